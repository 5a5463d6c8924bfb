"""CUDA-shaped traces (tests/kineto_builder.py) for two shapes of issue 10: a sync in the
backward pass, on autograd's thread with no Python stack, attributed to the forward line
that built it; and the profiler's own synchronize, listed apart from the findings."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from kineto_builder import (
    BACKWARD_FRAMES,
    KinetoTraceBuilder,
    item_sync,
    mask_backward_sync,
    mask_index_sync,
    profiler_step_sync,
)

from tb_syncfinder import analyze
from tb_syncfinder.cli import main as cli_main
from tb_syncfinder.engine import Options, analyze_trace

LOSS = textwrap.dedent(
    """\
    import torch


    def masked_loss(logits, labels):
        keep = labels != 0
        picked = logits[keep]
        return picked.log_softmax(1).mean()
    """
)
LOSS_DEF, MASK_LINE = 4, 6
TRAIN = textwrap.dedent(
    """\
    from loss import masked_loss


    def train_step(model, x, labels):
        loss = masked_loss(model(x), labels)
        loss.backward()
        return loss.item()


    def main(model, loader, prof):
        for x, labels in loader:
            train_step(model, x, labels)
            prof.step()
    """
)
STEP_DEF, BACKWARD_LINE, ITEM_LINE = 4, 6, 7
MAIN_DEF, PROF_STEP_LINE = 10, 13
AUTOGRAD_TID = 4600


def _sources(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "loss.py").write_text(LOSS)
    (src / "train.py").write_text(TRAIN)
    return src


def _training_trace(tmp_path: Path, steps: int = 2) -> Path:
    """Steps of train_step inside a running main(): the mask's forward sync, its backward
    on autograd's thread while the main thread waits in loss.backward(), loss.item(), and
    prof.step() issuing the profiler's cudaDeviceSynchronize."""
    b = KinetoTraceBuilder()
    with b.frame(("train.py", PROF_STEP_LINE, "main")):  # running since before profiling
        for n in range(steps):
            sequence = 200 + n
            with b.step(n + 1):
                with b.frame(("train.py", STEP_DEF, "train_step")):
                    b.kernel(dur=200)
                    mask_index_sync(b, sequence, stack=[("loss.py", LOSS_DEF, "masked_loss")])
                    b.kernel(dur=100)
                    with b.frames(BACKWARD_FRAMES):
                        mask_backward_sync(b, sequence, AUTOGRAD_TID)
                    item_sync(b, stack=())
                profiler_step_sync(b)
    return b.write(tmp_path / "run" / "worker0.pt.trace.json")


def test_a_backward_sync_without_stack_is_attributed_to_its_forward_line(tmp_path):
    src = _sources(tmp_path)
    trace = _training_trace(tmp_path)
    result = analyze_trace(str(trace), Options(source_roots=(str(src),)))
    backward = [s for s in result.syncs if s.thread == AUTOGRAD_TID]
    assert len(backward) == 2
    for sync in backward:
        assert sync.stack == []  # autograd's thread has no Python frames
        assert sync.forward_op == "aten::index"
        assert [f.func for f in sync.forward_stack if f.user] == [
            "masked_loss",
            "train_step",
            "main",
        ]
        source = sync.source
        assert (Path(source.file).name, source.line, source.line_exact) == (
            "loss.py",
            MASK_LINE,
            True,
        )
        assert source.backward and source.def_line == LOSS_DEF
        run_by = source.run_by
        assert (Path(run_by.file).name, run_by.line, run_by.line_exact) == (
            "train.py",
            BACKWARD_LINE,
            True,
        )
    # Nothing else: per step the forward mask, its backward and loss.item(), each exact.
    lines = sorted(
        (Path(s.source.file).name, s.source.line, s.source.backward, s.op) for s in result.syncs
    )
    assert lines == sorted(
        2
        * [
            ("loss.py", MASK_LINE, False, "aten::index"),
            ("loss.py", MASK_LINE, True, "autograd::engine::evaluate_function: IndexBackward0"),
            ("train.py", ITEM_LINE, False, "aten::item"),
        ]
    )
    assert all(s.source.line_exact for s in result.syncs)


def test_backward_and_forward_of_one_line_are_two_sites_saying_who_ran_the_backward(tmp_path):
    src = _sources(tmp_path)
    report = analyze(_training_trace(tmp_path).parent, source_roots=[str(src)])
    at_mask = {s.backward: s for s in report.sites if s.line == MASK_LINE}
    assert set(at_mask) == {False, True}
    assert at_mask[True].run_by.line == BACKWARD_LINE and at_mask[False].run_by is None
    assert at_mask[True].count == at_mask[False].count == 2
    doc = report.to_json()
    site = next(s for s in doc["sites"] if s["backward"])
    assert site["run_by"]["line"] == BACKWARD_LINE
    sync = next(s for s in doc["syncs"] if s["source"]["backward"])
    assert sync["forward_op"] == "aten::index" and sync["forward_stack"]
    # The backward of x[mask] syncs in aten::nonzero, but the fix is the mask's, as the
    # forward site's (it said "use torch.where instead of nonzero" for a line without one).
    forward = next(s for s in doc["sites"] if s["line"] == MASK_LINE and not s["backward"])
    assert site["advice"] == forward["advice"]
    assert "boolean mask" in site["advice"]["title"]


def test_the_fwd_thread_id_picks_the_forward_thread_when_two_share_a_sequence_number(tmp_path):
    # Sequence numbers count per thread: two forward threads can both have number 7. The
    # backward op's Fwd thread id is torch's id of its thread, learnt from a number only one
    # thread has (9, on the second thread).
    src = _sources(tmp_path)
    (src / "other.py").write_text("def other_loss(logits, keep):\n    return logits[keep]\n")
    b = KinetoTraceBuilder()
    with b.step(1):
        mask_index_sync(b, 7, stack=[("loss.py", LOSS_DEF, "masked_loss")])
        with b.thread(5000):
            mask_index_sync(b, 7, stack=[("other.py", 1, "other_loss")])
            mask_index_sync(b, 9, stack=[("other.py", 1, "other_loss")])
        mask_backward_sync(b, 9, AUTOGRAD_TID, fwd_thread_id=2)
        mask_backward_sync(b, 7, AUTOGRAD_TID, fwd_thread_id=2)
    result = analyze_trace(
        str(b.write(tmp_path / "w.pt.trace.json")), Options(source_roots=(str(src),))
    )
    backward = [s for s in result.syncs if s.thread == AUTOGRAD_TID]
    assert [(Path(s.source.file).name, s.source.line) for s in backward] == [
        ("other.py", 2),
        ("other.py", 2),
    ]


def test_a_backward_op_whose_forward_is_not_in_the_trace_keeps_its_operator_chain(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        mask_backward_sync(b, 42, AUTOGRAD_TID)
    (sync,) = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json"))).syncs
    assert sync.source is None and sync.forward_op is None
    assert sync.op_chain[:2] == [
        "autograd::engine::evaluate_function: IndexBackward0",
        "IndexBackward0",
    ]


def test_the_profilers_own_synchronize_is_listed_apart_out_of_findings_and_totals(tmp_path):
    src = _sources(tmp_path)
    trace = _training_trace(tmp_path)
    result = analyze_trace(str(trace), Options(source_roots=(str(src),)))
    assert len(result.profiler_overhead) == 2
    assert all(
        s.api == "cudaDeviceSynchronize" and s.profiler_overhead for s in result.profiler_overhead
    )
    assert not any(s.api == "cudaDeviceSynchronize" for s in result.syncs)
    # Still said where it came from: the user's prof.step() line (a running frame's line).
    assert {s.source.line for s in result.profiler_overhead} == {PROF_STEP_LINE}
    assert all(s.id in result.contexts for s in result.profiler_overhead)
    report = analyze(trace.parent, source_roots=[str(src)])
    assert report.summary.sync_count == 6
    assert "explicit_sync" not in report.summary.by_kind
    assert [st.sync_count for st in report.steps] == [3, 3]
    assert not any(site.kind == "explicit_sync" for site in report.sites)
    overhead = report.profiler_overhead
    assert overhead.count == 2
    assert overhead.host_wait_us == sum(s.host_wait_us for s in result.profiler_overhead) > 0
    assert report.summary.host_wait_us == sum(s.host_wait_us for s in report.syncs)
    doc = report.to_json()
    assert doc["profiler_overhead"]["count"] == 2 and len(doc["profiler_overhead"]["syncs"]) == 2


def test_the_ci_gate_does_not_count_the_profilers_synchronize(tmp_path, capsys):
    trace = _training_trace(tmp_path)
    assert cli_main(["report", str(trace.parent), "--max-syncs-per-step", "3"]) == 0
    assert cli_main(["report", str(trace.parent), "--max-syncs-per-step", "2"]) == 1
    out = capsys.readouterr()
    assert "have more than 2 syncs, up to 3" in out.err


def test_the_legacy_profilers_exit_is_overhead_but_a_users_synchronize_is_not(tmp_path):
    b = KinetoTraceBuilder()
    with b.frame(("train.py", 12, "main")):
        with b.step(1):
            b.kernel(dur=100)
            with b.frames(
                [
                    ("torch/cuda/__init__.py", 1152, "synchronize"),
                    "<built-in function _cuda_synchronize>",
                ]
            ):
                b.runtime("cudaDeviceSynchronize")  # the user's torch.cuda.synchronize()
        b.kernel(dur=100)
        with b.frames(
            [
                ("torch/autograd/profiler.py", 403, "__exit__"),
                ("torch/cuda/__init__.py", 1152, "synchronize"),
                "<built-in function _cuda_synchronize>",
            ]
        ):
            b.runtime("cudaDeviceSynchronize")  # torch.autograd.profiler.profile stopping
    result = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json")))
    assert [s.step for s in result.syncs] == [1]
    assert [s.step for s in result.profiler_overhead] == [None]


def test_a_report_without_profiler_syncs_has_an_empty_overhead_list(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    path = b.write(tmp_path / "run" / "w.pt.trace.json")
    doc = json.loads(json.dumps(analyze(path.parent).to_json()))
    assert doc["profiler_overhead"] == {"count": 0, "host_wait_us": 0.0, "syncs": []}


def test_unreadable_sources_keep_every_sync_with_its_recorded_line_marked_inexact(tmp_path):
    """The trace does not show the profiler starting, so no recorded line is known to be
    where its function starts: none is called a def line."""
    trace = _training_trace(tmp_path)
    result = analyze_trace(str(trace), Options(source_roots=(str(tmp_path / "nowhere"),)))
    assert len(result.syncs) == 6 and len(result.profiler_overhead) == 2
    for sync in result.syncs:
        assert sync.op_chain and sync.source is not None
        user = next(f for f in sync.stack or sync.forward_stack if f.user)
        assert not sync.source.line_exact and sync.source.line == user.line
        assert sync.source.def_line is None
    backward = [s for s in result.syncs if s.source.backward]
    assert {(s.source.line, s.source.run_by.line) for s in backward} == {(LOSS_DEF, STEP_DEF)}


def test_a_trace_without_stacks_still_reports_every_sync_with_its_operator_chain(tmp_path):
    trace = _training_trace(tmp_path)
    doc = json.loads(trace.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    trace.write_text(json.dumps(doc))
    result = analyze_trace(str(trace))
    # Without frames nothing tells the profiler's synchronize inside prof.step() apart
    # (this builder records it inside the step's span): it stays a finding.
    assert len(result.syncs) == 8 and result.profiler_overhead == []
    assert all(s.source is None for s in result.syncs)
    assert sorted(s.op or s.api for s in result.syncs) == sorted(
        2
        * [
            "aten::index",
            "autograd::engine::evaluate_function: IndexBackward0",
            "aten::item",
            "cudaDeviceSynchronize",
        ]
    )


def test_the_terminal_lists_the_profilers_synchronize_apart_from_the_sites(tmp_path):
    from tb_syncfinder.outputs.text import render_report

    text = render_report(analyze(str(_training_trace(tmp_path).parent)), width=100)
    apart = text[text.index("Listed apart") :]
    assert "profiler overhead  2 syncs" in apart and "warm-up allocator" not in apart
    assert "explicit_sync" not in text  # the only explicit syncs are the profiler's


def _stackless_trace(tmp_path: Path, after_loop: list[str]) -> Path:
    """Two steps of ``.item()`` without python frames, then after the loop each of
    ``after_loop`` in order: "sync" (a bare cudaDeviceSynchronize: the program's
    ``torch.cuda.synchronize()``, or the profiler stopping), "op" (an operator with a
    kernel), "stream" (a bare cudaStreamSynchronize)."""
    b = KinetoTraceBuilder()
    for n in range(2):
        with b.step(n + 1):
            item_sync(b, stack=())
    for what in after_loop:
        b.kernel(dur=300)
        if what == "sync":
            b.runtime("cudaDeviceSynchronize")
        elif what == "stream":
            b.runtime("cudaStreamSynchronize")
        else:
            with b.op("aten::add"):
                b.runtime("cudaLaunchKernel", dur=4)
    return b.write(tmp_path / "run" / "w.pt.trace.json")


def test_without_stacks_the_last_bare_device_synchronize_after_the_steps_is_the_profilers(
    tmp_path,
):
    result = analyze_trace(str(_stackless_trace(tmp_path, ["sync", "sync"])))
    # The program's torch.cuda.synchronize() after the loop stays a finding; the last one,
    # the profiler stopping, is listed apart.
    assert [s.api for s in result.syncs].count("cudaDeviceSynchronize") == 1
    (stop,) = result.profiler_overhead
    assert stop.api == "cudaDeviceSynchronize" and stop.step is None
    assert stop.ts_us > max(s.ts_us for s in result.syncs)
    report = analyze(str(tmp_path / "run"))
    assert report.profiler_overhead.count == 1
    assert report.summary.sync_count == 3


def test_without_stacks_a_device_synchronize_followed_by_more_work_stays_a_finding(tmp_path):
    for after_loop in (["sync", "op"], ["stream"], []):
        result = analyze_trace(str(_stackless_trace(tmp_path / "_".join(after_loop), after_loop)))
        assert result.profiler_overhead == [], after_loop


def test_without_stacks_a_device_synchronize_inside_the_last_step_stays_a_finding(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b, stack=())
        b.kernel(dur=300)
        b.runtime("cudaDeviceSynchronize")
    result = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json")))
    assert result.profiler_overhead == []
    assert [s.api for s in result.syncs][-1] == "cudaDeviceSynchronize"


def test_without_stacks_a_worker_threads_last_synchronize_is_the_programs(tmp_path):
    """One profiler stop per trace: a worker thread that ends with a bare synchronize while
    the main thread goes on is the program's; the main thread's last one is the stop."""
    for steps in (True, False):
        b = KinetoTraceBuilder()
        with b.thread(4700):
            b.kernel(dur=200)
            b.runtime("cudaDeviceSynchronize")  # the worker's own, then it is done
        for n in range(2):
            if steps:
                with b.step(n + 1):
                    item_sync(b, stack=())
            else:
                item_sync(b, stack=())
        b.kernel(dur=300)
        b.runtime("cudaDeviceSynchronize")  # the profiler stopping
        result = analyze_trace(str(b.write(tmp_path / f"w{steps}.pt.trace.json")))
        (stop,) = result.profiler_overhead
        assert stop.thread != 4700
        assert [s.thread for s in result.syncs if s.api == "cudaDeviceSynchronize"] == [4700]
