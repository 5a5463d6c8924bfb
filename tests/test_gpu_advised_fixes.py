"""The catalogue's fixes, checked on a real H200 (docs/validation.md, section 12):
``gpu_advised_fixes/advised_fixes.*`` (``bench/record_advised_fixes.py``) calls each sync
the catalogue has an operator's fix for at its own line (``# SYNC: name``) and the fix's
code, the advice's ``after``, at the next (``# FIX: name``), profiled with stacks and under
``torch.cuda.set_sync_debug_mode("warn")``. The script beside them is the source the trace
names. No GPU is needed here; the CPU test records its own trace with torch."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from tb_syncfinder import analyze

HERE = Path(__file__).resolve().parent / "gpu_advised_fixes"
RECORDED = json.loads((HERE / "advised_fixes.json").read_text(encoding="utf-8"))
SOURCE = (HERE / "record_advised_fixes.py").read_text(encoding="utf-8").splitlines()
# Each case's fix, as the catalogue titles it.
TITLES = {
    "matrix_power": "Invert with inv_ex, then raise to a positive power",
    "repeat_interleave": "Pass output_size to repeat_interleave",
    "normal": "Sample as mean + std * noise, not torch.normal(mean, std)",
    "branch": "Do not branch on a GPU tensor",
    "mask": "Replace the boolean mask with ignore_index or torch.where",
    "nonzero": "Use torch.where (fixed shape) instead of nonzero",
    "unique": "Count into a fixed-size tensor instead of unique",
}


def _marked(marker: str) -> dict[int, str]:
    """Line -> case name of the probe's lines marked ``# SYNC: name`` or ``# FIX: name``."""
    found = {}
    for number, text in enumerate(SOURCE, 1):
        match = re.search(rf"  # {marker}: (\w+)$", text)
        if match:
            found[number] = match.group(1)
    return found


SYNC_LINES = _marked("SYNC")
FIX_LINES = _marked("FIX")


def _warned_lines() -> set[int]:
    return {int(w.split(" ", 1)[0].rsplit(":", 1)[1]) for w in RECORDED["warned"]}


def test_torch_warned_at_each_sync_and_at_none_of_the_advised_fixes() -> None:
    """The recording itself: on the H200 torch's sync detector warned at the 7 marked
    syncs (``torch.unique``'s warning names torch's own Python frame; the script takes the
    innermost frame of its own file) and at none of the fixes' 9 lines."""
    assert set(SYNC_LINES.values()) == set(TITLES) and len(FIX_LINES) == 9
    assert RECORDED["gpu"] == "NVIDIA H200"
    assert _warned_lines() == set(SYNC_LINES)


def test_each_sync_is_a_site_at_its_exact_line_with_the_fix_that_was_checked() -> None:
    """The report on the H200 trace names each of the 7 lines torch warned at, exact, with
    the catalogue's fix for it, and no line of a fix."""
    report = analyze(HERE / "advised_fixes.pt.trace.json.gz", source_roots=[str(HERE)])
    probe_sites = [s for s in report.sites if s.func == "probe"]
    sites = {s.line: s for s in probe_sites}
    assert len(probe_sites) == len(sites) and set(sites) == _warned_lines()
    for line, site in sites.items():
        assert site.line_exact
        assert site.advice["title"] == TITLES[SYNC_LINES[line]], (line, site.ops)
    assert not set(sites) & set(FIX_LINES)


def test_a_cpu_trace_of_the_probe_lists_the_same_lines_and_fixes_as_latent(
    tmp_path: Path,
) -> None:
    """On the CPU nothing waits; the same probe's trace lists as latent the lines that
    synced on the H200, with the same fixes (``inv_ex``'s CPU-only read is not one)."""
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("advised_fixes", HERE / "record_advised_fixes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["advised_fixes"] = module
    try:
        spec.loader.exec_module(module)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            module.probe(torch.device("cpu"))
    finally:
        sys.modules.pop("advised_fixes", None)
    path = tmp_path / "run" / "probe.pt.trace.json"
    path.parent.mkdir()
    prof.export_chrome_trace(str(path))
    report = analyze(path, source_roots=[str(HERE)])
    latent = sorted((s.line, s.advice["title"]) for s in report.latent_sites if s.func == "probe")
    assert latent == [(line, TITLES[SYNC_LINES[line]]) for line in sorted(_warned_lines())]
