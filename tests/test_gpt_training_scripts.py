"""nanoGPT's data loader on a real CPU trace: ``get_batch`` indexes a NumPy memmap with the
elements of ``torch.randint(...)``, each bound read back through ``__index__``. Drawn on
the host (no ``device=``), those indices wait for no GPU on a GPU run, and the reads are
no latent syncs (they were 144 of a 5-step trace's 161, ranked first); drawn where the
trace cannot tell, the fix says so."""

from __future__ import annotations

import ast
import runpy
import textwrap

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.source import _ParsedFile, indexes_host_values

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


GET_BATCH = """\
import numpy as np
import torch

block_size, batch_size = 8, 2
device = "cpu"


def get_batch(path):
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,){draw})
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
    loss = x.float().mean()
    print(loss.item())
    prof.step()
prof.stop()
"""


def _get_batch_report(tmp_path, draw: str):
    data = tmp_path / "train.bin"
    np.arange(4096, dtype=np.uint16).tofile(data)
    script = tmp_path / "train.py"
    script.write_text(GET_BATCH.format(draw=draw))
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DATA": str(data)})
    return analyze(str(logdir), source_roots=[str(tmp_path)])


def test_indexing_a_memmap_with_indices_drawn_on_the_host_is_no_latent_sync(tmp_path):
    report = _get_batch_report(tmp_path, draw="")
    sites = {(s.line, s.func): s.count for s in report.latent_sites}
    assert "<listcomp>" not in {func for _, func in sites}, sites
    # The loss's read is still one: the check drops only the indices' reads.
    assert sites.get((27, "<module>")) == 3, sites


def test_indexing_a_memmap_with_indices_that_may_be_on_a_gpu_gets_the_cpu_indices_fix(
    tmp_path,
):
    # ``device=device``: a CPU trace cannot tell where ``device`` points on a GPU run.
    report = _get_batch_report(tmp_path, draw=", device=device")
    memmap = [s for s in report.latent_sites if s.func == "<listcomp>"]
    assert memmap and memmap[0].advice is not None
    assert memmap[0].advice["title"] == "Index NumPy data with CPU indices"
    assert "which a CPU trace cannot tell" in memmap[0].advice["text"]


def _indexes_host_values(source: str, line: int) -> bool:
    parsed = _ParsedFile(ast.parse(textwrap.dedent(source)))
    # The innermost scope holding the line: the last to start, the shortest of those.
    around = [
        node
        for nodes in parsed.scopes.values()
        for node in nodes
        if node.lineno <= line <= node.end_lineno
    ]
    scope = max(around, key=lambda node: (node.lineno, -node.end_lineno))
    return indexes_host_values(scope, parsed.enclosing_scopes(scope), line)


@pytest.mark.parametrize(
    ("source", "line", "host"),
    [
        # A loop over host-drawn indices, and a global number in the bound.
        (
            """\
            T = 8
            def f(data):
                ix = torch.randperm(100)[:4]
                for i in ix:
                    data[i:i + T]
            """,
            5,
            True,
        ),
        # A bound that is a parameter: it may be a GPU tensor.
        (
            """\
            def f(data, span):
                ix = torch.randint(100, (4,))
                return [data[i:i + span] for i in ix]
            """,
            3,
            False,
        ),
        # Indices drawn with a device, and indices moved to one.
        (
            """\
            def f(data, dev):
                ix = torch.randint(100, (4,), device=dev)
                return [data[i] for i in ix]
            """,
            3,
            False,
        ),
        (
            """\
            def f(data, dev):
                ix = torch.randint(100, (4,)).to(dev)
                return [data[i] for i in ix]
            """,
            3,
            False,
        ),
        # A global the module binds to a tensor it does not make on the host.
        (
            """\
            T = model.block_size
            def f(data):
                ix = torch.arange(4)
                return [data[i:i + T] for i in ix]
            """,
            4,
            False,
        ),
        # A name bound again after the line does not count; one bound twice must be both.
        (
            """\
            def f(data, other):
                ix = torch.zeros(4, dtype=torch.long)
                if other is not None:
                    ix = other
                return [data[i] for i in ix]
            """,
            5,
            False,
        ),
    ],
)
def test_indices_are_host_values_only_where_every_binding_is_made_on_the_host(source, line, host):
    assert _indexes_host_values(source, line) is host


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
