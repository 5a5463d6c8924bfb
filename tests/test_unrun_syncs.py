"""A CPU-only trace's functions that hold an explicit synchronize: none ran there
(``torch.cuda.synchronize()`` under ``if device_type == "cuda":``, the timing line of the
GPT training scripts), and each waits on every step of a GPU run. Before, a CPU report of
such a loop said nothing of it; now the trace lists them (``unrun_syncs``), the report and
the tab say them under the latent syncs."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import analyze
from tb_syncfinder.cli import main
from tb_syncfinder.source import explicit_syncs, guards_around, runs_just_before

_LOOP = textwrap.dedent(
    """\
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    device_type = "cuda" if torch.cuda.is_available() else "cpu"


    def never_called():
        torch.cuda.synchronize()


    def train(model, opt, data, prof):
        for x, y in data:
            t0 = time.time()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if device_type == "cuda":
                torch.cuda.synchronize()

            def timing():  # defined, not called: its synchronize is not the loop's
                torch.cuda.synchronize()

            print(f"loss {loss.item():.4f} dt {time.time() - t0:.3f}")
            prof.step()


    def run(out):
        model = torch.nn.Linear(16, 16)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = [(torch.randn(8, 16), torch.randn(8, 16)) for _ in range(6)]
        with profile(
            activities=[ProfilerActivity.CPU],
            with_stack=True,
            schedule=schedule(wait=1, warmup=1, active=3),
            on_trace_ready=lambda p: p.export_chrome_trace(out),
        ) as prof:
            train(model, opt, data, prof)
    """
)


def test_explicit_syncs_are_read_with_their_guard_and_not_from_nested_functions():
    tree = ast.parse(_LOOP)
    train = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert explicit_syncs(train) == [(21, "torch.cuda.synchronize()", "device_type == 'cuda'")]
    stream = ast.parse("if a:\n    pass\nelse:\n    s.synchronize()\nev.synchronize()\n")
    # In an ``else``, the test negated (a TorchRL walk: tensordict's non-CUDA synchronize
    # was said to run under ``if device_type == 'cuda':``).
    assert explicit_syncs(stream) == [
        (4, "s.synchronize()", "not (a)"),
        (5, "ev.synchronize()", None),
    ]


def _record(tmp_path: Path) -> Path:
    torch = pytest.importorskip("torch")
    del torch
    script = tmp_path / "loop.py"
    script.write_text(_LOOP)
    scope: dict = {}
    exec(compile(_LOOP, str(script), "exec"), scope)
    out = tmp_path / "logs" / "run" / "host_1.1700000000000.pt.trace.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    scope["run"](str(out))
    return out


def test_a_cpu_trace_lists_the_synchronize_its_loop_holds_and_says_it(tmp_path, capsys):
    trace = _record(tmp_path)
    report = analyze(str(trace), source_roots=[str(tmp_path)])
    unrun = report.traces[0].unrun_syncs
    assert [(u.line, u.func, u.code, u.guard) for u in unrun] == [
        (21, "train", "torch.cuda.synchronize()", "device_type == 'cuda'")
    ]
    text = " ".join(report.to_text().split())
    assert "Not run on this CPU trace, but each waits for the GPU wherever it runs: loop.py:21" in (
        text
    )
    assert "under `if device_type == 'cuda':`" in text
    # With a fix of its own: most such synchronizes time the step.
    assert "Fix: drop debugging synchronizes; to time steps, synchronize only every N" in text
    # The loop's logged read comes just after it: on a GPU the host has waited already.
    (logged,) = [site for site in report.latent_sites if site.line == 26]
    assert logged.after_sync is not None and logged.after_sync.line == 21
    assert "after torch.cuda.synchronize() (line 21, not run here): on a GPU the host" in text
    out = tmp_path / "r.json"
    assert main(["report", str(trace), "--source-root", str(tmp_path), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["traces"][0]["unrun_syncs"][0]["line"] == 21


def test_a_gpu_trace_lists_no_unrun_synchronize(tmp_path):
    """Where the device ran, a synchronize that ran is a sync of the trace; one that did
    not was not reached on that run: nothing is read from the source."""
    (tmp_path / "train.py").write_text(_LOOP)
    b = KinetoTraceBuilder()
    for n in range(3):
        with b.step(n):
            item_sync(b, stack=[("train.py", 13, "train")])
            b.kernel(dur=100)
    trace = b.write(tmp_path / "run" / "w.pt.trace.json")
    report = analyze(str(trace), source_roots=[str(tmp_path)])
    assert report.traces[0].has_gpu_activity and report.traces[0].unrun_syncs == []
    assert "Not run on this CPU trace" not in report.to_text()


def test_a_module_loops_synchronize_is_named_when_its_reads_are_a_helpers(tmp_path):
    """The loop's only read is in a helper: the module frame had no sync of its own to say
    the loop ran profiled, and the note went missing (a user walk). The line it was at when
    the schedule began recording, its ``prof.step()``, is in the loop."""
    script = tmp_path / "unrun.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch

            device_type = "cpu"


            def log(t):
                return t.item()


            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                with_stack=True,
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
            )
            w = torch.randn(8, 8, requires_grad=True)
            prof.start()
            for step in range(5):
                loss = (w @ torch.randn(8, 8)).pow(2).mean()
                loss.backward()
                if device_type == "cuda":
                    torch.cuda.synchronize()
                print(f"loss {log(loss):.4f}")
                prof.step()
            prof.stop()
            if device_type == "cuda":
                torch.cuda.synchronize()  # after the loop: not the profiled steps'
            """
        )
    )
    import runpy

    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    lines = [u.line for t in report.traces for u in t.unrun_syncs]
    assert lines == [22], lines


@pytest.mark.parametrize(
    ("body", "after"),
    [
        # build-nanogpt: timing and a log between; a file opened to write the log.
        (
            "for s in range(3):\n    loss = model(x)\n    if cuda:\n"
            "        torch.cuda.synchronize()\n    t1 = time.time()\n    if master:\n"
            "        with open(p) as f:\n"
            "            f.write(f'{loss.item()}')\n",
            True,
        ),
        # Work queued between them: the read waits for it.
        (
            "for s in range(3):\n    torch.cuda.synchronize()\n    loss = model(x)\n"
            "    print(loss.item())\n",
            False,
        ),
        (
            "for s in range(3):\n    torch.cuda.synchronize()\n    y = torch.log(x)\n"
            "    print(y.item())\n",
            False,
        ),
        # At the top of the pass, the read before it; or in the other branch.
        (
            "for s in range(3):\n    print(loss.item())\n    torch.cuda.synchronize()\n",
            False,
        ),
        (
            "for s in range(3):\n    if a:\n        torch.cuda.synchronize()\n"
            "    else:\n        print(loss.item())\n",
            False,
        ),
        # In a loop of its own inside the pass: it may run no time.
        (
            "for s in range(3):\n    for k in ks:\n        torch.cuda.synchronize()\n"
            "    print(loss.item())\n",
            True,
        ),
    ],
)
def test_a_read_runs_just_after_a_synchronize_only_on_its_path_with_no_device_work_between(
    body, after
):
    tree = ast.parse(body)
    (sync_line,) = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "synchronize"
    ]
    (read_line,) = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "item"
    ]
    assert runs_just_before(tree, sync_line, read_line) is after


def test_a_helper_of_the_file_that_only_prints_lets_the_read_follow_the_synchronize():
    """llm.c logs through its own ``print0`` (``print`` on rank 0): a call of the file's
    own function counts by the calls in it."""
    module = ast.parse(
        textwrap.dedent(
            """\
            def print0(*args):
                if int(os.environ.get("RANK", 0)) == 0:
                    print(*args)


            def evaluate(m):
                return m(x)


            for step in range(3):
                torch.cuda.synchronize()
                print0(f"norm {norm:.4f} {lossf.item()}")
                torch.cuda.synchronize()
                evaluate(model)
                print0(f"val {val.item()}")
            """
        )
    )
    functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    assert runs_just_before(module, 11, 12, functions.get)
    assert not runs_just_before(module, 11, 12)  # print0 unknown: it may queue work
    assert not runs_just_before(module, 13, 15, functions.get)  # evaluate() runs the model


def test_a_synchronize_under_nested_ifs_is_said_under_each_of_their_tests(tmp_path):
    """timm's ``torch.cuda.synchronize()`` runs only with ``--synchronize-step``: the
    innermost test alone (``device.type == 'cuda'``) read as every CUDA step (a user
    walk). An ``elif`` chain's earlier tests hold it in their ``else``: not said."""
    tree = ast.parse(
        textwrap.dedent(
            """\
            for batch in loader:
                if args.synchronize_step:
                    if device.type == 'cuda':
                        torch.cuda.synchronize()
                    elif device.type == 'npu':
                        torch.npu.synchronize()
            """
        )
    )
    assert guards_around(tree, 4) == ["args.synchronize_step", "device.type == 'cuda'"]
    assert guards_around(tree, 6) == ["args.synchronize_step", "device.type == 'npu'"]
    assert guards_around(tree, 1) == []


def test_a_module_loop_that_reads_nothing_still_names_its_synchronize(tmp_path):
    """No read at all in the loop: no sync made a frame, so no function was read for its
    synchronizes, and the note went missing (a user walk). The frames the trace shows
    running are read instead."""
    script = tmp_path / "unrun.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch

            device_type = "cpu"
            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                with_stack=True,
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
            )
            w = torch.randn(8, 8, requires_grad=True)
            prof.start()
            for step in range(5):
                (w @ torch.randn(8, 8)).pow(2).mean().backward()
                if device_type == "cuda":
                    torch.cuda.synchronize()
                prof.step()
            prof.stop()
            if device_type == "cuda":
                torch.cuda.synchronize()  # after the loop: not the profiled steps'
            """
        )
    )
    import runpy

    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    assert report.latent_sites == []
    lines = [u.line for t in report.traces for u in t.unrun_syncs]
    assert lines == [15], lines


@pytest.mark.parametrize(
    ("code", "found"),
    [
        # Keras' convert_to_numpy: the copy only where the tensor is off the host.
        (
            "def f(x):\n    if x.device != torch.device('cpu'):\n        x = x.cpu()\n",
            [(3, "x.cpu()", "x.device != torch.device('cpu')")],
        ),
        (
            "def f(t):\n    if t.is_cuda:\n        t = t.to('cpu')\n",
            [(3, "t.to('cpu')", "t.is_cuda")],
        ),
        (
            "def f(t):\n    if t.device.type == 'cpu':\n        pass\n"
            "    else:\n        t = t.cpu()\n",
            [(5, "t.cpu()", "not (t.device.type == 'cpu')")],
        ),
        # Runs on the host too (a CPU trace shows it), or under a test of something else.
        ("def f(t):\n    if t.device.type == 'cpu':\n        t = t.cpu()\n", []),
        ("def f(t, flag):\n    if flag:\n        t = t.cpu()\n", []),
        ("def f(t):\n    t = t.cpu()\n", []),
    ],
)
def test_copies_made_only_off_the_host_are_read_with_their_test(code, found):
    from tb_syncfinder.source import guarded_copies

    assert guarded_copies(ast.parse(code).body[0]) == found


def test_a_copy_made_only_off_the_host_is_named_on_a_cpu_trace(tmp_path):
    """Keras' ``convert_to_numpy`` copies a metric to the host only where it is not there
    (``if x.device != torch.device("cpu"): x = x.cpu()``): on a CPU run the copy never
    runs and no trace shows it, and the report said no operator would synchronize (a
    Keras walk: every per-batch metric read missed). It is read from the source now, as
    an unrun synchronize is, with a fix for a copy."""
    script = tmp_path / "guarded.py"
    script.write_text(
        textwrap.dedent(
            """\
            import numpy as np
            import torch

            DEV = "cuda" if torch.cuda.is_available() else "cpu"
            w = torch.randn(8, 8, device=DEV, requires_grad=True)


            def to_numpy(x):
                if x.device != torch.device("cpu"):
                    x = x.cpu()
                return np.array(x)


            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                with_stack=True,
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
            )
            prof.start()
            for step in range(5):
                loss = (w @ w).square().mean()
                loss.backward()
                value = to_numpy(loss.detach())
                prof.step()
            prof.stop()
            """
        )
    )
    import runpy

    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    unrun = [(u.line, u.func, u.code, u.guard) for t in report.traces for u in t.unrun_syncs]
    assert unrun == [(10, "to_numpy", "x.cpu()", "x.device != torch.device('cpu')")], unrun
    text = " ".join(report.to_text().split())
    assert (
        "guarded.py:10 x.cpu() (in to_numpy, under `if x.device != torch.device('cpu'):`)" in text
    )
    assert "Fix: keep the values on the device and copy them back once" in text
