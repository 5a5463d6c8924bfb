"""Reads of one name in two branches (``scaler.step(opt)`` or ``opt.step()``; a module-level
loop's validation block or its logging, as build-nanogpt's and nanoGPT's ``train.py`` are
written): the calls of that name alone fit either branch, so every read was inexact with
both lines as candidates. The frame's other calls around them tell which branch ran (its
``Observed.calls``): each read is now exact at its line, on real torch CPU traces, and a
call by another name never pins a read on the wrong branch."""

from __future__ import annotations

import runpy
import sys
import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")

_PROFILER = (
    "torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], "
    "with_stack=True, schedule=torch.profiler.schedule(wait=1, warmup=1, active=5), "
    "on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR))"
)


def _run(tmp_path: Path, source: str) -> list[tuple[int | None, bool, list[int]]]:
    """Runs ``source`` as a script (``LOGDIR`` set), analyses its trace: each latent read
    as (line, exact, candidates), in time order."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source).replace("PROFILER", _PROFILER))
    logdir = tmp_path / "logs"
    sys.modules.pop("__main__x", None)
    # ``DEVICE``: tensors made where a GPU run would put them (the trace cannot tell, so
    # their reads are latent syncs; ``torch.randn(4)`` alone is on the host, and is none).
    globals_ = {"LOGDIR": str(logdir), "DEVICE": "cpu"}
    runpy.run_path(str(script), init_globals=globals_, run_name="__main__x")
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    return [
        (s.source.line, s.source.line_exact, list(s.source.candidates))
        for s in sorted(report.latent, key=lambda s: s.ts_us)
        if s.source is not None
    ]


def test_grad_scalers_read_is_placed_at_scaler_step_not_the_else_branchs_optimizer_step(
    tmp_path,
):
    found = _run(
        tmp_path,
        """\
        import torch


        def train_one_epoch(model, opt, scaler, data, prof):
            for x, y in data:
                with torch.autocast("cpu", enabled=scaler is not None):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                else:
                    loss.backward()
                    opt.step()
                prof.step()


        model = torch.nn.Linear(16, 16)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = [(torch.randn(8, 16), torch.randn(8, 16)) for _ in range(8)]
        with PROFILER as prof:
            train_one_epoch(model, opt, torch.amp.GradScaler("cpu"), data, prof)
        """,
    )
    assert found == [(11, True, [])] * 5  # was line 16*, candidates 11 and 15


def test_a_module_level_loops_validation_and_logging_reads_are_each_exact(tmp_path):
    """build-nanogpt's shape: the loop at module level (running when profiling started),
    a validation block every third step and the logging, each reading with ``.item()``."""
    found = _run(
        tmp_path,
        """\
        import torch

        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        log = []
        prof = PROFILER
        prof.start()
        for step in range(8):
            if step % 3 == 0:
                model.eval()
                with torch.no_grad():
                    val = model(torch.randn(4, 8)).pow(2).mean()
                log.append(f"val {val.item():.4f}")
                model.train()
            loss = model(torch.randn(4, 8)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step % 2 == 0:
                log.append(f"train {loss.item():.4f}")
            prof.step()
        prof.stop()
        """,
    )
    # Profiled: steps 2 to 6; validation at 3 and 6, logging at 2, 4 and 6.
    assert found == [(20, True, []), (13, True, []), (20, True, []), (13, True, []), (20, True, [])]


def test_alternating_branches_are_told_apart_by_their_other_calls(tmp_path):
    found = _run(
        tmp_path,
        """\
        import torch


        def log_train(x):
            return x * 2


        def log_eval(x):
            return x + 1


        def loop(prof):
            out = []
            for i in range(8):
                x = torch.randn(4, device=DEVICE)
                if i % 2:
                    log_train(x)
                    out.append(x.sum().item())
                else:
                    log_eval(x)
                    out.append(x.mean().item())
                prof.step()


        with PROFILER as prof:
            loop(prof)
        """,
    )
    assert found == [(21, True, []), (18, True, []), (21, True, []), (18, True, []), (21, True, [])]


def test_a_call_by_another_name_pins_no_read_on_the_wrong_branch(tmp_path):
    """Branch A calls ``log_eval`` as ``f``, branch B by its name: the frame ``log_eval``
    fits both (``f`` is bound to it), so the calls around say nothing, and the read stays
    a candidate of both, never claimed at B's line."""
    found = _run(
        tmp_path,
        """\
        import torch


        def log_eval(x):
            return x + 1


        def loop(prof):
            f = log_eval
            for i in range(8):
                x = torch.randn(4, device=DEVICE)
                if i % 2:
                    f(x)
                    x.sum().item()
                else:
                    log_eval(x)
                    x.mean().item()
                prof.step()


        with PROFILER as prof:
            loop(prof)
        """,
    )
    assert all(not exact or line in (14, 17) for line, exact, _c in found), found
    odd = [f for f in found if f[0] == 14 or 14 in f[2]]
    assert odd and all(line != 17 or not exact for line, exact, _c in odd), found


def test_a_generator_iterated_in_a_periodic_block_leaves_every_steps_read_exact(tmp_path):
    """build-nanogpt with HellaSwag on: ``for ... in enumerate(iterate_examples("val"))``
    every few steps. A generator's frame shows once per resume, which fit no branch, and
    the logging's ``{norm:.4f}`` stayed inexact in every step (a user walk)."""
    found = _run(
        tmp_path,
        """\
        import torch


        def examples():
            for i in range(3):
                yield i


        w = torch.randn(4, device=DEVICE)
        prof = PROFILER
        prof.start()
        for step in range(8):
            if step % 4 == 0:
                print(f"val {w.sum().item():.4f}")
                for ex in examples():
                    pass
            norm = w.norm()
            print(f"step {step} | loss: {w.mean().item():.6f} | norm: {norm:.4f}")
            prof.step()
        prof.stop()
        """,
    )
    assert found and all(exact for _line, exact, _c in found), found
    assert sorted({line for line, _e, _c in found}) == [14, 18]


def test_a_profiler_made_by_a_helper_is_known_by_its_name_and_places_the_validation_reads(
    tmp_path,
):
    """llm.c's loop with the profiler from the user's own helper (``prof =
    make_profiler()``): no ``profile(...)`` call names it, so every ``.step()`` might have
    been the profiler's, and none had to be: a pass could end without one, and the
    validation reads fit the training read's line too (inexact, both lines)."""
    found = _run(
        tmp_path,
        """\
        import torch


        def make_profiler():
            return PROFILER


        w = torch.randn(1, device=DEVICE)
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        prof = make_profiler()
        prof.start()
        for step in range(8):
            if step % 3 == 0:
                val = 0.0
                for _ in range(2):
                    val += w.item()
            opt.step()
            loss = w.item()
            prof.step()
        prof.stop()
        """,
    )
    # Profiled: steps 2 to 6; validation at 3 and 6 (two reads each).
    assert found == [
        (18, True, []),
        (16, True, []),
        (16, True, []),
        (18, True, []),
        (18, True, []),
        (18, True, []),
        (16, True, []),
        (16, True, []),
        (18, True, []),
    ], found
