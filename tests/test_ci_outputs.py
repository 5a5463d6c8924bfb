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


def test_sarif_fingerprints_survive_a_checkout_elsewhere_and_lines_added_above(tmp_path, capsys):
    """The fingerprint was the site key, file:line:op: a checkout at another path with lines
    added above the calls gave every alert a new identity."""
    assert main(["report", str(TRACE), "--format", "sarif", "--source-root", str(PAIRS_DIR)]) == 0
    here = json.loads(capsys.readouterr().out)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(TRACE, checkout / TRACE.name)
    shutil.copy(PAIRS_DIR / "savings_workloads.py", checkout / "savings_workloads.py")
    args = ["report", str(checkout / TRACE.name), "--format", "sarif"]
    assert main([*args, "--source-root", str(checkout)]) == 0
    there = json.loads(capsys.readouterr().out)
    assert _fingerprints(here) == _fingerprints(there)
    assert len(set(_fingerprints(here))) == len(here["runs"][0]["results"])
    # A later recording of the code with lines added above the calls: the same identities.
    from tb_syncfinder.outputs.sarif import _fingerprints as fingerprints_of

    before, after = tmp_path / "before.py", tmp_path / "after.py"
    body = "def f(x):\n    a = x.cpu()\n    b = x.tolist()\n"
    before.write_text(body, encoding="utf-8")
    after.write_text("import os\n\n\n" + body, encoding="utf-8")

    def site(line: int, key: str) -> dict:
        return {"key": key, "file": "m.py", "line": line, "line_exact": True, "func": "f"} | {
            "ops": ["aten::to"],
            "kind": "device_to_host_copy",
        }

    old_sites = [(site(2, "m.py:2:aten::to"), False), (site(3, "m.py:3:aten::to"), False)]
    new_sites = [(site(5, "m.py:5:aten::to"), False), (site(6, "m.py:6:aten::to"), False)]
    old_ids = fingerprints_of(
        old_sites, {"m.py:2:aten::to": str(before), "m.py:3:aten::to": str(before)}
    )
    new_ids = fingerprints_of(
        new_sites, {"m.py:5:aten::to": str(after), "m.py:6:aten::to": str(after)}
    )
    assert [old_ids[id(s)] for s, _ in old_sites] == [new_ids[id(s)] for s, _ in new_sites]


def test_a_fixed_site_leaves_the_other_sites_of_its_function_their_identity(capsys):
    """readback_metrics: a .cpu() (199) and a .tolist() (204) of one function, one operator
    and kind. Numbered by line, fixing the .cpu() made the .tolist() alert #1, the .cpu()'s:
    code scanning closed the .tolist() alert and moved the .cpu()'s. Their lines' text
    tells them apart."""
    logs = {}
    for name in ("readback_metrics_baseline", "readback_metrics_fix_cpu"):
        trace = PAIRS_DIR / f"{name}.pt.trace.json.gz"
        assert (
            main(["report", str(trace), "--format", "sarif", "--source-root", str(PAIRS_DIR)]) == 0
        )
        log = json.loads(capsys.readouterr().out)
        logs[name] = {
            r["locations"][0]["physicalLocation"]["region"]["startLine"]: r["partialFingerprints"][
                "syncSite/v2"
            ]
            for r in log["runs"][0]["results"]
        }
    assert set(logs["readback_metrics_baseline"]) == {199, 204}
    assert logs["readback_metrics_fix_cpu"] == {204: logs["readback_metrics_baseline"][204]}


def test_compare_writes_json_to_a_json_named_file(tmp_path, capsys):
    out = tmp_path / "cmp.json"
    base, fixed = TRACE, PAIRS_DIR / "dynamic_shapes_fixed.pt.trace.json.gz"
    assert main(["compare", str(base), str(fixed), "-o", str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8"))["schema"] == "tb_syncfinder.compare/1"


def test_output_names_that_fit_no_format_of_the_command_are_refused(tmp_path, capsys):
    """An annotated trace named by -o for two traces ended in a traceback (exit 1); compare
    -o c.sarif wrote the text table; .sarif.json is a SARIF log's usual name."""
    two = tmp_path / "two"
    two.mkdir()
    for name in ("copy_and_item_baseline", "copy_and_item_fixed"):
        shutil.copy(PAIRS_DIR / f"{name}.pt.trace.json.gz", two / f"{name}.pt.trace.json.gz")
    out = tmp_path / "x.sync_advisor.pt.trace.json"
    assert main(["report", str(two), "-o", str(out)]) == 2
    assert "the annotated trace needs exactly one trace" in capsys.readouterr().err
    fixed = PAIRS_DIR / "dynamic_shapes_fixed.pt.trace.json.gz"
    for name in ("c.sarif", "c.csv"):
        assert main(["compare", str(TRACE), str(fixed), "-o", str(tmp_path / name)]) == 2
        assert "compare writes JSON" in capsys.readouterr().err
        assert not (tmp_path / name).exists()
    sarif = tmp_path / "results.sarif.json"
    assert main(["report", str(TRACE), "-o", str(sarif)]) == 0
    assert json.loads(sarif.read_text(encoding="utf-8"))["version"] == "2.1.0"


def test_paths_may_come_after_options(tmp_path, capsys):
    """`report a.gz --json b.gz` (a flag appended after a glob in a CI step) was refused
    with "unrecognized arguments: b.gz"; compare's two sides may sit around its options."""
    fixed = PAIRS_DIR / "dynamic_shapes_fixed.pt.trace.json.gz"
    assert main(["report", str(TRACE), "--json", str(fixed)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(Path(t["path"]).name for t in report["traces"]) == sorted(
        [TRACE.name, fixed.name]
    )
    assert main(["compare", str(TRACE), "--json", str(fixed)]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "tb_syncfinder.compare/1"
    # A missing path is still a usage error, and an unknown option still refused.
    assert main(["report", "--json"]) == 2
    assert "required: PATH" in capsys.readouterr().err
    assert main(["report", str(TRACE), "--no-such-option"]) == 2
    # After "--" every word is a path, even one that starts with "-".
    dashed = tmp_path / "-x.pt.trace.json"
    shutil.copy(TRACE, dashed)
    capsys.readouterr()
    assert main(["report", "--json", "--", str(dashed)]) == 0
    assert json.loads(capsys.readouterr().out)["traces"][0]["path"] == str(dashed)


def test_an_output_name_no_format_has_says_the_table_was_written(tmp_path, capsys):
    """`-o report.md` wrote the terminal table without a word: a user expecting Markdown
    learned it from the file."""
    out = tmp_path / "report.md"
    assert main(["report", str(TRACE), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "no format is named by .md" in err and "table, json, csv, sarif" in err
    assert out.read_text(encoding="utf-8").startswith("Sync Advisor")
    for quiet in (["-o", str(tmp_path / "report.txt")], ["-o", str(out), "--format", "table"]):
        assert main(["report", str(TRACE), *quiet]) == 0
        assert "no format is named" not in capsys.readouterr().err
