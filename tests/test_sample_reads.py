"""A sampled value read every step (pytorch/examples' actor_critic and reinforce return
``m.sample().item()`` to the environment each step): the host needs it at once, and the
advice to keep it on the device and read it every N steps could not apply (a user's walk:
20 % of actor_critic's reads, 33 % of reinforce's)."""

from __future__ import annotations

import ast
import runpy
import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.catalogue import (
    DEVICE_TO_HOST_COPY,
    SAMPLE_READ_ADVICE,
    SCALAR_READBACK,
    advice_for,
)
from tb_syncfinder.source import reads_sample

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("code", "line", "sampled"),
    [
        ("def f(m):\n    action = m.sample()\n    return action.item()\n", 3, True),
        ("def f(p):\n    return torch.multinomial(p, 1).squeeze(0).item()\n", 2, True),
        ("def f(p):\n    return p.multinomial(1).item()\n", 2, True),
        # A greedy pick (DQN's action, greedy decoding's token) is needed at once too (the
        # RL walk's leftover: it kept the advice to read every N steps).
        ("def f(q):\n    return q.argmax().item()\n", 2, True),
        ("def f(logits):\n    return logits[:, -1].argmax(-1).item()\n", 2, True),
        # An accuracy over argmax picks, a loss, or a name of other values too: not one.
        ("def f(out, y):\n    return (out.argmax(1) == y).sum().item()\n", 2, False),
        ("def f(loss):\n    return loss.item()\n", 2, False),
        ("def f(m, t):\n    a = m.sample()\n    a = t\n    return a.item()\n", 4, False),
        ("def f(m, t):\n    return m.sample().item() + t.item()\n", 2, False),
        # A copy of a sampled action for the environment (CleanRL's ``envs.step(action.cpu()
        # .numpy())``), and one of the logits: only the first.
        (
            "def f(m, envs):\n    action = m.sample()\n    envs.step(action.cpu().numpy())\n",
            3,
            True,
        ),
        ("def f(m):\n    return m.sample().tolist()\n", 2, True),
        # A batch's greedy picks read with one ``.tolist()`` (Captum's targets): many at once
        # already.
        ("def f(net, x):\n    target = net(x).argmax(1).tolist()\n", 2, False),
        # ... but given to an environment's step, they are actions (a review: a DQN on vector
        # environments), and so is a greedy pick's copy.
        (
            "def f(q, envs):\n    actions = q.argmax(dim=1).tolist()\n"
            "    obs, r, d, i = envs.step(actions)\n",
            2,
            True,
        ),
        ("def f(q, envs):\n    envs.step(q.argmax(1).cpu().numpy())\n", 2, True),
        ("def f(q, opt):\n    a = q.argmax(1).tolist()\n    opt.step(a)\n", 2, False),
        ("def f(logits):\n    return logits.cpu().numpy()\n", 2, False),
        # An evaluation's greedy picks copied (a review): not needed at once.
        ("def f(out, preds):\n    preds.append(out.argmax(1).cpu())\n", 2, False),
    ],
)
def test_a_read_of_a_sampled_value_is_told(code, line, sampled):
    assert reads_sample(ast.parse(code).body[0], line) is sampled


def test_the_advice_for_a_sampled_read_is_to_sample_for_many_at_once():
    advice = advice_for(SCALAR_READBACK, ["aten::item"], sampled=True)
    assert advice["title"] == SAMPLE_READ_ADVICE.title
    assert advice_for(SCALAR_READBACK, ["aten::item"])["title"] != advice["title"]
    # A copy of one is needed at once too: a pinned buffer read later does not help (the
    # copy's own fix, a CleanRL walk: 64 of 223 reads a step).
    copy = advice_for(DEVICE_TO_HOST_COPY, ["aten::to", "aten::_to_copy"], sampled=True)
    assert copy["title"] == SAMPLE_READ_ADVICE.title
    for code in (SAMPLE_READ_ADVICE.before, SAMPLE_READ_ADVICE.after):
        ast.parse(code)


_SCRIPT = textwrap.dedent(
    """\
    import torch
    from torch.distributions import Categorical

    policy = torch.nn.Linear(4, 2)


    def select_action(state):
        probs = torch.softmax(policy(state), -1)
        m = Categorical(probs, validate_args=False)
        action = m.sample()
        return action.item()


    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for episode in range(5):
        state = torch.randn(4, device="cpu")
        for t in range(3):
            action = select_action(state)
        prof.step()
    prof.stop()
    """
)


def test_an_action_sampled_for_the_environment_is_told_to_sample_for_many(tmp_path: Path):
    script = tmp_path / "w.py"
    script.write_text(_SCRIPT)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    [site] = [s for s in report.latent_sites if s.line == 11]
    assert (site.count, site.advice["title"]) == (9, SAMPLE_READ_ADVICE.title)
