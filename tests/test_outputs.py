"""The output registry: every format renders a report, and the CLI and the plugin's export
give the same bytes for the same trace (one registry, no second implementation)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync
from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_syncfinder import outputs
from tb_syncfinder.cli import main
from tb_syncfinder.demo.sources import SOURCE_PACKS
from tb_syncfinder.discovery import find_traces
from tb_syncfinder.engine import Options, analyze_runs
from tb_syncfinder.plugin import SyncAdvisorPlugin
from tb_syncfinder.plugin.settings import PluginSettings

PLUGIN = "/data/plugin/sync_advisor/"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("outputs")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(
        "import torch\n\n\ndef train_step(loss):\n    loss.backward()\n    return loss.item()\n"
    )
    b = KinetoTraceBuilder()
    for n in range(1, 4):
        with b.step(n):
            item_sync(b, stack=[(str(root / "src" / "train.py"), 4, "train_step")])
            b.advance(200)
    b.write(root / "logs" / "run_a" / "worker0.pt.trace.json")
    return root


def _report_set(logdir: Path) -> outputs.ReportSet:
    options = Options(
        source_roots=(str(logdir / "src"),), source_packs=SOURCE_PACKS, contexts=False
    )
    return outputs.ReportSet.from_runs(analyze_runs(find_traces(str(logdir / "logs")), options))


@pytest.mark.parametrize("name", sorted(outputs.FORMATS))
def test_every_registered_format_renders_a_report(logdir: Path, name: str) -> None:
    output = outputs.FORMATS[name]
    body = outputs.render(name, _report_set(logdir))
    assert isinstance(body, bytes) and body
    assert output.media_type and output.extension.startswith(".")
    if name in ("json", "sarif", "trace"):
        json.loads(body)
    if name == "table":
        assert b"train.py:6" in body


def test_an_unknown_format_is_a_key_error_and_a_misfit_a_value_error(logdir: Path) -> None:
    report_set = _report_set(logdir)
    with pytest.raises(KeyError):
        outputs.render("pdf", report_set)
    two = outputs.ReportSet(
        {**report_set.report, "traces": report_set.report["traces"] * 2}, report_set.runs
    )
    with pytest.raises(ValueError, match="exactly one trace"):
        outputs.render("trace", two)


@pytest.mark.parametrize("fmt", ["json", "csv", "sarif"])
def test_the_cli_and_the_plugin_export_the_same_bytes(
    logdir: Path, fmt: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(logdir / "src")  # SARIF URIs and the CLI's source root
    out = tmp_path / f"report.{fmt}"
    assert main(["report", str(logdir / "logs"), "--format", fmt, "-o", str(out)]) == 0
    settings = PluginSettings(
        logdirs=[(None, str(logdir / "logs"))],
        source_roots=[str(logdir / "src")],
        cache_dir=None,
        reload_interval_s=3600,
        use_processes=False,
    )
    context = base_plugin.TBContext(logdir=str(logdir / "logs"), flags=argparse.Namespace())
    plugin = SyncAdvisorPlugin(context, settings, start=False)
    plugin.loader.poll()
    assert plugin.loader.wait_idle(60)
    response = Client(TensorBoardWSGI([plugin])).get(
        PLUGIN + "export", query_string={"run": "run_a", "format": fmt}
    )
    assert response.status_code == 200
    assert response.get_data() == out.read_bytes()
    assert response.mimetype == outputs.FORMATS[fmt].media_type.split(";")[0]


@pytest.mark.parametrize("indent", [None, 0, 1, 2])
def test_the_json_output_is_what_pythons_json_writes_byte_for_byte(indent) -> None:
    """The report's JSON is written by json's C encoder and indented by msgspec (json
    indents in Python, 4x slower): the bytes must stay those of ``json.dumps``, which the
    schema's readers and the byte-for-byte report checks were made on; NaN is null."""
    from tb_syncfinder.outputs.json import dumps

    value = {
        "text": 'é \u2028 \x00 " \\ / \U0001f600 ☃',
        "numbers": [0, -0.0, 1e-05, 1.5e16, 1e300, 2**70, 3000000.0, 0.1 + 0.2, True, None],
        "empty": [{}, [], {"a": {}}, [[]], ""],
        "nested": {"k": [{"x": [1, {"y": "z"}]}], "": 1},
        # A path of bytes that are not UTF-8, as Python reads it: json writes it escaped.
        "/tmp/w\udcff.pt.trace.json": ["\ud800", "\udfff x"],
    }
    assert dumps(value, indent=indent) == (json.dumps(value, indent=indent) + "\n").encode()
    with_nan = {"a": [1.0, float("nan"), {"b": float("inf")}]}
    expected = json.dumps({"a": [1.0, None, {"b": None}]}, indent=indent) + "\n"
    assert dumps(with_nan, indent=indent) == expected.encode()
