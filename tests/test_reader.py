"""Decoding, fast path and every robustness fallback."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import SHARED_DIR
from kineto_builder import KinetoTraceBuilder, item_sync
from trace_shapes import SHAPES, resnet_like, shape

from tb_syncfinder.engine import Options, analyze_trace
from tb_syncfinder.reader import CHUNK_BYTES, Event, TraceReadError, events_by_kind, read_trace


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


def test_an_event_without_a_start_is_skipped_and_said_so_not_placed_at_time_zero(tmp_path):
    """A review: complete events without ``ts`` were read as starting at 0 and nothing
    said so; placed there they stretch the trace back to the epoch."""
    doc = json.loads(_trace_text())
    start = min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X")
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "no start", "dur": 5})
    doc["traceEvents"].append({"ph": "s", "cat": "ac2g", "id": 1, "pid": 1, "tid": 1})
    path = tmp_path / "no_ts.pt.trace.json"
    path.write_text(json.dumps(doc))
    data = read_trace(str(path))
    assert "skipped 2 events without a start time (ts)" in data.repairs
    assert all(e.name != "no start" for e in data.events)
    assert min(e.ts for e in data.events if type(e) is Event) == start
    result = analyze_trace(str(path))
    assert result.info.error is None and len(result.syncs) == 1
    assert "skipped 2 events without a start time (ts)" in result.info.repairs


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
def test_unusable_files_raise_trace_read_error_naming_file_and_reason(tmp_path, content, reason):
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


def test_a_trace_cut_short_long_ago_is_not_asked_if_it_is_still_being_written(tmp_path):
    """A newcomer's copy cut in half two hours before was still asked "still being
    written?" at every read; its age answers that. A fresh one is still asked."""
    import os
    import time

    fresh = tmp_path / "fresh.pt.trace.json.gz"
    fresh.write_bytes(gzip.compress(_trace_text().encode())[:200])
    old = tmp_path / "old.pt.trace.json"
    old.write_text('{"traceEvents": [')
    two_hours_ago = time.time() - 2 * 3600
    os.utime(old, (two_hours_ago, two_hours_ago))
    assert analyze_trace(str(fresh)).info.error == "truncated gzip data (still being written?)"
    since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(two_hours_ago))
    for window_bytes in (0, 8):
        assert analyze_trace(str(old), Options(window_bytes=window_bytes)).info.error == (
            f"truncated JSON (unchanged since {since}: cut short, not being written)"
        )


def test_a_large_trace_cut_short_is_refused_from_its_end_without_reading_it(tmp_path):
    """A trace still being written (or cut) failed only once all of it was read: 12 s for
    750 MB, again at each of TensorBoard's retries. A large plain JSON file whose last
    bytes are not a JSON document's end is refused from them; a complete one is read."""
    from tb_syncfinder import reader

    event = b'{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.0}'
    count = 2 * reader._TAIL_CHECK_BYTES // len(event)
    whole = b'{"traceEvents": [' + b", ".join([event] * count) + b"]}\n"
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    with pytest.raises(TraceReadError) as info:
        read_trace(str(path))
    assert info.value.reason == (
        "truncated JSON (still being written?): it does not end with the closing bracket of "
        "its JSON"
    )
    path.write_bytes(whole)
    assert len(read_trace(str(path)).events) == count


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
    renamed = {
        "cpu_op": "Operator",
        "cuda_runtime": "Runtime",
        "gpu_memcpy": "Memcpy",
        "kernel": "Kernel",
    }
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


@pytest.mark.parametrize("step_cat", ["Operator", "cpu_op", "some_new_category"])
def test_a_profiler_step_span_of_any_category_is_a_step_and_no_operator(tmp_path, step_cat):
    """torch 1.x wrote ProfilerStep#N as an operator: it is still the step (and an
    annotation, never the outermost operator of the syncs in it)."""
    b = KinetoTraceBuilder()
    for n in (3, 4):
        with b.step(n):
            item_sync(b)
    doc = b.to_dict()
    spans = [e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert len(spans) == 2
    for event in spans:
        event["cat"] = step_cat
    path = tmp_path / "steps.pt.trace.json"
    path.write_text(json.dumps(doc))
    result = analyze_trace(str(path))
    assert [(s.op, s.step) for s in result.syncs] == [("aten::item", 3), ("aten::item", 4)]
    assert [s.op_chain[0] for s in result.syncs] == ["aten::item", "aten::item"]
    assert [step.step for step in result.steps] == [3, 4]


def test_the_events_of_one_category_share_one_string(tmp_path):
    """Categories are a dozen values among 10^5 events: one object each, not one per event."""
    b = KinetoTraceBuilder()
    for n in range(3):
        with b.step(n):
            item_sync(b)
    path = tmp_path / "cats.pt.trace.json"
    path.write_text(json.dumps(b.to_dict()))
    events = [e for e in read_trace(str(path), chunk_bytes=SMALL_CHUNK).events if type(e) is Event]
    by_category: dict[str, set[int]] = {}
    for e in events:
        by_category.setdefault(e.cat, set()).add(id(e.cat))
    assert {"cpu_op", "cuda_runtime", "kernel"} <= set(by_category)
    assert all(len(ids) == 1 for ids in by_category.values()), by_category


# -- fast path on every trace shape, and chunked decoding ---------------------------------

SMALL_CHUNK = 300  # a chunk every few events: every boundary case is met on small traces


def _write_doc(tmp_path: Path, name: str, doc: Any, gz: bool = False) -> Path:
    path = tmp_path / (f"{name}.pt.trace.json" + (".gz" if gz else ""))
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _events_json(data: Any) -> bytes:
    return msgspec.json.encode(data.events)


@pytest.mark.parametrize("chunk", [CHUNK_BYTES, SMALL_CHUNK], ids=["one_chunk", "small_chunks"])
@pytest.mark.parametrize("name", SHAPES)
def test_every_trace_shape_decodes_on_the_fast_path(tmp_path, name, chunk):
    data = read_trace(str(_write_doc(tmp_path, name, shape(name))), chunk_bytes=chunk)
    assert data.slow_chunks == 0 and data.fast_path, name
    assert data.repairs == []
    assert data.chunks > (1 if chunk == SMALL_CHUNK else 0)


@pytest.mark.parametrize("folder", ["real", "h100_demo"])
def test_shared_traces_decode_on_the_fast_path(folder):
    traces = sorted((SHARED_DIR / "traces" / folder).glob("*.pt.trace.json*"))
    if not traces:
        pytest.skip(f"no shared traces in {SHARED_DIR / 'traces' / folder}")
    for path in traces:
        data = read_trace(str(path))
        assert data.fast_path and data.repairs == [], path.name


@pytest.mark.parametrize("chunk", [64, SMALL_CHUNK, 4096])
def test_the_decoded_trace_does_not_depend_on_the_chunk_size(tmp_path, chunk):
    doc = resnet_like(2, blocks=2)
    doc["traceEvents"] += shape("cuda_sync_events")["traceEvents"]
    for gz in (False, True):
        path = _write_doc(tmp_path, f"resnet{gz}", doc, gz=gz)
        whole, chunked = read_trace(str(path)), read_trace(str(path), chunk_bytes=chunk)
        assert whole.chunks == 1 and chunked.chunks > 10
        assert _events_json(chunked) == _events_json(whole)
        assert (chunked.device_properties, chunked.distributed_info, chunked.byte_size) == (
            whole.device_properties,
            whole.distributed_info,
            whole.byte_size,
        )


def _ids_by_kind(by_kind: Any) -> tuple[Any, ...]:
    return (
        [(cat, [id(e) for e in events]) for cat, events in by_kind.by_category.items()],
        [id(e) for e in by_kind.metadata],
        [id(e) for e in by_kind.flow_starts],
    )


@pytest.mark.parametrize("chunk", [64, SMALL_CHUNK, CHUNK_BYTES])
@pytest.mark.parametrize("form", ["object", "array", "repaired"])
def test_the_events_come_sorted_by_kind_as_the_timeline_sorts_them(tmp_path, chunk, form):
    """The reader sorts events by kind as it keeps them (the timeline's input): the same
    lists, in the same order, as sorting the decoded events afterwards, on every path."""
    doc = resnet_like(2, blocks=2)
    doc["traceEvents"] += shape("cuda_sync_events")["traceEvents"]
    text = json.dumps(doc["traceEvents"] if form == "array" else doc)
    if form == "repaired":  # the slow path for the chunks that hold one
        text = text.replace('"cbid": 0', '"cbid": N/A', 3)
    path = tmp_path / "kinds.pt.trace.json"
    path.write_text(text)
    data = read_trace(str(path), chunk_bytes=chunk)
    assert (data.slow_chunks > 0) == (form == "repaired")
    assert data.by_kind is not None
    assert _ids_by_kind(data.by_kind) == _ids_by_kind(events_by_kind(data.events))
    assert {"cpu_op", "kernel", "cuda_runtime"} <= set(data.by_kind.by_category)
    assert data.by_kind.metadata and data.by_kind.flow_starts


def _repeat_interleave_trace(damaged: bool) -> str:
    b = KinetoTraceBuilder(gpu=False)
    with b.step(1):
        with b.op(
            "aten::repeat_interleave",
            args={"Concrete Inputs": ["", "", "", "12"], "Input Dims": [[4], [], [], []]},
        ):
            pass
        with b.op("aten::repeat_interleave", args={"Concrete Inputs": ["", "", "", ""]}):
            with b.op("aten::item", args={"Concrete Inputs": [""]}):
                with b.op("aten::_local_scalar_dense", args={"Concrete Inputs": [""]}):
                    pass
        with b.op("aten::add", args={"Concrete Inputs": ["", "", "1"]}):
            pass
    text = json.dumps(b.to_dict())
    return (
        text.replace('"cbid": 0', '"cbid": N/A').replace('"Ev Idx": 0', '"Ev Idx": N/A')
        if damaged
        else text
    )


@pytest.mark.parametrize("chunk", [CHUNK_BYTES, SMALL_CHUNK])
@pytest.mark.parametrize("damaged", [False, True], ids=["fast_path", "slow_path"])
def test_a_repeat_interleave_is_latent_where_its_cpu_kernel_read_the_total(
    tmp_path, chunk, damaged
):
    """record_shapes' Concrete Inputs are read on no path (the op's own read inside it
    tells a latent repeat_interleave, without output_size, from one with it); the trace
    stays on the fast path where it is not damaged."""
    path = tmp_path / "ri.pt.trace.json"
    path.write_text(_repeat_interleave_trace(damaged))
    data = read_trace(str(path), chunk_bytes=chunk)
    assert data.fast_path is not damaged
    assert [e.name for e in data.events if type(e) is Event and e.cat == "cpu_op"] == [
        "aten::repeat_interleave",
        "aten::repeat_interleave",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::add",
    ]
    latent = analyze_trace(str(path), Options(contexts=False)).latent
    assert [(s.op, s.trigger_op) for s in latent] == [
        ("aten::repeat_interleave", "aten::_local_scalar_dense")
    ]


def _probed_trace(layout: str) -> dict:
    """Many operators, among them three nccl:* ops whose arguments only the probe reads."""
    b = KinetoTraceBuilder(gpu=False)
    with b.step(1):
        for n in range(120):
            with b.op("aten::add", args={"Input Dims": [[n], [n]]}):
                pass
            if n % 40 == 0:
                with b.op(
                    "nccl:all_reduce", args={"Input Dims": [[n + 1, 2]], "Input type": ["float"]}
                ):
                    pass
    doc = b.to_dict()
    if layout == "args_first":  # another writer's key order: "{" of args before "name"
        doc["traceEvents"] = [
            {"args": e["args"], **{k: v for k, v in e.items() if k != "args"}} if "args" in e else e
            for e in doc["traceEvents"]
        ]
    elif layout.endswith("name_elsewhere"):  # the op name as another key's value too
        doc["traceEvents"][-1].setdefault("args", {})["Fwd op"] = "nccl:all_reduce"
    return doc


def _mixed_writers(doc: dict, layout: str) -> bytes:
    """``doc`` with its events written compactly by one writer, and one more event of the
    name the probe looks for written in Kineto's spaced layout by another: an instant
    event, or an object nested in an operator's args. Each is as many hits of the keyed
    needle as there are ops to probe, and none is theirs."""
    events = doc.pop("traceEvents")
    if layout == "mixed_instant":
        other = {"ph": "i", "cat": "cpu_instant_event", "name": "nccl:all_reduce", "pid": 1,
                 "tid": 1, "ts": 1.0, "s": "t", "args": {"Input Dims": [[999, 999]],
                 "Input type": ["int8"]}}  # fmt: skip
    else:
        other = {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1,
                 "ts": 1.0, "dur": 1.0, "args": {"meta": {"name": "nccl:all_reduce",
                 "Input Dims": [[999, 999]]}}}  # fmt: skip
    first = [json.dumps(e, separators=(",", ":")) for e in events if e.get("ph") == "M"]
    rest = [json.dumps(e, separators=(",", ":")) for e in events if e.get("ph") != "M"]
    # One op to probe is what lines the counts up: the first nccl:* op only.
    probed = [n for n, e in enumerate(rest) if '"nccl:' in e]
    for n in reversed(probed[1:]):
        del rest[n]
    listed = first + [json.dumps(other)] + rest
    head = json.dumps(doc)[:-1]
    return f'{head}, "traceEvents": [{", ".join(listed)}]}}'.encode()


# Whether each layout is read event by event: Kineto's (`"name": "nccl:...`) and another
# writer's without spaces (the short needle) are; where the name is also another key's
# value, only the needle with the key lines up; where "args" comes before "name", none.
_READ_EVENT_BY_EVENT = {
    "kineto": True,
    "compact": True,
    "name_elsewhere": True,
    "compact_name_elsewhere": False,
    "args_first": False,
    "mixed_instant": False,
    "mixed_nested": False,
}


@pytest.mark.parametrize("layout", list(_READ_EVENT_BY_EVENT))
def test_probed_arguments_are_read_event_by_event_or_from_the_whole_chunk(
    tmp_path, monkeypatch, layout
):
    from tb_syncfinder import reader

    path = tmp_path / "probed.pt.trace.json"
    mixed = layout.startswith("mixed")
    if mixed:
        path.write_bytes(_mixed_writers(_probed_trace(layout), layout))
    else:
        separators = (",", ":") if layout.startswith("compact") else None
        path.write_text(json.dumps(_probed_trace(layout), separators=separators))
    whole = []
    real = reader._Reader._attach_probed_args
    monkeypatch.setattr(
        reader._Reader,
        "_attach_probed_args",
        lambda self, *a: (whole.append(1), real(self, *a))[1],
    )
    data = read_trace(str(path))
    assert data.fast_path
    ops = [e for e in data.events if type(e) is Event and e.cat == "cpu_op"]
    nccl = [([[1, 2]], ["float"]), ([[41, 2]], ["float"]), ([[81, 2]], ["float"])]
    assert [(e.args.input_dims, e.args.input_type) for e in ops if e.name.startswith("nccl:")] == (
        nccl[:1] if mixed else nccl
    )
    assert all(e.args.input_dims is None for e in ops if not e.name.startswith("nccl:"))
    assert bool(whole) is not _READ_EVENT_BY_EVENT[layout]


def _one_hot_trace() -> dict:
    """Operators with ``Concrete Inputs`` on every one (record_shapes), among them
    ``aten::one_hot`` with and without ``num_classes`` and a ``nccl:*`` op to probe too."""
    b = KinetoTraceBuilder(gpu=False)
    with b.step(1):
        for n in range(60):
            with b.op("aten::add", args={"Concrete Inputs": ["", "", "1"]}):
                pass
            if n % 20 == 0:
                classes = "-1" if n == 20 else str(n + 4)
                with b.op("aten::one_hot", args={"Concrete Inputs": ["", classes]}):
                    pass
            if n == 30:
                with b.op("nccl:all_reduce", args={"Input Dims": [[7, 2]], "Input type": ["f"]}):
                    pass
    return b.to_dict()


@pytest.mark.parametrize("chunk", [CHUNK_BYTES, 2048], ids=["one_chunk", "small_chunks"])
@pytest.mark.parametrize("layout", ["kineto", "args_first", "odd_args", "lenient"])
def test_one_hots_concrete_inputs_are_kept_on_every_decode_path(
    tmp_path, monkeypatch, layout, chunk
):
    """Whether ``F.one_hot`` was given ``num_classes`` is in its ``Concrete Inputs`` only
    (its CPU kernel reads the range either way): in a CPU-only trace recorded with shapes
    the reader keeps them on that op alone, read event by event, from the whole chunk
    (another writer's key order; an event whose args are a list, which only the generic
    decode reads), or by the lenient decode of a chunk with a broken event."""
    from tb_syncfinder import reader

    doc = {"record_shapes": 1, **_one_hot_trace()}  # before the event list, as torch writes it
    if layout in ("args_first", "odd_args"):
        doc["traceEvents"] = [
            {"args": e["args"], **{k: v for k, v in e.items() if k != "args"}} if "args" in e else e
            for e in doc["traceEvents"]
        ]
    if layout == "odd_args":
        doc["traceEvents"].insert(
            -1, {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 1.0, "s": "t", "args": [1]}
        )
    text = json.dumps(doc)
    if layout == "lenient":  # a bare N/A (invalid JSON) in one event: the slow path
        text = text.replace('"", "", "1"]', '"", "", N/A]', 1)
    path = tmp_path / "one_hot.pt.trace.json"
    path.write_text(text)
    whole = []
    real = reader._Reader._attach_probed_args
    monkeypatch.setattr(
        reader._Reader,
        "_attach_probed_args",
        lambda self, *a: (whole.append(1), real(self, *a))[1],
    )
    data = read_trace(str(path), chunk_bytes=chunk)
    ops = [e for e in data.events if type(e) is Event and e.cat == "cpu_op"]
    assert [e.args.concrete_inputs for e in ops if e.name == "aten::one_hot"] == [
        ["", "4"],
        ["", "-1"],
        ["", "44"],
    ]
    assert all(e.args.concrete_inputs is None for e in ops if e.name != "aten::one_hot")
    (nccl,) = [e for e in ops if e.name.startswith("nccl:")]
    assert nccl.args.input_dims == [[7, 2]]
    if layout == "lenient":
        assert data.slow_chunks >= 1
    else:
        assert data.fast_path and bool(whole) is (layout != "kineto")
    assert (data.chunks > 1) is (chunk == 2048)


@pytest.mark.parametrize("header", [{}, {"record_shapes": 1, "deviceProperties": [{"id": 0}]}])
def test_one_hots_inputs_are_not_probed_where_they_settle_nothing(tmp_path, header):
    """A trace recorded without shapes has no inputs to find, and a GPU trace's one_hot
    reads or not by itself: the probe's cost (5-13 % of a read) is not paid for them."""
    doc = {**header, **_one_hot_trace()}  # before the event list, as torch writes it
    path = tmp_path / "one_hot.pt.trace.json"
    path.write_text(json.dumps(doc))
    data = read_trace(str(path))
    ops = [e for e in data.events if type(e) is Event and e.cat == "cpu_op"]
    assert all(e.args.concrete_inputs is None for e in ops)
    (nccl,) = [e for e in ops if e.name.startswith("nccl:")]
    assert nccl.args.input_dims == [[7, 2]]


# -- hostile input: a named error for what is not a trace, bounded work on the rest --------


@pytest.mark.parametrize("chunk", [CHUNK_BYTES, 16], ids=["one_chunk", "tiny_chunks"])
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"[1, 2, 3]", "none of the 3 entries of its event list"),
        (b"null", "the JSON is null"),
        (b'"a string"', "the JSON is a string"),
        (b"42", "the JSON is a number"),
        (b"true", "the JSON is a boolean"),
        (b'{"traceEvents": [1, "x", null, [2]]}', "none of the 4 entries"),
        (b'{"traceEvents": [{"name": "no phase"}]}', "none of the 1 entries"),
        (b'{"traceEvents": {"ph": "X"}}', "'traceEvents' is not a list"),
        (b'{"traceEvents": null}', "no 'traceEvents' list"),
        (b'{"a": {"traceEvents": []}}', "no 'traceEvents' list"),
        (b'{"traceEvents": [{"ph": "X"}], "x": }', "invalid JSON"),
        (b'[{"ph": "X"}] [', "invalid JSON"),
        (b'{"traceEvents": [{"ph": "X"}]', "truncated JSON (still being written?)"),
        (b'{"traceEvents": [{"ph": "X"}, ', "truncated JSON (still being written?)"),
        (b'[{"ph": "X", "name": "a"}, {"ph": "X", "na', "truncated JSON"),
    ],
)
def test_what_is_not_a_trace_is_a_named_error(tmp_path, content, reason, chunk):
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    with pytest.raises(TraceReadError) as info:
        read_trace(str(path), chunk_bytes=chunk)
    assert reason in info.value.reason
    assert info.value.path == str(path) and "\n" not in info.value.reason


@pytest.mark.parametrize("chunk", [CHUNK_BYTES, 16])
@pytest.mark.parametrize(
    "content",
    [
        b"[]",
        b'{"traceEvents": []}',
        b"  [ \n ]  ",
        b'{"schemaVersion": 1, "traceEvents": [\n  ],\n "traceName": "x.json"}',
    ],
)
def test_an_empty_event_list_is_read_and_says_it_is_empty(tmp_path, content, chunk):
    path = tmp_path / "empty.pt.trace.json"
    path.write_bytes(content)
    data = read_trace(str(path), chunk_bytes=chunk)
    assert data.events == [] and any("empty trace" in r for r in data.repairs)
    result = analyze_trace(str(path))
    assert result.info.error is None
    assert any("empty trace" in r for r in result.info.repairs)


def test_a_trace_of_metadata_only_says_it_has_nothing_to_analyse(tmp_path):
    doc = {"traceEvents": [e for e in shape("cuda_stacks")["traceEvents"] if e["ph"] == "M"]}
    data = read_trace(str(_write_doc(tmp_path, "meta", doc)))
    assert data.events and any("no complete ('X') events" in r for r in data.repairs)


_DEEP = 50_000


def _deep(where: str, depth: int) -> bytes:
    nested = b"[" * depth + b"]" * depth
    event = b'{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"x": %s}}'
    if where == "args":
        return b'{"traceEvents": [' + event % b"1" + b", " + event % nested + b"]}"
    if where == "element":
        return b'{"traceEvents": [' + event % b"1" + b", " + nested + b"]}"
    if where == "before_events":
        return b'{"deviceProperties": ' + nested + b', "traceEvents": [' + event % b"1" + b"]}"
    if where == "after_events":
        return b'{"traceEvents": [' + event % b"1" + b'], "distributedInfo": ' + nested + b"}"
    return nested  # array format


@pytest.mark.parametrize("chunk", [CHUNK_BYTES, SMALL_CHUNK])
@pytest.mark.parametrize(
    "where", ["args", "element", "before_events", "after_events", "array_format"]
)
def test_deep_nesting_is_the_files_named_error(tmp_path, where, chunk):
    path = tmp_path / "deep.pt.trace.json.gz"
    path.write_bytes(gzip.compress(_deep(where, _DEEP)))
    with pytest.raises(TraceReadError, match="nested too deeply"):
        read_trace(str(path), chunk_bytes=chunk)
    assert "nested too deeply" in analyze_trace(str(path)).info.error


@pytest.mark.parametrize("depth", [200, 900, 1000, 1100, 3000])
def test_nesting_near_the_recursion_limit_never_escapes(tmp_path, depth):
    for where in ("args", "after_events"):
        path = tmp_path / f"deep_{where}.pt.trace.json"
        path.write_bytes(_deep(where, depth))
        result = analyze_trace(str(path))  # a report or the named error: nothing raised
        assert result.info.error is None or "nested too deeply" in result.info.error


def test_duplicate_keys_keep_the_first_event_list_and_say_so(tmp_path):
    first = shape("cuda_stacks")["traceEvents"]
    text = json.dumps({"traceEvents": first})[:-1] + ', "traceEvents": [{"ph": "X"}]}'
    path = tmp_path / "dup.pt.trace.json"
    path.write_text(
        text.replace('"ph": "X", "cat": "cpu_op"', '"ph": "X", "ts": -5, "cat": "cpu_op"')
    )
    data = read_trace(str(path), chunk_bytes=SMALL_CHUNK)
    assert len(data.events) == len(first)
    assert "a second 'traceEvents' key was ignored" in data.repairs
    assert data.fast_path  # a duplicate key inside an event: the last one counts


def test_an_event_larger_than_the_limit_is_a_named_error(tmp_path):
    event = {"ph": "X", "name": "a" * 300_000, "ts": 1, "dur": 1}
    path = _write_doc(tmp_path, "big", {"traceEvents": [event]}, gz=True)
    with pytest.raises(TraceReadError, match="one event larger than 0 MiB"):
        read_trace(str(path), chunk_bytes=4096, max_held_bytes=100_000)
    assert len(read_trace(str(path), chunk_bytes=4096).events) == 1  # default: 64 MiB


def test_whitespace_anywhere_is_not_kept(tmp_path):
    """Gigabytes of spaces compress to almost nothing: none of them may be held."""
    event = json.dumps(shape("cuda_stacks")["traceEvents"][5]).encode()
    spaces = b" " * (8 << 20)
    text = (
        spaces
        + b'{"traceEvents": ['
        + spaces
        + event
        + b","
        + spaces
        + event
        + spaces
        + b"]"
        + spaces
        + b', "traceName": "x"'
        + spaces
        + b"}"
        + spaces
    )
    path = tmp_path / "spaces.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text, 1))
    data = read_trace(str(path), chunk_bytes=64 << 10, max_held_bytes=1 << 20)
    assert len(data.events) == 2 and data.trace_name == "x" and data.fast_path


def test_gzip_members_are_all_read_and_trailing_garbage_ignored(tmp_path):
    text = json.dumps(shape("record_shapes")).encode()
    half = len(text) // 2
    path = tmp_path / "members.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]) + b"garbage")
    data = read_trace(str(path), chunk_bytes=SMALL_CHUNK)
    assert _events_json(data) == _events_json(
        read_trace(_write_doc(tmp_path, "plain", shape("record_shapes")).as_posix())
    )


def test_a_settled_truncation_names_its_time_in_utc(monkeypatch):
    """The text lands in JSON, SARIF and summaries read elsewhere: in the runner's local
    time it read 10:36 in one zone and 19:36 in another."""
    import time

    from tb_syncfinder.reader import settled_truncation

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        text = settled_truncation("truncated JSON (still being written?)", 0.0)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert (
        text
        == "truncated JSON (unchanged since 1970-01-01 00:00 UTC: cut short, not being written)"
    )


def test_events_with_a_ph_but_unreadable_times_are_said_as_that(tmp_path: Path) -> None:
    """An event {"ph": "X", "ts": "abc"} was said not to be "an object with a 'ph'"."""
    path = tmp_path / "w1.pt.trace.json"
    event = {"ph": "X", "ts": "abc", "dur": 1, "name": "a", "pid": 1, "tid": 1}
    path.write_text(json.dumps({"traceEvents": [event, {**event, "ts": None, "dur": 1e30}]}))
    with pytest.raises(TraceReadError) as info:
        read_trace(str(path))
    said = str(info.value)
    assert "1 entry with a field of the wrong type (a 'ts' that is no number?)" in said, said
    assert "1 entry with times no profiler writes" in said, said
    path.write_text(json.dumps({"traceEvents": [1, 2, "x"]}))
    with pytest.raises(TraceReadError) as info:
        read_trace(str(path))
    assert str(info.value).endswith(": 3 entries that are no object"), str(info.value)


def test_a_file_that_recorded_nothing_is_no_step_of_its_run(tmp_path):
    """An empty trace (``[]``) beside a real one counted as a step of 0 us: the run's
    syncs per step halved and its mean step with them. It counts no step now, and the
    tab's device is the real trace's (its with_stack snippet kept ProfilerActivity.CUDA)."""
    from tb_syncfinder import analyze
    from tb_syncfinder.plugin.api import summary_impl

    run = tmp_path / "run"
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    b.write(run / "good.pt.trace.json")
    alone = analyze(run / "good.pt.trace.json").summary
    (run / "empty.pt.trace.json").write_text("[]")
    both = analyze(run)
    assert (both.summary.step_count, both.summary.syncs_per_step) == (1, alone.syncs_per_step)
    assert both.summary.mean_step_time_us == alone.mean_step_time_us
    assert {t.path.rsplit("/", 1)[-1]: t.steps for t in both.traces} == {
        "empty.pt.trace.json": 0,
        "good.pt.trace.json": 1,
    }

    class Selection:  # what summary_impl reads of the plugin's selection
        report_json = both.to_json()
        top_kinds: list[Any] = []
        loading = False

    assert summary_impl(Selection())["device"] == "cuda"  # type: ignore[arg-type]


def test_a_named_pipe_is_read_when_something_writes_to_it(tmp_path, monkeypatch):
    """``tb-syncfinder report <(zcat trace.json.gz)`` gives the reader a pipe: it is read
    whole (a FIFO nothing writes to ends at once, ``test_plugin_loader``)."""
    import os
    import threading

    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    content = b.write(tmp_path / "t.pt.trace.json").read_bytes()
    pipe = tmp_path / "pipe.pt.trace.json"
    os.mkfifo(pipe)

    def write() -> None:
        with open(pipe, "wb") as handle:
            handle.write(content)

    from tb_syncfinder import reader

    # However late the writer thread starts; the read goes on as soon as bytes come.
    monkeypatch.setattr(reader, "_PIPE_WRITER_WAIT_S", 60.0)
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        data = read_trace(str(pipe))
    finally:
        writer.join(10)
    assert len(data.events) == len(read_trace(str(tmp_path / "t.pt.trace.json")).events) > 0
