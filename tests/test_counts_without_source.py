"""A count of syncs does not depend on whether the source file is found: a real torch CPU
trace of README's "Use it on your own traces" loop, with ``idx.cpu().tolist()``, analysed
from the script's folder and from elsewhere (the newcomer's 4.0 per step vs 5.0)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.detect import Episode
from tb_syncfinder.models import Attribution, Source

torch = pytest.importorskip("torch")

TRAIN = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    def train_step(model, opt, x, y):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen = loss.item()
        idx = logits.argmax(1)
        ids = idx.cpu().tolist()
        return seen, ids


    def main(logdir):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True,
                     schedule=schedule(wait=1, warmup=1, active=3),
                     on_trace_ready=tensorboard_trace_handler(logdir)) as prof:
            for _ in range(5):
                train_step(model, opt, x, y)
                prof.step()
    """
)
ITEM, CPU_TOLIST = 11, 13
STEPS = 3
# The same step with a .cpu() and, on the next line, a .tolist() of another tensor.
TWO_LINES = TRAIN.replace(
    "    return seen, ids\n",
    "    host = idx.cpu()\n    labels = y.tolist()\n    return seen, ids, host, labels\n",
)
CPU_ALONE, TOLIST_NEXT = 14, 15


def _record(tmp_path: Path, script: str) -> Path:
    """Profile ``script`` as ``python train.py`` run from its folder would: its frames
    record the relative name ``train.py``, which only that folder (or a ``--source-root``
    naming it) finds. Returns the run's folder of traces."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(script)
    logdir = project / "logs" / "run"
    namespace: dict = {"__name__": "train"}
    exec(compile(script, "train.py", "exec"), namespace)
    namespace["main"](str(logdir))
    (tmp_path / "elsewhere").mkdir()
    return logdir


def _counts(report) -> dict[tuple[str, str], int]:
    """Latent findings per (kind, operator): what a gate counts, whatever the line."""
    counts: dict[tuple[str, str], int] = {}
    for sync in report.latent:
        key = (sync.kind, sync.op or "-")
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_the_count_of_syncs_does_not_depend_on_whether_the_source_is_found(tmp_path):
    """README's loop: ``idx.cpu().tolist()`` copies once on a GPU (``.cpu()`` copies and
    waits, ``.tolist()`` reads the host tensor it returned). With the source that is one
    latent copy a step at that line; without it (the trace analysed away from the script)
    the trace's order, a ``.tolist()`` right after a ``.cpu()`` with nothing between, says
    the same: one copy, not two (it was 5 syncs a step there against 4)."""
    logdir = _record(tmp_path, TRAIN)
    found = analyze(logdir, source_roots=[str(tmp_path / "project")])
    not_found = analyze(logdir, source_roots=[str(tmp_path / "elsewhere")])
    assert {(s.line, s.line_exact, s.ops[0]): s.count for s in found.latent_sites} == {
        (ITEM, True, "aten::item"): STEPS,
        (CPU_TOLIST, True, "aten::to"): STEPS,
    }
    assert not any(s.line_exact for s in not_found.latent_sites)
    expected = {
        ("scalar_readback", "aten::item"): STEPS,
        ("device_to_host_copy", "aten::to"): STEPS,
    }
    assert _counts(found) == _counts(not_found) == expected
    assert found.summary.latent_count == not_found.summary.latent_count == 2 * STEPS
    # The one copy names both calls, found or not.
    for report in (found, not_found):
        copies = [s for s in report.latent if s.op == "aten::to"]
        assert {tuple(s.apis) for s in copies} == {("Tensor.cpu", "Tensor.tolist")}


def test_the_readme_loop_counts_alike_from_the_scripts_folder_and_from_elsewhere(
    tmp_path, monkeypatch
):
    """The newcomer's case: without ``--source-root`` the source root is the folder the
    analysis runs in. The same count from the script's folder and from another, so a
    ``--max-syncs-per-step`` gate answers alike wherever it runs."""
    logdir = _record(tmp_path, TRAIN)
    per_folder = {}
    for folder in ("project", "elsewhere"):
        monkeypatch.chdir(tmp_path / folder)
        report = analyze(logdir)
        exact = {s.line_exact for s in report.latent_sites}
        per_folder[folder] = (report.summary.latent_count, len(report.latent_sites), exact)
    assert per_folder == {
        "project": (2 * STEPS, 2, {True}),
        "elsewhere": (2 * STEPS, 2, {False}),
    }


def test_a_tolist_on_the_line_after_a_cpu_counts_apart_only_where_the_source_shows_it(
    tmp_path,
):
    """``host = idx.cpu()`` then ``labels = y.tolist()``: on a GPU two copies if ``y`` lives
    there. The trace records that pair as it records ``idx.cpu().tolist()`` (a ``.tolist()``
    right after a ``.cpu()``, nothing between), so only the source tells them apart: with
    it, two copies at two exact lines; without it, one copy that names both calls, at the
    inexact line the footnote explains (the source file was not found)."""
    logdir = _record(tmp_path, TWO_LINES)
    found = analyze(logdir, source_roots=[str(tmp_path / "project")])
    not_found = analyze(logdir, source_roots=[str(tmp_path / "elsewhere")])
    assert {(s.line, s.line_exact, s.ops[0]): s.count for s in found.latent_sites} == {
        (ITEM, True, "aten::item"): STEPS,
        (CPU_TOLIST, True, "aten::to"): STEPS,
        (CPU_ALONE, True, "aten::to"): STEPS,
        (TOLIST_NEXT, True, "aten::to"): STEPS,
    }
    assert _counts(found)[("device_to_host_copy", "aten::to")] == 3 * STEPS
    assert _counts(not_found)[("device_to_host_copy", "aten::to")] == 2 * STEPS
    copies = [s for s in not_found.latent if s.op == "aten::to"]
    assert {tuple(s.apis) for s in copies} == {("Tensor.cpu", "Tensor.tolist")}
    assert not any(s.source.line_exact for s in copies)


def _source(line: int | None, exact: bool) -> Source:
    return Source("train.py", line, 5, "train_step", exact)


def _attribution(api: str) -> Attribution:
    return Attribution(api, [api], ["aten::to"], 1, 1, 0.0, 1.0, [], None, [], None, None)


@pytest.mark.parametrize(
    ("cpu", "tolist", "copies"),
    [
        (_source(13, True), _source(13, True), 1),  # x.cpu().tolist()
        (_source(None, False), _source(None, False), 1),  # file not found
        (_source(13, True), _source(None, False), 1),  # the .tolist() not singled out
        (None, None, 1),  # no user frame
        (_source(14, True), _source(15, True), 2),  # c = x.cpu() then y.tolist()
    ],
)
def test_a_tolist_right_after_a_cpu_is_one_copy_unless_the_source_shows_two_lines(
    cpu, tolist, copies
):
    """``one_copy_per_chain``: the ``.tolist()`` goes into the ``.cpu()``'s copy wherever
    the source does not show the two calls at different exact lines."""
    from tb_syncfinder.detect import one_copy_per_chain

    thread = object()
    episodes = [
        Episode(thread, [], 3, 3, latent=True, method="cpu", call=2),
        Episode(thread, [], 5, 5, latent=True, method="tolist", call=5, after_cpu=2),
    ]
    attributions = [_attribution("Tensor.cpu"), _attribution("Tensor.tolist")]
    kept, named, _sources = one_copy_per_chain(episodes, attributions, [cpu, tolist])
    assert len(kept) == copies
    assert named[0].apis == (["Tensor.cpu"] if copies == 2 else ["Tensor.cpu", "Tensor.tolist"])


def test_sites_without_a_stack_say_the_annotations_they_ran_in(tmp_path: Path) -> None:
    """In a trace without Python stacks every blocking ``aten::to`` reads
    ``[aten::to] (no stack)``: the ``record_function`` annotations around its syncs are what
    tells one site from another, in the JSON and under the site."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    b = KinetoTraceBuilder()
    for n in range(2):
        with b.step(n):
            with b.annotation("## sparse_data_dist ##"):
                item_sync(b, stack=())
    trace = b.write(tmp_path / "w.pt.trace.json")
    report = analyze(trace)
    (site,) = report.sites
    assert site.file is None and site.annotations == ["## sparse_data_dist ##"]
    assert "in ## sparse_data_dist ##" in report.to_text()
