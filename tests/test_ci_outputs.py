"""What a CI job reads from ``tb-syncfinder report``: a file in the format its name says,
SARIF whose fingerprints keep an alert from one run to the next, and output on standard
output however the run ends. On the H100 pairs in ``tests/gpu_pairs`` (real traces, with the
script each ran beside them)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tb_syncfinder.cli import main

PAIRS_DIR = Path(__file__).resolve().parent / "gpu_pairs"
TRACE = PAIRS_DIR / "dynamic_shapes_baseline.pt.trace.json.gz"


def _fingerprints(sarif: dict) -> list[str]:
    return sorted(r["partialFingerprints"]["syncSite/v2"] for r in sarif["runs"][0]["results"])


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("out.sarif", lambda text: json.loads(text)["version"] == "2.1.0"),
        ("out.json", lambda text: json.loads(text)["schema"] == "tb_syncfinder.report/1"),
        ("out.csv", lambda text: next(csv.reader(text.splitlines()))[:2] == ["rank", "latent"]),
        ("out.txt", lambda text: text.startswith("Sync Advisor")),
    ],
)
def test_the_output_files_extension_picks_its_format(tmp_path, capsys, name, check):
    """-o results.sarif wrote the terminal table under that name, exit 0, and the code
    scanning upload failed on it."""
    out = tmp_path / name
    assert main(["report", str(TRACE), "-o", str(out), "--source-root", str(PAIRS_DIR)]) == 0
    assert check(out.read_text(encoding="utf-8"))
    # An explicit format still wins.
    assert main(["report", str(TRACE), "-o", str(out), "--format", "table"]) == 0
    assert out.read_text(encoding="utf-8").startswith("Sync Advisor")


def test_dash_is_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(TRACE), "-o", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "tb_syncfinder.report/1"
    assert not (tmp_path / "-").exists()


def test_a_machine_format_on_standard_output_is_written_when_no_trace_could_be_read(
    tmp_path, capsys
):
    """`report broken --json | jq` read an empty stream; -o FILE got each trace's error."""
    broken = tmp_path / "run" / "w.pt.trace.json"
    broken.parent.mkdir()
    broken.write_text("", encoding="utf-8")
    assert main(["report", str(broken.parent), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["traces"][0]["error"]


def test_sarif_fingerprints_survive_a_checkout_elsewhere_and_a_runner_without_the_source(
    tmp_path, capsys
):
    """The fingerprint was the site key, file:line:op: another runner without the source (the
    def line instead of the call's), or lines added above the call, gave every alert a new
    identity."""
    assert main(["report", str(TRACE), "--format", "sarif", "--source-root", str(PAIRS_DIR)]) == 0
    found = json.loads(capsys.readouterr().out)
    elsewhere = tmp_path / "runner"
    elsewhere.mkdir()
    shutil.copy(TRACE, elsewhere / TRACE.name)
    empty = tmp_path / "nothing"
    empty.mkdir()
    args = ["report", str(elsewhere / TRACE.name), "--format", "sarif", "--source-root", str(empty)]
    assert main(args) == 0
    unread = json.loads(capsys.readouterr().out)
    lines = {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]
        for r in found["runs"][0]["results"]
    }
    other = {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]
        for r in unread["runs"][0]["results"]
    }
    assert lines != other  # the lines differ (exact against the def line)...
    assert _fingerprints(found) == _fingerprints(unread)  # ...the alerts are the same
    assert len(set(_fingerprints(found))) == len(found["runs"][0]["results"])


def test_compare_writes_json_to_a_json_named_file(tmp_path, capsys):
    out = tmp_path / "cmp.json"
    base, fixed = TRACE, PAIRS_DIR / "dynamic_shapes_fixed.pt.trace.json.gz"
    assert main(["compare", str(base), str(fixed), "-o", str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8"))["schema"] == "tb_syncfinder.compare/1"
