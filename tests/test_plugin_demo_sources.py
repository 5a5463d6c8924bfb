"""The demo workloads' source lines resolve in the dashboard for every user: a plain
``tensorboard --logdir syncfinder-demo-logs`` started from any folder, without
``--sync_advisor_*`` flags, serves ``tb_syncfinder/demo/*.py`` (the name torch records for an
installed package's files) and nothing else beyond the usual roots."""

from __future__ import annotations

import argparse
import ast
import json
import os
from pathlib import Path
from typing import Any

import pytest
from kineto_builder import KinetoTraceBuilder
from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_syncfinder.demo.sources import DEMO_DIR as DEMO_SOURCE_DIR
from tb_syncfinder.plugin import SyncAdvisorPlugin
from tb_syncfinder.plugin.settings import settings_from_flags

PLUGIN = "/data/plugin/sync_advisor/"
DEMO_DIR = Path(DEMO_SOURCE_DIR)
RECORDED_SEG = "tb_syncfinder/demo/seg.py"  # as torch names site-packages/tb_syncfinder/...


def nonzero_call_in_seg() -> tuple[str, int, int]:
    """(function, def line, call line) of the demo's ``torch.nonzero`` call in seg.py, read
    from the source (its ``# sync: nonzero`` marker), not hard-coded."""
    text = (DEMO_DIR / "seg.py").read_text(encoding="utf-8")
    call_line = next(n for n, line in enumerate(text.splitlines(), 1) if "# sync: nonzero" in line)
    func = next(
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef)
        and node.lineno <= call_line <= (node.end_lineno or node.lineno)
    )
    return func.name, func.lineno, call_line


@pytest.fixture()
def plain_tensorboard_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Client:
    """The plugin as ``tensorboard --logdir logs`` builds it, run from a folder that is
    neither the checkout nor site-packages, on a GPU trace whose frames name the demo's
    seg.py the way torch records an installed file."""
    func, def_line, _ = nonzero_call_in_seg()
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with b.op("aten::nonzero", stack=[(RECORDED_SEG, def_line, func)], called="nonzero"):
            b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=8)
            b.runtime("cudaStreamSynchronize")
    b.write(tmp_path / "logs" / "seg_baseline" / "w0.pt.trace.json")
    user_dir = tmp_path / "somewhere_else"
    user_dir.mkdir()
    monkeypatch.chdir(user_dir)
    flags = argparse.Namespace(
        logdir=str(tmp_path / "logs"), sync_advisor_cache_dir="none"
    )  # no --sync_advisor_source_root
    settings = settings_from_flags(flags, flags.logdir)
    settings.use_processes = False
    context = base_plugin.TBContext(logdir=flags.logdir, flags=flags)
    plugin = SyncAdvisorPlugin(context, settings, start=False)
    plugin.loader.poll()
    assert plugin.loader.wait_idle(60)
    return Client(TensorBoardWSGI([plugin]))


def get(client: Client, route: str, **params: Any) -> tuple[int, dict]:
    response = client.get(PLUGIN + route, query_string=params)
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    return response.status_code, json.loads(response.get_data())


def test_demo_sites_resolve_to_the_exact_line_without_flags_from_a_foreign_cwd(
    plain_tensorboard_plugin: Client,
) -> None:
    _, _, call_line = nonzero_call_in_seg()
    status, sites = get(plain_tensorboard_plugin, "sites", run="seg_baseline")
    assert status == 200 and sites["total"] == 1
    site = sites["items"][0]
    assert (site["file"], site["line"], site["line_exact"]) == (RECORDED_SEG, call_line, True)
    status, syncs = get(plain_tensorboard_plugin, "syncs", run="seg_baseline")
    resolved = syncs["items"][0]["source"]["resolved_path"]
    assert Path(resolved).resolve() == (DEMO_DIR / "seg.py").resolve()


def test_source_endpoint_serves_the_recorded_demo_name_without_flags(
    plain_tensorboard_plugin: Client,
) -> None:
    _, _, call_line = nonzero_call_in_seg()
    status, body = get(
        plain_tensorboard_plugin, "source", file=RECORDED_SEG, line=call_line, context=0
    )
    assert status == 200, body
    assert body["line"] == call_line and "torch.nonzero" in body["lines"][0]
    assert Path(body["path"]) == (DEMO_DIR / "seg.py").resolve()
    # The absolute installed path is served too (a root), as in localized bundled traces.
    status, _ = get(plain_tensorboard_plugin, "source", file=str(DEMO_DIR / "cnn.py"), line=1)
    assert status == 200


def test_the_builtin_demo_root_widens_nothing_else(
    plain_tensorboard_plugin: Client, tmp_path: Path
) -> None:
    client = plain_tensorboard_plugin
    # The map cannot climb out of the demo folder into the rest of the package...
    escaped = "tb_syncfinder/demo/../plugin/plugin.py"
    assert get(client, "source", file=escaped, line=1)[0] == 403
    assert (
        get(client, "source", file=str(DEMO_DIR.parent / "plugin" / "plugin.py"), line=1)[0] == 403
    )
    # ...the bundled-traces folder or anything that is not .py is never served...
    assert get(client, "source", file="tb_syncfinder/demo/traces/versions.json", line=1)[0] == 403
    # ...and a .py file outside the roots stays refused.
    outside = tmp_path / "secret.py"
    outside.write_text("TOKEN = 'x'\n")
    assert get(client, "source", file=str(outside), line=1)[0] == 403
    assert os.getcwd() == str(tmp_path / "somewhere_else")
