"""Bad or odd input never raises, never hides other traces, and always says why.

A seeded, bounded fuzz over trace mutations (truncation, wrong types, missing keys, odd
containers, bad bytes) checks the project rule end to end through ``analyze_trace`` and
``analyze``; the rest pins the source resolver, the exporters and compare on odd inputs.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import math
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import analyze
from tb_syncfinder.engine import analyze_trace

FUZZ_CASES = 200
FUZZ_SEED = 20240611


def _cuda_trace() -> dict[str, Any]:
    b = KinetoTraceBuilder()
    for step in (1, 2):
        with b.step(step):
            b.kernel(dur=200)
            item_sync(b)
            with b.op("aten::nonzero", stack=[("model.py", 3, "forward")], called="nonzero"):
                b.runtime("cudaMemcpyAsync", dur=4, memcpy=("DtoH", "Pageable"), bytes=8)
                b.runtime("cudaStreamSynchronize")
    return b.to_dict()


@pytest.fixture(scope="module")
def base_traces(tmp_path_factory) -> list[dict[str, Any]]:
    """A CUDA trace from the builder and a tiny real-torch CPU trace."""
    from cpu_workload import WORKLOAD, profile_workload

    root = tmp_path_factory.mktemp("cpu_trace")
    trace_path = root / "run" / "w.pt.trace.json"
    profile_workload(WORKLOAD, root / "src" / "workload.py", trace_path)
    return [_cuda_trace(), json.loads(trace_path.read_text())]


_ODD_VALUES: list[Any] = [
    None,
    "12.5",
    "N/A",
    "",
    [],
    [1, 2],
    {},
    {"a": 1},
    float("nan"),
    float("inf"),
    -float("inf"),
    "NaN",
    "-Infinity",
    "1e400",
    1e308,
    -1e308,
    10**30,
    -(10**30),
    -5,
    -1.5,
    0,
    True,
    "\u00e9\u2603",
]
_FIELDS = ["ts", "dur", "ph", "name", "cat", "pid", "tid", "args", "id"]
_ARG_KEYS = [
    "External id",
    "correlation",
    "Python id",
    "Python parent id",
    "bytes",
    "device",
    "stream",
    "Call stack",
    "cuda_sync_kind",
    "name",
    "labels",
    "Concrete Inputs",
    "wait_on_stream",
]


def _events(doc: Any) -> list[Any]:
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _mutate_doc(rng: random.Random, doc: dict[str, Any]) -> Any:
    """One structural mutation of a decoded trace (the result is encoded as JSON)."""
    doc = copy.deepcopy(doc)
    events = doc["traceEvents"]
    kind = rng.randrange(12)
    picked = [rng.randrange(len(events)) for _ in range(rng.randint(1, 8))]
    if kind == 0:  # drop random keys
        for i in picked:
            if isinstance(events[i], dict) and events[i]:
                events[i].pop(rng.choice(list(events[i])), None)
    elif kind == 1:  # wrong types / odd numbers in event fields
        for i in picked:
            events[i][rng.choice(_FIELDS)] = rng.choice(_ODD_VALUES)
    elif kind == 2:  # wrong types in args
        for i in picked:
            args = events[i].setdefault("args", {})
            if isinstance(args, dict):
                args[rng.choice(_ARG_KEYS)] = rng.choice(_ODD_VALUES)
    elif kind == 3:  # negative durations
        for i in picked:
            events[i]["dur"] = -abs(float(events[i].get("dur", 1) or 1)) * rng.choice([1, 1e9])
    elif kind == 4:  # duplicated events
        for i in picked:
            events.insert(rng.randrange(len(events) + 1), copy.deepcopy(events[i]))
    elif kind == 5:  # unbalanced nesting: a child outlives its parent, parents shrink
        for i in picked:
            if "dur" in events[i] and isinstance(events[i]["dur"], (int, float)):
                events[i]["dur"] = events[i]["dur"] * rng.choice([0, 0.3, 7, 1000])
                events[i]["ts"] = events[i]["ts"] + rng.choice([-50, 3, 40])
    elif kind == 6:  # many events at the same ts
        same = events[picked[0]].get("ts", 0)
        for i in picked:
            events[i]["ts"] = same
    elif kind == 7:  # missing or odd traceEvents
        choice = rng.randrange(4)
        if choice == 0:
            del doc["traceEvents"]
        else:
            doc["traceEvents"] = [None, "x", {"a": 1}][choice - 1]
    elif kind == 8:  # a bare list (Chrome trace array format)
        return events
    elif kind == 9:  # odd top-level values
        doc[
            rng.choice(
                [
                    "deviceProperties",
                    "distributedInfo",
                    "schemaVersion",
                    "traceName",
                    "torch_version",
                    "cuda_runtime_version",
                ]
            )
        ] = rng.choice(_ODD_VALUES)
    elif kind == 10:  # non-dict events mixed in
        for i in picked:
            events[i] = rng.choice([None, 3, "event", [1, 2], True])
    else:  # everything shuffled
        rng.shuffle(events)
    return doc


def _encode(doc: Any) -> bytes:
    # allow_nan: Python writes NaN / Infinity literals, as some tools do.
    return json.dumps(doc).encode()


def _mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    kind = rng.randrange(6)
    if kind == 0:
        return data[: rng.randrange(len(data))], "truncated"
    if kind == 1:
        return gzip.compress(data)[: rng.randrange(10, 200)], "truncated gzip"
    if kind == 2:
        return b"\x1f\x8b" + bytes(rng.randrange(256) for _ in range(64)), "gzip garbage"
    if kind == 3:
        at = rng.randrange(len(data))
        return data[:at] + b"\xff\xfe\xc3(" + data[at:], "non-UTF-8 bytes"
    if kind == 4:
        return gzip.compress(data) + b"garbage after the stream", "gzip trailing garbage"
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))), "random bytes"


def _fuzz_cases(base: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    cases: list[tuple[str, bytes]] = []
    for n in range(FUZZ_CASES):
        # One generator per case: a case stays the same when another one changes.
        rng = random.Random(FUZZ_SEED * 1000 + n)
        doc = base[n % len(base)]
        if rng.random() < 0.7:
            cases.append((f"case{n}-doc", _encode(_mutate_doc(rng, doc))))
        else:
            data, what = _mutate_bytes(rng, _encode(doc))
            cases.append((f"case{n}-{what}", data))
    return cases


def _assert_human_error(error: str) -> None:
    assert "\n" not in error, error
    assert not error.startswith("analysis failed"), error  # a stage crashed on the input
    assert "internal error" not in error, error  # the reader crashed on the input
    for internal in ("Traceback", "object at 0x", "<class", "Error(", "$.", "(b'", "Error -"):
        assert internal not in error, error


def _assert_finite_json(value: Any) -> None:
    # NaN / inf in a report would be invalid JSON for the dashboard and a wrong answer.
    json.dumps(value, allow_nan=False)


@pytest.mark.parametrize("chunk", [None, 97], ids=["default_chunks", "small_chunks"])
def test_mutated_traces_never_raise_and_failures_say_why_in_one_line(
    tmp_path, base_traces, monkeypatch, chunk
):
    from tb_syncfinder import engine, reader
    from tb_syncfinder.aggregate import build_report

    if chunk is not None:  # every boundary of the chunked decode, on every mutation
        monkeypatch.setattr(
            engine, "read_trace", functools.partial(reader.read_trace, chunk_bytes=chunk)
        )

    failures: list[str] = []
    for name, data in _fuzz_cases(base_traces):
        path = tmp_path / f"{name.replace(' ', '_')}.pt.trace.json"
        path.write_bytes(data)
        try:
            result = analyze_trace(str(path))
            assert result.info.path == str(path)
            if result.info.error is not None:
                _assert_human_error(result.info.error)
            else:
                _assert_finite_json(build_report([result]).to_json())
                _assert_finite_json(result.contexts)
        except Exception as exc:  # noqa: BLE001 - collect every failing case, then report
            failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
    assert not failures, "\n".join(failures)


def test_a_folder_mixing_good_and_broken_traces_reports_the_good_ones_fully(tmp_path, base_traces):
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    good = _encode(base_traces[0])
    (run / "good.pt.trace.json").write_bytes(good)
    (run / "truncated.pt.trace.json").write_bytes(good[: len(good) // 2])
    (run / "garbage.pt.trace.json.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    (run / "latin1.pt.trace.json").write_bytes(b'{"traceEvents": [{"name": "\xe9"}]')
    (run / "no_events.pt.trace.json").write_text('{"schemaVersion": 1}')
    (run / "array.pt.trace.json").write_text(json.dumps(base_traces[0]["traceEvents"]))
    alone = analyze_trace(str(run / "good.pt.trace.json"))
    report = analyze(tmp_path / "logdir")
    by_name = {Path(t.path).name: t for t in report.traces}
    assert set(by_name) == {p.name for p in run.iterdir()}
    for broken in (
        "truncated.pt.trace.json",
        "garbage.pt.trace.json.gz",
        "latin1.pt.trace.json",
        "no_events.pt.trace.json",
    ):
        assert by_name[broken].error, broken
        _assert_human_error(by_name[broken].error)
    assert by_name["good.pt.trace.json"].error is None
    assert by_name["array.pt.trace.json"].error is None
    good_syncs = [s for s in report.syncs if Path(s.trace).name == "good.pt.trace.json"]
    assert len(good_syncs) == len(alone.syncs) == 4
    assert report.summary.error_count == 4


def test_negative_huge_and_nan_string_durations_give_no_negative_or_nan_costs(
    tmp_path, base_traces
):
    doc = copy.deepcopy(base_traces[0])
    syncs = [e for e in doc["traceEvents"] if e.get("name") == "cudaStreamSynchronize"]
    for event, odd in zip(syncs, [-500, 1e300, "NaN", "-Infinity"], strict=False):
        event["dur"] = odd
    path = tmp_path / "odd_durations.pt.trace.json"
    path.write_bytes(_encode(doc))
    result = analyze_trace(str(path))
    assert result.info.error is None
    assert result.syncs  # the memcpy calls of the episodes still block
    for sync in result.syncs:
        assert 0 <= sync.host_wait_us < 1e6, sync
    for step in result.steps:
        assert 0 <= step.host_wait_us <= step.step_time_us


def test_nan_and_infinite_times_do_not_reach_the_report(tmp_path, base_traces):
    doc = copy.deepcopy(base_traces[0])
    for event in doc["traceEvents"][::7]:
        if "dur" in event:
            event["dur"] = float("nan")
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::add",
            "ts": float("inf"),
            "dur": 1,
            "pid": 1,
            "tid": 1,
        }
    )
    path = tmp_path / "nan.pt.trace.json"
    path.write_bytes(_encode(doc))
    result = analyze_trace(str(path))
    assert result.info.error is None
    assert all(math.isfinite(s.host_wait_us) for s in result.syncs)
    _assert_finite_json(result.contexts)


# -- source resolution on odd files ------------------------------------------------------


def _source_stack(file: str) -> list[Any]:
    from tb_syncfinder.models import Frame

    # Line 1 is a def line in the good file; "item" is what the frame called.
    return [Frame("<built-in>", None, "item", False), Frame(file, 1, "train_step", True)]


GOOD_SOURCE = "def train_step(x):\n    return x.item()\n"


def _assert_recorded_line_fallback(source: Any) -> None:
    """The recorded line, inexact; not called a def line (the stack does not show the frame
    entered while profiling ran)."""
    assert source is not None
    assert (source.line, source.def_line, source.line_exact) == (1, None, False)


@pytest.mark.parametrize("kind", ["latin1", "syntax_error", "huge", "null_bytes", "deep"])
def test_odd_source_files_fall_back_to_the_recorded_line(tmp_path, kind):
    from tb_syncfinder import source as source_module
    from tb_syncfinder.source import SourceResolver

    path = tmp_path / "work.py"
    if kind == "latin1":
        path.write_bytes(GOOD_SOURCE.encode() + b'name = "caf\xe9"\n')
    elif kind == "syntax_error":
        path.write_text(GOOD_SOURCE + "def broken(:\n")
    elif kind == "huge":
        path.write_text(GOOD_SOURCE + "#" * (source_module._MAX_SOURCE_BYTES + 10))
    elif kind == "null_bytes":
        path.write_bytes(GOOD_SOURCE.encode() + b"\x00\x00")
    else:  # nested past the parser's limits
        path.write_text(GOOD_SOURCE + "y = " + "(" * 5000 + ")" * 5000 + "\n")
    resolver = SourceResolver([str(tmp_path)])
    _assert_recorded_line_fallback(resolver.resolve(_source_stack("work.py"), ["item"]))


def test_the_good_source_file_does_resolve_exactly(tmp_path):
    from tb_syncfinder.source import SourceResolver

    (tmp_path / "work.py").write_text(GOOD_SOURCE)
    source = SourceResolver([str(tmp_path)]).resolve(_source_stack("work.py"), ["item"])
    assert (source.line, source.line_exact) == (2, True)


def test_a_directory_named_like_a_source_file_is_not_read(tmp_path):
    from tb_syncfinder.source import SourceResolver

    (tmp_path / "pkg" / "work.py").mkdir(parents=True)
    resolver = SourceResolver([str(tmp_path)])
    for name in ("work.py", "pkg/work.py", str(tmp_path / "pkg" / "work.py")):
        source = resolver.resolve(_source_stack(name), ["item"])
        _assert_recorded_line_fallback(source)
        assert source.resolved_path is None


def test_symlink_loops_as_files_and_as_roots_are_not_followed(tmp_path):
    from tb_syncfinder.source import SourceResolver

    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling.py").symlink_to(tmp_path / "missing.py")
    resolver = SourceResolver([str(tmp_path), str(tmp_path / "loop")])
    for name in ("a.py", "dir/a.py", "dangling.py", "loop/x.py"):
        source = resolver.resolve(_source_stack(name), ["item"])
        _assert_recorded_line_fallback(source)
        assert source.resolved_path is None


def test_an_unreadable_source_file_falls_back_to_the_recorded_line(tmp_path, monkeypatch):
    import os

    from tb_syncfinder.source import SourceResolver

    path = tmp_path / "work.py"
    path.write_text(GOOD_SOURCE)
    path.chmod(0)
    if os.geteuid() == 0:  # root reads anything: make the read fail as it would for a user
        real_read = Path.read_bytes

        def denied(self: Path) -> bytes:
            if self == path:
                raise PermissionError(13, "Permission denied", str(self))
            return real_read(self)

        monkeypatch.setattr(Path, "read_bytes", denied)
    try:
        source = SourceResolver([str(tmp_path)]).resolve(_source_stack("work.py"), ["item"])
    finally:
        path.chmod(0o644)
    _assert_recorded_line_fallback(source)


# -- exporters on odd reports ---------------------------------------------------------

ODD_NAME = 'op, "quoted"\nnext line <b>&amp;</b> \u00e9'


def _odd_report_json() -> dict[str, Any]:
    none_site = {
        "key": None,
        "file": None,
        "line": None,
        "func": None,
        "kind": None,
        "ops": None,
        "count": None,
        "per_step": None,
        "host_wait_us": None,
        "gpu_idle_us": None,
        "share_of_step": None,
        "advice": None,
        "mean_host_wait_us": None,
        "line_exact": None,
        "def_line": None,
        "apis": None,
        "steps": None,
    }
    odd_site = dict(
        none_site,
        key=ODD_NAME,
        file="C:\\Users\\me\\my proj\\tr,ain.py",
        line=3,
        func=ODD_NAME,
        kind="scalar_readback",
        ops=[ODD_NAME, None],
        apis=[ODD_NAME, None],
        steps=[1, None],
        count=2,
        host_wait_us=5.0,
        advice={"title": ODD_NAME, "text": None},
    )
    files = [
        "../../outside.py",
        "/abs/with space/#hash?.py",
        "\\\\server\\share\\x.py",
        "./rel/./a.py",
        "dir/../b.py",
    ]
    sites = [none_site, odd_site] + [dict(odd_site, file=f, key=f) for f in files]
    return {"sites": sites, "latent_sites": [dict(none_site, latent=True)], "syncs": []}


def test_csv_of_a_report_with_none_fields_and_odd_names_round_trips():
    import csv
    import io

    from tb_syncfinder.outputs.csv import CSV_COLUMNS, to_csv

    rows = list(csv.reader(io.StringIO(to_csv(_odd_report_json()))))
    assert rows[0] == list(CSV_COLUMNS)
    assert len(rows) == 1 + 8
    assert all(len(row) == len(CSV_COLUMNS) for row in rows)
    odd = next(row for row in rows if row[CSV_COLUMNS.index("func")] == ODD_NAME)
    assert ODD_NAME in odd[CSV_COLUMNS.index("ops")]


def test_sarif_of_odd_sites_is_valid_json_with_relative_forward_slash_uris(tmp_path):
    from tb_syncfinder.outputs.sarif import to_sarif

    sarif = json.loads(
        json.dumps(to_sarif(_odd_report_json(), root=str(tmp_path)), allow_nan=False)
    )
    uris = [
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in sarif["runs"][0]["results"]
    ]
    assert len(uris) == 6  # every site with a file and a line
    for uri in uris:
        assert uri and "\\" not in uri and not uri.startswith("/"), uri
        assert ":" not in uri.split("/")[0], uri  # no drive letter or scheme
        assert ".." not in uri.split("/") and "." not in uri.split("/"), uri
        assert not any(ch in uri for ch in ' #?,"\n'), uri


def test_annotate_trace_with_odd_sync_fields_writes_valid_json(tmp_path, base_traces):
    from tb_syncfinder.outputs.annotated_trace import annotate_trace

    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(_encode(base_traces[0]))
    syncs = [
        {
            "kind": None,
            "op": ODD_NAME,
            "api": None,
            "ts_us": None,
            "end_us": None,
            "host_wait_us": None,
            "gpu_idle_after_us": None,
            "stack": [None, {"user": True}],
            "source": None,
            "site_key": None,
        },
        {
            "kind": "scalar_readback",
            "op": None,
            "api": ODD_NAME,
            "ts_us": 10.0,
            "end_us": 20.0,
            "host_wait_us": 10.0,
            "gpu_idle_after_us": 5.0,
            "source": {"file": ODD_NAME, "line": None},
            "site_key": "k",
        },
    ]
    annotated = json.loads(annotate_trace(str(path), syncs, [{"key": "k", "advice": None}]))
    added = [e for e in annotated["traceEvents"] if e.get("cat") == "sync_advisor"]
    assert len(added) == 3
    assert all(e["dur"] >= 0 for e in added)


@pytest.mark.parametrize("damage", ["invalid_utf8", "gzip_trailing_garbage"])
def test_annotate_trace_reads_what_the_analysis_reads(tmp_path, base_traces, damage):
    from tb_syncfinder.outputs.annotated_trace import annotate_trace

    data = _encode(base_traces[0])
    path = tmp_path / "w.pt.trace.json"
    if damage == "invalid_utf8":
        data = data.replace(b'"name": "aten::item"', b'"name": "aten::item\xe9"', 1)
    else:
        data = gzip.compress(data) + b"trailing garbage"
    path.write_bytes(data)
    result = analyze_trace(str(path))
    assert result.info.error is None and result.syncs
    syncs = msgspec.to_builtins(result.syncs)
    annotated = json.loads(annotate_trace(str(path), syncs))
    assert sum(e.get("cat") == "sync_advisor" for e in annotated["traceEvents"]) >= 2


# -- compare on odd reports -----------------------------------------------------------


def _cpu_and_gpu_reports(
    tmp_path: Path, base_traces: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    gpu = tmp_path / "gpu.pt.trace.json"
    gpu.write_bytes(_encode(base_traces[0]))
    cpu = tmp_path / "cpu.pt.trace.json"
    cpu.write_bytes(_encode(base_traces[1]))
    return analyze(gpu).to_json(), analyze(cpu).to_json()


def test_compare_a_gpu_run_with_a_cpu_only_run_does_not_call_every_site_fixed(
    tmp_path, base_traces
):
    from tb_syncfinder.compare import compare

    gpu, cpu = _cpu_and_gpu_reports(tmp_path, base_traces)
    assert gpu["sites"] and not cpu["sites"] and cpu["latent_sites"]
    for base, new in ((gpu, cpu), (cpu, gpu)):
        result = compare(base, new)
        json.dumps(result, allow_nan=False)
        assert result["note"] and "CPU-only" in result["note"]
        assert result["latent_sites"] == []
        statuses = {row["status"] for row in result["sites"]}
        assert statuses <= {"new", "fixed", "same", "better", "worse"}
        # Two different programs: nothing matches, but each side's sites are all there.
        assert len(result["sites"]) == len(gpu["sites"]) + len(cpu["latent_sites"])
    same = compare(gpu, gpu)
    assert same["note"] is None and {r["status"] for r in same["sites"]} == {"same"}


def test_compare_reports_with_zero_steps_and_no_sites(tmp_path, base_traces):
    from tb_syncfinder.compare import compare

    gpu, _ = _cpu_and_gpu_reports(tmp_path, base_traces)
    empty = {
        "summary": {"step_count": 0, "mean_step_time_us": 0.0},
        "sites": [],
        "latent_sites": [],
        "traces": [],
    }
    bare: dict[str, Any] = {}
    for base, new in ((empty, gpu), (gpu, empty), (empty, empty), (bare, bare), (bare, gpu)):
        result = compare(base, new)
        json.dumps(result, allow_nan=False)
        assert result["step_time_change_us"] is None or math.isfinite(result["step_time_change_us"])
    assert {r["status"] for r in compare(empty, gpu)["sites"]} == {"new"}
    assert {r["status"] for r in compare(gpu, empty)["sites"]} == {"fixed"}
    zero_steps = dict(gpu, summary=dict(gpu["summary"], step_count=0))
    assert {r["status"] for r in compare(zero_steps, zero_steps)["sites"]} == {"same"}


def test_repairs_made_while_reading_are_reported_on_the_trace(tmp_path):
    from tb_syncfinder.engine import analyze_trace

    trace = tmp_path / "win.pt.trace.json"
    trace.write_text(
        '{"traceEvents": [{"ph": "X", "name": "aten::add", "cat": "cpu_op", '
        '"pid": 1, "tid": 1, "ts": 1, "dur": 2, '
        '"args": {"file": "C:\\Users\\me\\train.py", "Stream": N/A}}]}'
    )
    result = analyze_trace(str(trace))
    assert result.info.error is None
    assert "escaped backslashes in Windows paths" in result.info.repairs
    assert "quoted N/A values" in result.info.repairs


def test_an_empty_trace_is_said_empty_not_cpu_only(tmp_path, capsys):
    """An empty event list (a torch_npu trace_view.json of `[]`, a Kineto file written
    before any step) was "CPU-only trace: nothing ran on a GPU", with a summary of zeros."""
    from tb_syncfinder.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "w.pt.trace.json").write_text('{"traceEvents": []}')
    assert main(["report", str(run)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "1 trace (empty 1)" in text and "Empty trace: no event of the program was recorded" in text
    )
    assert "CPU-only" not in text and "Summary" not in text
    # As Kineto writes a file stopped before any step: metadata, its own span, instants.
    kineto = {
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
            {
                "ph": "X",
                "cat": "Trace",
                "name": "PyTorch Profiler (0)",
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "ts": 1000.0,
                "dur": 5.0,
            },
            {
                "ph": "i",
                "s": "t",
                "name": "Iteration Start: PyTorch Profiler",
                "pid": "Traces",
                "tid": "PyTorch Profiler",
                "ts": 1000.0,
            },
        ],
    }
    (run / "w.pt.trace.json").write_text(json.dumps(kineto))
    assert main(["report", str(run)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Empty trace: no event of the program was recorded" in text and "CPU-only" not in text
