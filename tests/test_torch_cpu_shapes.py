"""Real torch CPU traces of the code shapes of issue 10, each finding at its exact line and
nothing else reported. On a CPU the would-be syncs are latent findings; they go through the
same stack and source resolution as real ones on a GPU."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _findings(report) -> list[tuple[str, int | None, bool, str | None]]:
    """(file name, line, exact, op) of every latent finding, in time order."""
    return [
        (
            Path(s.source.file).name if s.source else "-",
            s.source.line if s.source else None,
            bool(s.source and s.source.line_exact),
            s.op,
        )
        for s in sorted(report.latent, key=lambda s: s.ts_us)
    ]


# -- shape 1: an inline loop in a function already running when profiling started ----------

INLINE_LOOP = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    def main(logdir, scheduled):
        w = torch.randn(8, 4, requires_grad=True)
        loader = [(torch.randn(16, 8), torch.randint(0, 4, (16,))) for _ in range(3)]
        log = []
        warm = w.sum().item()
        kw = {"schedule": schedule(wait=0, warmup=1, active=2)} if scheduled else {}
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     on_trace_ready=tensorboard_trace_handler(logdir), **kw) as prof:
            for x, y in loader:
                out = x @ w
                loss = torch.nn.functional.cross_entropy(out, y)
                loss.backward()
                acc = (out.argmax(1) == y).float().sum().item()
                log.append(loss.item())
                prof.step()
        return log, warm
    """
)
WITH_PROFILE, ACC_ITEM, LOSS_ITEM, PROF_STEP = 11, 17, 18, 19


@pytest.mark.parametrize(
    ("scheduled", "recorded_line", "steps"), [(False, WITH_PROFILE, 3), (True, PROF_STEP, 2)]
)
def test_inline_loop_reports_each_item_at_its_own_line(tmp_path, scheduled, recorded_line, steps):
    """main() was running when profiling started, so its frame records its current line:
    the `with profile(` line (profiling starts in __enter__) or, with a schedule, the
    prof.step() that started recording. The two .item() calls on consecutive lines are
    two sites, each exact, in every recorded iteration."""
    (tmp_path / "inline_loop.py").write_text(INLINE_LOOP)
    module = _load(tmp_path / "inline_loop.py", "inline_loop")
    logdir = tmp_path / "logs"
    module.main(str(logdir), scheduled)
    sys.modules.pop("inline_loop", None)
    report = analyze(logdir, source_roots=[str(tmp_path)])
    recorded = {next(f.line for f in s.stack if f.user) for s in report.latent}
    assert recorded == {recorded_line}  # what the trace says
    assert (
        _findings(report)
        == [
            ("inline_loop.py", ACC_ITEM, True, "aten::item"),
            ("inline_loop.py", LOSS_ITEM, True, "aten::item"),
        ]
        * steps
    )
    assert sorted((s.line, s.count, s.line_exact) for s in report.latent_sites) == [
        (ACC_ITEM, steps, True),
        (LOSS_ITEM, steps, True),
    ]


# -- shape 2: the backward of a boolean-mask index ------------------------------------------

MASKED = textwrap.dedent(
    """\
    import torch


    def masked_loss(logits, labels):
        keep = labels != 0
        picked = logits[keep]
        return picked.log_softmax(1).mean()


    def train_step(model, x, labels):
        loss = masked_loss(model(x), labels)
        loss.backward()
        return loss.detach()
    """
)
MASK_LINE, BACKWARD_LINE = 6, 12


def _profile_three_steps(logdir: Path, step) -> None:
    """Three steps of ``step()`` profiled with stacks, the last two recorded."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        schedule=schedule(wait=0, warmup=1, active=2),
        on_trace_ready=tensorboard_trace_handler(str(logdir)),
    ) as prof:
        for _ in range(3):
            step()
            prof.step()


def test_mask_backward_is_attributed_to_the_forward_line_and_run_by_backward(tmp_path):
    (tmp_path / "masked.py").write_text(MASKED)
    module = _load(tmp_path / "masked.py", "masked")
    model = torch.nn.Linear(8, 5)
    logdir = tmp_path / "logs"
    _profile_three_steps(
        logdir,
        lambda: module.train_step(model, torch.randn(16, 8), torch.randint(0, 3, (16,))),
    )
    sys.modules.pop("masked", None)
    report = analyze(logdir, source_roots=[str(tmp_path)])
    assert (
        _findings(report)
        == [
            ("masked.py", MASK_LINE, True, "aten::index"),
            ("masked.py", MASK_LINE, True, "autograd::engine::evaluate_function: IndexBackward0"),
        ]
        * 2
    )
    backward = [s for s in report.latent if s.source.backward]
    assert len(backward) == 2
    for sync in backward:
        assert sync.forward_op == "aten::index"
        assert sync.forward_stack[0].func == "masked_loss"
        run_by = sync.source.run_by
        assert (run_by.line, run_by.line_exact, run_by.func) == (BACKWARD_LINE, True, "train_step")
    forward = [s for s in report.latent if not s.source.backward]
    assert all(s.source.run_by is None and s.forward_op is None for s in forward)


MULTI_HEAD = textwrap.dedent(
    """\
    import torch


    def forward(feat, heads, x, task_labels):
        h = feat(x)
        out = torch.zeros(h.shape[0], 4)
        for t in (0, 1):
            task_mask = task_labels == t
            out[task_mask, :3] = heads[t](h[task_mask])
        return out
    """
)
WRITE_LINE = 9


def test_a_masked_write_to_a_views_backward_is_its_lines_and_each_of_its_reads_counts(tmp_path):
    """Avalanche's multi-head routing, ``out[task_mask, :n] = head(x[task_mask])``: the
    write to a view makes autograd's ``CopySlices`` node, whose number no forward op has
    (the backward was named at torch's autograd runner), and whose backward runs the
    mask twice, an ``index`` and an ``index_put`` (3 ``nonzero`` a step were counted 2)."""
    (tmp_path / "multihead.py").write_text(MULTI_HEAD)
    module = _load(tmp_path / "multihead.py", "multihead")
    feat = torch.nn.Linear(8, 8)
    heads = [torch.nn.Linear(8, 3), torch.nn.Linear(8, 3)]
    logdir = tmp_path / "logs"

    def step() -> None:
        out = module.forward(feat, heads, torch.randn(16, 8), torch.arange(16) % 2)
        out.square().mean().backward()

    _profile_three_steps(logdir, step)
    sys.modules.pop("multihead", None)
    report = analyze(logdir, source_roots=[str(tmp_path)])
    (copy_slices,) = [s for s in report.latent_sites if any("CopySlices" in o for o in s.ops)]
    assert (copy_slices.line, copy_slices.line_exact, copy_slices.backward) == (
        WRITE_LINE,
        True,
        True,
    )
    assert copy_slices.count == 3 * 2  # 2 steps: the first head's 1, the second's 2


def test_reads_inside_one_operators_cpu_kernel_in_a_backward_are_one_finding(tmp_path):
    """A review: ``matrix_exp``'s backward runs 6 ``nonzero`` and a ``unique_consecutive`` in
    its CPU kernel, one copy to the host on CUDA; counting a backward node's operators apart
    (for ``CopySlices``) counted them 7 a step."""
    (tmp_path / "rot.py").write_text(
        "import torch\n\n\ndef rotate(S, x):\n    return x @ torch.linalg.matrix_exp(S - S.T)\n"
    )
    module = _load(tmp_path / "rot.py", "rot")
    S = torch.nn.Parameter(torch.randn(8, 8) * 0.1)
    logdir = tmp_path / "logs"
    _profile_three_steps(
        logdir, lambda: module.rotate(S, torch.randn(16, 8)).square().mean().backward()
    )
    sys.modules.pop("rot", None)
    report = analyze(logdir, source_roots=[str(tmp_path)])
    assert sorted((s.line, s.backward, s.count) for s in report.latent_sites) == [
        (5, False, 2),
        (5, True, 2),
    ]


# -- shape 4: chained and implicit calls inside a step function ----------------------------

STEP_METHOD = textwrap.dedent(
    """\
    import torch
    from torch.profiler import record_function


    class Trainer:
        def __init__(self):
            self.model = torch.nn.Linear(8, 4)

        def train_step(self, x, y):
            out = self.model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
            acc = (out.argmax(1) == y).float().mean()
            with record_function("metrics"):
                self.loss = loss.item()
                self.acc = float(acc)
                top = out[:4].max(1).values.tolist()
                peak = out[:4].max(1).values.sum().item()
                if acc >= 0:
                    self.hits = int(out.argmax(1).sum())
            return top, peak
    """
)
LOSS_ITEM_4, FLOAT_LINE, TOLIST_LINE, PEAK_LINE, IF_LINE, INT_LINE = 14, 15, 16, 17, 18, 19


def test_implicit_and_chained_calls_resolve_next_to_explicit_ones(tmp_path):
    """float(acc), int(t) and `if t` run their operator with no call frame of their own;
    they used to be matched to .item() by the operator's name (float(acc) was reported at
    the loss.item() line), and under record_function the annotation's bad nesting hid the
    user's frame. Each is now at its own line, in order with the explicit .item() calls."""
    (tmp_path / "trainer.py").write_text(STEP_METHOD)
    module = _load(tmp_path / "trainer.py", "trainer")
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    trainer = module.Trainer()
    logdir = tmp_path / "logs"
    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        schedule=schedule(wait=0, warmup=1, active=2),
        on_trace_ready=tensorboard_trace_handler(str(logdir)),
    ) as prof:
        for _ in range(3):
            trainer.train_step(torch.randn(16, 8), torch.randint(0, 4, (16,)))
            prof.step()
    sys.modules.pop("trainer", None)
    report = analyze(logdir, source_roots=[str(tmp_path)])
    one_step = [
        ("trainer.py", LOSS_ITEM_4, True, "aten::item"),
        ("trainer.py", FLOAT_LINE, True, "aten::item"),
        ("trainer.py", TOLIST_LINE, True, "aten::to"),  # no operator here, aten::to on a GPU
        ("trainer.py", PEAK_LINE, True, "aten::item"),
        ("trainer.py", IF_LINE, True, "aten::is_nonzero"),
        ("trainer.py", INT_LINE, True, "aten::item"),
    ]
    assert _findings(report) == one_step * 2
    for sync in report.latent:
        assert [f.func for f in sync.stack if f.user][0] == "train_step"
        assert not any(f.func == "__enter__" for f in sync.stack)  # record_function's


# -- shape 5: a sync inside a library called from the user's function ----------------------

LIBRARY = textwrap.dedent(
    """\
    import torch


    def _should_stop(scores):
        return bool((scores > 10).all().item())


    @torch.no_grad()
    def generate(x, steps=3):
        for _ in range(steps):
            x = x + 1
            if _should_stop(x):
                break
        return x
    """
)
LIBRARY_ITEM = 5
USER = textwrap.dedent(
    """\
    from fakelib import gen


    def run(x):
        y = x * 2
        out = gen.generate(y)
        return out.sum().item()
    """
)
GENERATE_LINE, OWN_ITEM = 6, 7


@pytest.fixture
def site_packages(tmp_path):
    """A package installed in a site-packages folder of this interpreter (on sys.path while
    the test runs): torch records its frames relative to it (``fakelib/gen.py``)."""
    folder = tmp_path / "venv" / "lib" / "site-packages"
    (folder / "fakelib").mkdir(parents=True)
    (folder / "fakelib" / "__init__.py").write_text("")
    (folder / "fakelib" / "gen.py").write_text(LIBRARY)
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        for name in ("fakelib", "fakelib.gen", "user_gen"):
            sys.modules.pop(name, None)


def test_library_sync_names_the_users_call_line_and_the_library_line(tmp_path, site_packages):
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    (tmp_path / "user_gen.py").write_text(USER)
    module = _load(tmp_path / "user_gen.py", "user_gen")
    logdir = tmp_path / "logs"
    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        on_trace_ready=tensorboard_trace_handler(str(logdir)),
    ):
        module.run(torch.randn(4))
    report = analyze(logdir, source_roots=[str(tmp_path)])
    assert _findings(report) == [("user_gen.py", GENERATE_LINE, True, "aten::item")] * 3 + [
        ("user_gen.py", OWN_ITEM, True, "aten::item")
    ]
    in_library = [s for s in report.latent if s.source.line == GENERATE_LINE]
    for sync in in_library:
        library = sync.source.library
        # Recorded relative to its site-packages folder, or absolute when torch had cached
        # its list of such prefixes before the folder was on sys.path.
        assert library.file.endswith("fakelib/gen.py")
        assert (library.line, library.line_exact, library.func) == (
            LIBRARY_ITEM,
            True,
            "_should_stop",
        )
        assert Path(library.resolved_path) == site_packages / "fakelib" / "gen.py"
        # The library frames stay in the stack (the dashboard folds them), marked as such.
        assert [(f.func, f.user) for f in sync.stack[:5]] == [
            ("item", False),
            ("_should_stop", False),
            ("generate", False),
            ("decorate_context", False),
            ("run", True),
        ]
    own = next(s for s in report.latent if s.source.line == OWN_ITEM)
    assert own.source.library is None
    sites = {(s.line, s.library.line if s.library else None) for s in report.latent_sites}
    assert sites == {(GENERATE_LINE, LIBRARY_ITEM), (OWN_ITEM, None)}


# A library shaped as transformers' is: ``generate`` under two of its own decorators and
# ``no_grad``'s, reading in a helper and in itself; a training loop with a black-style
# signature that the profiler starts inside (its callback steps the profiler, as a
# TrainerCallback does), reading in the last operand of a condition split over lines.
LOOP_LIBRARY = textwrap.dedent(
    """\
    import functools

    import torch


    def _kept(f):
        @functools.wraps(f)
        def wrapped_func(*args, **kwargs):
            return f(*args, **kwargs)

        return wrapped_func


    def _mask_ok(mask):
        return bool(mask.all())


    @_kept
    @_kept
    @torch.no_grad()
    def generate(x, mask, steps=2):
        for _ in range(steps):
            if _mask_ok(mask):
                x = x + 1
            if (x > 1e9).any():
                break
        return x


    def fit(
        step_fn,
        batches,
        on_step_end,
    ):
        for batch in batches:
            loss = step_fn(batch)
            if (loss < -1e9).all():
                loss = None
            if (
                loss is not None
                and batch is not None
                and (loss > 1e9).all()
            ):
                continue
            on_step_end()
    """
)
# Two truths of ``.all()`` in the loop: the call before the read does not tell them apart.
MASK_READ, GENERATE_READ, FIT_DEF, FIT_READ, FIT_AT_START = 15, 25, 30, 42, 45
LOOP_USER = textwrap.dedent(
    """\
    import torch
    from fakeloop import lib


    def main(prof):
        x, mask = torch.zeros(4), torch.ones(4, dtype=torch.bool)
        for _ in range(4):
            out = lib.generate(x, mask)
            prof.step()
        return out


    def train(prof):
        lib.fit(lambda b: (b * 2).sum(), [torch.ones(3)] * 6, prof.step)
    """
)
GENERATE_CALL, FIT_CALL = 8, 14


def test_a_libraries_reads_under_one_call_are_sites_of_their_own_at_the_call_line(
    tmp_path, site_packages
):
    """``model.generate(...)`` in a loop stepping the profiler: the call line is found
    through the library's decorators, and the reads of two library functions under it are
    two sites, each naming its own line. A library loop already running when profiling
    started (a Trainer's ``_run_epoch``, stepped from a callback, its signature over
    several lines) names its function and its candidate lines, the read's among them."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    (site_packages / "fakeloop").mkdir()
    (site_packages / "fakeloop" / "__init__.py").write_text("")
    (site_packages / "fakeloop" / "lib.py").write_text(LOOP_LIBRARY)
    (tmp_path / "user_loop.py").write_text(LOOP_USER)
    module = _load(tmp_path / "user_loop.py", "user_loop")
    logdir = tmp_path / "logs"
    try:
        for run, wait in ((module.main, 0), (module.train, 1)):
            with profile(
                activities=[ProfilerActivity.CPU],
                with_stack=True,
                schedule=schedule(wait=wait, warmup=1, active=2, repeat=1),
                on_trace_ready=tensorboard_trace_handler(str(logdir)),
            ) as prof:
                run(prof)
    finally:
        for name in ("fakeloop", "fakeloop.lib", "user_loop"):
            sys.modules.pop(name, None)
    report = analyze(logdir, source_roots=[str(tmp_path)])
    sites = {
        (s.line, s.line_exact, s.library.func, s.library.line, s.library.line_exact)
        for s in report.latent_sites
    }
    assert sites == {
        (GENERATE_CALL, True, "_mask_ok", MASK_READ, True),
        (GENERATE_CALL, True, "generate", GENERATE_READ, True),
        # The line the running loop was at (its callback's call), not exact.
        (FIT_CALL, True, "fit", FIT_AT_START, False),
    }, sites
    assert len({s.key for s in report.latent_sites}) == 3
    fit = next(s for s in report.latent_sites if s.library.func == "fit")
    assert fit.library.def_line == FIT_DEF
    assert FIT_READ in fit.library.candidates, fit.library.candidates
    # Every output names the running loop at its function's line, not its callback's call.
    import csv
    import io

    from tb_syncfinder.outputs.csv import to_csv
    from tb_syncfinder.outputs.text import render_report

    rows = list(csv.DictReader(io.StringIO(to_csv(report.to_json()))))
    (shown,) = {r["library_line"] for r in rows if r["library_func"] == "fit"}
    assert shown.endswith(f"fakeloop/lib.py:{FIT_DEF}*"), shown
    assert f"fakeloop/lib.py:{FIT_DEF}* (fit; candidate lines" in render_report(report, width=400)


# Lightning's shape: one helper (``to_item``) reads for the progress bar every step and for
# the loggers when they are written; two reads, two fixes, under one ``trainer.fit()``.
FAKE_LIGHTNING = {
    "apply_func.py": """\
def to_item(value):
    return value.item()


def convert_tensors_to_scalars(data):
    return {k: to_item(v) for k, v in data.items()}
""",
    "trainer/connectors/logger_connector/result.py": """\
from fakepl.apply_func import convert_tensors_to_scalars


def metrics(logged):
    return convert_tensors_to_scalars(logged)
""",
    "trainer/connectors/logger_connector/logger_connector.py": """\
from fakepl.apply_func import convert_tensors_to_scalars


def log_metrics(logged):
    return convert_tensors_to_scalars(logged)
""",
    "fit.py": """\
import torch

from fakepl.trainer.connectors.logger_connector import logger_connector, result


def fit(step_fn, steps, on_step_end):
    for step in range(steps):
        loss = step_fn(torch.ones(3))
        result.metrics({"loss": loss})
        if step % 2 == 1:
            logger_connector.log_metrics({"loss": loss})
        on_step_end()
""",
}


def test_a_frameworks_reads_through_one_helper_are_told_apart_by_the_code_they_fix(
    tmp_path, site_packages
):
    """Lightning's progress bar and its loggers read through the same ``to_item``: one site
    said "drop prog_bar" for both. Keyed by the library code each fix is about, they are
    two sites, each with its own fix and count."""
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    for name, text in FAKE_LIGHTNING.items():
        path = site_packages / "fakepl" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for folder in path.relative_to(site_packages).parents:
            (site_packages / folder / "__init__.py").touch()
    (tmp_path / "user_fit.py").write_text(
        "from fakepl.fit import fit\n\n\ndef main(prof):\n"
        "    fit(lambda b: (b * 2).sum(), 4, prof.step)\n"
    )
    module = _load(tmp_path / "user_fit.py", "user_fit")
    logdir = tmp_path / "logs"
    try:
        with profile(
            activities=[ProfilerActivity.CPU],
            with_stack=True,
            on_trace_ready=tensorboard_trace_handler(str(logdir)),
        ) as prof:
            module.main(prof)
    finally:
        for name in [n for n in sys.modules if n == "fakepl" or n.startswith("fakepl.")]:
            sys.modules.pop(name)
        sys.modules.pop("user_fit", None)
    report = analyze(logdir, source_roots=[str(tmp_path)])
    sites = {(s.line, s.library.func, s.count, s.advice["title"]) for s in report.latent_sites}
    assert sites == {
        (5, "to_item", 4, "Drop prog_bar=True from values Lightning logs every step"),
        (5, "to_item", 2, "Write Lightning's logs less often: raise log_every_n_steps"),
    }, sites
    # The two rows say which code each fix is about, not the helper alone.
    from tb_syncfinder.outputs.text import render_report

    # (Paths relative to site-packages, or absolute where torch listed its prefixes before
    # the folder was on sys.path.)
    text = render_report(report, width=400)
    assert "(to_item), under " in text
    assert "fakepl/trainer/connectors/logger_connector/result.py (metrics)" in text
    assert "fakepl/trainer/connectors/logger_connector/logger_connector.py (log_metrics)" in text


def test_the_validation_bench_shape_workloads_find_every_marked_line_on_the_cpu(tmp_path):
    # bench/validate_sync_debug.py runs the same shapes under torch's sync detector on a
    # GPU; on the CPU its engine half compares latent sites with the `# sync:` markers.
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "validate_sync_debug.py"
    spec = importlib.util.spec_from_file_location("bench_validate_shapes", path)
    validate = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = validate  # dataclasses look their module up while being built
    try:
        spec.loader.exec_module(validate)
        device = torch.device("cpu")
        with validate.ShapeWorkloads(tmp_path) as shapes:
            for run in validate.SHAPE_RUNS:
                check = shapes.check(run, "cpu", on_cpu=True)
                validate.run_shape(shapes, check, str(tmp_path / "traces"), device, steps=2)
                assert check.markers, run
                assert set(check.engine) == set(check.markers), run
                assert all(site["line_exact"] for site in check.engine.values()), run
                assert check.profiler_overhead == 0  # no CUDA: the profiler waits for nothing
    finally:
        sys.modules.pop(spec.name, None)


# -- torch.compile: a graph break at each item() -------------------------------------------

COMPILED = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler


    def train_step(x):
        y = x * 2
        a = y.sum().item()
        z = y + a
        b = z.mean().item()
        return z, b


    def main(logdir):
        torch._dynamo.reset()  # another test's compiles change what this one's run does
        step = torch.compile(train_step, backend="eager")
        x = torch.randn(64, 64)
        for _ in range(3):
            step(x)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     on_trace_ready=tensorboard_trace_handler(logdir)):
            for _ in range(2):
                step(x)
    """
)


def test_a_compiled_function_reports_each_item_not_one_per_compiled_region(tmp_path):
    """Each ``item()`` breaks the graph: torch.compile runs the rest of ``train_step`` as
    ``torch_dynamo_resume_in_train_step_at_7`` (then ``..._at_9``), inside the first
    ``Torch-Compiled Region: 0/0`` span, which the trace writes as an operator. Before, that
    span was the outermost operator of both item()s, so they were one finding per call; now
    each is its own, at ``aten::item``, in ``train_step``, and never at a wrong line."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "compiled_step.py"
    path.write_text(COMPILED)
    module = _load(path, "compiled_step")
    module.main(str(tmp_path / "logs" / "run"))
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    found = sorted(report.latent, key=lambda s: s.ts_us)
    assert [s.op for s in found] == ["aten::item"] * 4
    assert all("Torch-Compiled Region" not in " ".join(s.op_chain) for s in found)
    for sync, truth in zip(found, [7, 9, 7, 9], strict=True):
        assert sync.source is not None and sync.source.func == "train_step"
        if sync.source.line_exact:
            assert sync.source.line == truth
        else:
            assert truth in sync.source.candidates


def test_reads_after_a_graph_break_are_called_from_the_line_that_called_the_function(
    tmp_path,
):
    """The read at line 9 runs in ``torch_dynamo_resume_in_train_step_at_7``, which
    torch.compile's frame of ``train_step`` called: its caller was that frame (line 7,
    inexact), a call no source makes. Both reads are called from ``step(x)`` in ``main``.
    And each read is the instruction that broke its frame's graph, at the line its resume
    function is named after: both were at either line (5 and 7, marked)."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "compiled_callers.py"
    path.write_text(COMPILED)
    module = _load(path, "compiled_callers")
    module.main(str(tmp_path / "logs" / "run"))
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    callers = {
        (site.line, site.line_exact): [(c.line, c.line_exact, c.func) for c in site.callers]
        for site in report.latent_sites
    }
    assert callers == {(7, True): [(22, True, "main")], (9, True): [(22, True, "main")]}
    # Each is a graph break, and its fix says so.
    assert {s.source.compiled for s in report.latent} == {"graph_break"}
    text = " ".join(report.to_text().split())
    assert text.count("this read also breaks the graph") == 2


CAPTURED = textwrap.dedent(
    """\
    import torch
    import torch._dynamo
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler


    def train_step(x):
        y = x * 2
        z = y[y > 0]
        n = y.sum().item()
        return z.sum() + n


    def main(logdir):
        torch._dynamo.config.capture_scalar_outputs = True
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        try:
            step = torch.compile(train_step, backend="eager")
            x = torch.randn(64, 64)
            for _ in range(3):
                step(x)
            with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                         on_trace_ready=tensorboard_trace_handler(logdir)):
                for _ in range(2):
                    step(x)
        finally:
            torch._dynamo.config.capture_scalar_outputs = False
            torch._dynamo.config.capture_dynamic_output_shape_ops = False
            torch._dynamo.reset()
    """
)


def test_reads_captured_in_a_compiled_graph_are_at_their_own_lines(tmp_path):
    """With ``capture_scalar_outputs`` the reads run inside the graph torch.compile made of
    ``train_step``, below dynamo's and the graph's generated frames: the boolean mask was
    at the function's def line (marked) and both were "synced in <eval_with_key>.1:4"
    (the generated ``forward``; with inductor, a module named by a hash). The graph's
    operators are the function's own lines, matched by name (their order is the graph's)."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "captured_step.py"
    path.write_text(CAPTURED)
    module = _load(path, "captured_step")
    module.main(str(tmp_path / "logs" / "run"))
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    lines = {
        (s.op, s.source.line, s.source.line_exact, s.source.library is None) for s in report.latent
    }
    assert lines == {("aten::index", 8, True, True), ("aten::item", 9, True, True)}
    # Captured, not a graph break: the fix says the graph still waits there.
    assert {s.source.compiled for s in report.latent} == {"in_graph"}
    assert all("torch.compile graph" in site.advice["compiled"] for site in report.latent_sites)


AUTOGRAD_FUNCTION = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    def solve(x):
        for _ in range(4):
            x = x * 0.5
            if bool(x.norm() < 1e-9):
                break
        return x


    class Solve(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return solve(x)

        @staticmethod
        def backward(ctx, grad):
            return grad


    def main(logdir):
        x = torch.randn(16, requires_grad=True)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     schedule=schedule(wait=0, warmup=1, active=2),
                     on_trace_ready=tensorboard_trace_handler(logdir)) as prof:
            for _ in range(3):
                Solve.apply(x).sum().backward()
                prof.step()
    """
)


def test_each_read_inside_an_autograd_functions_forward_is_counted_at_its_line(tmp_path):
    """A ``torch.autograd.Function``'s ``apply`` is recorded as an operator (``Solve``) holding
    its ``forward``'s Python: the four reads of its loop were one finding per call, at the
    function's def line, inexact (linear_operator's conjugate gradients: 5 of 85 reads
    counted in a walk). Each read is a finding of its own, at its line."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "solver_step.py"
    path.write_text(AUTOGRAD_FUNCTION)
    module = _load(path, "solver_step")
    module.main(str(tmp_path / "logs" / "run"))
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    [site] = report.latent_sites
    assert (site.line, site.line_exact, site.count, site.per_step) == (8, True, 8, 4.0)
    assert site.ops[0] == "Solve"


# -- copies back to the host: .cpu() and .tolist() as recorded calls -------------------------

COPIES = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler


    def log_step(x, with_stack):
        y = x @ x
        rows = y.sum(1).tolist()
        host = y.cpu()
        arr = host.numpy()
        same = y.to("cpu")
        return rows, arr, same


    def main(logdir, with_stack=True):
        x = torch.randn(32, 32)
        with profile(activities=[ProfilerActivity.CPU], with_stack=with_stack,
                     on_trace_ready=tensorboard_trace_handler(logdir)):
            for _ in range(2):
                log_step(x, with_stack)
    """
)
TOLIST_COPY, CPU_COPY, TO_CPU_COPY = 7, 8, 10


def test_cpu_and_tolist_are_latent_copies_when_the_trace_records_calls(tmp_path):
    """On a GPU ``.tolist()`` and ``.cpu()`` copy the tensor back and wait. A CPU-only trace
    runs no operator that says so (``.tolist()`` none, ``.cpu()`` the ``aten::to`` of
    every ``.to()``), but with stacks it records them as built-in calls: each is a latent
    device-to-host copy at its line, keyed and named by the operator a GPU trace shows
    (``aten::to``), its API the method, never the tensor's address. ``.numpy()`` (never a
    GPU tensor) is not listed; ``.to("cpu")`` is where its line names the host (the trace
    alone cannot tell it from an upload)."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "copies.py"
    path.write_text(COPIES)
    module = _load(path, "copies")
    module.main(str(tmp_path / "logs" / "run"))
    module.main(str(tmp_path / "logs" / "nostack"), with_stack=False)
    sys.modules.pop("copies", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    one_step = [
        ("copies.py", TOLIST_COPY, True, "aten::to"),
        ("copies.py", CPU_COPY, True, "aten::to"),
        ("copies.py", TO_CPU_COPY, True, "aten::to"),
    ]
    assert _findings(report) == one_step * 2
    assert {s.kind for s in report.latent} == {"device_to_host_copy"}
    keys = sorted(site.key for site in report.latent_sites)
    assert keys == sorted(
        f"{path}:{line}:aten::to" for line in (TOLIST_COPY, CPU_COPY, TO_CPU_COPY)
    )
    assert sorted(s.api for s in report.latent) == (
        ["Tensor.cpu"] * 2 + ["Tensor.to"] * 2 + ["Tensor.tolist"] * 2
    )
    # Without its source, a .to() may be an upload: not listed.
    path.rename(tmp_path / "copies.py.away")
    unread = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "logs")])
    path.write_text(COPIES)
    assert TO_CPU_COPY not in {s.line for s in unread.latent_sites}
    # Without stacks nothing tells these copies from uploads: none is listed.
    bare = analyze(tmp_path / "logs" / "nostack", source_roots=[str(tmp_path / "src")])
    assert bare.latent == []


# -- a profiler object, as in a notebook -----------------------------------------------------


def test_a_stopped_profiler_object_is_analysed_and_shows_as_text(tmp_path):
    """``analyze(prof)`` right after the ``with`` block, as a notebook user would: the same
    findings as from the exported file, the text IPython shows, a second call, and what
    torch will not export (a profiler running, never started or never active, or whose
    handler saved the trace) refused with what to do instead of torch's own errors."""
    from torch.profiler import ProfilerActivity, profile

    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "copies.py"
    path.write_text(COPIES)
    module = _load(path, "copies_notebook")
    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        module.log_step(x, True)
    sys.modules.pop("copies_notebook", None)
    report = analyze(prof, source_roots=[str(tmp_path / "src")])
    assert sorted((Path(s.file).name, s.line) for s in report.latent_sites) == [
        ("copies.py", TOLIST_COPY),
        ("copies.py", CPU_COPY),
        ("copies.py", TO_CPU_COPY),
    ]
    text = report.to_text()
    assert "Latent syncs (3 sites)" in text and f"copies.py:{CPU_COPY}" in text

    class Printer:
        shown = ""

        def text(self, value: str) -> None:
            self.shown += value

    printer = Printer()
    report._repr_pretty_(printer, False)
    assert printer.shown == report.to_text(top=10)

    # Kineto saves a trace once: a second call (other source roots) reads the same file.
    again = analyze(prof, source_roots=[str(tmp_path / "src")])
    assert again.to_json()["latent_sites"] == report.to_json()["latent_sites"]
    assert {t.run for t in again.traces} == {"profiler"}

    running = profile(activities=[ProfilerActivity.CPU])
    with pytest.raises(ValueError, match="never started"):
        analyze(running)
    running.start()
    try:
        with pytest.raises(ValueError, match="after it has stopped"):
            analyze(running)
    finally:
        running.stop()
    from torch.profiler import schedule, tensorboard_trace_handler

    idle = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=5, warmup=1, active=1))
    with idle:
        for _ in range(3):
            idle.step()
    with pytest.raises(ValueError, match="never reached an active step"):
        analyze(idle)
    logdir = tmp_path / "logs"
    with profile(
        activities=[ProfilerActivity.CPU], on_trace_ready=tensorboard_trace_handler(str(logdir))
    ) as handled:
        module.log_step(x, True)
    with pytest.raises(ValueError, match=f"its on_trace_ready handler wrote it to {logdir}"):
        analyze(handled)


NOTEBOOK_CELL = textwrap.dedent(
    """\
    def cell_step(x):
        y = x @ x
        n = int((y > 0).sum())
        rows = y.sum(1).tolist()
        return n, rows
    """
)


def test_a_notebook_cells_lines_are_exact_when_analysed_in_its_kernel(tmp_path):
    """Jupyter compiles a cell under a file name that does not exist
    (``/tmp/ipykernel_<pid>/<hash>.py``) and keeps its lines in ``linecache``, as done
    here: ``analyze(prof)`` in that kernel names the cell's exact lines, where a file
    search finds nothing and would fall back to the def line."""
    import linecache

    from torch.profiler import ProfilerActivity, profile

    name = str(tmp_path / "ipykernel_4242" / "3141592653.py")  # no such file
    linecache.cache[name] = (len(NOTEBOOK_CELL), None, NOTEBOOK_CELL.splitlines(True), name)
    try:
        namespace: dict = {}
        exec(compile(NOTEBOOK_CELL, name, "exec"), namespace)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            namespace["cell_step"](torch.randn(16, 16))
        report = analyze(prof, source_roots=[str(tmp_path)])
    finally:
        linecache.cache.pop(name, None)
    found = sorted((s.source.line, s.source.line_exact, s.op or "-") for s in report.latent)
    assert found == [(3, True, "aten::item"), (4, True, "aten::to")]
    assert all(s.source.file == name for s in report.latent)


def test_an_ipython_cell_without_a_file_names_its_exact_lines(tmp_path):
    """The terminal IPython, kernels without ipykernel 6's compiler and Colab name a cell's
    code ``<ipython-input-N-hash>``: it was taken for a built-in, and the finding named the
    IPython launcher's line (``ipython:8``). Its lines are in ``linecache`` as a Jupyter
    cell's are."""
    import linecache

    from torch.profiler import ProfilerActivity, profile

    name = "<ipython-input-4-faad06d10617>"
    linecache.cache[name] = (len(NOTEBOOK_CELL), None, NOTEBOOK_CELL.splitlines(True), name)
    try:
        namespace: dict = {}
        exec(compile(NOTEBOOK_CELL, name, "exec"), namespace)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            namespace["cell_step"](torch.randn(16, 16))
        report = analyze(prof, source_roots=[str(tmp_path)])
    finally:
        linecache.cache.pop(name, None)
    found = sorted((s.source.line, s.source.line_exact, s.op or "-") for s in report.latent)
    assert found == [(3, True, "aten::item"), (4, True, "aten::to")]
    assert all(s.source.file == name for s in report.latent)


EDGE_COPIES = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler
    from torch.utils.data import DataLoader, TensorDataset


    def main(logdir):
        model = torch.nn.Linear(4, 2)
        loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     on_trace_ready=tensorboard_trace_handler(logdir)):
            weights = model.weight.cpu()
            for (x,) in loader:
                out = model(x)
                rows = out.detach().cpu().tolist()
                host = out.detach().cpu()
                labels = out.detach().tolist()
        return weights, rows, host, labels
    """
)
PARAMETER_CPU, CPU_TOLIST, CPU_ALONE, TOLIST_NEXT = 11, 14, 15, 16


def test_latent_copies_are_the_users_own_once_per_copy_whatever_the_tensor_type(tmp_path):
    """A shuffled DataLoader's sampler calls ``torch.randperm(n).tolist()`` and its iterator
    seeds with ``.item()``, on host tensors: nothing to list. ``x.cpu().tolist()`` copies
    once, a ``.tolist()`` after a ``.cpu()`` on the line before twice. And torch's tracer
    names every ``.cpu()`` of a session after the type of the first one's tensor: here
    ``<built-in method cpu of Parameter object>``."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "edge_copies.py"
    path.write_text(EDGE_COPIES)
    module = _load(path, "edge_copies")
    module.main(str(tmp_path / "logs" / "run"))
    sys.modules.pop("edge_copies", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    counts = {(Path(s.file).name, s.line, s.ops[0]): s.count for s in report.latent_sites}
    assert counts == {
        ("edge_copies.py", PARAMETER_CPU, "aten::to"): 1,
        ("edge_copies.py", CPU_TOLIST, "aten::to"): 4,  # one per batch
        # A .tolist() right after a .cpu() of another line copies again.
        ("edge_copies.py", CPU_ALONE, "aten::to"): 4,
        ("edge_copies.py", TOLIST_NEXT, "aten::to"): 4,
    }
    assert not any("torch/utils/data" in f.file for s in report.latent for f in s.stack)


def _cpu_profile(logdir: Path, active: int, stacks: bool = False):
    """A CPU profile with shapes, one warm-up step then ``active`` steps, written to
    ``logdir`` (without Python stacks unless ``stacks``: most users' traces)."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    return profile(
        activities=[ProfilerActivity.CPU],
        with_stack=stacks,
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=active),
        on_trace_ready=tensorboard_trace_handler(str(logdir)),
    )


def test_a_dataloaders_seed_draws_are_no_latent_reads_in_a_trace_without_stacks(tmp_path):
    """Each ``iter(loader)`` draws a base seed and a shuffling sampler another, as
    ``torch.empty((), dtype=torch.int64).random_().item()`` on the host: without stacks
    they were listed as an ``aten::item`` of the program. The loss's ``.item()`` stays."""
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    model = torch.nn.Linear(4, 2)
    logdir = tmp_path / "logs" / "run"
    reads = 0
    with _cpu_profile(logdir, active=6) as prof:
        for _epoch in range(4):
            for x, y in DataLoader(data, batch_size=8, shuffle=True):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                if _epoch % 2:
                    loss.item()
                    reads += 1
                prof.step()
    report = analyze(logdir)
    assert not report.traces[0].has_stacks
    items = [s for s in report.latent_sites if s.ops[0] == "aten::item"]
    assert [(s.file, s.count) for s in items] == [(None, 3)]  # epochs 2 and 4, in 6 steps


def test_a_datasets_reads_in_a_loaders_fetch_are_no_latent_reads_without_stacks(tmp_path):
    """A dataset's random augmentations decide on host tensors (torchvision's
    ``RandomResizedCrop.get_params`` reads ``torch.empty(1).uniform_(...).item()``, its
    flips ``if torch.rand(1) < p:``) inside the loader's fetch: 130 reads a step were
    listed for torchvision's transforms in a trace without stacks."""
    from torch.utils.data import DataLoader, Dataset

    class Augmented(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, index):
            image = torch.rand(3, 8, 8)
            if torch.rand(1) < 0.5:
                image = image.flip(-1)
            scale = torch.empty(1).uniform_(0.5, 1.0).item()
            return image * scale, index % 2

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 2))
    logdir = tmp_path / "logs" / "run"
    with _cpu_profile(logdir, active=3) as prof:
        for x, y in DataLoader(Augmented(), batch_size=4):
            torch.nn.functional.cross_entropy(model(x), y).item()
            prof.step()
    report = analyze(logdir)
    assert not report.traces[0].has_stacks
    assert [(s.ops[0], s.count) for s in report.latent_sites] == [("aten::item", 3)]


@pytest.mark.parametrize(
    ("optimizer_name", "options", "closure", "listed"),
    [
        ("Adam", {}, False, 0),
        ("AdamW", {"foreach": True}, False, 0),
        ("NAdam", {}, False, 0),
        ("Adam", {"fused": True}, False, 0),
        # A closure's reads may be of device tensors: the step's reads stay listed, the
        # closure's loss.item() and the counters' (4 parameters) alike, 3 steps.
        ("Adam", {}, True, 3 * (1 + 4)),
        # ASGD keeps its counters on the parameters' device: its reads sync.
        ("ASGD", {}, False, 3 * 4 * 3),
    ],
)
def test_an_optimizers_host_step_counters_are_no_latent_reads_in_a_trace_without_stacks(
    tmp_path, optimizer_name, options, closure, listed
):
    """Adam and its kin read each parameter's step counter with ``.item()``, a host
    tensor on a GPU run too: with stacks torch's frames said so, without them every Adam
    step of a CPU trace listed one read per parameter."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = getattr(torch.optim, optimizer_name)(model.parameters(), lr=0.01, **options)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))

    def loss_and_grad():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    def logged_loss():
        loss = loss_and_grad()
        loss.item()
        return loss

    logdir = tmp_path / "logs" / "run"
    with _cpu_profile(logdir, active=3) as prof:
        for _ in range(4):
            if closure:
                optimizer.step(logged_loss)
            else:
                loss_and_grad()
                optimizer.step()
            prof.step()
    report = analyze(logdir)
    assert not report.traces[0].has_stacks
    assert sum(s.count for s in report.latent_sites) == listed


def test_an_rnns_reads_of_a_packed_sequences_batch_sizes_are_no_latent_reads(tmp_path):
    """A GRU given a ``PackedSequence`` reads its ``batch_sizes`` (``int(batch_sizes[0])``,
    a size for ``torch.zeros``), a CPU tensor on every device: two sites a call were listed
    at every packed RNN's line (the chatbot tutorial's encoder). The loss's read stays."""
    from torch.nn.utils.rnn import pack_padded_sequence

    gru = torch.nn.GRU(4, 8)
    logdir = tmp_path / "logs" / "run"
    with _cpu_profile(logdir, active=3, stacks=True) as prof:
        for _ in range(4):
            lengths = torch.tensor([5, 3, 2])
            packed = pack_padded_sequence(torch.randn(5, 3, 4), lengths)
            _, hidden = gru(packed)
            hidden.sum().item()
            prof.step()
    report = analyze(logdir, source_roots=[str(tmp_path)])
    assert [(s.ops[0], s.count, s.library) for s in report.latent_sites] == [
        ("aten::item", 3, None)
    ]


# -- mixed precision: GradScaler and the optimizers' own reads ------------------------------

GRAD_SCALER = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    def main(logdir, fused, optimizer_name):
        torch.manual_seed(0)
        layers = [torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)]
        model = torch.nn.Sequential(*layers)
        make = getattr(torch.optim, optimizer_name)
        optimizer = make(model.parameters(), lr=1e-3, fused=fused)
        scaler = torch.amp.GradScaler("cpu")
        sched = torch.optim.lr_scheduler.StepLR(optimizer, 10)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     schedule=schedule(wait=0, warmup=1, active=3),
                     on_trace_ready=tensorboard_trace_handler(logdir)) as prof:
            for _ in range(4):
                x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(model(x).float(), y)
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                sched.step()
                prof.step()
    """
)
SCALER_STEP = GRAD_SCALER.splitlines().index("            scaler.step(optimizer)") + 1


# The same loop with the profiler object assigned, started and stopped by hand.
GRAD_SCALER_STARTED = GRAD_SCALER.replace(
    "    with profile(activities=[ProfilerActivity.CPU], with_stack=True,\n"
    "                 schedule=schedule(wait=0, warmup=1, active=3),\n"
    "                 on_trace_ready=tensorboard_trace_handler(logdir)) as prof:\n",
    "    prof = profile(activities=[ProfilerActivity.CPU], with_stack=True,\n"
    "                   schedule=schedule(wait=0, warmup=1, active=3),\n"
    "                   on_trace_ready=tensorboard_trace_handler(logdir))\n"
    "    prof.start()\n"
    "    if True:\n",
)


def test_an_assigned_profilers_step_is_told_from_the_other_steps(tmp_path):
    """``prof = profile(...)`` binds the profiler as ``with ... as prof`` does."""
    assert GRAD_SCALER_STARTED != GRAD_SCALER
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "amp_started.py"
    path.write_text(GRAD_SCALER_STARTED + "    prof.stop()\n")
    module = _load(path, "amp_started")
    module.main(str(tmp_path / "logs" / "run"), False, "SGD")
    sys.modules.pop("amp_started", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    line = GRAD_SCALER_STARTED.splitlines().index("            scaler.step(optimizer)") + 1
    assert [(s.line, s.line_exact) for s in report.latent_sites] == [(line, True)]


@pytest.mark.parametrize("optimizer_name", ["AdamW", "SGD"])
@pytest.mark.parametrize("fused", [False, True], ids=["default", "fused"])
def test_grad_scalers_read_is_listed_with_the_fused_fix_and_optimizer_internals_are_not(
    tmp_path, optimizer_name, fused
):
    """``scaler.step`` reads ``found_inf`` for an optimizer without a fused step, which waits
    on a GPU (checked on an H200: ``tests/gpu_shapes``); a fused one reads nothing. The
    optimizers' own ``item`` calls on a CPU run read host tensors on a GPU run too: Adam's
    step counter (``_get_value``, once per parameter) and the fused CPU kernels' scalars.
    ``main`` runs when profiling starts and calls three ``step`` methods: ``prof.step()`` is
    the profiler's, so the sync's line is ``scaler.step``'s, exact (it was inexact, with
    ``scaler.step``, ``sched.step`` and ``prof.step`` as candidates)."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "amp_loop.py"
    path.write_text(GRAD_SCALER)
    module = _load(path, "amp_loop")
    module.main(str(tmp_path / "logs" / "run"), fused, optimizer_name)
    sys.modules.pop("amp_loop", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    sites = {(Path(s.file).name, s.line): s for s in report.latent_sites}
    if fused:
        assert sites == {}
        return
    assert list(sites) == [("amp_loop.py", SCALER_STEP)]
    site = sites["amp_loop.py", SCALER_STEP]
    assert site.per_step == 1.0 and site.line_exact
    assert site.advice["title"].startswith("Use a fused optimizer")
    assert "fused=True" in site.advice["after"]


# -- syncs inside library calls: module instances, aliases, classes -------------------------

LIBRARY_CALLS = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

        def forward(self, x, causal):
            hidden = x * 2
            return self.encoder(hidden, mask=causal)  # sync: member


    def main(logdir, fixed=False):
        torch.manual_seed(0)
        net = Net()
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).train()
        clip = nn.utils.clip_grad_norm_
        causal = nn.Transformer.generate_square_subsequent_mask(6)
        x = torch.randn(4, 6, 16)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     schedule=schedule(wait=0, warmup=1, active=2),
                     on_trace_ready=tensorboard_trace_handler(logdir)) as prof:
            for _ in range(3):
                out = encoder(x, mask=causal)  # sync: local
                out = net(out, causal)
                mean, std = out[:, 0, :4], out[:, 0, 4:8].exp()
                policy = torch.distributions.Normal(
                    mean, std, validate_args=not fixed)  # sync: validate
                loss = out.pow(2).mean() - policy.rsample().mean()
                loss.backward()
                clip(net.parameters(), 1.0, error_if_nonfinite=not fixed)  # sync: alias
                prof.step()
    """
)


def _marked(text: str) -> dict[str, int]:
    return {
        line.split("# sync: ")[1]: number
        for number, line in enumerate(text.splitlines(), 1)
        if "# sync: " in line
    }


def test_syncs_in_library_calls_are_placed_at_the_call_the_user_wrote(tmp_path):
    """A module called by an instance's name (``encoder(x)``, ``self.encoder(h)``: the trace
    names its class), a function called by an alias (``clip = nn.utils.clip_grad_norm_``)
    and a class constructed over two lines with a truth test of a Python bool on the second
    (``validate_args=not fixed``, not the sync): each sync at the line of the call, exact,
    with the fix of that call (``catalogue.LIBRARY_ADVICE``)."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "library_calls.py"
    path.write_text(LIBRARY_CALLS)
    module = _load(path, "library_calls")
    module.main(str(tmp_path / "logs" / "run"))
    sys.modules.pop("library_calls", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    marks = _marked(LIBRARY_CALLS)
    found = {
        (s.source.line, s.source.line_exact, Path(s.source.library.file).name)
        for s in report.latent
        if s.source and s.source.library
    }
    # The Normal's call starts a line above its marker: Python gives a call its first line.
    assert found == {
        (marks["local"], True, "transformer.py"),
        (marks["member"], True, "transformer.py"),
        (marks["validate"] - 1, True, "distribution.py"),
        (marks["alias"], True, "clip_grad.py"),
    }, found
    # Each gets the fix of how the library is called, not "do not branch on a GPU tensor".
    titles = {s.line: s.advice["title"] for s in report.latent_sites}
    assert titles == {
        marks["local"]: "Pass is_causal=True with a causal mask",
        marks["member"]: "Pass is_causal=True with a causal mask",
        marks["validate"] - 1: "Turn off torch.distributions' argument checks in the training loop",
        marks["alias"]: "Leave error_if_nonfinite off in clip_grad_norm_",
    }, titles


MODULES_IN_A_LIST = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    def block():
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)


    def main(logdir):
        torch.manual_seed(0)
        blocks = [block() for _ in range(2)]
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        final = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        causal = nn.Transformer.generate_square_subsequent_mask(6)
        x = torch.randn(4, 6, 16)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     schedule=schedule(wait=0, warmup=1, active=2),
                     on_trace_ready=tensorboard_trace_handler(logdir)) as prof:
            for _ in range(3):
                out = x
                for blk in blocks:
                    out = blk(out, mask=causal)  # sync: loop
                out = final(out, mask=causal, is_causal=True)
                out.sum().backward()
                prof.step()
    """
)


def test_modules_called_through_a_loop_variable_are_not_pinned_on_the_one_named_call(tmp_path):
    """``final`` is the one instance of the class the file names; the syncs are the two
    ``blk(...)`` calls of the inner loop, whose instances come from a list. The trace shows
    three calls of the class a step, the source names one: the sync was never put at
    ``final``'s line. Since a call of a name bound to what the source does not tell (a
    loop's element, a parameter) may be the module, the two calls before ``final``'s are
    placed at ``blk(...)``, exact (torchvision's detection ``train_one_epoch(model, ...)``
    calls its parameter)."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "module_list.py"
    path.write_text(MODULES_IN_A_LIST)
    module = _load(path, "module_list")
    module.main(str(tmp_path / "logs" / "run"))
    sys.modules.pop("module_list", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    loop_line = _marked(MODULES_IN_A_LIST)["loop"]
    assert report.latent and all(
        s.source.line == loop_line and s.source.line_exact for s in report.latent
    )


MODULE_FROM_A_FACTORY = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    def get_model():
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)


    def train_one_epoch(model, x, causal, logdir):
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     schedule=schedule(wait=0, warmup=1, active=2),
                     on_trace_ready=tensorboard_trace_handler(logdir)) as prof:
            for _ in range(3):
                out = model(x, mask=causal)  # sync: param
                out.sum().backward()
                prof.step()


    def main(logdir):
        torch.manual_seed(0)
        built = get_model()
        causal = nn.Transformer.generate_square_subsequent_mask(6)
        train_one_epoch(built, torch.randn(4, 6, 16, device="cpu"), causal, logdir)
    """
)


def test_a_module_called_through_a_parameter_is_placed_at_its_call(tmp_path):
    """torchvision's detection reference builds its model with ``get_model(...)`` and calls
    it in ``train_one_epoch(model, ...)``: the source names no class for ``model``, and the
    model's reads were at the function's def line. A call of a name bound to what the
    source does not tell may be the module; the alignment places it, exact."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "factory.py"
    path.write_text(MODULE_FROM_A_FACTORY)
    module = _load(path, "factory")
    module.main(str(tmp_path / "logs" / "run"))
    sys.modules.pop("factory", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    line = _marked(MODULE_FROM_A_FACTORY)["param"]
    assert report.latent and {(s.source.line, s.source.line_exact) for s in report.latent} == {
        (line, True)
    }


# -- the call a library sync came through, as code writes it --------------------------------

EDGE_HEAD = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from torch.distributions import Normal as Gauss
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


    class MyNormal(torch.distributions.Normal):
        pass


    class Hub:
        @staticmethod
        def from_pretrained(name):
            layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
            return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)


    # Where a GPU run keeps the tensors (a library given host tensors alone stays there).
    DEV = "cuda" if torch.cuda.is_available() else "cpu"


    def main(logdir):
        torch.manual_seed(0)
        mean, std = torch.zeros(4, device=DEV), torch.ones(4, device=DEV)
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).apply(lambda m: None)
        clippers = [nn.utils.clip_grad_norm_]
        built = Hub.from_pretrained("tiny")
        causal = nn.Transformer.generate_square_subsequent_mask(6)
        x = torch.randn(4, 6, 16, requires_grad=True, device=DEV)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     schedule=schedule(wait=0, warmup=1, active=2),
                     on_trace_ready=tensorboard_trace_handler(logdir)) as prof:
            for _ in range(3):
    """
)
EDGE_BODIES = {
    # A class derived from the one whose __init__ syncs, with none of its own.
    "subclass": "d = MyNormal(mean, std, validate_args=True)  # sync: call\n",
    # A class imported under another name.
    "import_alias": "d = Gauss(mean, std, validate_args=True)  # sync: call\n",
    # A model a factory built (Hugging Face's from_pretrained): its class is not named.
    "factory": "out = built(x, mask=causal)  # sync: call\n",
    # A module bound with a lambda on the same line.
    "lambda_on_the_line": "out = enc(x, mask=causal)  # sync: call\n",
    # The user's own normal.py beside the script is not torch's (see below).
    "user_normal_py": "d = torch.distributions.Normal(mean, std, True)  # sync: call\n",
    # The same function called directly and through a loop variable: the trace shows more
    # calls than the source names, so no line is claimed.
    "loop_variable": (
        "x.sum().backward()\n"
        "nn.utils.clip_grad_norm_([x], 1.0, error_if_nonfinite=True)  # sync: direct\n"
        "for clip in clippers:\n"
        "    clip([x], 1.0, error_if_nonfinite=True)  # sync: loop\n"
    ),
}


@pytest.mark.parametrize("case", sorted(EDGE_BODIES))
def test_a_library_sync_is_placed_at_the_call_however_it_is_named(tmp_path, case):
    body = textwrap.indent(EDGE_BODIES[case] + "prof.step()\n", " " * 12)
    text = EDGE_HEAD + body
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / f"edge_{case}.py"
    path.write_text(text)
    # Line 55 of torch's normal.py is Normal.__init__; here it is another class's.
    lines = [
        "# the user's module",
        *[""] * 52,
        "class Mine:",
        "    def __init__(self):",
        "        pass",
    ]
    (tmp_path / "src" / "normal.py").write_text("\n".join(lines) + "\n")
    module = _load(path, f"edge_{case}")
    module.main(str(tmp_path / "logs" / "run"))
    sys.modules.pop(f"edge_{case}", None)
    report = analyze(tmp_path / "logs" / "run", source_roots=[str(tmp_path / "src")])
    marks = _marked(text)
    found = {(s.source.line, s.source.line_exact) for s in report.latent}
    if case == "loop_variable":
        assert found and not any(exact for _line, exact in found), found
    else:
        assert found == {(marks["call"], True)}, found


# -- torch's namespaced functions, however imported, and look-alikes that are not them ------

NAMESPACED = textwrap.dedent(
    """\
    import numpy as np
    import torch
    import torch as th
    import torch.linalg as LA
    from torch import linalg
    from torch.linalg import solve as tsolve


    def inv(m):  # the user's own inv, not torch's
        return m * 2


    def step(a, b):
        y = inv(a)
        n = np.linalg.inv(a.numpy())
        z = LA.inv(y)
        w = linalg.cholesky(a)
        v = tsolve(a, b)
        u = th.linalg.lu_factor(a)
        return y, n, z, w, v, u
    """
)
LA_INV, LINALG_CHOLESKY, TSOLVE, TH_LU_FACTOR = 16, 17, 18, 19


def test_torch_namespace_calls_are_found_exact_however_imported(tmp_path) -> None:
    """``torch.linalg.inv`` runs as the built-in ``linalg_inv``: the call is found whether
    the namespace is aliased (``LA.inv``, ``th.linalg``), imported (``from torch import
    linalg``) or the function itself imported under another name, and never at the
    user's own ``inv`` or numpy's ``np.linalg.inv`` called just before."""
    (tmp_path / "namespaced.py").write_text(NAMESPACED)
    module = _load(tmp_path / "namespaced.py", "namespaced")
    a = torch.randn(8, 8) + 8 * torch.eye(8)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        module.step(a, torch.randn(8, 2))
    sys.modules.pop("namespaced", None)
    path = tmp_path / "run" / "n.pt.trace.json"
    path.parent.mkdir()
    prof.export_chrome_trace(str(path))
    report = analyze(path, source_roots=[str(tmp_path)])
    assert [(line, exact) for _file, line, exact, _op in _findings(report)] == [
        (LA_INV, True),
        (LINALG_CHOLESKY, True),
        (TSOLVE, True),
        (TH_LU_FACTOR, True),
    ]


NAMESPACES_BOUND_OTHERWISE = {
    "assigned.py": (
        "import torch\nLA = torch.linalg\n\n\ndef step(a):\n    z = LA.inv(a)\n    return z\n",
        [(6, True)],
    ),
    "star.py": (
        "import torch\nfrom torch.linalg import *\n\n\ndef step(a):\n"
        "    z = inv(a)\n    w = cholesky(a)\n    return z, w\n",
        [(6, True), (7, True)],
    ),
    "star_then_own_def.py": (
        "import torch\nfrom torch.linalg import *\n\n\ndef inv(m):\n    return m * 2\n\n\n"
        "def step(a):\n    y = inv(a)\n    z = torch.linalg.inv(y)\n    return y, z\n",
        [(11, True)],
    ),
    "star_then_import.py": (
        "import torch\nfrom torch.linalg import *\n\n\ndef step(a):\n"
        "    from numpy.linalg import inv\n    n = inv(a.numpy())\n"
        "    z = torch.linalg.inv(a)\n    return n, z\n",
        [(8, True)],
    ),
    "assigned_through_alias.py": (
        "import torch as th\nLA = th.linalg\n\n\ndef step(a):\n    z = LA.inv(a)\n    return z\n",
        [(6, True)],
    ),
    "assigned_in_a_chain.py": (
        "import torch\nt = torch\nLA = t.linalg\nL2 = LA\n\n\ndef step(a):\n"
        "    z = L2.inv(a)\n    return z\n",
        [(8, True)],
    ),
    "assigned_numpy.py": (
        "import numpy as np\nimport torch\nLA = np.linalg\n\n\ndef step(a):\n"
        "    n = LA.inv(a.numpy())\n    z = torch.linalg.inv(a)\n    return n, z\n",
        [(8, True)],
    ),
    "module_chain_a_function_shadows.py": (
        "import torch\nt = torch\nLA = t.linalg\n\n\ndef step(a):\n"
        "    t = a.sum()\n    z = LA.inv(a)\n    return z, t\n",
        [(8, True)],
    ),
    "module_numpy_a_function_rebinds.py": (
        "import numpy as xp\nimport torch\nLA = xp.linalg\n\n\ndef step(a):\n"
        "    xp = torch\n    n = LA.inv(a.numpy())\n    z = xp.linalg.inv(a)\n    return n, z\n",
        [(9, True)],
    ),
    "saved_and_restored.py": (
        "import torch\nu = None\nt = torch\nu = t\nt = u\nLA = u.linalg\n\n\n"
        "def step(a):\n    z = LA.inv(a)\n    return z\n",
        [(10, True)],
    ),
    "shadowed.py": (
        "import torch\nfrom torch import linalg\n\n\ndef step(a):\n"
        "    from numpy import linalg\n    n = linalg.inv(a.numpy())\n"
        "    z = torch.linalg.inv(a)\n    return n, z\n",
        [(8, True)],
    ),
}


@pytest.mark.parametrize("name", sorted(NAMESPACES_BOUND_OTHERWISE))
def test_a_namespace_assigned_star_imported_or_shadowed_is_followed(tmp_path, name) -> None:
    """Reviews' cases: ``LA = torch.linalg`` (also through ``import torch as th`` and a
    chain of names) and ``from torch.linalg import *`` bind the namespace too, and
    ``LA = np.linalg`` does not; a function's ``from numpy import linalg`` hides the
    module's torch one, so numpy's ``linalg.inv`` called first is not taken for torch's;
    and a star import yields to the file's own ``def inv`` and to a later ``from
    numpy.linalg import inv``. A module's assignment is followed in the module: a
    function's own ``t`` or ``xp`` changes none of it."""
    source, expected = NAMESPACES_BOUND_OTHERWISE[name]
    (tmp_path / name).write_text(source)
    module = _load(tmp_path / name, name[:-3])
    a = torch.randn(8, 8) + 8 * torch.eye(8)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        module.step(a @ a.T)
    sys.modules.pop(name[:-3], None)
    path = tmp_path / "run" / "n.pt.trace.json"
    path.parent.mkdir()
    prof.export_chrome_trace(str(path))
    report = analyze(path, source_roots=[str(tmp_path)])
    assert [(line, exact) for _file, line, exact, _op in _findings(report)] == expected


SCRIPT_IN_A_FOLDER = textwrap.dedent(
    """\
    import torch
    import tb_syncfinder
    from torch.profiler import profile, ProfilerActivity

    model = torch.nn.Linear(8, 1)


    def step(x):
        loss = model(x).pow(2).mean()
        return loss.item()


    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        step(torch.randn(4, 8))
    (site,) = tb_syncfinder.analyze(prof).latent_sites
    print(site.file, site.line, site.line_exact)
    """
)


def test_analyze_prof_finds_the_script_it_runs_beside_others_of_its_name(tmp_path):
    """``python scripts/train.py`` from a project that also has ``examples/train.py``:
    torch records ``train.py`` (relative to the script's ``sys.path`` entry), the working
    directory holds it in two folders, and ``analyze(prof)`` named the def line. The
    running script's folder is a root after the others."""
    import subprocess

    (tmp_path / "scripts").mkdir()
    (tmp_path / "examples").mkdir()
    (tmp_path / "scripts" / "train.py").write_text(SCRIPT_IN_A_FOLDER)
    (tmp_path / "examples" / "train.py").write_text("def step(x):\n    return x\n")
    import os

    repo = str(Path(__file__).resolve().parent.parent)  # this checkout, not an installed one
    done = subprocess.run(
        [sys.executable, "scripts/train.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": repo},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stdout.split() == ["train.py", "10", "True"]


def test_a_library_calling_itself_hundreds_deep_is_analysed(tmp_path, site_packages):
    """A read at the bottom of a library's self-recursion 400 deep: every frame repeats the
    one above it, and passing them all over as wrappers made paths of 400 names whose walk
    overflowed the interpreter's stack ("analysis failed: RecursionError")."""
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    (site_packages / "fakerec").mkdir()
    (site_packages / "fakerec" / "__init__.py").write_text("")
    (site_packages / "fakerec" / "rec.py").write_text(
        "def rec(x, n):\n    return x.sum().item() if n == 0 else rec(x, n - 1)\n"
    )
    (tmp_path / "user_rec.py").write_text(
        "import torch\nfrom fakerec.rec import rec\n\n\n"
        "def main():\n    return rec(torch.ones(3), 400)\n"
    )
    module = _load(tmp_path / "user_rec.py", "user_rec")
    logdir = tmp_path / "logs"
    try:
        with profile(
            activities=[ProfilerActivity.CPU],
            with_stack=True,
            on_trace_ready=tensorboard_trace_handler(str(logdir)),
        ):
            module.main()
    finally:
        for name in ("fakerec", "fakerec.rec", "user_rec"):
            sys.modules.pop(name, None)
    report = analyze(logdir, source_roots=[str(tmp_path)])
    assert not [t.error for t in report.traces if t.error]
    (site,) = report.latent_sites
    assert (site.line, site.line_exact, site.library.func) == (6, True, "rec")


# -- a loop stepping the profiler from its loader's wrapper (timm, torchvision) -------------

STEPPING_LOADER = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule


    def stepping(loader, on_step):
        for i, batch in enumerate(loader):
            if i:
                on_step()
            yield batch
        on_step()


    def train_one_epoch(loader, distributed, log_interval=2):
        total = 0.0
        for batch_idx, x in enumerate(loader):
            loss = (x * 2).sum()
            total += loss.item()
            if batch_idx % log_interval == 0:
                if distributed:
                    loss_avg = loss.mean().item()
                    loss_now = loss.max().item()
        return total


    def main(out, distributed):
        data = [torch.randn(16, 8) for _ in range(8)]
        with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                     schedule=schedule(wait=1, warmup=1, active=4, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
            train_one_epoch(stepping(data, prof.step), distributed)
    """
)
EVERY_STEP, AVG_READ, NOW_READ = 17, 20, 21


@pytest.mark.parametrize("distributed", [False, True])
def test_a_loop_stepped_by_its_loaders_wrapper_names_each_read_at_its_line(tmp_path, distributed):
    """timm's and torchvision's loops step the profiler from a wrapper of their loader (a
    generator's ``__next__``), and the loop was running when the schedule began recording.
    Without the steps as boundaries, every read after the first was "61*" with the reads
    under ``if args.distributed:`` as candidates, or one of them: now each is exact."""
    (tmp_path / "stepping_loader.py").write_text(STEPPING_LOADER)
    module = _load(tmp_path / "stepping_loader.py", "stepping_loader")
    out = tmp_path / "logs" / "run" / "host_1.1700000000000.pt.trace.json"
    out.parent.mkdir(parents=True)
    module.main(str(out), distributed)
    sys.modules.pop("stepping_loader", None)
    report = analyze(out, source_roots=[str(tmp_path)])
    expected = {EVERY_STEP: 4}
    if distributed:
        expected.update({AVG_READ: 2, NOW_READ: 2})
    assert {(s.line, s.line_exact): s.count for s in report.latent_sites} == {
        (line, True): count for line, count in expected.items()
    }
    # The logged reads run every second step, and say so.
    guards = {s.line: s.periodic_guard for s in report.latent_sites}
    assert guards.pop(EVERY_STEP) is None
    assert set(guards.values()) <= {"batch_idx % log_interval == 0"}


# Found by a review: a wrapper stepping the profiler every second batch (gradient
# accumulation), and a callback reached by another name than its function's. With the
# step required at every ``__next__``, the first named a dead branch's line exact; taken
# for a generator, the second named the wrong one of two reads exact.
ACCUMULATING = textwrap.dedent(
    """\
    import torch


    def stepping(loader, on_step, every=2):
        for i, batch in enumerate(loader):
            if i and i % every == 0:
                on_step()
            yield batch
        on_step()


    def train(loader, w):
        total = 0.0
        for i, x in enumerate(loader):
            loss = (x @ w).sum()
            total += loss.item()
            if i < 0:
                total += loss.max().item()
        return total


    class Hooks:
        def __init__(self, prof):
            self.prof = prof
            self.after = self._after_batch

        def _after_batch(self):
            self.prof.step()


    def train_with_hooks(data, w, hooks):
        total = 0.0
        for i, x in enumerate(data):
            loss = (x @ w).sum()
            total += loss.item()
            hooks.after()
            if i % 2:
                total += loss.max().item()
        return total
    """
)


@pytest.mark.parametrize("shape", ["accumulating", "aliased_callback"])
def test_a_step_boundary_is_placed_only_where_the_trace_shows_it(tmp_path, shape):
    from torch.profiler import ProfilerActivity, profile, schedule

    (tmp_path / "accumulating.py").write_text(ACCUMULATING)
    module = _load(tmp_path / "accumulating.py", "accumulating")
    w = torch.randn(8, 8)
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(out)),
    ) as prof:
        if shape == "accumulating":
            module.train(module.stepping([torch.randn(4, 8) for _ in range(16)], prof.step), w)
        else:
            hooks = module.Hooks(prof)
            module.train_with_hooks([torch.randn(4, 8) for _ in range(10)], w, hooks)
    sys.modules.pop("accumulating", None)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    exact = [s.source.line for s in report.latent if s.source.line_exact]
    if shape == "accumulating":
        assert len(report.latent) == 6 and exact == [16] * 6  # never the dead branch's 18
    else:
        # Recorded: iteration 1's second read, then 2, 3 (both reads) and 4: lines 38, 35,
        # 35, 38, 35. The callback's frames carry another name than the call's, so no step
        # boundary is placed: lines are candidates, and none claimed exact is wrong.
        assert len(report.latent) == 5
        assert exact.count(35) <= 3 and exact.count(38) <= 2 and set(exact) <= {35, 38}
        assert all(
            set(s.source.candidates) == {35, 38} for s in report.latent if not s.source.line_exact
        )
