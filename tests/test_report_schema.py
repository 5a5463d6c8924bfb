"""The field names of ``tb_syncfinder.report/1`` that issue 2 promises: the schema may grow,
but none of these may be renamed or dropped (the plugin, the dashboard, the CLI's --json and
other people's tools read them).

Each check is a subset check on a report analysed end to end, so an added field passes and a
renamed or dropped one fails naming what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import analyze, models

TRACE_FIELDS = {"path", "worker", "span", "device", "steps", "error"}
SUMMARY_FIELDS = {"sync_count", "host_wait_us", "gpu_idle_us", "step_time_us"}
SYNC_FIELDS = {
    "kind",
    "api",
    "apis",
    "op",
    "trigger_op",
    "step",
    "thread",
    "ts_us",
    "host_wait_us",
    "gpu_idle_after_us",
    "annotations",
    "module",
    "stack",
    "source",
    "trace",
}
FRAME_FIELDS = {"file", "line", "func", "user"}
SOURCE_FIELDS = {"file", "line", "def_line", "func", "line_exact"}
SITE_FIELDS = {
    "file",
    "line",
    "func",
    "kind",
    "ops",
    "count",
    "per_step",
    "host_wait_us",
    "gpu_idle_us",
    "share_of_step",
    "advice",
}
TOP_LEVEL_FIELDS = {"schema", "traces", "summary", "syncs", "sites", "latent"}


def _missing(expected: set[str], record: dict[str, Any]) -> set[str]:
    return expected - set(record)


def _gpu_and_cpu_run(tmp_path: Path) -> Path:
    """A run with one CUDA trace (real syncs, with a stack whose source is readable) and
    one CPU-only trace (latent findings)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "import torch\n\n\ndef train_step(loss):\n    x = 1\n    return loss.item()\n"
    )
    gpu = KinetoTraceBuilder()
    for n in range(2):
        with gpu.step(n):
            item_sync(gpu, stack=[("train.py", 4, "train_step")], kernel_us=200)
    gpu.write(tmp_path / "run" / "worker0.1700000000000.pt.trace.json")
    cpu = KinetoTraceBuilder(gpu=False)
    with cpu.step(1), cpu.op("aten::nonzero", stack=[("train.py", 4, "train_step")]):
        pass
    cpu.write(tmp_path / "run" / "worker1.1700000000001.pt.trace.json")
    return tmp_path / "run"


def test_report_json_keeps_every_field_name_of_issue_2(tmp_path: Path) -> None:
    run = _gpu_and_cpu_run(tmp_path)
    doc = analyze(run, source_roots=[str(tmp_path / "src")]).to_json()

    assert doc["schema"] == models.SCHEMA == "tb_syncfinder.report/1"
    assert _missing(TOP_LEVEL_FIELDS, doc) == set()
    assert len(doc["traces"]) == 2
    for trace in doc["traces"]:
        assert _missing(TRACE_FIELDS, trace) == set()
    assert _missing(SUMMARY_FIELDS, doc["summary"]) == set()

    assert doc["syncs"] and doc["latent"]
    for sync in doc["syncs"] + doc["latent"]:
        assert _missing(SYNC_FIELDS, sync) == set()
        assert sync["stack"], "the fixture records a with_stack stack for every sync"
        for frame in sync["stack"]:
            assert _missing(FRAME_FIELDS, frame) == set()
        assert sync["source"] is not None
        assert _missing(SOURCE_FIELDS, sync["source"]) == set()

    assert doc["sites"]
    for site in doc["sites"]:
        assert _missing(SITE_FIELDS, site) == set()


# Extensions (docs/DESIGN.md): the profiler's own overhead per trace and in the summary, and
# "fix together" per site. Present on every record, null / empty where they do not apply.
TRACE_PROFILER_FIELDS = {
    "host_events_per_step",
    "profiler_overhead_per_step_us",
    "device_busy_per_step_us",
}
SUMMARY_PROFILER_FIELDS = TRACE_PROFILER_FIELDS | {"profiler_note"}
SITE_FIX_TOGETHER_FIELDS = {
    "predicted_saving_with_others_us",
    "predicted_saving_with_others_per_step_us",
    "fix_with",
    "fix_with_saving_us",
    "fix_with_saving_per_step_us",
    "fix_with_note",
}


def test_the_profiler_and_fix_together_extensions_are_in_every_record(tmp_path: Path) -> None:
    run = _gpu_and_cpu_run(tmp_path)
    doc = analyze(run, source_roots=[str(tmp_path / "src")]).to_json()
    for trace in doc["traces"]:
        assert _missing(TRACE_PROFILER_FIELDS, trace) == set()
        assert trace["host_events_per_step"] > 0
    gpu, cpu = sorted(doc["traces"], key=lambda t: not t["has_gpu_activity"])
    assert gpu["device_busy_per_step_us"] > 0
    assert cpu["device_busy_per_step_us"] is None
    assert _missing(SUMMARY_PROFILER_FIELDS, doc["summary"]) == set()
    for site in doc["sites"] + doc["latent_sites"]:
        assert _missing(SITE_FIX_TOGETHER_FIELDS, site) == set()
    (site,) = doc["sites"]
    # One site: fixed with the others, it saves what it saves alone.
    assert site["predicted_saving_with_others_us"] == pytest.approx(site["predicted_saving_us"])
    assert site["fix_with"] == [] and site["fix_with_note"] is None
    for site in doc["latent_sites"]:
        assert site["predicted_saving_with_others_us"] is None and site["fix_with"] == []


def test_saving_note_keeps_its_meaning_beside_the_profilers_note(tmp_path: Path) -> None:
    """``saving_note`` says why the saving is a bound or partial: the profiler's note is a
    field of its own and is not appended to it."""
    b = KinetoTraceBuilder()
    for n in range(1, 5):
        with b.step(n), b.frame(("train.py", 20, "main")):
            for _ in range(150):  # many host events: the profiler's note
                with b.frame(("model.py", 5, "forward")), b.op("aten::add"):
                    b.kernel(dur=1.0)
            item_sync(b, stack=[("train.py", 8, "train_step")], kernel_us=100)
    doc = analyze(b.write(tmp_path / "run" / "w.pt.trace.json")).to_json()
    summary = doc["summary"]
    assert summary["saving_method"] == "replay"
    assert summary["profiler_note"].startswith("The profiler's own overhead is about ")
    assert summary["saving_note"] is None
    assert all(t["saving_note"] is None for t in doc["traces"])


def test_a_sync_without_a_stack_has_source_null_not_a_missing_key(tmp_path: Path) -> None:
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=100)
        b.runtime("cudaDeviceSynchronize")
    b.write(tmp_path / "w0.pt.trace.json")
    (sync,) = analyze(tmp_path / "w0.pt.trace.json").to_json()["syncs"]
    assert "source" in sync and sync["source"] is None
    assert sync["stack"] == []


def test_to_json_leaves_the_garbage_collector_as_it_found_it(sample_report) -> None:
    """to_json pauses the cyclic GC while it builds its dicts (their collections were 4/5
    of its time at 20,000 syncs) and must give it back as it was, on or off."""
    import gc

    assert gc.isenabled()
    first = sample_report.to_json()
    assert gc.isenabled()
    gc.disable()
    try:
        assert sample_report.to_json() == first
        assert not gc.isenabled()
    finally:
        gc.enable()
