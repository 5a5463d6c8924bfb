"""Copies to the host that a host call takes at once: a checkpoint's ``torch.save`` of
``net.cpu().state_dict()``, and the cost matrix scipy's ``linear_sum_assignment`` solves
(DETR's Hungarian matcher). Neither can stay on the device or be read later: their fix is
a copy made once for many, or made differently (walks of CycleGAN and DETR)."""

from __future__ import annotations

import runpy
import textwrap

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")

_PROFILED = """

prof = torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU],
    with_stack=True,
    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
    on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
)
prof.start()
for it in range(5):
    step(it)
    prof.step()
prof.stop()
"""

_MATCHER = textwrap.dedent(
    """\
    import torch


    def linear_sum_assignment(cost):  # scipy.optimize's, as far as the source tells
        return cost.argmin(0), cost.argmin(1)


    def match(outputs, targets):
        cost = torch.cdist(outputs, targets)
        cost = cost.view(2, 4, -1).cpu()
        return [linear_sum_assignment(c[i]) for i, c in enumerate(cost.split([3, 3], -1))]


    def copied(outputs):
        host = outputs.cpu()
        return host


    def step(it):
        outputs = torch.randn(8, 4)
        match(outputs, torch.randn(6, 4))
        copied(outputs)
    """
)

_CHECKPOINT = textwrap.dedent(
    """\
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    wrapped = torch.nn.DataParallel(net)


    def save(path, parallel):
        if parallel:
            torch.save(wrapped.module.cpu().state_dict(), path)
        else:
            torch.save(net.cpu().state_dict(), path)


    def step(it):
        net(torch.randn(2, 4)).sum().backward()
        save(SAVE_TO, it % 2 == 0)
    """
)


def _report(tmp_path, code: str):
    script = tmp_path / "w.py"
    script.write_text(code + _PROFILED)
    logdir = tmp_path / "logs"
    runpy.run_path(
        str(script), init_globals={"LOGDIR": str(logdir), "SAVE_TO": str(tmp_path / "c.pt")}
    )
    return analyze(str(logdir), source_roots=[str(tmp_path)])


def test_a_cost_matrix_copied_for_scipys_assignment_gets_one_copy_for_all_matchings(tmp_path):
    """A pinned buffer read later (the copy's generic fix) cannot help: the solver runs on
    the next line and the step's loss needs it. Another copy of the same tensors keeps
    the generic fix."""
    report = _report(tmp_path, _MATCHER)
    titles = {(s.func, s.line): s.advice["title"] for s in report.latent_sites}
    assert titles[("match", 10)].startswith("One copy for every matching")
    assert titles[("copied", 15)] == "Do not copy to the host inside the step"
    (sync,) = {s.source.host_use for s in report.latent if s.source.line == 10}
    assert sync == "linear_sum_assignment"


def test_a_checkpoint_saved_from_a_module_moved_to_the_host_gets_the_save_from_the_device_fix(
    tmp_path,
):
    """CycleGAN saves ``torch.save(net.module.cpu().state_dict(), path)`` or, on the CPU,
    ``torch.save(net.cpu().state_dict(), path)``: both branches are the line's candidates,
    and both give the copy to ``torch.save``."""
    report = _report(tmp_path, _CHECKPOINT)
    (site,) = report.latent_sites
    assert not site.line_exact and sorted(site.candidates) == [9, 11]
    assert site.advice["title"].startswith("Save the checkpoint from the device")
    assert "torch.save(net.state_dict(), path)" in site.advice["after"]


_MOVED_TO_SAVE = textwrap.dedent(
    """\
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))


    def step(it):
        net(torch.randn(2, 4)).sum().backward()
        if it % 2 == 0:
            net.eval().cpu()
            path = SAVE_TO
            torch.save(net.state_dict(), path)
            net.train()
    """
)


def test_a_model_moved_to_the_host_to_be_saved_lines_later_gets_the_save_fix(tmp_path):
    """pytorch/examples' fast_neural_style checkpoints with ``transformer.eval().cpu()``,
    then ``torch.save(transformer.state_dict(), path)`` two lines later: the copy got the
    generic "pinned buffer" fix, which no model being saved can take (a walk)."""
    report = _report(tmp_path, _MOVED_TO_SAVE)
    (site,) = report.latent_sites
    assert (site.line, site.line_exact) == (9, True)
    assert site.advice["title"].startswith("Save the checkpoint from the device")


@pytest.mark.parametrize(
    ("code", "line", "use"),
    [
        # Copies of what a model computed, and a tensor saved: no model moved to be saved.
        (
            "def f(self, x, path):\n    preds = [self.model(x).cpu()]\n"
            "    torch.save(self.model.state_dict(), path)\n",
            2,
            None,
        ),
        (
            "def f(model, x, path):\n    feats = model.forward(x).cpu()\n"
            "    torch.save(model.state_dict(), path)\n",
            2,
            None,
        ),
        ("def f(x, path):\n    torch.save(x.softmax(-1).cpu(), path)\n", 2, None),
        # The model moved, on the line or before its save.
        (
            "def f(net, path):\n    torch.save(net.module.cpu().state_dict(), path)\n",
            2,
            "torch.save",
        ),
        (
            "def f(net, path):\n    net.eval().cpu()\n    torch.save(net.state_dict(), path)\n",
            2,
            "torch.save",
        ),
    ],
)
def test_only_a_model_moved_to_be_saved_is_a_checkpoints_copy(code, line, use):
    """A review: ``self.model(x).cpu()`` before a ``torch.save(self.model.state_dict())``,
    and ``torch.save(t.cpu(), path)`` of a tensor, were given the checkpoint fix."""
    import ast

    from tb_syncfinder.source import host_use

    assert host_use(ast.parse(code).body[0], line) == use


_LOGGER = textwrap.dedent(
    """\
    import logging

    import torch

    logger = logging.getLogger("w")
    logger.setLevel(logging.WARNING)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def step(it):
        loss = (torch.randn(8, 8, device=device) @ torch.randn(8, 8, device=device)).sum()
        logger.info(f"step {it} loss {loss}")
        logger.debug("step %d loss %s", it, loss)
        print(f"loss {loss * 2}")
    """
)


def test_a_loggers_message_built_in_its_call_gets_the_loggers_own_arguments_fix(tmp_path):
    """A walk: ``logger.info(f"... {loss}")`` read the tensor each step while INFO was off,
    and was told to print a number every N steps; the logger's ``%s`` argument (the next
    line) reads nothing then. A ``print`` keeps the print fix."""
    report = _report(tmp_path, _LOGGER)
    titles = {s.line: s.advice["title"] for s in report.latent_sites}
    assert set(titles) == {11, 13}  # the logger's own argument is never formatted
    assert titles[11].startswith("Give the tensor to the logger as an argument")
    assert titles[13] == "Do not print device tensors inside the step"
    assert {s.source.host_use for s in report.latent if s.source.line == 11} == {"logging"}


@pytest.mark.parametrize(
    ("call", "logging_"),
    [
        ('logger.info(f"loss {loss}")', True),
        ('self.logger.warning("loss {}".format(loss))', True),
        ('log.debug("loss %s" % loss)', True),
        ('logging.log(logging.INFO, f"loss {loss}")', True),
        ('logger.info("loss %s", loss)', False),  # formatted only when shown
        ('logger.info(f"done")', False),  # nothing formatted
        ('wandb.log({"loss": loss})', False),  # no logger's message
        ('print(f"loss {loss}")', False),
    ],
)
def test_a_loggers_message_is_one_formatted_in_its_call(call, logging_):
    import ast

    from tb_syncfinder.source import host_use

    scope = ast.parse(f"def f(self, loss):\n    {call}\n").body[0]
    assert host_use(scope, 2) == ("logging" if logging_ else None)
