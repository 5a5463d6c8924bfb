"""Decoding, fast path and every robustness fallback."""

from __future__ import annotations

import gzip
import json

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder.engine import analyze_trace
from tb_syncfinder.reader import TraceReadError, read_trace


def _trace_text() -> str:
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    return json.dumps(b.to_dict())


def test_gzip_is_detected_by_magic_bytes_not_the_name(tmp_path):
    path = tmp_path / "plain_name.json"
    path.write_bytes(gzip.compress(_trace_text().encode()))
    data = read_trace(str(path))
    assert any(e.name == "cudaStreamSynchronize" for e in data.events)
    assert data.device_properties[0]["name"].startswith("NVIDIA")
    assert data.distributed_info["rank"] == 0


def test_unquoted_na_values_are_repaired(tmp_path):
    text = _trace_text().replace('"cbid": 0', '"cbid": N/A')
    path = tmp_path / "na.pt.trace.json"
    path.write_text(text)
    data = read_trace(str(path))
    assert "quoted N/A values" in data.repairs
    assert len(analyze_trace(str(path)).syncs) == 1


def test_windows_paths_with_unescaped_backslashes_are_repaired(tmp_path):
    text = _trace_text().replace('"name": "python3.11"', '"name": "C:\\Users\\me\\train.py"')
    path = tmp_path / "win.pt.trace.json"
    path.write_text(text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    data = read_trace(str(path))
    assert any("backslash" in r for r in data.repairs)
    assert len(analyze_trace(str(path)).syncs) == 1


def test_string_timestamps_and_missing_fields_are_tolerated(tmp_path):
    doc = json.loads(_trace_text())
    for event in doc["traceEvents"]:
        if "ts" in event:
            event["ts"] = str(event["ts"])
    doc["traceEvents"].append({"ph": "X", "name": "no fields at all"})
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "bad", "ts": "N/A"})
    path = tmp_path / "strings.pt.trace.json"
    path.write_text(json.dumps(doc))
    result = analyze_trace(str(path))
    assert result.info.error is None
    assert len(result.syncs) == 1


def test_huge_record_window_end_does_not_stretch_the_trace(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    b.runtime("cudaDeviceSynchronize")  # outside the step: capped by the trace span
    path = b.write(tmp_path / "w.pt.trace.json", record_window_end=9.9e18)
    result = analyze_trace(str(path))
    assert all(s.gpu_idle_after_us < 1e6 for s in result.syncs)


def test_array_format_trace_is_accepted(tmp_path):
    events = json.loads(_trace_text())["traceEvents"]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events))
    assert len(analyze_trace(str(path)).syncs) == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b'{"schemaVersion": 1}', "no 'traceEvents'"),
        (b'{"traceEvents": [{"ph": "X", "name": "a"', "truncated JSON (still being written?)"),
        (b"this is not json", "invalid JSON"),
        (b"[1, 2", "truncated JSON"),
    ],
)
def test_unusable_files_raise_trace_read_error_naming_file_and_reason(tmp_path, content,
                                                                      reason):
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    with pytest.raises(TraceReadError) as info:
        read_trace(str(path))
    assert reason in info.value.reason
    assert str(path) in str(info.value) and info.value.path == str(path)


def test_truncated_gzip_says_still_being_written(tmp_path):
    path = tmp_path / "w.pt.trace.json.gz"
    path.write_bytes(gzip.compress(_trace_text().encode())[:200])
    with pytest.raises(TraceReadError, match="still being written"):
        read_trace(str(path))


def test_analyze_trace_returns_the_error_instead_of_raising(tmp_path):
    path = tmp_path / "bad.pt.trace.json"
    path.write_text('{"traceEvents": [')
    result = analyze_trace(str(path))
    assert result.info.error == "truncated JSON (still being written?)"
    assert result.syncs == []


def test_missing_file_is_a_read_error(tmp_path):
    with pytest.raises(TraceReadError, match="no such file"):
        read_trace(str(tmp_path / "nope.json"))


def test_metadata_and_torch1_style_categories(tmp_path):
    """torch 1.x wrote "Operator" / "Runtime" / "Memcpy" categories and lower-case keys."""
    doc = json.loads(_trace_text())
    renamed = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "gpu_memcpy": "Memcpy",
               "kernel": "Kernel"}
    for event in doc["traceEvents"]:
        if event.get("cat") in renamed:
            event["cat"] = renamed[event["cat"]]
            args = event.get("args", {})
            if "External id" in args:
                args["external id"] = args.pop("External id")
    path = tmp_path / "old.pt.trace.json"
    path.write_text(json.dumps(doc))
    (sync,) = analyze_trace(str(path)).syncs
    assert sync.op == "aten::item"
