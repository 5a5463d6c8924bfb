"""A fix that turns a function's many reads into one read of another operator (the advised
``y.tolist()`` in place of ``[itos[int(i)] for i in y]``): compare listed the new copy as a
new site beside the fixed reads, and ``--fail-on-regression`` failed the very fix the report
had advised (minGPT's chargpt: 103 reads a step became 0.6)."""

from __future__ import annotations

import copy
import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from tb_syncfinder.cli import main
from tb_syncfinder.compare import compare
from tb_syncfinder.models import Report
from tests.test_callers import _COMPREHENSION_SCRIPT

_READ_EACH = '        completion = "".join([itos[int(i)] for i in y])\n'
_READ_ONCE = '        completion = "".join([itos[i] for i in y.tolist()])\n'


def _replaced(report: dict[str, Any], kind: str, ops: list[str], **changes: Any) -> None:
    """The report's scalar_readback site replaced by one of ``kind`` in its function."""
    old = next(s for s in report["sites"] if s["kind"] == "scalar_readback")
    new = copy.deepcopy(old)
    new.update(kind=kind, ops=ops, key=f"{old['key']}:{kind}", **changes)
    report["sites"] = [s for s in report["sites"] if s is not old] + [new]


def _row(result: dict[str, Any], status: str) -> dict[str, Any]:
    return next(s for s in result["sites"] if s["status"] == status)


def test_a_cheaper_read_in_place_of_a_functions_fixed_reads_replaces_them(
    sample_report: Report,
) -> None:
    base = sample_report.to_json()
    new = copy.deepcopy(base)
    # 8 reads (2 a step) costing 4 ms become 4 copies (1 a step) costing 2 ms.
    _replaced(new, "device_to_host_copy", ["aten::to"], count=4, host_wait_us=1500.0)
    result = compare(base, new)
    fixed, added = _row(result, "fixed"), _row(result, "new")
    assert added["replaces"] == [fixed["key"]]
    assert fixed["replaces"] == []
    assert "not a regression" in result["replacement_note"]


@pytest.mark.parametrize(
    "changes",
    [
        {"count": 16},  # more syncs a step than were fixed
        {"count": 4, "host_wait_us": 9000.0},  # fewer, but dearer than what was freed
        {"count": 4, "host_wait_us": 1500.0, "func": "evaluate"},  # another function's
        {"count": 4, "host_wait_us": 1500.0, "file": "/home/me/proj/other.py"},
    ],
)
def test_a_new_site_that_adds_syncs_or_cost_or_is_elsewhere_stays_a_regression(
    sample_report: Report, changes: dict[str, Any]
) -> None:
    base = sample_report.to_json()
    new = copy.deepcopy(base)
    _replaced(new, "device_to_host_copy", ["aten::to"], **changes)
    result = compare(base, new)
    assert _row(result, "new")["replaces"] == []
    assert result["replacement_note"] is None


def _record(tmp_path: Path, name: str, script_text: str) -> Path:
    script = tmp_path / name / "w.py"
    script.parent.mkdir()
    script.write_text(script_text)
    logdir = tmp_path / name / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    return logdir


def test_the_advised_tolist_fix_passes_the_regression_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("torch")
    assert _READ_EACH in _COMPREHENSION_SCRIPT
    base = _record(tmp_path, "base", _COMPREHENSION_SCRIPT)
    fixed = _record(tmp_path, "fixed", _COMPREHENSION_SCRIPT.replace(_READ_EACH, _READ_ONCE))
    capsys.readouterr()
    assert main(["compare", str(base), str(fixed), "--fail-on-regression", "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)["latent_sites"]
    gone = [r for r in rows if r["status"] == "fixed"]
    added = [r for r in rows if r["status"] == "new"]
    assert [r["kind"] for r in gone] == ["scalar_readback"]
    assert [r["kind"] for r in added] == ["device_to_host_copy"]
    assert added[0]["replaces"] == [gone[0]["key"]]
    assert "1 new site in place of syncs fixed in the same function" in captured.err
    # The table says where: the comprehension's line, which the copy took the place of.
    assert main(["compare", str(base), str(fixed)]) == 0
    assert f"in place of the syncs at line {gone[0]['before']['lines'][0]}" in (
        capsys.readouterr().out
    )
    # Read the other way round (the fix undone), the reads are a regression.
    assert main(["compare", str(fixed), str(base), "--fail-on-regression"]) == 1
    assert "new (latent): " in capsys.readouterr().err
