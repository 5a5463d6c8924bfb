"""Fix together: what fixing a site saves once the other sites are fixed too, and the
other site named where two sites' syncs wait for the same GPU work (each alone saves
little: the other then waits instead)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder

from tb_syncfinder import analyze, whatif
from tb_syncfinder.detect import detect_syncs
from tb_syncfinder.engine import Options, analyze_trace
from tb_syncfinder.outputs.text import render_report
from tb_syncfinder.reader import read_trace
from tb_syncfinder.timeline import build_timeline

STEPS = 5
CPU_FRAME = ("train.py", 4, "read_predictions")
TOLIST_FRAME = ("train.py", 9, "read_tops")


def _read_back(b: KinetoTraceBuilder, frame: tuple[str, int, str], method: str) -> None:
    """``x.cpu()`` / ``x.tolist()`` of a GPU tensor: a pageable copy, then a stream sync."""
    with (
        b.op("aten::to", stack=[frame], called=method),
        b.op("aten::_to_copy"),
        b.op("aten::copy_"),
    ):
        b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=64)
        b.runtime("cudaStreamSynchronize")


def _same_kernel(path: Path) -> Path:
    """Each step: a 2 ms kernel, ``.cpu()`` waits for it, ``.tolist()`` right after waits for
    nothing more, then 1.5 ms of host work that could have run beside the kernel."""
    b = KinetoTraceBuilder()
    for n in range(1, STEPS + 1):
        with b.step(n):
            b.kernel(dur=2000)
            _read_back(b, CPU_FRAME, "cpu")
            _read_back(b, TOLIST_FRAME, "tolist")
            b.advance(1500)
    return b.write(path)


def _own_kernels(path: Path) -> Path:
    """Each step: two kernels, each waited for by its own sync with host work after it."""
    b = KinetoTraceBuilder()
    for n in range(1, STEPS + 1):
        with b.step(n):
            b.kernel(dur=1000)
            _read_back(b, CPU_FRAME, "cpu")
            b.advance(800)
            b.kernel(dur=1000)
            _read_back(b, TOLIST_FRAME, "tolist")
            b.advance(800)
    return b.write(path)


def _sites(report):
    by_func = {site.func: site for site in report.sites}
    return by_func["read_predictions"], by_func["read_tops"]


def test_two_syncs_waiting_for_the_same_kernel_name_each_other(tmp_path: Path) -> None:
    report = analyze(_same_kernel(tmp_path / "run" / "w.pt.trace.json"))
    cpu, tolist = _sites(report)
    steps = report.summary.step_count
    # Alone, each saves little: the other waits for the kernel instead.
    for site in (cpu, tolist):
        assert site.saving_method == "replay"
        assert site.predicted_saving_per_step_us < 100
        # With the other fixed too, most of the host work goes beside the kernel.
        assert site.predicted_saving_with_others_per_step_us > 1000
        assert site.predicted_saving_with_others_us == pytest.approx(
            site.predicted_saving_with_others_per_step_us * steps
        )
    assert cpu.fix_with == [tolist.key]
    assert tolist.fix_with == [cpu.key]
    together = report.summary.predicted_saving_us  # the two sites are every sync
    for site in (cpu, tolist):
        assert site.fix_with_saving_us == pytest.approx(together)
        assert site.fix_with_saving_per_step_us == pytest.approx(together / steps)
    assert cpu.fix_with_note is not None and tolist.fix_with_note is not None
    assert "the .tolist() at line 9 then waits for the same GPU work" in cpu.fix_with_note
    assert "the .cpu() at line 4 then waits for the same GPU work" in tolist.fix_with_note
    assert cpu.fix_with_note.startswith("Fixing this alone saves ")
    assert "Fixed together they save 1." in cpu.fix_with_note
    # In the JSON, and under each site in the terminal.
    doc = report.to_json()
    for site in doc["sites"]:
        assert site["fix_with"] and site["fix_with_note"]
        assert site["predicted_saving_with_others_per_step_us"] > 1000
    text = render_report(report, width=200)
    assert cpu.fix_with_note in text and tolist.fix_with_note in text


def test_syncs_waiting_for_their_own_kernels_are_not_told_to_fix_together(
    tmp_path: Path,
) -> None:
    report = analyze(_own_kernels(tmp_path / "run" / "w.pt.trace.json"))
    for site in _sites(report):
        assert site.predicted_saving_per_step_us > 500
        # About what it saves alone: the other site's wait is its own.
        assert site.predicted_saving_with_others_per_step_us == pytest.approx(
            site.predicted_saving_per_step_us, rel=0.25
        )
        assert site.fix_with == []
        assert site.fix_with_note is None
        assert site.fix_with_saving_us is None
    assert "Fixing this alone" not in render_report(report, width=200)


def _index_readers(graph, indexed: bool) -> None:
    """Put the edges back through the readers' index (built) or evaluating every task
    while something moved is read (none): the two give the same floats."""
    graph._readers = graph._build_readers() if indexed else None


@pytest.mark.parametrize("indexed", [True, False], ids=["readers", "dense"])
@pytest.mark.parametrize("shape", [_same_kernel, _own_kernels])
def test_with_the_others_is_the_full_replays_difference(
    tmp_path: Path, shape, indexed: bool
) -> None:
    # saving(every sync) - saving(every sync but the site's), each a full replay: what the
    # site's edges put back into the "every sync removed" replay give, to the float.
    path = shape(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    result = whatif.replay(tl, episodes)
    graph = result._graph
    _index_readers(graph, indexed)
    sites = {"cpu": [0, 2, 4, 6, 8], "tolist": [1, 3, 5, 7, 9]}
    assert len(episodes) == 10
    own = {key: result.saving(members).total_us for key, members in sites.items()}
    found = whatif.fix_together(result, sites, ["cpu", "tolist"], own, 0.0)
    everything = frozenset(result.counted)
    for key, members in sites.items():
        others = graph.saving_from(graph.metrics_for(everything - frozenset(members)))
        assert found.with_others[key] == pytest.approx(
            result.all_syncs.total_us - others.total_us, abs=1e-6
        )
    assert graph.window_of(graph.base_values) == graph.base_metrics.window
    assert graph.window_of(result._no_sync.values) == result._no_sync.window
    # The replay's values are left as they were.
    assert graph.window_of(result._no_sync.values) == pytest.approx(
        graph.base_metrics.window - result.all_syncs.total_us
    )


def test_sites_past_the_cap_have_no_figure(tmp_path: Path, monkeypatch) -> None:
    path = _same_kernel(tmp_path / "run" / "w.pt.trace.json")
    monkeypatch.setattr(whatif, "WITH_OTHERS_SITES", 1)
    report = analyze(path)
    figures = sorted(
        (site.host_wait_us, site.predicted_saving_with_others_us) for site in report.sites
    )
    # The site with the longest host wait (the .cpu(), waiting for the kernel) only.
    assert figures[0][1] is None and figures[1][1] is not None
    assert all(site.fix_with == [] for site in report.sites if site.host_wait_us < 100)
    monkeypatch.setattr(whatif, "WITH_OTHERS_SITES", 0)
    report = analyze(path)
    assert all(site.predicted_saving_with_others_us is None for site in report.sites)
    assert all(site.fix_with_note is None for site in report.sites)


def test_no_figure_without_a_replay(tmp_path: Path) -> None:
    path = _same_kernel(tmp_path / "run" / "w.pt.trace.json")
    report = analyze(path, whatif=False)
    for site in report.sites:
        assert site.saving_method == "bound"
        assert site.predicted_saving_with_others_us is None
        assert site.predicted_saving_with_others_per_step_us is None
        assert site.fix_with == []
    doc = report.to_json()
    assert all(site["predicted_saving_with_others_us"] is None for site in doc["sites"])


def test_the_figures_survive_the_result_cache(tmp_path: Path) -> None:
    import pickle

    from tb_syncfinder.aggregate import build_report

    result = analyze_trace(str(_same_kernel(tmp_path / "w.pt.trace.json")), Options())
    again = pickle.loads(pickle.dumps(result))
    assert again.savings.with_others == result.savings.with_others
    assert again.savings.fix_with == result.savings.fix_with
    first, second = build_report([result]).to_json(), build_report([again]).to_json()
    assert first["sites"] == second["sites"]


@pytest.mark.parametrize("indexed", [True, False], ids=["readers", "dense"])
def test_a_site_that_delays_everything_after_it_skips_the_stretches_it_only_shifts(
    tmp_path: Path, indexed: bool
) -> None:
    """Host-bound steps: putting a site's edges back delays the host, and every launch after
    it, by the same amount up to the site's next sync (a stretch taken shifted, not
    evaluated) and past its last (the rest of the trace): the same floats as the full
    replays, for a fraction of the graph's tasks."""
    b = KinetoTraceBuilder()
    for n in range(1, 101):
        with b.step(n):
            b.kernel(dur=300 + 10 * (n % 4))
            if n % 25 == 5:  # a site syncing every 25th step
                _read_back(b, CPU_FRAME, "cpu")
            b.advance(800)
            b.kernel(dur=100)
            _read_back(b, TOLIST_FRAME, "tolist")  # one syncing in every step
            b.advance(1200)
    path = b.write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    result = whatif.replay(tl, episodes)
    graph = result._graph
    _index_readers(graph, indexed)
    assert len(episodes) == 104
    # Episodes in time order: the rare site's are those of steps 5, 15, ... (first of two).
    by_step: dict[int, list[int]] = {}
    for index, episode in enumerate(episodes):
        step = tl.step_at(episode.calls[0].event.ts)
        by_step.setdefault(step.number, []).append(index)
    rare = [by_step[n][0] for n in sorted(by_step) if len(by_step[n]) == 2]
    every = [by_step[n][-1] for n in sorted(by_step)]
    assert len(rare) == 4 and len(every) == 100
    sites = {"rare": rare, "every": every}
    everything = frozenset(result.counted)
    ctx = graph.no_sync_ends(result._no_sync.values, frozenset(graph._jumps_of(everything)))
    for key, members in sites.items():
        window, work = graph.window_with_edges_back(ctx, graph._jumps_of(members))
        others = graph.saving_from(graph.metrics_for(everything - frozenset(members)))
        assert result.all_syncs.total_us - (graph.base_metrics.window - window) == (
            pytest.approx(result.all_syncs.total_us - others.total_us, abs=1e-6)
        )
        if key == "rare":
            assert result.all_syncs.total_us - others.total_us > 4 * 250
            assert work < len(graph.tasks) / 3, work
    found = whatif.fix_together(result, sites, ["every", "rare"], {}, 0.0)
    assert set(found.with_others) == {"every", "rare"}


def _sync(key: str, line: int, method: str, trace: str = "t0"):
    from tb_syncfinder.models import Frame, Source, Sync

    return Sync(
        kind="device_to_host_copy",
        api="cudaStreamSynchronize",
        apis=["cudaStreamSynchronize"],
        op="aten::to",
        trigger_op="aten::copy_",
        step=1,
        thread=1,
        ts_us=0.0,
        host_wait_us=10.0,
        gpu_idle_after_us=0.0,
        stack=[Frame("<built-in>", None, method, False), Frame("train.py", 1, "f", True)],
        source=Source("train.py", line, 1, "f", True),
        trace=trace,
        site_key=key,
        saving_method="replay",
    )


def test_the_note_says_the_saving_with_every_site_where_the_pair_holds_less_of_it() -> None:
    from tb_syncfinder.aggregate import build_sites
    from tb_syncfinder.models import TraceSavings

    syncs = [_sync("a", 4, "cpu"), _sync("b", 9, "tolist")]
    figures = TraceSavings(
        method="replay",
        sites={"a": 100.0, "b": 50.0},
        with_others={"a": 3000.0, "b": 2000.0},
        fix_with={"a": ("b", 2000.0)},
    )
    a, b = sorted(build_sites(syncs, 1, 10_000.0, savings=[("t0", figures)]), key=lambda s: s.key)
    assert a.fix_with == ["b"] and a.fix_with_saving_us == 2000.0
    assert a.fix_with_note == (
        "Fixing this alone saves 100 us per step: the .tolist() at line 9 then waits for the "
        "same GPU work. Fixed together they save 2.00 ms per step. Once every other site "
        "is fixed, fixing this one saves 3.00 ms per step."
    )
    # Its trace named no partner for b: the note without one.
    assert b.fix_with == [] and b.fix_with_saving_us is None
    assert b.fix_with_note == (
        "Fixing this alone saves 50 us per step; once every other site is fixed, "
        "fixing this one saves 2.00 ms per step: other syncs wait for the same GPU work."
    )
    # A pair that recovers less than half of what the others add (1.00 ms of 2.90): no
    # partner named, the note without one.
    figures.fix_with["a"] = ("b", 1000.0)
    a, _b = sorted(build_sites(syncs, 1, 10_000.0, savings=[("t0", figures)]), key=lambda s: s.key)
    assert a.fix_with == [] and a.fix_with_saving_us is None
    assert a.fix_with_note == (
        "Fixing this alone saves 100 us per step; once every other site is fixed, "
        "fixing this one saves 3.00 ms per step: other syncs wait for the same GPU work."
    )
    figures.fix_with["a"] = ("b", 100.0 + 0.5 * 2900.0)  # half of it: named
    a, _b = sorted(build_sites(syncs, 1, 10_000.0, savings=[("t0", figures)]), key=lambda s: s.key)
    assert a.fix_with == ["b"]
    # Below 5 % of the step with the others, no note; nor with its own saving a quarter.
    for step_time, own in ((100_000.0, 100.0), (10_000.0, 800.0)):
        figures.sites["a"] = own
        (a, _b) = sorted(
            build_sites(syncs, 1, step_time, savings=[("t0", figures)]), key=lambda s: s.key
        )
        assert a.fix_with == [] and a.fix_with_note is None
        assert a.predicted_saving_with_others_us == 3000.0


def test_traces_naming_different_partners_name_none() -> None:
    from tb_syncfinder.aggregate import build_sites
    from tb_syncfinder.models import TraceSavings

    syncs = [_sync("a", 4, "cpu", trace) for trace in ("t0", "t1")]
    syncs += [_sync("b", 9, "tolist", "t0"), _sync("c", 12, "item", "t1")]

    def figures(partner: str) -> TraceSavings:
        return TraceSavings(
            method="replay",
            sites={"a": 10.0, partner: 10.0},
            with_others={"a": 2000.0, partner: 2000.0},
            fix_with={"a": (partner, 1800.0)},
        )

    savings = [("t0", figures("b")), ("t1", figures("c"))]
    (a,) = [s for s in build_sites(syncs, 2, 20_000.0, savings=savings) if s.key == "a"]
    assert a.predicted_saving_with_others_us == 4000.0
    assert a.predicted_saving_with_others_per_step_us == 2000.0
    assert a.fix_with == [] and a.fix_with_saving_us is None
    assert a.fix_with_note == (
        "Fixing this alone saves 10 us per step; once every other site is fixed, "
        "fixing this one saves 2.00 ms per step: other syncs wait for the same GPU work."
    )
    # The same partner in both: named, with both traces' figures added.
    savings = [("t0", figures("b")), ("t1", figures("b"))]
    syncs[-1] = _sync("b", 9, "tolist", "t1")
    (a,) = [s for s in build_sites(syncs, 2, 20_000.0, savings=savings) if s.key == "a"]
    assert a.fix_with == ["b"] and a.fix_with_saving_per_step_us == 1800.0


GPU_PAIRS = Path(__file__).resolve().parent / "gpu_pairs"


@pytest.mark.skipif(
    not (GPU_PAIRS / "readback_metrics_baseline.pt.trace.json.gz").exists(),
    reason="the H100 pairs (tests/gpu_pairs) are not in this checkout",
)
def test_the_h100_pairs_name_the_read_backs_together_and_not_the_item_with_its_copy() -> None:
    """``readback_metrics``: ``.cpu()`` (line 199) and ``.tolist()`` (line 204) wait for the
    same GPU work: 0.29 and 0.02 ms alone, 4.37 ms together (measured on the H100: about 1.0,
    0.8 and 5.7 ms). ``copy_and_item``: the ``.item()`` saves most of it alone."""
    roots = [str(GPU_PAIRS)]
    report = analyze(GPU_PAIRS / "readback_metrics_baseline.pt.trace.json.gz", source_roots=roots)
    sites = {site.line: site for site in report.sites}
    cpu, tolist = sites[199], sites[204]
    assert cpu.fix_with == [tolist.key] and tolist.fix_with == [cpu.key]
    assert "the .tolist() at line 204 then waits for the same GPU work" in cpu.fix_with_note
    assert "the .cpu() at line 199 then waits for the same GPU work" in tolist.fix_with_note
    assert cpu.fix_with_saving_per_step_us == pytest.approx(4370, rel=0.05)
    for site in (cpu, tolist):
        assert site.predicted_saving_per_step_us < 400
        assert site.predicted_saving_with_others_per_step_us > 4000
    report = analyze(GPU_PAIRS / "copy_and_item_baseline.pt.trace.json.gz", source_roots=roots)
    item = next(site for site in report.sites if "aten::item" in site.ops)
    assert item.predicted_saving_per_step_us > 4000
    assert item.fix_with == [] and item.fix_with_note is None
    assert all(site.fix_with == [] for site in report.sites)


@pytest.mark.skipif(
    not (GPU_PAIRS / "dynamic_shapes_baseline.pt.trace.json.gz").exists(),
    reason="the H100 pairs (tests/gpu_pairs) are not in this checkout",
)
def test_sites_whose_best_pair_recovers_little_get_the_note_without_a_partner() -> None:
    """``dynamic_shapes``: the mask index (line 169) saves 0.39 ms alone and 2.19 ms with the
    others; its best pair, with the ``unique`` (line 159), 0.49 ms: a fifth of the
    difference, so no partner is named, and the note says the others wait for that work.
    The ``nonzero`` (line 160) had no partner at all and gets the same note. The index's
    backward (line 169 too) saves 0.50 ms with the others: under 5 % of the 12.9 ms step."""
    report = analyze(
        GPU_PAIRS / "dynamic_shapes_baseline.pt.trace.json.gz", source_roots=[str(GPU_PAIRS)]
    )
    # (The library part of a key, `@torch/functional.py:_unique_impl`, left out.)
    by_key = {site.key.split(":", 1)[1].split("@")[0]: site for site in report.sites}
    index = by_key["169:aten::index"]
    nonzero = by_key["160:aten::nonzero"]
    unique = by_key["159:aten::_unique2"]
    backward = by_key["169:autograd::engine::evaluate_function: IndexBackward0"]
    assert all(site.fix_with == [] for site in report.sites)
    assert index.fix_with_note == (
        "Fixing this alone saves 394 us per step; once every other site is fixed, "
        "fixing this one saves 2.19 ms per step: other syncs wait for the same GPU work."
    )
    for site in (nonzero, unique):
        assert site.fix_with_note is not None
        assert site.fix_with_note.endswith(": other syncs wait for the same GPU work.")
        assert "then waits for" not in site.fix_with_note
    assert backward.fix_with_note is None


DEMO_TRACES = Path(__file__).resolve().parent.parent / "tb_syncfinder" / "demo" / "traces"


def test_the_demo_segs_backward_index_names_no_partner() -> None:
    """The bundled seg: the mask index's backward (seg.py:82) saves 1 us alone and 0.96 ms
    with the others fixed; no other single site recovers half of that."""
    report = analyze(DEMO_TRACES / "seg_baseline.pt.trace.json.gz")
    (backward,) = [
        site for site in report.sites if "IndexBackward0" in site.ops and site.line == 82
    ]
    assert backward.predicted_saving_with_others_per_step_us == pytest.approx(961, abs=20)
    assert backward.fix_with == []
    assert backward.fix_with_note is not None
    assert backward.fix_with_note.startswith("Fixing this alone saves 0.98 us per step; once every")
    assert backward.fix_with_note.endswith(": other syncs wait for the same GPU work.")


def test_a_pair_that_gains_nothing_is_not_named(tmp_path: Path) -> None:
    """Three synchronizes in a row after one kernel: each alone saves (almost) nothing, each
    with the others fixed 1.5 ms a step. The first two fixed together gain a little (their
    own calls' time), and name each other in the trace's figures; the third gains nothing
    with either (the other one still waits for the kernel): it names no partner."""
    b = KinetoTraceBuilder()
    for n in range(1, STEPS + 1):
        with b.step(n):
            b.kernel(dur=2000)
            for line, func in ((4, "first"), (9, "second"), (14, "third")):
                with b.frame(("train.py", line, func)):
                    b.runtime("cudaDeviceSynchronize")
            b.advance(1500)
    path = b.write(tmp_path / "w.pt.trace.json")
    result = analyze_trace(str(path), Options())
    keys = {key.split(":")[1]: key for key in result.savings.sites}
    first, second, third = keys["4"], keys["9"], keys["14"]
    with_others = result.savings.with_others
    own = result.savings.sites
    for key in (first, second, third):
        assert with_others[key] > 1000 * STEPS
        assert own[key] < 0.25 * with_others[key]  # each qualifies for a partner
    fix_with = result.savings.fix_with
    assert fix_with[first][0] == second and fix_with[second][0] == first
    assert fix_with[first][1] > own[first] + own[second] + whatif.TOL_US
    assert third not in fix_with
    # In the report: no partner for any (the pair recovers little of what the others add),
    # the note without one for each.
    report = analyze(path)
    assert all(site.fix_with == [] for site in report.sites)
    assert all(
        site.fix_with_note and site.fix_with_note.endswith("wait for the same GPU work.")
        for site in report.sites
    )


def test_a_partner_sharing_the_sites_line_is_named_by_its_library_code(tmp_path: Path) -> None:
    """Two reads under one call of the user's (``trainer.fit()``), split into two sites by
    the library code that read (Lightning's progress bar and its loggers): named by the
    line alone, the partner was either of them."""
    user = ("train.py", 20, "main")
    bar = ("lightning/pytorch/trainer/connectors/logger_connector/result.py", 100, "metrics")
    logs = (
        "lightning/pytorch/trainer/connectors/logger_connector/logger_connector.py",
        200,
        "log_metrics",
    )
    b = KinetoTraceBuilder()
    for n in range(1, STEPS + 1):
        with b.step(n), b.frames([user]):
            b.kernel(dur=2000)
            with b.frames([bar]):
                _read_back(b, ("lightning/fabric/utilities/apply_func.py", 120, "to_item"), "cpu")
            with b.frames([logs]):
                _read_back(b, ("lightning/fabric/utilities/apply_func.py", 120, "to_item"), "cpu")
            b.advance(1500)
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    by_library = {site.key.rpartition(":")[2]: site for site in report.sites}
    metrics, log_metrics = by_library["metrics"], by_library["log_metrics"]
    assert metrics.fix_with == [log_metrics.key] and log_metrics.fix_with == [metrics.key]
    assert (
        f"at line 20, under {logs[0]} (log_metrics) then waits for the same GPU work"
        in metrics.fix_with_note
    ), metrics.fix_with_note
    assert f"at line 20, under {bar[0]} (metrics) then waits" in log_metrics.fix_with_note


def test_a_user_path_holding_an_at_sign_adds_no_library_to_the_partners_name(tmp_path: Path):
    """A Jenkins workspace (``/ws/job@2/...``): the ``@`` of a site key without a library
    part was read as one, and every note named its partner ``, under 2/train.py:...``."""
    b = KinetoTraceBuilder()
    for n in range(1, STEPS + 1):
        with b.step(n):
            b.kernel(dur=2000)
            _read_back(b, ("/ws/job@2/train.py", 4, "read_predictions"), "cpu")
            _read_back(b, ("/ws/job@2/train.py", 9, "read_tops"), "tolist")
            b.advance(1500)
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    notes = [site.fix_with_note for site in report.sites if site.fix_with_note]
    assert notes and all(", under " not in note for note in notes), notes
