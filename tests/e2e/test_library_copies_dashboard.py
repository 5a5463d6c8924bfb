"""A CPU-only run of a reinforcement-learning library's ``model.learn()`` in a real
TensorBoard and Chromium: the library copies the policy's actions to the host once per
environment step (Stable-Baselines3's ``actions.cpu().numpy()``). The tab's "No GPU
activity" banner counts those copies and names their line, where it said only that no
operator would synchronize."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

from tests.e2e.helpers import new_page, plugin_url, serve_tensorboard, skip_without_browser

skip_without_browser()

_LIBRARY = """\
def collect(policy, obs, n_steps):
    for _ in range(n_steps):
        actions = policy(obs).argmax(1).cpu()
    return actions
"""

_SCRIPT = textwrap.dedent(
    """\
    import sys

    import torch
    from stable_baselines3.common import rollouts

    policy = torch.nn.Linear(4, 2)
    obs = torch.randn(8, 4)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(sys.argv[1]),
    ) as prof:
        for step in range(5):
            rollouts.collect(policy, obs, 4)
            prof.step()
    """
)


def test_the_no_gpu_banner_counts_the_copies_a_library_made(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    package = tmp_path / "stable_baselines3" / "common"
    package.mkdir(parents=True)
    (tmp_path / "stable_baselines3" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "rollouts.py").write_text(_LIBRARY)
    (tmp_path / "learn.py").write_text(_SCRIPT)
    logdir = tmp_path / "logs"
    subprocess.run(
        [sys.executable, "learn.py", str(logdir / "run")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        check=True,
        capture_output=True,
    )
    with serve_tensorboard(logdir, cwd=tmp_path, expected_runs={"run"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=run"))
        page.wait_for_selector("[data-testid=no-gpu]")
        said = page.inner_text("[data-testid=no-gpu] [data-testid=library-copies]")
        assert "Copies to the host that libraries made in their own code, not listed" in said
        assert "4.0 a step at stable_baselines3/common/rollouts.py:3 (collect, .cpu())" in said
        assert "under learn.py:15" in said
    assert page_errors == []
