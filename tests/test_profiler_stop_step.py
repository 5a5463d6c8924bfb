"""The step the profiler's stop closes is no step of the program.

A loop that ends while a schedule's cycle is active (or a profile without a schedule) ends
with ``prof.step()`` opening ``ProfilerStep#N`` and the ``with profile(...)`` exit closing
it a few microseconds later, with nothing of the loop in it. Counted as a step, it divides
every per-step figure by one step too many (a README-style loop of 8 batches showed its
every-step ``.item()`` as 0.8 a step)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import analyze
from tb_syncfinder.engine import analyze_trace

# What torch 2.x records under ``with profile(...)``'s exit, outermost first: the
# profiler stopping, and (on a GPU) waiting for the device as it does.
PROFILER_STOP_FRAMES = (
    ("torch/profiler/profiler.py", 1121, "__exit__"),
    ("torch/profiler/profiler.py", 1135, "stop"),
    ("torch/autograd/profiler.py", 403, "__exit__"),
    ("torch/cuda/__init__.py", 1152, "synchronize"),
    "<built-in function _cuda_synchronize>",
)


def _steps_then_last(tmp_path: Path, last: str) -> Path:
    """Three steps, each with a kernel and ``loss.item()``, then a last step holding
    ``last``: the profiler's stop alone, or code of the program's."""
    b = KinetoTraceBuilder()
    with b.frame(("train.py", 10, "main")):
        for n in range(3):
            with b.step(n + 1):
                item_sync(b)
        with b.step(4):
            if last == "profiler_stop":
                with b.frames(PROFILER_STOP_FRAMES):
                    b.runtime("cudaDeviceSynchronize")
            elif last == "user_synchronize":
                with b.frames(
                    (("train.py", 14, "main"), ("torch/cuda/__init__.py", 1152, "synchronize"))
                ):
                    b.runtime("cudaDeviceSynchronize")
            elif last == "item_after_loop":
                item_sync(b, stack=(("train.py", 15, "main"),))
            elif last == "item_then_profiler_stop":
                item_sync(b, stack=(("train.py", 15, "main"),), kernel_us=None)
                with b.frames(PROFILER_STOP_FRAMES):
                    b.runtime("cudaDeviceSynchronize")
            elif last == "checkpoint_after_loop":
                with b.frame(("train.py", 16, "save_checkpoint")):
                    b.advance(5000)
            elif last == "library_epoch_end":
                # ultralytics' loop ending: its progress bar closing, epoch-end callbacks.
                with b.frame(("ultralytics/utils/tqdm.py", 335, "close")):
                    b.advance(40)
                with b.frame(("ultralytics/engine/trainer.py", 231, "run_callbacks")):
                    b.advance(50)
            elif last == "loader_exit":
                # The loop's last fetch: the loader raises StopIteration (with workers, after
                # joining them: 29 ms in a DLRM walk, longer than the steps).
                with (
                    b.frame(("torch/utils/data/dataloader.py", 733, "__next__")),
                    b.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"),
                ):
                    b.advance(29000)
                with b.frames(PROFILER_STOP_FRAMES):
                    b.runtime("cudaDeviceSynchronize")
            elif last != "nothing":
                raise AssertionError(last)
    return b.write(tmp_path / "run" / "worker0.pt.trace.json")


@pytest.mark.parametrize(
    "last",
    ["nothing", "profiler_stop", "library_epoch_end", "checkpoint_after_loop", "loader_exit"],
)
def test_a_last_step_holding_only_the_profilers_stop_is_not_counted(tmp_path, last):
    """Nor one holding only the program's Python after the loop, in a trace whose steps
    ran operators: no pass of the loop (a YOLO walk: ultralytics' 127 us closing step
    made its 3 reads a step 2.7); nor the loader's fetch that ends the loop, however long
    (a DLRM walk: 1.0 read a step read as 0.8)."""
    result = analyze_trace(str(_steps_then_last(tmp_path, last)))
    assert result.info.steps == 3
    assert [s.step for s in result.steps] == [1, 2, 3]
    assert len([s for s in result.syncs if s.op == "aten::item"]) == 3
    # The profiler's own wait is still listed, apart from the findings.
    overhead = result.profiler_overhead
    assert len(overhead) == (1 if last in ("profiler_stop", "loader_exit") else 0)


@pytest.mark.parametrize("last", ["user_synchronize", "item_after_loop"])
def test_a_last_step_with_the_programs_work_is_counted(tmp_path, last):
    result = analyze_trace(str(_steps_then_last(tmp_path, last)))
    assert result.info.steps == 4
    assert [s.step for s in result.steps] == [1, 2, 3, 4]


def test_a_short_last_step_the_profilers_stop_closes_is_the_code_after_the_loop(tmp_path):
    """A read after the loop, then the profiler's stop (``with profile(...)``'s exit, a
    Trainer callback's ``prof.stop()``): a step far shorter than the loop's, no pass of it.
    Counted (a sentence-transformers walk), each pass's read was "in 8 of 9 steps", 1.8 a
    step where each made 2. The read after the loop is still listed."""
    result = analyze_trace(str(_steps_then_last(tmp_path, "item_then_profiler_stop")))
    assert result.info.steps == 3
    assert [s.step for s in result.steps] == [1, 2, 3]
    assert len([s for s in result.syncs if s.op == "aten::item"]) == 4


def test_a_last_step_of_python_alone_is_counted_where_no_step_ran_an_operator(tmp_path):
    """A loop of the program's Python only (no operator anywhere): its last step is as
    much a pass of the loop as the others."""
    b = KinetoTraceBuilder()
    for n in range(4):
        with b.step(n + 1), b.frame(("train.py", 12, "env_step")):
            b.advance(100)
    result = analyze_trace(str(b.write(tmp_path / "run" / "worker0.pt.trace.json")))
    assert result.info.steps == 4


def test_a_trace_of_one_step_keeps_it_however_empty(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(7):
        b.advance(20)
    item_sync(b)
    result = analyze_trace(str(b.write(tmp_path / "run" / "worker0.pt.trace.json")))
    assert result.info.steps == 1


torch = pytest.importorskip("torch")

README_LOOP = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)


    def main(logdir):
        torch.manual_seed(0)
        loader = [(torch.randn(16, 32), torch.randn(16, 1)) for _ in range(8)]
        with profile(activities=[ProfilerActivity.CPU],
                     schedule=schedule(wait=1, warmup=1, active=3),
                     on_trace_ready=tensorboard_trace_handler(logdir),
                     with_stack=True) as prof:
            for x, y in loader:
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                running = loss.item()  # every step
                prof.step()
        return running
    """
)


def test_a_loop_ending_inside_a_profiling_cycle_counts_the_steps_it_ran(tmp_path):
    """Eight batches, cycles of wait 1, warm-up 1, active 3: steps 2-4 in the first trace,
    7 and the profiler's stop (8) in the second. Four steps, one item() in each."""
    src = tmp_path / "src" / "readme_loop.py"
    src.parent.mkdir()
    src.write_text(README_LOOP)
    spec = importlib.util.spec_from_file_location("readme_loop", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(str(tmp_path / "logs" / "run"))
    traces = sorted((tmp_path / "logs" / "run").glob("*.pt.trace.json"))
    assert len(traces) == 2
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(src.parent)])
    assert sum(t.steps for t in report.traces) == 4
    items = [s for s in report.latent_sites if "aten::item" in s.ops and s.func == "main"]
    assert len(items) == 1 and items[0].count == 4
    assert items[0].per_step == pytest.approx(1.0)
    sys.modules.pop("readme_loop", None)


def test_a_trace_of_the_profilers_closing_step_alone_adds_no_step_to_its_run(tmp_path):
    """A review: a schedule whose next cycle starts as the loop ends (``repeat=0``, the
    default) makes the profiler's exit write a second trace of that closing step alone. Its
    run counted it: 363 item() calls over 3 steps read as 90.8 per step, not 121."""
    src = tmp_path / "src" / "cycle_loop.py"
    src.parent.mkdir()
    src.write_text(
        README_LOOP.replace(
            "schedule(wait=1, warmup=1, active=3)", "schedule(wait=0, warmup=0, active=3)"
        ).replace("for _ in range(8)]", "for _ in range(3)]")
    )
    spec = importlib.util.spec_from_file_location("cycle_loop", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(str(tmp_path / "logs" / "run"))
    sys.modules.pop("cycle_loop", None)
    traces = sorted((tmp_path / "logs" / "run").glob("*.pt.trace.json"))
    assert len(traces) == 2  # steps 0-2, then the closing step 3 alone
    closing = min(traces, key=lambda t: t.stat().st_size)
    alone = analyze_trace(str(closing))
    assert alone.info.steps == 0 and alone.info.step_markers and alone.steps == []
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(src.parent)])
    assert sum(t.steps for t in report.traces) == 3 and report.summary.step_count == 3
    items = [s for s in report.latent_sites if "aten::item" in s.ops and s.func == "main"]
    assert len(items) == 1 and items[0].count == 3
    assert items[0].per_step == pytest.approx(1.0)


def test_a_trace_of_one_empty_step_with_the_programs_work_around_it_keeps_it(tmp_path):
    """The closing step alone is dropped only where the trace holds no operator: a one-step
    trace whose work lies outside its step (work before the first ``prof.step()``) keeps
    its step, as before."""
    b = KinetoTraceBuilder()
    item_sync(b)
    with b.step(1), b.frames(PROFILER_STOP_FRAMES[:2]):
        b.advance(20)
    result = analyze_trace(str(b.write(tmp_path / "run" / "worker0.pt.trace.json")))
    assert result.info.steps == 1


def test_a_first_step_alone_in_its_trace_is_kept_however_empty(tmp_path):
    """A review: a one-step trace without stacks whose step 0 ran only Python (no operator)
    looked like the closing step and counted 0 steps. A closing step alone in its trace
    always follows a cycle written before it: step 0 never is one."""
    b = KinetoTraceBuilder()
    with b.step(0):
        b.advance(5000)
    result = analyze_trace(str(b.write(tmp_path / "run" / "worker0.pt.trace.json")))
    assert result.info.steps == 1 and [s.step for s in result.steps] == [0]


DATALOADER_LOOP = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    def main(logdir, workers):
        model = torch.nn.Linear(4, 1)
        data = torch.utils.data.TensorDataset(torch.randn(48, 4))
        loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=workers)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     schedule=schedule(wait=1, warmup=1, active=10, repeat=1),
                     on_trace_ready=tensorboard_trace_handler(logdir)) as prof:
            for (x,) in loader:
                loss = model(x).sum()
                value = loss.item()  # every step
                prof.step()
        return value
    """
)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloaders_last_fetch_after_the_loop_is_no_step(tmp_path, workers):
    """Six batches, steps 2-5 profiled: the loader's fetch that ends the loop opens
    ``ProfilerStep#6`` and the profiler's exit closes it (with workers, it joins them and
    takes longer than any step). Four steps, one read in each."""
    src = tmp_path / "src" / "loader_loop.py"
    src.parent.mkdir()
    src.write_text(DATALOADER_LOOP)
    spec = importlib.util.spec_from_file_location("loader_loop", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(str(tmp_path / "logs" / "run"), workers)
    sys.modules.pop("loader_loop", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(src.parent)])
    assert sum(t.steps for t in report.traces) == 4
    items = [s for s in report.latent_sites if "aten::item" in s.ops]
    assert len(items) == 1 and items[0].count == 4
    assert items[0].per_step == pytest.approx(1.0)
