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
SUMMARY_PROFILER_FIELDS = TRACE_PROFILER_FIELDS | {
    "profiler_note",
    "busiest_worker_device_busy_per_step_us",
}
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


# The job object (issue 17) as the JSON, the plugin's ``job`` route and the dashboard read
# it, every nested name: it is built from the job stage's records (``jobs._job_json``), so a
# rename there would rename a field of the report. "[]" is any element of a list.
JOB_FIELD_PATHS = {
    "backend",
    "clocks",
    "clocks[].method",
    "clocks[].name",
    "clocks[].offset_us",
    "clocks[].ranks",
    "clocks[].residual_max_us",
    "clocks[].residual_us",
    "clocks[].samples",
    "collective_count",
    "complete",
    "groups",
    "groups[].counts",
    "groups[].group",
    "groups[].matched",
    "groups[].members",
    "groups[].present",
    "groups[].reason",
    "groups[].status",
    "issues",
    "issues[].code",
    "issues[].group",
    "issues[].message",
    "issues[].paths",
    "issues[].ranks",
    "issues[].severity",
    "job_saving_per_step_us",
    "job_saving_us",
    "key",
    "late_arrivals",
    "late_arrivals[].bound",
    "late_arrivals[].carried_in",
    "late_arrivals[].contributors",
    "late_arrivals[].contributors[].earlier_us",
    "late_arrivals[].contributors[].site_key",
    "late_arrivals[].contributors[].wait_id",
    "late_arrivals[].explained_us",
    "late_arrivals[].group",
    "late_arrivals[].k",
    "late_arrivals[].label",
    "late_arrivals[].lateness_us",
    "late_arrivals[].rank",
    "late_arrivals[].step",
    "late_arrivals[].unexplained_us",
    "late_collective_count",
    "lateness",
    "lateness.carried_in_us",
    "lateness.explained_us",
    "lateness.late_us",
    "lateness.not_explained_us",
    "missing_ranks",
    "noise_us",
    "other_jobs",
    "rank_steps",
    "rank_steps[].absent_wait_us",
    "rank_steps[].blocking_wait_us",
    "rank_steps[].carried_in_us",
    "rank_steps[].caused_wait_us",
    "rank_steps[].collectives",
    "rank_steps[].late_us",
    "rank_steps[].rank",
    "rank_steps[].step",
    "rank_steps[].step_time_us",
    "rank_steps[].sync_wait_us",
    "rank_steps[].wait_us",
    "rank_totals",
    "rank_totals[].blocking_wait_us",
    "rank_totals[].carried_in_us",
    "rank_totals[].caused_wait_us",
    "rank_totals[].collectives",
    "rank_totals[].host",
    "rank_totals[].late_us",
    "rank_totals[].path",
    "rank_totals[].peer_wait_in_syncs_us",
    "rank_totals[].rank",
    "rank_totals[].steps",
    "rank_totals[].sync_wait_us",
    "rank_totals[].wait_in_collectives_us",
    "rank_totals[].worker",
    "ranks",
    "site_count",
    "sites",
    "sites[].bound",
    "sites[].caused_wait_us",
    "sites[].file",
    "sites[].func",
    "sites[].is_sync",
    "sites[].job_saving_per_step_us",
    "sites[].job_saving_us",
    "sites[].kind",
    "sites[].late_collectives",
    "sites[].line",
    "sites[].line_exact",
    "sites[].op",
    "sites[].rank",
    "sites[].site_key",
    "sites[].steps",
    "sites[].wait_ids",
    "step_time_us",
    "steps",
    "steps[].late_rank",
    "steps[].late_rank_caused_wait_us",
    "steps[].ranks",
    "steps[].slowest_rank",
    "steps[].step",
    "steps[].time_us",
    "what_if",
    "world_size",
}


def _key_paths(value: Any, prefix: str = "") -> set[str]:
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}.{key}" if prefix else key
            found.add(path)
            found |= _key_paths(inner, path)
    elif isinstance(value, list):
        for inner in value:
            found |= _key_paths(inner, prefix + "[]")
    return found


def test_the_job_object_keeps_every_nested_field_name(capsys: pytest.CaptureFixture) -> None:
    """A real two-rank job recorded on an H100 (``tests/gpu_job``): every field the job
    object has had is still there, at the same place."""
    import json

    from tb_syncfinder.cli import main

    job_dir = Path(__file__).resolve().parent / "gpu_job" / "baseline"
    assert main(["report", str(job_dir), "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["job"]
    missing = JOB_FIELD_PATHS - _key_paths(job)
    assert not missing, f"job fields renamed or dropped: {sorted(missing)}"


def _whole_numbers(value: Any, path: str = "") -> list[str]:
    """The paths of times (``*_us``) and shares written as JSON integers."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _whole_numbers(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for inner in value:
            found += _whole_numbers(inner, path + "[]")
    elif type(value) is int and (path.endswith("_us") or path.endswith("share_of_step")):
        found.append(path)
    return found


def test_times_are_written_as_floats_even_when_there_is_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A typed reader (a Go or Rust struct, a JSON schema of "number" written as float)
    sees ``0`` where a run has no sync: the sums of nothing were integers (a trace without
    syncs, a CPU-only trace, a job with no late rank)."""
    import json

    from tb_syncfinder.cli import main

    here = Path(__file__).resolve().parent
    inputs = [
        here.parent / "tb_syncfinder" / "demo" / "traces" / "cnn_optimized.pt.trace.json.gz",
        _gpu_and_cpu_run(tmp_path),
        here / "gpu_job" / "baseline",
    ]
    # A logdir with a run whose only trace cannot be read (its summary sums nothing).
    mixed = tmp_path / "mixed"
    (mixed / "good").mkdir(parents=True)
    (mixed / "good" / "w.pt.trace.json.gz").write_bytes(inputs[0].read_bytes())
    (mixed / "bad").mkdir()
    (mixed / "bad" / "w.pt.trace.json").write_text("xx")
    inputs.append(mixed)
    for path in inputs:
        assert main(["report", str(path), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert _whole_numbers(report) == [], path
    # Nothing readable: the -o file still written (exit 2) holds floats too.
    out = tmp_path / "nothing.json"
    assert main(["report", str(mixed / "bad"), "--json", "-o", str(out)]) == 2
    capsys.readouterr()
    assert _whole_numbers(json.loads(out.read_text())) == []


# Every key path of the CLI's JSON on the inputs below, as of 2026-11-28 (regenerate with
# ``python tests/test_report_schema.py``, which only ever adds paths: a path that goes away
# is a field renamed or dropped, or an input that no longer has such a record).
KEY_PATHS_FILE = Path(__file__).resolve().parent / "report_key_paths.txt"
# Objects whose keys are data (kind names, ranks), not fields.
_DATA_KEYED = ("by_kind", "counts", "steps_by_worker")


def _report_key_paths(value: Any, prefix: str = "$") -> set[str]:
    found: set[str] = set()
    if isinstance(value, dict):
        data_keyed = prefix.rsplit(".", 1)[-1] in _DATA_KEYED
        for key, inner in value.items():
            path = f"{prefix}.{{}}" if data_keyed else f"{prefix}.{key}"
            found.add(path)
            found |= _report_key_paths(inner, path)
    elif isinstance(value, list):
        for inner in value:
            found |= _report_key_paths(inner, prefix + "[]")
    return found


def _cli_key_paths(tmp_path: Path) -> set[str]:
    """The key paths of ``report --format json`` on: a built run of a CUDA and a CPU-only
    trace (syncs with a readable source, latent findings), the bundled demo's four H100
    runs as one logdir, a real two-rank job (``tests/gpu_job``), and a demo trace with the
    step time measured without the profiler."""
    import contextlib
    import io
    import json

    from tb_syncfinder.cli import main

    repo = Path(__file__).resolve().parent.parent
    demo = repo / "tb_syncfinder" / "demo" / "traces"
    inputs = [
        [str(_gpu_and_cpu_run(tmp_path)), "--source-root", str(tmp_path / "src")],
        [str(demo)],
        [str(repo / "tests" / "gpu_job" / "baseline")],
        [str(demo / "cnn_baseline.pt.trace.json.gz"), "--unprofiled-step-ms", "14.5"],
    ]
    paths: set[str] = set()
    for args in inputs:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["report", *args, "--format", "json"]) == 0, args
        paths |= _report_key_paths(json.loads(out.getvalue()))
    return paths


def test_no_key_path_of_the_cli_json_is_ever_renamed_or_dropped(tmp_path: Path) -> None:
    """The whole report, every extension included, not only issue 2's names: each key path
    the CLI's JSON had on these inputs (lists as ``[]``) is still there."""
    recorded = set(KEY_PATHS_FILE.read_text(encoding="utf-8").split())
    missing = recorded - _cli_key_paths(tmp_path)
    assert not missing, (
        "key paths of the report JSON renamed or dropped (or no input has such a record any "
        f"more: add one that has): {sorted(missing)}"
    )


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        known = set(KEY_PATHS_FILE.read_text(encoding="utf-8").split())
        known |= _cli_key_paths(Path(folder))
    KEY_PATHS_FILE.write_text("".join(f"{p}\n" for p in sorted(known)), encoding="utf-8")
    print(f"{KEY_PATHS_FILE}: {len(known)} key paths")
