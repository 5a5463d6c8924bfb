"""Traces recorded by real torch on the CPU inside the test: stacks, exact source lines,
annotations, module paths, steps and latent findings."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze, catalogue

torch = pytest.importorskip("torch")

WORKLOAD = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 4)

        def forward(self, x):
            self.peak = x.abs().max().item()
            return self.fc1(x)


    def train_step(model, x):
        y = model(x)
        idx = torch.nonzero(y > 0)
        s = y.sum().item()
        kept = y[y > 0]
        u = torch.unique(idx)
        t = y.sum().item()
        return s, t, kept, u
    """
)
# Lines in WORKLOAD (1-based).
FORWARD_DEF, FORWARD_ITEM = 10, 11
DEF_LINE, NONZERO, ITEM1, MASK, UNIQUE, ITEM2 = 15, 17, 18, 19, 20, 21


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("cpu_trace")
    src = root / "workload_sync.py"
    src.write_text(WORKLOAD)
    spec = importlib.util.spec_from_file_location("workload_sync", src)
    module = importlib.util.module_from_spec(spec)
    sys.modules["workload_sync"] = module
    spec.loader.exec_module(module)
    from torch.profiler import (
        ProfilerActivity,
        profile,
        record_function,
        schedule,
        tensorboard_trace_handler,
    )

    model = module.Net()
    logdir = root / "logs" / "run1"
    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        with_modules=True,
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=2),
        on_trace_ready=tensorboard_trace_handler(str(logdir)),
    ) as prof:
        for _ in range(3):
            with record_function("train_block"):
                module.train_step(model, torch.randn(4, 8))
            prof.step()
    sys.modules.pop("workload_sync", None)
    return root, logdir


def test_cpu_trace_has_no_real_syncs_only_latent_findings(recorded):
    root, logdir = recorded
    report = analyze(logdir, source_roots=[str(root)])
    assert report.summary.sync_count == 0
    assert report.traces[0].device == "cpu" and report.traces[0].has_stacks
    kinds = {(s.op, s.kind) for s in report.latent}
    assert ("aten::nonzero", catalogue.DYNAMIC_SHAPE) in kinds
    assert ("aten::item", catalogue.SCALAR_READBACK) in kinds
    assert ("aten::index", catalogue.DYNAMIC_SHAPE) in kinds
    assert all(s.latent and s.host_wait_us == 0 for s in report.latent)


def test_latent_findings_point_at_exact_call_lines(recorded):
    root, logdir = recorded
    report = analyze(logdir, source_roots=[str(root)])
    lines = {}
    for sync in report.latent:
        assert sync.source is not None, sync
        assert sync.source.line_exact
        if sync.source.func == "forward":
            assert (sync.source.def_line, sync.source.line) == (FORWARD_DEF, FORWARD_ITEM)
            continue
        assert sync.source.def_line == DEF_LINE
        lines.setdefault(sync.op, set()).add(sync.source.line)
    assert lines["aten::nonzero"] == {NONZERO}
    assert lines["aten::item"] == {ITEM1, ITEM2}  # 2 item calls, matched in order
    assert lines["aten::index"] == {MASK}
    assert any(op.startswith("aten::unique") or op == "aten::_unique2" for op in lines)
    site_lines = {(s.line, s.kind) for s in report.latent_sites}
    assert (UNIQUE, catalogue.DYNAMIC_SHAPE) in site_lines


def test_steps_annotations_and_stacks_come_from_the_trace(recorded):
    root, logdir = recorded
    report = analyze(logdir, source_roots=[str(root)])
    assert sorted({s.step for s in report.latent}) == [1, 2]
    assert [s.step for s in report.steps] == [1, 2]
    sync = next(s for s in report.latent if s.op == "aten::nonzero")
    assert sync.annotations == ["train_block"]
    assert sync.stack[0].func == "nonzero" and not sync.stack[0].user
    user = [f for f in sync.stack if f.user]
    assert Path(user[0].file).name == "workload_sync.py" and user[0].line == DEF_LINE


def test_module_path_comes_from_nn_module_frames(recorded):
    root, logdir = recorded
    report = analyze(logdir, source_roots=[str(root)])
    in_forward = [s for s in report.latent if s.source and s.source.func == "forward"]
    assert len(in_forward) == 2 and all(s.module == "Net" for s in in_forward)
    outside = [s for s in report.latent if s.source and s.source.func == "train_step"]
    assert outside and all(s.module is None for s in outside)
    for sync in report.latent:
        assert not any(f.func.startswith("nn.Module") for f in sync.stack)


RUNNING_LOOP = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    w = torch.randn(8, 4, device="cpu")  # where a GPU run puts it: not made on the host
    scale = torch.ones(1).item()
    with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(LOGDIR)) as prof:
        for step in range(3):
            y = torch.randn(4, 8) @ w
            idx = torch.nonzero(y > 0)
            loss = y.sum().item()
            peak = y.max().item()
            prof.step()
    """
)
LOOP_NONZERO, LOOP_ITEM1, LOOP_ITEM2, LOOP_STEP = 11, 12, 13, 14


def test_module_level_loop_findings_point_at_the_calls_not_at_prof_step(tmp_path):
    """The loop's <module> frame was running when profiling started, so the trace records
    its current line (prof.step()), not a def line; the resolver finds the calls in the
    loop body, and the two item() calls in the order they run."""
    import runpy

    script = tmp_path / "train_loop.py"
    script.write_text(RUNNING_LOOP)
    logdir = tmp_path / "logs" / "loop"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)}, run_name="train_loop")
    report = analyze(logdir, source_roots=[str(tmp_path)])
    innermost = {
        next((f.func, Path(f.file).name, f.line) for f in s.stack if f.user) for s in report.latent
    }
    assert innermost == {("<module>", "train_loop.py", LOOP_STEP)}  # what the trace says
    by_op: dict[str, list[tuple[float, int]]] = {}
    for sync in report.latent:
        assert sync.source is not None and sync.source.line_exact, sync.source
        by_op.setdefault(sync.op, []).append((sync.ts_us, sync.source.line))
    assert {line for _, line in by_op["aten::nonzero"]} == {LOOP_NONZERO}
    items = [line for _, line in sorted(by_op["aten::item"])]
    assert items == [LOOP_ITEM1, LOOP_ITEM2] * 2  # 2 recorded steps, calls in run order


# The profiling loop the scripts below end with: ``train_step(x, n)`` per step, steps
# profiled after one warm-up, written where ``main`` is told.
PROFILED_LOOP = """

def main(trace_path, steps=3):
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),
        on_trace_ready=lambda prof: prof.export_chrome_trace(trace_path),
    ) as prof:
        for n in range(steps + 1):
            train_step(torch.randn(8, 8), n)
            prof.step()
"""


def _profiled_report(
    tmp_path, name: str, step_code: str, loop: str = PROFILED_LOOP, **globals_: object
):
    """``step_code`` (a module defining ``train_step``) profiled on the CPU with ``loop``,
    and its report with the script's folder as source root."""
    import runpy

    script = tmp_path / f"{name}.py"
    script.write_text(step_code + loop)
    trace = tmp_path / "logs" / "run" / "w.pt.trace.json"
    trace.parent.mkdir(parents=True)
    runpy.run_path(str(script), init_globals=globals_)["main"](str(trace))
    return analyze(trace.parent, source_roots=[str(tmp_path)])


PRINTING = """\
import torch


def train_step(x, step):
    y = x @ x
    loss = y.mean()
    print(y[y > 0].sum(), file=SINK)
    return loss.item()
"""
PRINT_LINE, PRINT_ITEM_LINE, MASK_LINE = 7, 8, 7


def test_printing_a_tensor_is_one_read_back_site_at_the_print_with_the_print_fix(tmp_path):
    """torch formats a tensor for print() through torch/_tensor_str.py, which reads values
    back with is_nonzero, item and masked_select: one site at the print, a scalar
    read-back with the print fix, not a branch or a boolean mask."""
    import io

    report = _profiled_report(tmp_path, "printing", PRINTING, SINK=io.StringIO())
    printed = [s for s in report.latent_sites if s.ops and s.ops[0] == "print(tensor)"]
    (site,) = printed
    assert (site.line, site.kind) == (PRINT_LINE, "scalar_readback")
    assert site.advice["title"] == "Do not print device tensors inside the step"
    assert len({op for op in site.ops if op.startswith("aten::")}) >= 2  # several ops, one site
    # The mask on the same line (y[y > 0]) is its own dynamic-shape site; the item() of
    # the next line stays an item() read-back.
    others = {(s.line, s.kind, s.ops[0]) for s in report.latent_sites if s is not site}
    assert (MASK_LINE, "dynamic_shape", "aten::index") in others
    assert (PRINT_ITEM_LINE, "scalar_readback", "aten::item") in others


FORMATTING = """\
import torch


def train_step(x, step):
    loss = (x @ x).mean()
    print(f"loss {loss:.3f}", file=SINK)
    return loss
"""
FORMAT_LINE = 6


def test_an_f_string_of_a_tensor_is_the_print_site_with_the_print_fix(tmp_path):
    """``f"{loss:.3f}"`` does not go through torch/_tensor_str.py: Tensor.__format__ reads
    the number with item(). It is the same print, with the same fix, not an item() whose
    fix shows a ``.item()`` the line does not have."""
    import io

    report = _profiled_report(tmp_path, "formatting", FORMATTING, SINK=io.StringIO())
    (site,) = report.latent_sites
    assert (site.line, site.kind, site.ops[0]) == (FORMAT_LINE, "scalar_readback", "print(tensor)")
    assert "aten::item" in site.ops
    assert site.advice["title"] == "Do not print device tensors inside the step"


CTC = """\
import torch
import torch.nn.functional as F


def train_step(x, step):
    lp = x.repeat(1, 2)[:, :12].reshape(8, 2, 6).log_softmax(-1).detach().requires_grad_()
    loss = F.ctc_loss(lp, torch.tensor([[1, 2], [3, 4]]), [8, 8], [2, 2])
    loss.backward()
    per_seq = F.ctc_loss(lp, torch.tensor([1, 2, 3, 4]).int(), [8, 8], [2, 2], reduction="none")
    return loss, per_seq
"""
CTC_LINE = 7


def test_a_ctc_loss_with_the_mean_reduction_is_the_copy_a_gpu_run_makes_in_it(tmp_path):
    """A CTC loss with the mean reduction (the default) waits on a GPU whichever kernel runs
    it (docs/validation.md, section 14), with no operator on the CPU that says so: a latent
    copy to the host at its line, as a GPU trace keys it, with the fix that says how cuDNN's
    kernel takes it. With ``reduction="none"`` cuDNN's kernel waits for nothing, which a CPU
    trace cannot tell from torch's: not listed; nor the backward (cuDNN's reads nothing)."""
    report = _profiled_report(tmp_path, "ctc", CTC)
    found = sorted((s.line, s.kind, s.backward) for s in report.latent_sites)
    assert found == [(CTC_LINE, "device_to_host_copy", False)]
    assert {s.advice["title"] for s in report.latent_sites} == {
        "Call ctc_loss the way cuDNN takes it, and average on the device"
    }


CTC_MODULE = """\
import torch
from torch.nn import CTCLoss

criterion = CTCLoss()
per_sequence = CTCLoss(reduction="none")


def loss_of(criterion, lp):
    return criterion(lp, torch.tensor([[1, 2], [3, 4]]), [8, 8], [2, 2])


def train_step(x, step):
    lp = x.repeat(1, 2)[:, :12].reshape(8, 2, 6).log_softmax(-1).detach().requires_grad_()
    loss = loss_of(criterion, lp)
    loss.backward()
    kept = per_sequence(lp, torch.tensor([1, 2, 3, 4]).int(), [8, 8], [2, 2])
    return loss, kept
"""
CTC_MODULE_LINE = 9


def test_a_ctc_loss_module_of_the_mean_reduction_is_the_copy_as_f_ctc_loss(tmp_path):
    """``nn.CTCLoss`` called as a module (a CRNN walk's ``cost = criterion(preds, text,
    preds_size, length)``, in a function given the module's ``criterion``): its line shows
    no ``ctc_loss(``, and none of its 28 calls was listed. The reduction is read where the
    module was made: the mean's call is listed as ``F.ctc_loss``'s is, ``"none"``'s not."""
    report = _profiled_report(tmp_path, "ctc_module", CTC_MODULE)
    found = sorted((s.line, s.kind, s.backward) for s in report.latent_sites)
    assert found == [(CTC_MODULE_LINE, "device_to_host_copy", False)]


@pytest.mark.parametrize(
    ("code", "line", "waits"),
    [
        # Made, then moved (a review): the same loss.
        (
            "criterion = nn.CTCLoss(zero_infinity=True).to(dev)\n"
            "def f(x):\n    return criterion(x)\n",
            3,
            True,
        ),
        ("def f(x):\n    c = nn.CTCLoss()\n    c = c.to(dev)\n    return c(x)\n", 4, True),
        ("def f(x):\n    c = nn.CTCLoss(blank=0, reduction='sum')\n    return c(x)\n", 3, False),
        ("def f(x, **kw):\n    c = nn.CTCLoss(**kw)\n    return c(x)\n", 3, False),
    ],
)
def test_the_reduction_of_a_ctc_loss_module_is_read_where_it_was_made(code, line, waits):
    import ast

    from tb_syncfinder.source import calls_a_mean_ctc_loss_module

    module = ast.parse("import torch.nn as nn\n" + code)
    scope = next(n for n in module.body if isinstance(n, ast.FunctionDef))
    assert calls_a_mean_ctc_loss_module(scope, line + 1, module) is waits


SIZE_READS = """\
import torch

CLASSES = ["cat", "dog", "bird", "fish", "ant", "bee", "owl", "elk"]


def trim(x, lengths):
    return x[:, : lengths.max()]


def count(lengths):
    for _ in range(lengths.min().item()):
        pass


def train_step(x, step):
    lengths = (x[:, 0].abs() * 6).long().clamp(1, 8)
    trimmed = trim(x, lengths)
    rows = torch.arange(lengths.sum())
    count(lengths)
    logged = trimmed.mean().item()
    name = CLASSES[x.argmax().item() % 8]
    return rows, logged, name
"""
TRIM_LINE, RANGE_LINE, ARANGE_LINE, LOGGED_LINE, LOOKUP_LINE = 7, 11, 18, 20, 21


def test_a_read_that_sets_a_size_gets_the_size_fix_and_a_logged_read_keeps_its_own(tmp_path):
    """A value read back to trim padding, size a tensor or count a loop cannot stay on the
    device, so "keep it on the device" is no fix there: those lines get the size's fix
    (take it from the host, or keep the shape fixed); a value read to log keeps the read's."""
    report = _profiled_report(tmp_path, "size_reads", SIZE_READS)
    titles = {s.line: s.advice["title"] for s in report.latent_sites}
    size_title = "This read sets a size: take it from the host, or keep the shape fixed"
    assert {
        line: titles.get(line) for line in (TRIM_LINE, ARANGE_LINE, RANGE_LINE)
    } == dict.fromkeys((TRIM_LINE, ARANGE_LINE, RANGE_LINE), size_title)
    assert titles[LOGGED_LINE] == "Keep the value on the device; read it every N steps"
    # A Python list looked up by it sets no size; its read is of a value chosen by
    # ``argmax``, which the host needs at once: chosen for many, one read serves them.
    assert titles[LOOKUP_LINE] == "Sample or choose for many at once: one read serves them all"
    sizes = {s.source.line for s in report.latent if s.source and s.source.read_as_size}
    assert sizes == {TRIM_LINE, ARANGE_LINE, RANGE_LINE}


COPIES_THEN_READS = """\
import torch

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train_step(x, step):
    loss = (x * 2).sum()
    a = loss.cpu().item()
    b = loss.to("cpu").item()
    c = x.to(torch.float64).tolist()
    d = x.to(DEV)
    e = x.to(DEV); f = torch.zeros(2, device="cpu")  # noqa: E702
    g = x.to(DEV)  # device="cpu" when testing on a laptop
    h, i = x.cpu(), loss.item()
    return a, b, c, d, e, f, g, h, i
"""
CPU_ITEM_LINE, TO_CPU_ITEM_LINE, CAST_TOLIST_LINE, TWO_TENSORS_LINE = 8, 9, 10, 14


def test_a_read_of_what_a_copy_to_the_host_returned_is_that_copy_only(tmp_path):
    """On a GPU ``x.cpu().item()`` and ``x.to("cpu").item()`` wait once, in the copy: the
    ``.item()`` reads a host tensor. One latent copy each, as a GPU trace shows, naming
    both calls; a ``.to()`` that is a cast stays out, its ``.tolist()`` in; a ``.to(DEV)``
    cannot say where it goes, whatever another call or a comment on its line says (``DEV``
    is the GPU where there is one; a name bound only to the host is read since
    ``tests/test_latent_host_tensors.py``'s ``cpu_device``)."""
    report = _profiled_report(tmp_path, "copies_then_reads", COPIES_THEN_READS)
    found = sorted((s.line, s.kind, tuple(s.apis)) for s in report.latent_sites)
    assert found == [
        (CPU_ITEM_LINE, "device_to_host_copy", ("Tensor.cpu", "Tensor.item")),
        (TO_CPU_ITEM_LINE, "device_to_host_copy", ("Tensor.to", "Tensor.item")),
        (CAST_TOLIST_LINE, "device_to_host_copy", ("Tensor.tolist",)),
        # Another tensor's read right after a copy is a read of its own.
        (TWO_TENSORS_LINE, "device_to_host_copy", ("Tensor.cpu",)),
        (TWO_TENSORS_LINE, "scalar_readback", ("aten::_local_scalar_dense",)),
    ]


GUARDED_BRANCH = """\
import torch


def train_step(x, step):
    y = x * 2
    if y.any():
        y = y + 1
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return y
"""
ANY_LINE = 6


def test_a_branch_on_a_tensor_beside_a_guard_is_placed_by_the_call_it_tests(tmp_path):
    """Two truth tests in one function, ``if y.any():`` and ``if torch.cuda.is_available():``:
    the trace's order of calls says which one read the tensor (``any`` ran just before the
    truth operator, ``is_available`` after it)."""
    report = _profiled_report(tmp_path, "guarded", GUARDED_BRANCH)
    truths = [s for s in report.latent if s.op == "aten::is_nonzero"]
    assert truths
    assert {(s.source.line, s.source.line_exact) for s in truths} == {(ANY_LINE, True)}


ALIASED_BRANCH = """\
import torch

is_bad = lambda t: t.isnan().any()


def train_step(x, step):
    y = x * 2
    if step > 100:
        y = y + 1
    if is_bad(y):
        y = y - 1
    return y
"""
ALIASED_LINE, INT_GUARD_LINE = 10, 8


def test_a_branch_whose_call_is_recorded_under_another_name_is_never_placed_elsewhere(tmp_path):
    """``is_bad`` runs as ``<lambda>``: the name the trace records is not the one the code
    wrote, so nothing says which test read the tensor; the int guard beside it must not win
    by elimination (a wrong exact line): the lines stay candidates."""
    report = _profiled_report(tmp_path, "aliased", ALIASED_BRANCH)
    truths = [s for s in report.latent if s.op == "aten::is_nonzero"]
    assert truths
    for sync in truths:
        if sync.source.line_exact:
            assert sync.source.line == ALIASED_LINE
        else:
            assert ALIASED_LINE in sync.source.candidates
            assert INT_GUARD_LINE in sync.source.candidates


READ_WHEN_LEFT_OUT = """\
import torch
import torch.nn.functional as F


def train_step(x, step):
    labels = (x[0] * 2).abs().long().clamp(max=4)
    onehot = F.one_hot(labels)
    hist = torch.histc(x, bins=8)
    ranged = torch.histc(x, bins=8, min=-4.0, max=4.0)
    return onehot.sum() + hist.sum() + ranged.sum()
"""
ONE_HOT_LINE, HISTC_LINE = 7, 8


def test_ops_that_read_back_when_an_argument_is_left_out_say_to_pass_it(tmp_path):
    """``one_hot`` without ``num_classes`` and ``histc`` without its range read the input's
    extremes on the host: their fix is the argument, not the generic read-back advice; a
    ``histc`` given its range reads nothing."""
    report = _profiled_report(tmp_path, "read_when_left_out", READ_WHEN_LEFT_OUT)
    titles = {s.line: s.advice["title"] for s in report.latent_sites}
    assert titles[ONE_HOT_LINE] == "Pass num_classes to one_hot"
    assert titles[HISTC_LINE] == "Pass min and max to histc"
    assert HISTC_LINE + 1 not in titles


def test_one_hot_given_num_classes_is_no_latent_sync_where_the_trace_records_shapes(tmp_path):
    """On CUDA ``one_hot(x, num_classes=N)`` reads nothing (an H200 warned at none); its CPU
    kernel reads the range either way. With ``record_shapes`` the trace says whether
    ``num_classes`` was passed (``Concrete Inputs``): only the call without it is listed."""
    with_shapes = PROFILED_LOOP.replace("with_stack=True,", "with_stack=True, record_shapes=True,")
    assert with_shapes != PROFILED_LOOP
    report = _profiled_report(tmp_path, "one_hots", ONE_HOTS, loop=with_shapes)
    assert sorted(s.line for s in report.latent_sites) == [ONE_HOT_BARE_LINE]


SUBCLASS_READ_INSIDE_ONE_HOT = """\
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map


class Checked(torch.Tensor):
    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.elem if isinstance(t, Checked) else t
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        if isinstance(out, torch.Tensor) and out.numel():
            bad = bool(out.reshape(-1)[0].item() < -1e9)
        return tree_map(lambda t: Checked(t) if isinstance(t, torch.Tensor) else t, out)


def train_step(x, step):
    labels = Checked((x[0] * 2).abs().long().clamp(max=3))
    return F.one_hot(labels, num_classes=4)
"""
SUBCLASS_ITEM_LINE = 19


def test_a_read_a_subclass_makes_inside_one_hot_is_listed_though_num_classes_is_given(tmp_path):
    """A review: the first rule skipped every read inside a one_hot given its classes,
    also the ``.item()`` a ``__torch_dispatch__`` subclass's Python makes there (one_hot
    decomposes for it), a real read on CUDA. Only one_hot's own read is skipped."""
    with_shapes = PROFILED_LOOP.replace("with_stack=True,", "with_stack=True, record_shapes=True,")
    report = _profiled_report(
        tmp_path, "subclass_one_hot", SUBCLASS_READ_INSIDE_ONE_HOT, loop=with_shapes
    )
    assert SUBCLASS_ITEM_LINE in {s.line for s in report.latent_sites}


ONE_HOTS = """\
import torch
import torch.nn.functional as F


def train_step(x, step):
    labels = (x[0] * 2).abs().long().clamp(max=3)
    bare = F.one_hot(labels)
    named = F.one_hot(labels, num_classes=4)
    positional = F.one_hot(labels, 4)
    return bare, named, positional
"""
ONE_HOT_BARE_LINE = 7


CPU_ONLY_READS = """\
import torch


def train_step(x, step):
    y = x.clone()
    mask = y > 0
    y[mask] = 0
    spread = x.std() + x.var()
    picks = torch.multinomial(torch.softmax(x[0], 0), 2)
    same = torch.equal(x, x.clone())
    counts = torch.bincount((x[0] > 0).long())
    return y, spread, picks, same, counts
"""
EQUAL_LINE, BINCOUNT_LINE = 10, 11


def test_reads_only_a_cpu_kernel_makes_are_no_latent_syncs_and_gpu_only_reads_are(tmp_path):
    """``x[mask] = 0`` (a masked_fill of a host number on CUDA), ``std``/``var`` and
    ``multinomial`` read a scalar on the CPU only: they were listed as latent syncs. And
    ``torch.equal`` and ``torch.bincount``, which read back on CUDA only, were missing."""
    report = _profiled_report(tmp_path, "cpu_only_reads", CPU_ONLY_READS)
    lines = {s.line: s for s in report.latent_sites}
    assert sorted(lines) == [EQUAL_LINE, BINCOUNT_LINE], {k: v.ops for k, v in lines.items()}
    assert lines[EQUAL_LINE].line_exact and lines[BINCOUNT_LINE].line_exact
    assert lines[EQUAL_LINE].advice["title"].startswith("Compare on the device")
    assert lines[BINCOUNT_LINE].advice["title"].startswith("Count with scatter_add_")


MAX_BACKWARD = """\
import torch


def train_step(x, step):
    w = x.clone().requires_grad_(True)
    w.max().backward()
    return w.grad
"""


def test_the_backward_of_a_full_max_reads_nothing_on_a_gpu(tmp_path):
    """``evenly_distribute_backward`` reads ``isnan`` on the CPU only."""
    report = _profiled_report(tmp_path, "max_backward", MAX_BACKWARD)
    assert report.latent_sites == []


SYNTAX_CALLS = """\
import torch


def train_step(x, step):
    lr = float(step)
    y = x * lr
    hit = 3.0 in y
    return hit
"""
FLOAT_LINE, CONTAINS_LINE = 5, 7


def test_a_special_method_called_by_syntax_is_not_named_at_another_call(tmp_path):
    """``3.0 in y`` runs ``Tensor.__contains__``, whose item() was named exact at the one
    ``float(step)`` of the function: a call of one of the names an item() is usually made
    by, but a Python number's. The ``in`` test runs it: that is its line."""
    report = _profiled_report(tmp_path, "syntax_calls", SYNTAX_CALLS)
    named = [(s.line, s.line_exact) for s in report.latent_sites]
    assert named == [(CONTAINS_LINE, True)], named


SYNTAX_BESIDE_ITEM = """\
import torch


def train_step(x, step):
    y = x * 2
    hit = 3.0 in x
    text = str(x[0, :2])
    total = y.sum().item()
    return hit, text, total
"""
IN_LINE, STR_LINE, ITEM_LINE = 6, 7, 8


def test_an_in_test_and_str_of_a_tensor_are_at_their_lines_not_at_a_later_item(tmp_path):
    """``Tensor.__contains__`` calls ``.item()``: the frame below the special method was
    matched to the function's own ``y.sum().item()``, so both reads were named there,
    exact, and the ``in`` line nowhere (the same on an H200, docs/validation.md section
    14). ``str(t)`` runs ``__repr__`` with no frame between: its line, not the def line."""
    report = _profiled_report(tmp_path, "syntax_beside_item", SYNTAX_BESIDE_ITEM)
    named = {s.line: (s.line_exact, s.count) for s in report.latent_sites}
    steps = sum(t.steps for t in report.traces)
    assert named[IN_LINE] == (True, steps) and named[ITEM_LINE] == (True, steps), named
    # Text's __repr__ is placed among candidates, never claimed (see the next tests).
    (as_text,) = [s for s in report.latent_sites if s.line not in (IN_LINE, ITEM_LINE)]
    assert not as_text.line_exact and as_text.candidates == [STR_LINE], as_text


CUSTOM_BACKWARD = """\
import torch


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        ctx.seen = g.abs().max().item()
        return g * 2


def train_step(x, step):
    w = x.clone().requires_grad_(True)
    out = Scale.apply(w).pow(2).mean()
    out.backward()
    return w.grad
"""
BACKWARD_ITEM_LINE, APPLY_LINE = 11, 17


def test_a_sync_in_a_backward_the_user_wrote_is_at_its_own_line(tmp_path):
    """A custom Function's backward reads ``.item()``: it was named at the forward
    ``Scale.apply`` line, exact, the real line only under "run by"."""
    report = _profiled_report(tmp_path, "custom_backward", CUSTOM_BACKWARD)
    named = {(s.line, s.line_exact) for s in report.latent_sites}
    assert (BACKWARD_ITEM_LINE, True) in named, named
    assert all(line != APPLY_LINE for line, _exact in named), named


UNIQUE_CONSECUTIVE = """\
import torch


def train_step(x, step):
    runs = torch.unique_consecutive((x[0] > 0).long())
    if step < 0:
        kinds = torch.unique(x)
        return kinds
    return runs
"""
CONSECUTIVE_LINE, DEAD_UNIQUE_LINE = 5, 7


def test_unique_consecutive_is_at_its_own_line_not_a_dead_branchs_unique(tmp_path):
    """torch.unique_consecutive runs its built-in from torch's own Python; the built-in's
    name, seen in the trace, was dropped from what the line is matched by, and the
    ``torch.unique`` of a branch that never ran was named, exact."""
    report = _profiled_report(tmp_path, "unique_consecutive", UNIQUE_CONSECUTIVE)
    named = {(s.line, s.line_exact) for s in report.latent_sites}
    assert named == {(CONSECUTIVE_LINE, True)}, named


PLAIN_ANY = """\
import torch


def train_step(x, step):
    flags = [step > 0, step > 1]
    a = (x > -1e9).all()
    if any(flags):
        pass
    if float(step) >= 0 and a:
        return x
    return x
"""
PLAIN_ANY_LINE, TENSOR_TRUTH_LINE = 7, 9


def test_a_test_of_pythons_any_is_not_taken_for_a_tensors_truth(tmp_path):
    """``if any(flags):`` (Python's any, a Python bool) was named exact for the truth of
    the tensor ``a`` two lines below: any was the last call the trace saw before it."""
    report = _profiled_report(tmp_path, "plain_any", PLAIN_ANY)
    truths = [s for s in report.latent_sites if s.kind == "scalar_readback"]
    assert truths, [(s.line, s.ops) for s in report.latent_sites]
    assert all((s.line, s.line_exact) != (PLAIN_ANY_LINE, True) for s in truths)
    assert any(s.line == TENSOR_TRUTH_LINE or TENSOR_TRUTH_LINE in s.candidates for s in truths)


GUARDED_ANY = """\
import torch


def train_step(x, step):
    y = x * 2
    out = (y,)
    if isinstance(out, tuple):
        y = out[0]
    if y.any():
        return y
    return x
"""
GUARD_LINE, TENSOR_ANY_LINE = 7, 9


def test_a_guard_of_python_values_beside_a_tensors_test_leaves_it_exact(tmp_path):
    """``if isinstance(out, tuple):`` reads no tensor: ``if y.any():`` is the truth, exact
    (a first version of the rule for Python's any made both lines candidates)."""
    report = _profiled_report(tmp_path, "guarded_any", GUARDED_ANY)
    named = {(s.line, s.line_exact) for s in report.latent_sites}
    assert (TENSOR_ANY_LINE, True) in named, named


MASKED_ASSIGNS = """\
import torch


def train_step(x, step):
    y = x.clone()
    y[y > 0] = 0
    t = x.mean()
    y[x > 0] = t
    return y
"""
NUMBER_ASSIGN_LINE, TENSOR_ASSIGN_LINE = 6, 8


def test_a_masked_assignment_of_a_number_is_no_latent_sync_but_of_a_tensor_is(tmp_path):
    """``y[mask] = 0`` is a masked_fill_ of a host number on CUDA: no read (it was listed);
    ``y[mask] = t`` of a device tensor runs nonzero there (a first version hid it too)."""
    report = _profiled_report(tmp_path, "masked_assigns", MASKED_ASSIGNS)
    lines = {s.line for s in report.latent_sites}
    assert NUMBER_ASSIGN_LINE not in lines and TENSOR_ASSIGN_LINE in lines, lines


MASKED_ASSIGNS_BACKWARD = """\
import torch


def train_step(x, step):
    w = x.detach().clone().requires_grad_(True)
    y = w * 2
    y[y > 0] = torch.finfo(torch.float32).min
    z = w * 3
    z[z > 0] = z.mean()
    (y.sum() + z.sum()).backward()
    return y
"""
BACKWARD_NUMBER_LINE, BACKWARD_TENSOR_LINE = 7, 9


def test_the_backward_of_a_masked_assignment_of_a_number_is_no_latent_sync(tmp_path):
    """The backward of ``y[mask] = finfo.min`` fills the gradient through the mask with a
    host number on CUDA, as its forward does: it was listed (pytorch-metric-learning's
    NTXent loss, 5 of a run's 28 reads in a walk). The backward of ``z[mask] = t`` of a
    device tensor runs nonzero there, and stays."""
    report = _profiled_report(tmp_path, "masked_assigns_backward", MASKED_ASSIGNS_BACKWARD)
    backward = {s.line for s in report.latent_sites if s.backward}
    assert BACKWARD_NUMBER_LINE not in backward and BACKWARD_TENSOR_LINE in backward, backward


TEXT_BESIDE_STR_OF_A_NUMBER = """\
import torch


def train_step(x, step):
    tag = str(step)
    msg = "%s" % x[0, :2]
    note = f"{x[1, :2]!r}"
    table = str({"a": x[2, 0], "b": x[2, 1]})
    return tag, msg, note, table
"""
STR_STEP_LINE, PERCENT_LINE, CONVERSION_LINE, DICT_LINE = 5, 6, 7, 8


def test_a_tensor_turned_into_text_by_syntax_is_never_named_at_a_str_of_a_number(tmp_path):
    """``"%s" % t``, ``f"{t!r}"`` and ``str()`` of a dict of tensors run
    ``Tensor.__repr__`` with no frame between, as ``str(t)`` does: a first version matched
    every such read to the one visible ``str(...)`` call, ``str(step)`` of a Python number,
    exact (a review found it). Each is a point that may run it any number of times, and
    its lines are candidates, never claimed: here never ``str(step)`` exact."""
    report = _profiled_report(tmp_path, "text_beside_str", TEXT_BESIDE_STR_OF_A_NUMBER)
    named = [(s.line, s.line_exact, tuple(s.candidates)) for s in report.latent_sites]
    assert named, "the reads are listed"
    assert all(not (line == STR_STEP_LINE and exact) for line, exact, _c in named), named
    placed = {line for line, exact, _c in named if exact}
    placed |= {c for _line, exact, cands in named if not exact for c in cands}
    assert {PERCENT_LINE, CONVERSION_LINE, DICT_LINE} <= placed, named


PERCENT_BESIDE_STR_OF_A_NUMBER = """\
import torch


def train_step(x, step):
    tag = str(step)
    msg = "%s" % x[0, :2]
    return tag, msg
"""


def test_a_percent_format_of_a_tensor_is_not_named_at_the_str_of_a_number_before_it(tmp_path):
    """The review's case: the ``"%s" % t`` read was named at ``str(step)``, exact."""
    report = _profiled_report(tmp_path, "percent_beside_str", PERCENT_BESIDE_STR_OF_A_NUMBER)
    named = [(s.line, s.line_exact, tuple(s.candidates)) for s in report.latent_sites]
    assert named == [(4, False, (STR_STEP_LINE, PERCENT_LINE))], named


LOGGING_SHAPES = """\
import torch


def with_a_dict(x, step):
    name = "run%d" % step
    metrics = {"loss": x[0, 0]}
    msg = f"{metrics}"
    return name, msg


def with_map_str(x, step):
    tag = str(step)
    parts = list(map(str, x[:2, :2]))
    return tag, parts


def with_a_float_format(x, step):
    lr = "lr %.3f" % (0.1 * step)
    msg = str(x[0, :2])
    return lr, msg


def train_step(x, step):
    return with_a_dict(x, step), with_map_str(x, step), with_a_float_format(x, step)
"""
RUN_D_LINE, FSTRING_DICT_LINE = 5, 7
STR_STEP_IN_MAP_LINE, MAP_STR_LINE = 12, 13
LR_LINE, STR_T_LINE = 18, 19


def test_logging_shapes_name_their_own_lines_and_never_a_format_of_a_number(tmp_path):
    """A second review of the text points: ``f"{metrics}"`` of a dict of tensors (run by
    ``object.__format__``'s ``str()``) was named at ``"run%d" % step``, exact, and
    ``map(str, rows)`` at ``str(step)``, exact. ``%d`` and ``%f`` run no ``__repr__``; a
    field with no format spec and ``str`` passed as a value may. A third found more places
    that run it than the model has (``msg %= t``, ``f"{x:}"``, an alias of ``str``), so
    these reads are candidates, never claimed: here each the one right line."""
    report = _profiled_report(tmp_path, "logging_shapes", LOGGING_SHAPES)
    sites = {s.func: s for s in report.latent_sites}
    assert set(sites) == {"with_a_dict", "with_map_str", "with_a_float_format"}, sites
    assert not any(s.line_exact for s in sites.values())
    assert sites["with_a_dict"].candidates == [FSTRING_DICT_LINE]
    assert sites["with_a_float_format"].candidates == [STR_T_LINE]
    assert MAP_STR_LINE in sites["with_map_str"].candidates


UNMODELLED_TEXT = """\
import builtins

import torch


def train_step(x, step):
    tag = str(step)
    msg = "loss %s"
    msg %= x[0, :2]
    again = builtins.str(x[1, :2])
    return tag, msg, again
"""
TAG_LINE = 7


def test_text_made_where_the_model_has_no_point_is_never_named_at_another_str(tmp_path):
    """A third review: ``msg %= t`` and ``builtins.str(t)`` run ``__repr__`` where the
    model had no point, and the one ``str(step)`` of the function took them, exact. Text
    reads are candidates only: never ``str(step)`` exact."""
    report = _profiled_report(tmp_path, "unmodelled_text", UNMODELLED_TEXT)
    assert report.latent_sites, "the reads are listed"
    assert not [s for s in report.latent_sites if s.line_exact and s.line == TAG_LINE]


POST_PROCESS = """\
import torch


class PostProcess(torch.nn.Module):
    @torch.no_grad()
    def forward(self, results, masks, sizes):
        for i, (mask, size) in enumerate(zip(masks, sizes)):
            height, width = size[0], size[1]
            results[i]["masks"] = mask[:, :height, :width].unsqueeze(1)
            results[i]["masks"] = results[i]["masks"].float()
        return results


post = PostProcess()


def train_step(x, step):
    masks = torch.rand(2, 3, 16, 16) > 0.5
    post([{}, {}], masks, torch.tensor([[16, 12], [14, 16]]))
"""


def test_slice_bounds_beside_an_enumerate_counters_index_are_at_their_own_line(tmp_path):
    """DETR's ``PostProcessSegm`` reads two slice bounds per image, ``mask[:, :h, :w]``,
    beside ``results[i]["masks"]`` on that line and the next: an index by ``enumerate``'s
    counter, a Python int, was taken for a tensor read too, so the bounds were at the
    ``def`` line with three candidates and the generic fix."""
    report = _profiled_report(tmp_path, "post_process", POST_PROCESS)
    (site,) = report.latent_sites
    assert (site.line, site.line_exact, site.count) == (9, True, 12)
    assert site.advice["title"].startswith("This read sets a size")


NON_TENSOR_TESTS = """\
import torch


def metrics(a, b, mode, extra=None):
    out = {}
    n = b.sum()
    if extra is not None:
        out["extra"] = extra
    out["ent"] = (a.sum() / n).item() if n > 0 else 0.0
    if mode == "train":
        out["tokens"] = b.sum().item()
    return out


def train_step(x, step):
    metrics(x, torch.ones(8, 8), "train")
"""


def test_tests_that_read_no_tensor_leave_the_reads_beside_them_exact(tmp_path):
    """TRL's metrics (``x.item() if n > 0 else 0.0`` beside ``if mode == "train":`` and
    ``if x is not None:``) were at the function's line, marked, with every test among the
    candidates: a comparison with a string or with ``None`` reads no tensor (a walk)."""
    report = _profiled_report(tmp_path, "non_tensor_tests", NON_TENSOR_TESTS)
    lines = sorted((s.line, s.line_exact, s.ops[0]) for s in report.latent_sites)
    assert lines == [
        (9, True, "aten::is_nonzero"),
        (9, True, "aten::item"),
        (11, True, "aten::item"),
    ]


DICT_LOOKUPS = """\
import torch

METRICS = {"train": {"a": [], "b": []}}


def metrics(logits, mask, mode):
    kept = logits[mask.bool()].sum()
    METRICS[mode]["a"].append(kept.item())
    METRICS[mode]["b"] = mask.sum()


def train_step(x, step):
    metrics(x, x > 0, "train")
"""


def test_a_lookup_then_looked_up_by_a_string_indexes_no_tensor(tmp_path):
    """TRL's ``_compute_loss`` masks its logits beside ``self._metrics[mode]["..."]``
    appends: each ``X[mode]`` lookup was taken for a possible mask, so the masks went to
    the function's line with 16 candidates (a walk). What a string then indexes is no
    tensor."""
    report = _profiled_report(tmp_path, "dict_lookups", DICT_LOOKUPS)
    lines = sorted((s.line, s.line_exact, s.ops[-1]) for s in report.latent_sites)
    assert lines == [(7, True, "aten::nonzero"), (8, True, "aten::_local_scalar_dense")]


FORMATTED_COUNTER = """\
import torch


def main(trace_path, steps=4):
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),
        on_trace_ready=lambda prof: prof.export_chrome_trace(trace_path),
    ) as prof:
        for step in range(steps + 1):
            loss = (torch.randn(8, 8, device=DEVICE) * 2).sum()
            if step % 2 == 0:
                print(f"loss {loss:.4f}")
            name = f"step{step}.ckpt"
            prof.step()
"""


def test_a_formatted_loop_counter_is_no_candidate_for_a_formatted_read(tmp_path):
    """A Fabric walk: ``f"step{step}.ckpt"`` of the loop's int counter was taken for a
    second ``__format__`` of a tensor, and the print under ``if step % 2 == 0:`` went to
    the ``prof.step()`` line, marked, its test lost."""
    report = _profiled_report(
        tmp_path, "formatted_counter", FORMATTED_COUNTER, loop="", DEVICE="cpu"
    )
    (site,) = report.latent_sites
    assert (site.line, site.line_exact, site.periodic_guard) == (14, True, "step % 2 == 0")


BOOL_FLAG = """\
import torch


def forward_pass(x, backward: bool = True, log=False):
    loss = (x * 2).sum()
    if not torch.isfinite(loss):
        raise ValueError("loss is not finite")
    if backward:
        loss = loss * 1
    if log:
        print("logging")
    return loss.item()


def train_step(x, step):
    forward_pass(x)
"""


def test_a_test_of_a_flag_parameter_is_no_candidate_for_a_truth_read(tmp_path):
    """PyKEEN's ``if not torch.isfinite(loss):`` beside ``if backward:`` of ``backward:
    bool = True`` was at the function's line, marked: a parameter annotated ``bool`` or
    defaulting to one is a flag, whose test reads no tensor (a walk)."""
    report = _profiled_report(tmp_path, "bool_flag", BOOL_FLAG)
    lines = sorted((s.line, s.line_exact, s.ops[0]) for s in report.latent_sites)
    assert lines == [(6, True, "aten::is_nonzero"), (12, True, "aten::item")]
