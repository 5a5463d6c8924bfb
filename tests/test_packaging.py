"""What ``pip install`` puts in place: a wheel built from this checkout holds the dashboard's
bundle, the demo and its traces, and the marker that tells type checkers the package's own
hints are to be used (PEP 561)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_the_bundle_the_demo_and_the_typed_marker(tmp_path: Path) -> None:
    source = tmp_path / "src"  # built from a copy: setuptools writes build/ where it builds
    source.mkdir()
    shutil.copy(REPO / "setup.py", source)
    shutil.copy(REPO / "README.md", source)
    shutil.copytree(
        REPO / "tb_syncfinder",
        source / "tb_syncfinder",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(tmp_path / "wheel"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("tb_syncfinder-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "tb_syncfinder/py.typed" in names
    assert "tb_syncfinder/static/index.js" in names
    assert "tb_syncfinder/demo/cnn.py" in names
    assert "tb_syncfinder/demo/traces/cnn_baseline.pt.trace.json.gz" in names
    assert "tb_syncfinder/plugin/workers.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "sync_advisor = tb_syncfinder.plugin:SyncAdvisorLoader" in text
    assert "tb-syncfinder = tb_syncfinder.cli:run" in text
