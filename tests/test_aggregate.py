"""Sites, summary, advice and per-file errors across a run folder."""

from __future__ import annotations

import json

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import analyze, catalogue, models
from tb_syncfinder.catalogue import advice_for
from tb_syncfinder.discovery import find_traces
from tb_syncfinder.engine import NoTracesError, analyze_runs


def _run(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "import torch\n\n\ndef train_step(loss):\n    x = 1\n    return loss.item()\n"
    )
    b = KinetoTraceBuilder()
    for n in range(4):
        with b.step(n):
            item_sync(b, stack=[("train.py", 4, "train_step")], kernel_us=300)
            if n % 2 == 0:
                b.kernel(dur=100)
                b.runtime("cudaDeviceSynchronize")
    b.write(tmp_path / "run" / "worker0.1700000000000.pt.trace.json.gz")
    return tmp_path / "run"


def test_sites_group_by_source_line_and_operator_sorted_by_cost(tmp_path):
    report = analyze(_run(tmp_path), source_roots=[str(tmp_path / "src")])
    assert [s.count for s in report.sites] == [4, 2]
    item = report.sites[0]
    assert item.key == "train.py:6:aten::item"
    assert (item.file, item.line, item.def_line, item.line_exact) == ("train.py", 6, 4, True)
    assert item.kind == catalogue.SCALAR_READBACK and item.per_step == 1
    assert item.steps == [0, 1, 2, 3]
    assert item.mean_host_wait_us == pytest.approx(item.host_wait_us / 4)
    assert set(item.advice) == {"title", "text", "before", "after", "removes"}
    bare = report.sites[1]
    assert bare.key == "-:cudaDeviceSynchronize:explicit_sync"
    assert bare.kind == catalogue.EXPLICIT_SYNC
    assert all(s.site_key for s in report.syncs)
    costs = [s.host_wait_us + s.gpu_idle_us for s in report.sites]
    assert costs == sorted(costs, reverse=True)


def test_report_json_has_the_schema_fields_and_unique_stable_ids(tmp_path):
    run = _run(tmp_path)
    doc = analyze(run).to_json()
    json.dumps(doc)
    assert doc["schema"] == models.SCHEMA
    assert {"path", "worker", "span", "device", "steps", "error"} <= set(doc["traces"][0])
    assert doc["traces"][0]["worker"] == "worker0"
    sync = doc["syncs"][0]
    assert {
        "kind",
        "api",
        "apis",
        "op",
        "trigger_op",
        "step",
        "thread",
        "ts_us",
        "host_wait_us",
        "gpu_idle_after_us",
        "annotations",
        "module",
        "stack",
        "source",
        "trace",
    } <= set(sync)
    ids = [s["id"] for s in doc["syncs"]]
    assert len(set(ids)) == len(ids)
    assert ids == [s["id"] for s in analyze(run).to_json()["syncs"]]


def test_broken_trace_beside_a_good_one_is_an_error_not_a_crash(tmp_path):
    run = _run(tmp_path)
    (run / "worker1.1700000000001.pt.trace.json").write_text('{"traceEvents": [{"ph":')
    report = analyze(run)
    assert report.summary.error_count == 1
    assert report.summary.sync_count == 6
    errors = [t for t in report.traces if t.error]
    assert errors[0].worker == "worker1" and "truncated" in errors[0].error


def test_missing_path_or_folder_without_traces_raises(tmp_path):
    with pytest.raises(NoTracesError):
        analyze(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoTracesError, match="no PyTorch profiler traces"):
        analyze(tmp_path / "empty")


@pytest.mark.parametrize(
    ("kind", "ops", "needle"),
    [
        (catalogue.SCALAR_READBACK, ["aten::item"], "every N steps"),
        (catalogue.DYNAMIC_SHAPE, ["aten::nonzero"], "torch.where"),
        (catalogue.DYNAMIC_SHAPE, ["aten::_unique2"], "scatter_add_"),
        (catalogue.DYNAMIC_SHAPE, ["aten::index", "aten::nonzero"], "ignore_index"),
        (catalogue.BLOCKING_HOST_TO_DEVICE, ["aten::to"], "non_blocking=True"),
        (catalogue.EXPLICIT_SYNC, [], "synchronize"),
        (catalogue.ALLOCATOR_SYNC, [], "allocator"),
        (catalogue.DEVICE_TO_HOST_COPY, ["aten::to"], "pinned"),
    ],
)
def test_advice_is_concrete_per_kind_and_operator(kind, ops, needle):
    advice = advice_for(kind, ops)
    assert needle in advice["title"] + advice["text"] + advice["after"]
    assert advice["before"] and advice["after"] and advice["removes"]


def _stackless_copies(tmp_path):
    """Two steps of blocking ``aten::to`` copies without python frames: a read-back, two
    pageable uploads (one waiting in the copy, one in the stream synchronize after it) and
    a collective's result read back inside torchrec's awaitable ``wait()``."""
    b = KinetoTraceBuilder()
    for n in range(2):
        with b.step(n):
            b.kernel(dur=200)
            with b.op("aten::to"):
                b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"))
                b.runtime("cudaStreamSynchronize")
            with b.op("aten::to"):
                b.runtime("cudaMemcpyAsync", dur=40, memcpy=("HtoD", "Pageable"))
                b.runtime("cudaStreamSynchronize", dur=2)
            b.kernel(dur=200)
            with b.op("aten::to"):
                b.runtime("cudaMemcpyAsync", dur=2, memcpy=("HtoD", "Pageable"))
                b.runtime("cudaStreamSynchronize", dur=60)
            b.kernel(dur=200)
            with b.annotation("## KJTAllToAll:Awaitable wait() ##"), b.op("aten::to"):
                b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"))
                b.runtime("cudaStreamSynchronize")
    return b.write(tmp_path / "run" / "w.pt.trace.json")


def test_without_stacks_a_site_is_one_operator_of_one_kind(tmp_path):
    report = analyze(str(_stackless_copies(tmp_path).parent))
    assert report.summary.by_kind == {
        catalogue.DEVICE_TO_HOST_COPY: 2,
        catalogue.BLOCKING_HOST_TO_DEVICE: 4,
        catalogue.COLLECTIVE_WAIT: 2,
    }
    # One site per kind, each holding every sync of its kind, whichever call waited.
    assert {site.kind: site.count for site in report.sites} == report.summary.by_kind
    for site in report.sites:
        members = [s for s in report.syncs if s.site_key == site.key]
        assert {s.kind for s in members} == {site.kind}
        assert site.key == f"aten::to:{site.kind}"
    upload = next(s for s in report.sites if s.kind == catalogue.BLOCKING_HOST_TO_DEVICE)
    assert {"cudaMemcpyAsync", "cudaStreamSynchronize"} == {
        s.api for s in report.syncs if s.site_key == upload.key
    }


def test_a_runs_saving_note_names_the_traces_it_is_about(tmp_path):
    run = tmp_path / "run"
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    b.write(run / "gpu.pt.trace.json")
    # A CPU-only trace beside it: nothing ran on a device, nothing to replay.
    (run / "cpu.pt.trace.json").write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::add",
                        "pid": 1,
                        "tid": 1,
                        "ts": 1.0,
                        "dur": 5.0,
                    },
                ]
            }
        )
    )
    report = analyze(str(run))
    assert report.summary.saving_method == "replay"
    assert report.summary.saving_note is None  # the CPU trace's reason is not the run's
    alone = analyze(str(run / "cpu.pt.trace.json"))
    assert alone.summary.saving_note == "no device activity: nothing to replay"


def test_a_tensor_printed_inside_a_library_is_one_print_site_with_the_print_fix(tmp_path):
    """tqdm's set_postfix formats a CUDA tensor: no frame of the user's own, so the site
    has no source line, and it is still one print site with the print advice."""
    library = [
        ("/usr/lib/python3.11/site-packages/tqdm/std.py", 1400, "set_postfix"),
        ("/usr/lib/python3.11/site-packages/torch/_tensor.py", 560, "__repr__"),
        ("/usr/lib/python3.11/site-packages/torch/_tensor_str.py", 700, "_str"),
    ]
    b = KinetoTraceBuilder()
    for n in range(1, 3):
        with b.step(n):
            b.kernel(dur=300)
            with (
                b.op("aten::is_nonzero", stack=library),
                b.op("aten::item"),
                b.op("aten::_local_scalar_dense"),
            ):
                b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=1)
                b.runtime("cudaStreamSynchronize")
            b.kernel(dur=300)
            with (
                b.op("aten::item", stack=library, called="item"),
                b.op("aten::_local_scalar_dense"),
            ):
                b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
                b.runtime("cudaStreamSynchronize")
    b.write(tmp_path / "run" / "w.pt.trace.json")
    (site,) = analyze(str(tmp_path / "run")).sites
    assert site.ops[0] == "print(tensor)" and site.kind == catalogue.SCALAR_READBACK
    assert site.count == 4 and site.advice["title"] == catalogue.TENSOR_TEXT_ADVICE.title


def _stepped(path, steps, reads=True, rank=None):
    b = KinetoTraceBuilder()
    if rank is not None:
        b.set_distributed(rank=rank, world_size=2)
    for n in range(steps):
        with b.step(n):
            if reads:
                item_sync(b, stack=[("model.py", 12, "training_step")])
            b.kernel(dur=100)
    b.write(path)


def test_lightning_training_and_validation_traces_are_said_averaged_with_each_loops_steps(
    tmp_path,
):
    prof = tmp_path / "prof"
    train = "fit-x-[Strategy]SingleDeviceStrategy.training_step"
    val = "fit-x-[Strategy]SingleDeviceStrategy.validation_step"
    _stepped(prof / f"{train}.1795878232849391401.pt.trace.json", 10)
    _stepped(prof / f"{val}.1795878233945858423.pt.trace.json", 5, reads=False)
    report = analyze(str(prof))
    assert report.summary.steps_by_worker == {train: 10, val: 5}
    note = report.summary.steps_note
    assert "15 steps of Lightning's training_step and validation_step loops" in note
    assert f"{train} (10 steps)" in note and "--worker" in note
    assert report.sites[0].per_step == pytest.approx(10 / 15)
    text = report.to_text()
    assert text.index("Per-step figures are over the 15 steps") < text.index("model.py")
    # One worker picked: its own steps, nothing to say.
    alone = analyze(str(prof / f"{train}.1795878232849391401.pt.trace.json"))
    assert alone.summary.steps_note is None and alone.summary.steps_by_worker == {}
    assert alone.sites[0].per_step == pytest.approx(1.0)


def test_ranks_of_a_job_and_spans_of_one_worker_are_not_said_averaged(tmp_path):
    for rank in (0, 1):
        _stepped(tmp_path / "job" / f"rank{rank}.1.pt.trace.json", 4, rank=rank)
    _stepped(tmp_path / "spans" / "host_1.1700000000001.pt.trace.json", 4)
    _stepped(tmp_path / "spans" / "host_1.1700000000002.pt.trace.json", 4)
    for run in ("job", "spans"):
        summary = analyze(str(tmp_path / run)).summary
        assert summary.steps_note is None and summary.steps_by_worker == {}, run


def test_two_programs_traces_in_one_run_are_said_averaged(tmp_path):
    _stepped(tmp_path / "run" / "train.1.pt.trace.json", 6)
    _stepped(tmp_path / "run" / "eval.1.pt.trace.json", 2, reads=False)
    summary = analyze(str(tmp_path / "run")).summary
    assert summary.steps_by_worker == {"eval": 2, "train": 6} or summary.steps_by_worker == {
        "train": 6,
        "eval": 2,
    }
    assert "8 steps of 2 workers whose traces do not name them ranks of one job" in (
        summary.steps_note
    )


def test_several_runs_merged_are_said_averaged_by_run_and_empty_traces_are_left_out(tmp_path):
    _stepped(tmp_path / "logs" / "base" / "w.1.pt.trace.json", 4)
    _stepped(tmp_path / "logs" / "fixed" / "w.1.pt.trace.json", 4, reads=False)
    # A trace that recorded nothing beside them: no step of it is averaged in.
    (tmp_path / "logs" / "fixed" / "empty.1.pt.trace.json").write_text('{"traceEvents": []}')
    runs = analyze_runs(find_traces(str(tmp_path / "logs")))
    merged = runs.report.summary
    assert merged.steps_by_worker == {"base/w": 4, "fixed/w": 4}
    assert "over the 8 steps of 2 runs, averaged together" in merged.steps_note
    assert "report --run NAME" in merged.steps_note
    assert all(report.summary.steps_note is None for report in runs.runs.values())


def test_two_jobs_ranks_merged_across_runs_are_said_averaged_by_run(tmp_path):
    """Each run a job of two ranks: within a run the ranks' mean is the job's step, but the
    merged report averages both jobs' steps, and said nothing of it."""
    for run, steps in (("base", 4), ("fixed", 2)):
        for rank in (0, 1):
            _stepped(tmp_path / "logs" / run / f"rank{rank}.1.pt.trace.json", steps, rank=rank)
    runs = analyze_runs(find_traces(str(tmp_path / "logs")))
    merged = runs.report.summary
    assert "over the 12 steps of 2 runs, averaged together" in merged.steps_note
    assert merged.steps_by_worker == {
        "base/rank0": 4,
        "base/rank1": 4,
        "fixed/rank0": 2,
        "fixed/rank1": 2,
    }
    assert all(report.summary.steps_note is None for report in runs.runs.values())


def test_a_site_syncing_in_some_steps_says_in_how_many_and_the_most_in_one(tmp_path):
    b = KinetoTraceBuilder()
    for n in range(4):
        with b.step(n):
            item_sync(b, stack=[("train.py", 4, "train_step")])
            if n % 2 == 0:  # a log every second step: three reads at once
                for _ in range(3):
                    item_sync(b, stack=[("train.py", 9, "log")])
    report = analyze(str(b.write(tmp_path / "run" / "w.pt.trace.json")))
    by_func = {site.func: site for site in report.sites}
    every, logged = by_func["train_step"], by_func["log"]
    assert (every.steps_with_syncs, every.max_per_step) == (4, 1)
    assert (logged.steps_with_syncs, logged.max_per_step) == (2, 3)
    assert logged.per_step == pytest.approx(1.5)
    text = report.to_text(top=0)
    assert "in 2 of 4 steps, up to 3 in one" in text
    assert "in 4 of 4 steps" not in text


def test_a_line_under_a_remainder_test_is_said_to_run_every_n_steps_already(tmp_path):
    from tb_syncfinder.source import periodic_guard

    code = (
        "def train(loader, log_every):\n"
        "    for step, x in enumerate(loader):\n"
        "        loss = x.sum()\n"
        "        if step % log_every == 0:\n"
        "            print(loss.item())\n"
        "        else:\n"
        "            loss.item()\n"
    )
    import ast

    scope = ast.parse(code).body[0]
    assert periodic_guard(scope, 5) == "step % log_every == 0"
    assert periodic_guard(scope, 7) is None  # the else runs the other passes
    assert periodic_guard(scope, 3) is None


def test_a_flag_set_from_a_remainder_is_a_remainder_test():
    """DLRM's ``should_print = ((j + 1) % args.print_freq == 0) or (j + 1 == nbatches)``
    then ``if should_print:``: its reads were advised to be made every N steps, which they
    were (a walk: 48 of 56 reads). A flag set otherwise anywhere reaching the test is not
    one."""
    import ast

    from tb_syncfinder.source import periodic_guard

    code = (
        "def train(loader, args, nbatches, verbose):\n"
        "    for j, x in enumerate(loader):\n"
        "        loss = x.sum()\n"
        "        should_print = ((j + 1) % args.print_freq == 0) or (j + 1 == nbatches)\n"
        "        if should_print:\n"
        "            print(loss.item())\n"
        "        show = (j + 1) % 10 == 0\n"
        "        if verbose:\n"
        "            show = True\n"
        "        if show:\n"
        "            print(loss.item())\n"
    )
    scope = ast.parse(code).body[0]
    assert periodic_guard(scope, 6) == "should_print"
    assert periodic_guard(scope, 11) is None
    # A string's formatting is no remainder, nor is a name the test computes with (a review).
    other = (
        "def train(loader, stats, name, hist):\n"
        "    for i, x in enumerate(loader):\n"
        '        key = "loss_%s" % name\n'
        "        if key in stats:\n"
        "            stats[key] += x.sum().item()\n"
        "        slot = i % 4\n"
        "        if hist[slot] > 0:\n"
        "            print(x.sum().item())\n"
    )
    scope = ast.parse(other).body[0]
    assert periodic_guard(scope, 5) is None
    assert periodic_guard(scope, 8) is None


def test_a_remainder_test_around_the_loop_that_steps_the_profiler_thins_no_read():
    """MONAI's ``if (epoch + 1) % val_interval == 0:`` around its profiled validation loop
    made a read in every pass of that loop "already every N steps" (a walk: 12 of 21
    reads); the test says which runs of the loop were profiled. A test inside the loop
    still counts, and without a profiler's name every test does, as before."""
    import ast

    from tb_syncfinder.source import periodic_guard

    code = (
        "def main(loader, prof):\n"
        "    for epoch in range(9):\n"
        "        if (epoch + 1) % 2 == 0:\n"
        "            for step, x in enumerate(loader):\n"
        "                loss = x.sum().item()\n"
        "                if step % 4 == 0:\n"
        "                    print(x.max().item())\n"
        "                prof.step()\n"
    )
    scope = ast.parse(code).body[0]
    profilers = frozenset({"prof"})
    assert periodic_guard(scope, 5, profilers) is None
    assert periodic_guard(scope, 7, profilers) == "step % 4 == 0"
    assert periodic_guard(scope, 5) == "(epoch + 1) % 2 == 0"


def test_a_remainder_test_true_in_every_step_is_not_said_to_thin_the_reads():
    """nanoGPT's ``log_interval = 1``: the read ran in 5 of 5 steps, and was said to run
    "already every N steps" (a user walk)."""
    from tb_syncfinder.outputs.text import spread_text

    guarded = {"periodic_guard": "it % log_interval == 0", "max_per_step": 1}
    every = spread_text({**guarded, "steps_with_syncs": 5}, 5)
    assert every == "under `if it % log_interval == 0:`, true in every profiled step"
    assert spread_text({**guarded, "steps_with_syncs": 2}, 5).endswith(
        "already every N steps (under `if it % log_interval == 0:`)"
    )
