"""A read in a helper of the user's (``def to_float(t): return t.item()``) is one site at
the helper's line, whichever line called it: the calls of it, where the user decides what
is read and how often, were not said. Each site now counts its syncs by the user's line
that called its function (``Site.callers``), and the report names them where there are
several."""

from __future__ import annotations

import runpy
import textwrap

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")

_SCRIPT = textwrap.dedent(
    """\
    import torch


    def to_float(t):
        return t.item()


    def train_step(w):
        loss = (w @ w).sum()
        return to_float(loss)


    w = torch.randn(8, 8, device=DEVICE)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(6):
        loss = (w @ w).sum()
        a = to_float(loss)
        b = to_float(loss * 2)
        if step % 2 == 0:
            c = to_float(loss.mean())
        prof.step()
    prof.stop()
    """
)


def test_a_helpers_read_is_counted_by_the_lines_that_called_it(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(_SCRIPT)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert (site.line, site.func, site.count) == (5, "to_float", 10)
    assert [(c.line, c.line_exact, c.func, c.count) for c in site.callers] == [
        (23, True, "<module>", 4),
        (24, True, "<module>", 4),
        (26, True, "<module>", 2),
    ]
    text = " ".join(report.to_text().split())
    # Line 26 alone runs under a `%` test: it says so (the others run every step).
    assert "called from line 23 (4), line 24 (4), line 26 (2, under `if step % 2 == 0:`)" in text


def test_a_function_called_from_one_line_names_no_caller(tmp_path):
    """One caller is the loop that runs the function: the stack says it, the report does
    not repeat it under every site."""
    script = tmp_path / "w.py"
    script.write_text(
        _SCRIPT.replace(
            "    a = to_float(loss)\n    b = to_float(loss * 2)\n"
            "    if step % 2 == 0:\n        c = to_float(loss.mean())\n",
            "    a = train_step(w)\n",
        )
    )
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert site.func == "to_float"
    assert [(c.line, c.func, c.count) for c in site.callers] == [(10, "train_step", 4)]
    assert "called from" not in report.to_text()


def test_a_helpers_read_called_under_a_periodic_test_is_already_every_n_steps(tmp_path):
    """A logging helper called under ``if step % 2 == 0:``: its own line runs under no test,
    and the read was not said to be already every N steps, as the same read written in the
    loop was."""
    script = tmp_path / "w.py"
    script.write_text(
        _SCRIPT.replace(
            "    a = to_float(loss)\n    b = to_float(loss * 2)\n"
            "    if step % 2 == 0:\n        c = to_float(loss.mean())\n",
            "    if step % 2 == 0:\n        c = to_float(loss.mean())\n",
        )
    )
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert site.periodic_guard is None
    assert [(c.line, c.periodic_guard) for c in site.callers] == [(24, "step % 2 == 0")]
    text = " ".join(report.to_text().split())
    assert (
        "in 2 of 4 steps: already every N steps (under `if step % 2 == 0:`, around its call "
        "at line 24)"
    ) in text


_METER_SCRIPT = textwrap.dedent(
    """\
    import torch


    class Meter:
        def __init__(self, val):
            self.val = val

        def __str__(self):
            return f"{self.val:.3f}"


    def display(meters):
        entries = [str(meter) for meter in meters]
        print(" ".join(entries))


    w = torch.randn(8, 8, device=DEVICE)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(6):
        loss = (w @ w).sum()
        if step % 2 == 0:
            display([Meter(loss), Meter(loss.mean())])
        prof.step()
    prof.stop()
    """
)


def test_a_read_two_calls_below_a_periodic_test_is_already_every_n_steps(tmp_path):
    """pytorch/examples' imagenet: ``AverageMeter.__str__`` reads under ``ProgressMeter.
    display``'s ``[str(meter) for meter in self.meters]``, called under ``if i %
    args.print_freq == 0:``. Only the caller's own line was looked at for the test, so the
    read was not said to be already every N steps."""
    script = tmp_path / "w.py"
    script.write_text(_METER_SCRIPT)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert (site.line, site.func, site.count, site.periodic_guard) == (9, "__str__", 4, None)
    (caller,) = site.callers
    # The comprehension's one line is where its str() ran (3.11 gives it a frame).
    assert (caller.line, caller.line_exact) == (13, True)
    assert (caller.periodic_guard, caller.periodic_guard_line) == ("step % 2 == 0", 28)
    text = " ".join(report.to_text().split())
    assert (
        "in 2 of 4 steps, up to 2 in one: already every N steps (under `if step % 2 == 0:`, "
        "around the call at line 28 that leads here)"
    ) in text


def test_a_test_outside_the_loop_that_steps_the_profiler_is_not_said(tmp_path):
    """A ``%`` test around the call of the training loop's function is about epochs: the
    reads inside run on every step of the epochs it lets through."""
    script = tmp_path / "w.py"
    script.write_text(
        _METER_SCRIPT.replace(
            "prof.start()\nfor step in range(6):\n    loss = (w @ w).sum()\n"
            "    if step % 2 == 0:\n        display([Meter(loss), Meter(loss.mean())])\n"
            "    prof.step()\n",
            "prof.start()\n\n\ndef epoch():\n    for step in range(3):\n"
            "        loss = (w @ w).sum()\n        display([Meter(loss)])\n"
            "        prof.step()\n\n\nfor number in range(4):\n    if number % 2 == 0:\n"
            "        epoch()\n",
        )
    )
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert site.func == "__str__" and site.count == 4
    assert [c.periodic_guard for c in site.callers] == [None]
    assert "already every N steps" not in report.to_text()


_COMPREHENSION_SCRIPT = textwrap.dedent(
    """\
    import torch

    itos = dict(enumerate("abcdef"))
    loss = torch.tensor(1.5, requires_grad=True, device="cpu") * 2  # a GPU run's device


    def callback(it):
        if it % 3 == 0:
            print(f"iter {it}: loss {loss.item():.5f}")
        if it % 5 == 0:
            y = torch.arange(6) * (loss.detach() > 0)
            completion = "".join([itos[int(i)] for i in y])


    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=5),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(7):
        callback(step)
        prof.step()
    prof.stop()
    """
)


def test_a_comprehensions_reads_are_under_the_test_of_the_line_that_runs_it(tmp_path):
    """minGPT's chargpt decodes a sample with ``[itos[int(i)] for i in y]`` under ``if
    it % 5 == 0:``. Before Python 3.12 the comprehension is a frame of its own, and its call
    was placed at the callback's ``loss.item()`` line, exact, under that line's ``% 3``."""
    script = tmp_path / "w.py"
    script.write_text(_COMPREHENSION_SCRIPT)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    site = next(s for s in report.latent_sites if s.line == 12)
    assert site.count == 6
    if site.func == "<listcomp>":  # Python before 3.12
        assert [(c.line, c.line_exact, c.periodic_guard) for c in site.callers] == [
            (12, True, "it % 5 == 0")
        ]
    text = " ".join(report.to_text().split())
    assert "already every N steps (under `if it % 5 == 0:`" in text
    assert "under `if it % 3 == 0:`, around its call" not in text


def test_a_test_around_the_call_of_the_loop_that_steps_the_profiler_is_not_said(tmp_path):
    """A read in the training loop's own function, called under ``if epoch % 2 == 0:``: it
    reads on every step of the epochs that test lets through, not every N steps."""
    script = tmp_path / "w.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch

            w = torch.randn(8, 8, device="cpu")  # where a GPU run puts it
            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                with_stack=True,
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
            )


            def train_one_epoch():
                for step in range(3):
                    loss = (w @ w).sum()
                    print(loss.item())
                    prof.step()


            prof.start()
            for epoch in range(4):
                if epoch % 2 == 0:
                    train_one_epoch()
            prof.stop()
            """
        )
    )
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert (site.line, site.func) == (15, "train_one_epoch")
    assert [c.periodic_guard for c in site.callers] == [None]
    assert "already every N steps" not in report.to_text()


_VALIDATION_EVERY_N_EPOCHS = textwrap.dedent(
    """\
    import torch

    w = torch.randn(8, 8, device=DEVICE)
    val_interval = 1
    for epoch in range(1):
        if (epoch + 1) % val_interval == 0:
            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                with_stack=True,
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
            )
            prof.start()
            for i in range(4):  # the profiler stops in its cycle: the read after is in it
                v = (w @ w).sum().item()
                prof.step()
            t = w.max().item()
            prof.stop()
    """
)


def test_a_test_around_the_profiled_loop_does_not_make_its_reads_every_n_steps(tmp_path):
    """MONAI's validation every ``val_interval`` epochs: the test around the profiled loop
    made its every-pass read "already every N steps", and its read after the loop too (a
    walk): the test holds the profiled steps."""
    script = tmp_path / "w.py"
    script.write_text(_VALIDATION_EVERY_N_EPOCHS)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    found = sorted((s.line, s.line_exact, s.periodic_guard) for s in report.latent_sites)
    assert found == [(15, True, None), (17, True, None)]
    assert "every N steps (under" not in " ".join(report.to_text().split())


_ALIAS_SCRIPT = textwrap.dedent(
    """\
    import torch


    def compute_loss(w):
        loss = (w @ w).sum()
        n = loss.item()
        return loss * n


    STEP_FN


    def train_step(w):
        loss = step_fn(w)
        w.grad = None
        return loss.item()


    w = torch.randn(8, 8, device=DEVICE)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(6):
        a = train_step(w)
        b = train_step(w * 2)
        prof.step()
    prof.stop()
    """
)


def _alias_callers(tmp_path, step_fn: str) -> list[tuple[int, bool, str]]:
    script = tmp_path / "w.py"
    script.write_text(_ALIAS_SCRIPT.replace("STEP_FN", step_fn))
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = [s for s in report.latent_sites if s.func == "compute_loss"]
    assert (site.line, site.line_exact) == (6, True)
    return [(c.line, c.line_exact, c.func) for c in site.callers]


def test_a_function_called_by_a_name_the_source_does_not_tell_has_no_exact_caller(tmp_path):
    """``step_fn`` bound to what a factory returns: the trace's ``compute_loss`` is called
    by no name the caller's source shows. Its read (``.item()``, in ``compute_loss``'s own
    frame) was taken for the caller's own ``loss.item()`` two lines below, exact (the
    torch.compile walk's ``train.py:46``); the caller's line is not known."""
    callers = _alias_callers(tmp_path, "def make():\n    return compute_loss\n\n\nstep_fn = make()")
    assert callers == [(17, False, "train_step")]


def test_a_function_bound_through_torch_compile_or_itself_is_called_at_its_alias(tmp_path):
    """``step_fn = torch.compile(f) if COMPILE else f`` (the torch.compile walk's script):
    either branch runs ``f``'s frame, so a call of ``step_fn`` is a call of ``f``."""
    callers = _alias_callers(
        tmp_path,
        "COMPILE = False\nstep_fn = torch.compile(compute_loss) if COMPILE else compute_loss",
    )
    assert callers == [(15, True, "train_step")]


def test_callers_of_one_line_told_apart_by_their_remainder_tests_say_the_test():
    """nerf-pytorch's ``render_rays`` reached from ``batchify_rays:59`` in training and, every
    ``i_testset`` steps, in the test-set render: "called from line 59 (75), line 59 (13)",
    two labels alike. The caller whose calls run under a ``%`` test says it."""
    from tb_syncfinder.outputs.text import callers_text

    site = {"file": "w.py", "line": 9}
    every = {"file": "w.py", "line": 14, "line_exact": True, "count": 5, "periodic_guard": None}
    guarded = {**every, "count": 1, "periodic_guard": "step % 4 == 0"}
    site["callers"] = [every, guarded]
    assert callers_text(site) == "called from line 14 (5), line 14 (1, under `if step % 4 == 0:`)"
    site["callers"] = [{**every, "periodic_guard": "step % 4 == 0"}, guarded]
    assert callers_text(site) == "called from line 14 (5), line 14 (1)"


_BRANCHES_UNDER_A_TEST = textwrap.dedent(
    """\
    import torch

    LOSSES = []


    def show():
        return f"loss {torch.stack(LOSSES).mean().item():.4f}"


    w = torch.randn(8, 8, device=DEVICE)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=5, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for i in range(7):
        LOSSES.append((w @ w).sum())
        if i % 2 == 0:
            if torch.cuda.is_available():
                print(show(), torch.cuda.max_memory_allocated())
            else:
                print(show())
        prof.step()
    prof.stop()
    """
)


def test_a_call_in_both_branches_under_a_remainder_test_is_every_n_steps(tmp_path):
    """torchvision's ``MetricLogger.log_every`` prints its meters in an ``if``/``else`` (with
    and without the GPU's memory) under ``if i % print_freq == 0:``: the call's line is one of
    the two, which the trace does not tell, and the test around both was not said (a
    segmentation walk: 58 of 63 reads told to read every N steps, which they did)."""
    script = tmp_path / "w.py"
    script.write_text(_BRANCHES_UNDER_A_TEST)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert site.line == 7
    text = " ".join(report.to_text().split())
    assert "already every N steps (under `if i % 2 == 0:`" in text


_INJECTED = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from helpers import is_dist, world_size


    class Matcher(nn.Module):
        def forward(self, x):
            return (x * 2).cpu()


    class Criterion(nn.Module):
        def __init__(self, matcher):
            super().__init__()
            self.matcher = matcher

        def forward(self, x, aux):
            indices = self.matcher(x)
            if is_dist():
                pass
            n = world_size()
            for a in aux:
                indices = self.matcher(a)
            return indices, n


    criterion = Criterion(Matcher())
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    ) as prof:
        for _ in range(5):
            x = torch.randn(4, 4)
            criterion(x, [x + 1])
            prof.step()
    """
)


def test_a_module_given_to_init_is_called_where_its_attribute_is_not_at_other_calls(
    tmp_path, monkeypatch
):
    """DETR's ``SetCriterion`` keeps the ``HungarianMatcher`` it is given (``self.matcher
    = matcher``): the calls of that attribute were never taken for the module's, so the
    functions imported from another file between them (``is_dist()``, ``world_size()``)
    were, and the matcher's ``.cpu()`` was said to be called from lines 18 and 20, exact."""
    (tmp_path / "helpers.py").write_text(
        "def is_dist():\n    return False\n\n\ndef world_size():\n    return 1\n"
    )
    script = tmp_path / "w.py"
    script.write_text(_INJECTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = [s for s in report.latent_sites if s.line == 8]
    assert [(c.line, c.line_exact, c.count) for c in site.callers] == [
        (17, True, 3),
        (22, True, 3),
    ]


_LOGGED_LOSSES = textwrap.dedent(
    """\
    import torch


    def current_losses(losses):
        return {name: float(value) for name, value in losses.items()}


    w = torch.randn(8, 8)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(6):
        losses = {"a": (w @ w).sum(), "b": w.mean(), "c": w.std()}
        if step % EVERY == 0:
            logged = current_losses(losses)
        prof.step()
    prof.stop()
    """
)


@pytest.mark.parametrize(
    ("every", "title"),
    [
        (2, "Read every N steps already: read the values together, or less often"),
        # ``% 1`` lets every step through: the kind's own fix stands.
        (1, "Keep the value on the device; read it every N steps"),
    ],
)
def test_reads_every_n_steps_already_get_the_fix_of_reading_them_together(tmp_path, every, title):
    """CycleGAN's ``get_current_losses``, called every ``print_freq`` iterations, reads its 8
    losses one by one: the report said "already every N steps" and then, as its fix, "read
    it every N steps" (a walk)."""
    script = tmp_path / "w.py"
    script.write_text(_LOGGED_LOSSES)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "EVERY": every})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert site.line == 5
    assert site.advice["title"] == title


_EVERY_N_HANDLER = textwrap.dedent(
    """\
    import torch


    class Events:  # PyTorch-Ignite's, as far as the source tells
        @staticmethod
        def ITERATION_COMPLETED(every=1):
            return every


    class Engine:
        def __init__(self):
            self.handlers, self.iteration, self.output = [], 0, None

        def on(self, every):
            def attach(handler):
                self.handlers.append((every, handler))
                return handler

            return attach

        def fire(self):
            for every, handler in self.handlers:
                if self.iteration % every == 0:
                    handler(self)


    trainer = Engine()


    @trainer.on(Events.ITERATION_COMPLETED(every=2))
    def log_loss(engine):
        print(f"loss {engine.output:.3f}")


    w = torch.randn(8, 8)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(6):
        trainer.iteration, trainer.output = step, (w @ w).sum()
        trainer.fire()
        prof.step()
    prof.stop()
    """
)


def test_a_handler_run_every_n_events_is_read_every_n_steps_already(tmp_path):
    """PyTorch-Ignite's ``@trainer.on(Events.ITERATION_COMPLETED(every=N))`` runs a handler
    every N iterations: its reads were told to be made every N steps (a walk)."""
    script = tmp_path / "w.py"
    script.write_text(_EVERY_N_HANDLER)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert (site.line, site.count) == (32, 2)
    assert site.periodic_guard == "@trainer.on(Events.ITERATION_COMPLETED(every=2))"
    text = " ".join(report.to_text().split())
    assert (
        "already every N steps (under `@trainer.on(Events.ITERATION_COMPLETED(every=2))`)" in text
    )


_GETITEM_BY_COUNTER = textwrap.dedent(
    """\
    import torch


    class Scores:
        def __init__(self, t):
            self.t = t

        def __getitem__(self, i):
            return self.t[i].item()


    def summarize(scores, n):
        table = Scores(scores)
        out = []
        for i in range(n):
            out.append(table[i])
        return out


    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for it in range(5):
        summarize(torch.randn(4), 4)
        prof.step()
    prof.stop()
    """
)


def test_an_index_by_a_loop_counter_still_calls_a_getitem_at_its_line(tmp_path):
    """A loop's int counter indexes no tensor (``_loop_counters``), but ``table[i]`` of an
    object runs its ``__getitem__``: its read's caller is that line, exact (a review: it
    fell back to the function's line when the counter rule was applied there too)."""
    script = tmp_path / "w.py"
    script.write_text(_GETITEM_BY_COUNTER)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert site.line == 9
    assert [(c.line, c.line_exact, c.count) for c in site.callers] == [(16, True, 12)]


_EPOCH_SCRIPT = textwrap.dedent(
    """\
    import torch


    def train(epochs, batches):
        w = torch.randn(8, 8, device=DEVICE, requires_grad=True)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            with_stack=True,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=5, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
        ) as prof:
            for epoch in range(epochs):
                total = torch.zeros((), device=DEVICE)
                for batch in range(batches):
                    loss = (w @ w).sum()
                    total += loss.detach()
                    STEP_IN_BATCH
                print(f"epoch {epoch}: loss {total / batches:.4f}")
                STEP_IN_EPOCH


    train(EPOCHS, 3)
    """
)


def _epoch_report(tmp_path, step_in_batch: bool, epochs: int):
    script = tmp_path / "w.py"
    script.write_text(
        _EPOCH_SCRIPT.replace("STEP_IN_BATCH", "prof.step()" if step_in_batch else "pass")
        .replace("STEP_IN_EPOCH", "pass" if step_in_batch else "prof.step()")
        .replace("EPOCHS", str(epochs))
    )
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    return analyze(str(logdir), source_roots=[str(tmp_path)])


def test_an_epochs_read_after_its_loop_that_steps_the_profiler_is_already_every_n_steps(
    tmp_path,
):
    # The fix the tool gives (``total += loss.detach()``, read once an epoch) was told "Do
    # not print device tensors inside the step": the print runs once a pass of the epoch
    # loop, after the loop over batches that steps the profiler.
    report = _epoch_report(tmp_path, step_in_batch=True, epochs=3)
    (site,) = report.latent_sites
    assert (site.line, site.line_exact, site.count) == (18, True, 2)
    assert site.periodic_guard == "for epoch in range(epochs):"
    assert site.advice["title"].startswith("Read every N steps already")
    text = report.to_text()
    assert (
        "already every N steps (once a pass of `for epoch in range(epochs):`, after its loop "
        "that steps the profiler)" in " ".join(text.split())
    )


def test_an_epochs_read_is_every_step_where_the_epoch_loop_steps_the_profiler(tmp_path):
    # One profiled step an epoch: the print beside ``prof.step()`` reads in each step.
    report = _epoch_report(tmp_path, step_in_batch=False, epochs=7)
    (site,) = report.latent_sites
    assert (site.line, site.periodic_guard) == (18, None)
    assert not site.advice["title"].startswith("Read every N steps already")


@pytest.mark.parametrize(
    ("code", "profilers", "guard"),
    [
        # The profiler stepped by a hook the code does not show: the loop that runs the
        # optimizer's step is the loop of steps (lightly's examples under a driver).
        (
            "def f(epochs, data, model, optimizer):\n"
            "    for epoch in range(epochs):\n"
            "        total = 0\n"
            "        for x in data:\n"
            "            loss = model(x)\n"
            "            total += loss.detach()\n"
            "            optimizer.step()\n"
            "        print(f'{total / len(data):.5f}')\n",
            frozenset(),
            "for epoch in range(epochs):",
        ),
        # A loop of its own beside the loop of steps (a validation loop): its reads run
        # many times a pass (a review).
        (
            "def f(epochs, data, val, model, optimizer):\n"
            "    for epoch in range(epochs):\n"
            "        for x in data:\n"
            "            optimizer.step()\n"
            "        for v in val:\n"
            "            print(f'{model(v).sum():.5f}')\n",
            frozenset(),
            None,
        ),
        # A loop that runs no optimizer's step holds no steps.
        (
            "def f(epochs, layers, x):\n"
            "    for epoch in range(epochs):\n"
            "        for layer in layers:\n"
            "            x = layer(x)\n"
            "        print(f'{x.sum():.5f}')\n",
            frozenset(),
            None,
        ),
        # The profiler stepped by the epoch loop itself: a step a pass, said by no test.
        (
            "def f(epochs, data, optimizer, prof):\n"
            "    for epoch in range(epochs):\n"
            "        for x in data:\n"
            "            optimizer.step()\n"
            "        print(f'{x.sum():.5f}')\n"
            "        prof.step()\n",
            frozenset({"prof"}),
            None,
        ),
    ],
)
def test_an_epochs_read_is_every_n_steps_after_the_loop_of_steps(code, profilers, guard):
    _assert_guard_of_the_print(code, profilers, guard)


@pytest.mark.parametrize(
    ("code", "guard"),
    [
        # Gradient accumulation's test marks each training step (a torchtune walk, its
        # profiler stepped per micro-batch): no interval of reads.
        (
            "def f(data, model, optimizer, accum):\n"
            "    for i, x in enumerate(data):\n"
            "        loss = model(x)\n"
            "        if (i + 1) % accum == 0:\n"
            "            optimizer.step()\n"
            "            print(f'{loss.item():.3f}')\n",
            None,
        ),
        # One optimizer's step of two (a WGAN's generator every ``n_critic`` steps): an
        # interval of the loop's steps (a review).
        (
            "def f(data, d_opt, g_opt, n_critic):\n"
            "    for i, x in enumerate(data):\n"
            "        d_opt.step()\n"
            "        if i % n_critic == 0:\n"
            "            g_opt.step()\n"
            "            print(f'{x.sum().item():.3f}')\n",
            "i % n_critic == 0",
        ),
        # A logging test inside it still is one.
        (
            "def f(data, model, optimizer, accum, step, log_every):\n"
            "    for i, x in enumerate(data):\n"
            "        loss = model(x)\n"
            "        if (i + 1) % accum == 0:\n"
            "            optimizer.step()\n"
            "            if step % log_every == 0:\n"
            "                print(f'{loss.item():.3f}')\n",
            "step % log_every == 0",
        ),
    ],
)
def test_gradient_accumulations_test_is_no_interval_of_reads(code, guard):
    _assert_guard_of_the_print(code, frozenset(), guard)


def _assert_guard_of_the_print(code, profilers, guard):
    import ast

    from tb_syncfinder.source import periodic_guard

    scope = ast.parse(code).body[0]
    line = next(n for n, text in enumerate(code.splitlines(), 1) if "print(" in text)
    assert periodic_guard(scope, line, profilers) == guard


def test_the_guards_of_a_lambdas_or_a_comprehensions_own_line_are_read_without_statements():
    """A comprehension or lambda on one line is resolved exact with its line's facts: its
    frame's body is an expression, not statements (every GPU shape failed to analyse)."""
    import ast

    from tb_syncfinder.source import periodic_guard, setting_guard

    module = ast.parse("f = lambda x: x.item()\ng = [t.item() for t in ts]\n")
    lam = module.body[0].value
    comp = module.body[1].value
    for scope, line in ((lam, 1), (comp, 2)):
        assert periodic_guard(scope, line, frozenset()) is None
        assert periodic_guard(scope, line, frozenset({"prof"})) is None
        assert setting_guard(scope, line) is None
