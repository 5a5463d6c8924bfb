"""nanoGPT's data loader on a real CPU trace: ``get_batch`` indexes a NumPy memmap with the
elements of ``torch.randint(...)``, each bound read back through ``__index__``. Whether
that waits for a GPU depends on where the indices live, which a CPU trace cannot tell; the
fix said so (it said "Keep the value on the device"), and now it does."""

from __future__ import annotations

import runpy
import textwrap

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


def test_indexing_a_memmap_with_tensors_gets_the_cpu_indices_fix(tmp_path):
    data = tmp_path / "train.bin"
    np.arange(4096, dtype=np.uint16).tofile(data)
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """\
            import numpy as np
            import torch

            block_size, batch_size = 8, 2


            def get_batch(path):
                data = np.memmap(path, dtype=np.uint16, mode="r")
                ix = torch.randint(len(data) - block_size, (batch_size,))
                x = torch.stack(
                    [torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix]
                )
                return x


            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                with_stack=True,
                schedule=torch.profiler.schedule(wait=0, warmup=1, active=3),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
            )
            prof.start()
            for step in range(4):
                x = get_batch(DATA)
                prof.step()
            prof.stop()
            """
        )
    )
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DATA": str(data)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    memmap = [s for s in report.latent_sites if s.func == "<listcomp>"]
    assert memmap and memmap[0].advice is not None
    assert memmap[0].advice["title"] == "Index NumPy data with CPU indices"
    assert "which a CPU trace cannot tell" in memmap[0].advice["text"]


def test_a_tolist_under_a_torch_function_mode_is_one_copy(tmp_path):
    """``with torch.device(...)`` (a TorchFunctionMode, as scripts set the default device
    with) records each ``.tolist()`` again inside its ``__torch_function__``: two sites and
    twice the copies (a user walk)."""
    script = tmp_path / "mode.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch

            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                with_stack=True,
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
            )
            w = torch.randn(8, 8, requires_grad=True)
            prof.start()
            with torch.device("cpu"):
                for step in range(5):
                    loss = (w @ torch.randn(8, 8)).pow(2).mean()
                    loss.backward()
                    values = loss.detach().reshape(1).tolist()
                    prof.step()
            prof.stop()
            """
        )
    )
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    copies = [s for s in report.latent_sites if s.line == 15]
    assert [s.count for s in copies] == [3], [(s.line, s.count) for s in report.latent_sites]
