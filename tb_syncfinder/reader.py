"""Decode one Kineto trace file, fast, into typed events holding only the fields we use.

The fast path is one ``msgspec`` decode into ``gc=False`` Structs: about 8x faster than
``json.loads`` on a 54 MB trace, and the unknown keys (most of ``args``) are never
materialised. Events are a tagged union on ``ph``: complete events (``X``) keep what the
analysis reads, metadata (``M``) and flow starts (``s``) a few fields, and every other phase
(flow ends, instants, counters, ...: ~40 % of a GPU trace) an empty object. Together with a
gzip stream inflated into one exactly sized buffer this keeps the peak memory of a decode
near 2x the JSON size instead of 3.5x.

Real traces vary (see ``../shared/KINETO_NOTES.md``), so when the strict decode fails the
slow path repairs what it can, in order:

* gzip is detected by its magic bytes, not by the file name;
* unquoted ``N/A`` values (written by some Kineto versions) are quoted;
* Windows paths with unescaped backslashes (``Invalid \\escape``) are escaped;
* string timestamps / durations and odd argument types are converted leniently, event by
  event, and an event that still does not fit is skipped (and counted) rather than failing
  the whole file;
* a JSON array at the top level (Chrome trace "array format", Ascend ``trace_view.json``)
  is accepted as the event list.

What cannot be repaired raises ``TraceReadError(path, reason)`` with a reason a user can
act on (empty file, truncated JSON of a trace still being written, not a trace at all).
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

import msgspec
from msgspec import Struct

__all__ = [
    "Args", "Event", "FlowStart", "MetaEvent", "TraceEvent", "TraceData", "TraceReadError",
    "read_trace", "decode_trace", "gunzip",
]


class TraceReadError(Exception):
    """A trace file that cannot be analysed; ``path`` and ``reason`` say which and why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


# Argument values vary between traces (ints, strings such as "N/A", floats): permissive
# unions keep the fast path working on all of them.
_Scalar = Union[int, float, str, None]


class Args(Struct, gc=False, omit_defaults=True):
    """The few ``args`` entries the analysis reads; every other key is skipped unread."""

    external_id: Union[int, str, None] = msgspec.field(default=None, name="External id")
    external_id_legacy: Union[int, str, None] = msgspec.field(default=None, name="external id")
    correlation: Union[int, str, None] = None
    python_id: Union[int, str, None] = msgspec.field(default=None, name="Python id")
    python_parent_id: Union[int, str, None] = msgspec.field(
        default=None, name="Python parent id"
    )
    bytes: _Scalar = None
    device: Union[int, str, None] = None
    stream: Union[int, str, None] = None
    call_stack: Union[str, None] = msgspec.field(default=None, name="Call stack")
    # Kept undecoded (a slice of the input): only repeat_interleave ever needs it, and
    # decoding a list per operator would cost time and memory on record_shapes traces.
    concrete_inputs: Union[msgspec.Raw, None] = msgspec.field(default=None,
                                                              name="Concrete Inputs")
    cuda_sync_kind: Union[str, None] = None
    wait_on_stream: _Scalar = None
    kind: _Scalar = None  # hip memcpy kind on ROCm runtime calls ("1" = HtoD, "2" = DtoH)
    name: Union[str, None] = None  # metadata events: process_name / thread_name
    labels: Union[str, None] = None  # metadata events: process_labels ("CPU", "GPU 0")
    sequence_number: _Scalar = msgspec.field(default=None, name="Sequence number")
    fwd_thread_id: _Scalar = msgspec.field(default=None, name="Fwd thread id")


class _PhaseEvent(Struct, gc=False, tag_field="ph"):
    """Base of the per-phase event types: the decoder picks the type from ``ph``.

    A type without some field of ``Event`` reads its default from these class attributes
    (``e.name`` is "" on a flow end), so code written against ``Event`` works on any event.
    """

    ph: ClassVar[str] = ""
    cat = ""
    name = ""
    pid = 0
    tid = 0
    ts = 0.0
    dur = 0.0
    id = None
    args = None


class Event(_PhaseEvent, tag="X", gc=False):
    """One complete (``X``) event. ``ts``/``dur`` are microseconds as Kineto wrote them."""

    ph: ClassVar[str] = "X"
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    ts: float = 0.0
    dur: float = 0.0
    args: Union[Args, None] = None


class MetaEvent(_PhaseEvent, tag="M", gc=False):
    """A metadata event (process / thread names and labels)."""

    ph: ClassVar[str] = "M"
    name: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    args: Union[Args, None] = None


class FlowStart(_PhaseEvent, tag="s", gc=False):
    """A flow start: ``ac2g`` flows join runtime calls to device activity in old traces."""

    ph: ClassVar[str] = "s"
    cat: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    ts: float = 0.0
    id: Union[int, str, None] = None


# Every other phase of the Trace Event Format: no stage reads them, so they decode to empty
# objects (counted in ``event_count``, nothing else kept). A phase outside this list sends the
# file to the slow path, which drops such events.
_UNUSED_PHASES = "BEiICbneSTpFtfPNODVvRc()"
_UNUSED_EVENT_TYPES = tuple(
    type(f"_Phase{ord(phase)}", (_PhaseEvent,), {"ph": phase}, tag=phase, gc=False)
    for phase in _UNUSED_PHASES
)
_KNOWN_PHASES = frozenset("XMs" + _UNUSED_PHASES)
TraceEvent = Union[(Event, MetaEvent, FlowStart, *_UNUSED_EVENT_TYPES)]  # type: ignore[valid-type]


class _TraceFile(Struct, gc=False):
    traceEvents: Union[list[TraceEvent], None] = None  # noqa: N815 (JSON name)
    deviceProperties: Union[list[dict[str, Any]], None] = None  # noqa: N815
    distributedInfo: Union[dict[str, Any], None] = None  # noqa: N815
    schemaVersion: _Scalar = None  # noqa: N815
    displayTimeUnit: Union[str, None] = None  # noqa: N815
    traceName: Union[str, None] = None  # noqa: N815
    torch_version: Union[str, None] = None
    pytorch_version: Union[str, None] = None
    cuda_runtime_version: _Scalar = None
    cuda_driver_version: _Scalar = None
    with_stack: _Scalar = None


# The lenient form used by the slow path: everything optional and loosely typed, so that
# msgspec.convert(strict=False) can coerce "123.5" to a float event by event.
_FAST_DECODER = msgspec.json.Decoder(Union[_TraceFile, list[TraceEvent]])
_GENERIC_DECODER = msgspec.json.Decoder()


@dataclass
class TraceData:
    """A decoded trace: the events plus the file-level facts Kineto writes beside them."""

    path: str
    events: list[Any]  # TraceEvent values: Event, MetaEvent, FlowStart or an unused phase
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] | None = None
    schema_version: Any = None
    trace_name: str | None = None
    torch_version: str | None = None
    cuda_runtime_version: Any = None
    skipped_events: int = 0  # events dropped because they could not be converted
    repairs: list[str] = field(default_factory=list)  # which slow-path repairs were needed
    byte_size: int = 0  # uncompressed JSON size


_NA_RE = re.compile(rb'(?<=[:\[,])(\s*)N/A(?=\s*[,}\]])')
_BAD_ESCAPE_RE = re.compile(rb'\\(?!["\\/bfnrtu])')
# NaN / Infinity literals (Python's json.dump and some exporters write them; JSON has none):
# they become null, so the event that holds one is dropped or loses that argument.
_NON_FINITE_REPAIR = "NaN / Infinity values read as null"
_NON_FINITE_RE = re.compile(rb'(?<=[:\[,])(\s*)-?(?:NaN|Infinity)(?=\s*[,}\]])')


_MAX_DEFLATE_RATIO = 1100  # deflate cannot inflate more than ~1032x


def gunzip(path: str, raw: bytes) -> bytes:
    """``raw`` inflated when it is gzip (by its magic bytes, not the name), else as is.
    Raises ``TraceReadError`` for corrupt or truncated gzip data."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        # The gzip trailer holds the inflated size (mod 2**32): inflating into one buffer of
        # that size avoids gzip.decompress's list of blocks joined at the end (2x the JSON
        # at the peak). The bound keeps a garbled trailer from reserving gigabytes; a
        # multi-member file (or any size mismatch) takes the general path.
        expected = int.from_bytes(raw[-4:], "little")
        if 0 < expected <= len(raw) * _MAX_DEFLATE_RATIO:
            data = zlib.decompress(raw, 31, expected)
            if len(data) == expected:
                return data
            del data
        return gzip.decompress(raw)
    except gzip.BadGzipFile as exc:
        # Bytes after a complete gzip stream: gzip(1) ignores such trailing garbage with a
        # warning, and so do we (the trace itself is whole).
        inflater = zlib.decompressobj(31)
        try:
            data = inflater.decompress(raw)
        except zlib.error:
            data = b""
        if inflater.eof and data:
            return data
        raise TraceReadError(path, "corrupt gzip data: not a valid gzip stream") from exc
    except (EOFError, zlib.error) as exc:
        # A gzip stream without its end marker is what a trace still being written looks like.
        if isinstance(exc, EOFError) or "incomplete" in str(exc) or "truncated" in str(exc):
            raise TraceReadError(path, "truncated gzip data (still being written?)") from exc
        detail = str(exc).split(": ", 1)[-1]  # drop zlib's "Error -3 while decompressing data"
        raise TraceReadError(path, f"corrupt gzip data: {detail}") from exc


def _truncated_reason(message: str) -> str | None:
    if "truncated" in message.lower():
        return "truncated JSON (still being written?)"
    return None


def _from_file_struct(path: str, doc: _TraceFile | list[Any], size: int) -> TraceData:
    if isinstance(doc, list):
        return TraceData(path=path, events=doc, byte_size=size)
    if doc.traceEvents is None:
        raise TraceReadError(path, "not a PyTorch profiler trace: no 'traceEvents' list")
    return TraceData(
        path=path,
        events=doc.traceEvents,
        device_properties=[p for p in (doc.deviceProperties or []) if isinstance(p, dict)],
        distributed_info=doc.distributedInfo,
        schema_version=doc.schemaVersion,
        trace_name=doc.traceName,
        torch_version=doc.torch_version or doc.pytorch_version,
        cuda_runtime_version=doc.cuda_runtime_version,
        byte_size=size,
    )


# Times outside these bounds are not clock readings: NaN, infinities, 1e300 (a garbled
# field). ``ts`` is microseconds (since the epoch: ~1.7e15 today), ``dur`` at most ~11 days.
_MAX_ABS_TS_US = 1e18
_MAX_DUR_US = 1e12


def _check_times(data: TraceData) -> TraceData:
    """Drop events whose ``ts`` / ``dur`` are not finite or absurd, and clamp negative
    durations to 0 (the event stays, at its start): every stage after this one sums and
    compares times, and one NaN or negative duration would turn costs into NaN or
    negative numbers without any error. One pass over the events (~15 ms per 200k)."""
    bad = [e for e in data.events
           if not (0.0 <= e.dur <= _MAX_DUR_US and -_MAX_ABS_TS_US <= e.ts <= _MAX_ABS_TS_US)]
    if not bad:
        return data
    dropped: set[int] = set()
    clamped = 0
    for event in bad:
        # NaN fails every comparison, so it is never "finite and negative" here.
        if -_MAX_DUR_US <= event.dur < 0.0 and -_MAX_ABS_TS_US <= event.ts <= _MAX_ABS_TS_US:
            event.dur = 0.0
            clamped += 1
        else:
            dropped.add(id(event))
    if dropped:
        data.events = [e for e in data.events if id(e) not in dropped]
        data.skipped_events += len(dropped)
        data.repairs.append(f"skipped {len(dropped)} events with non-finite or absurd times")
    if clamped:
        data.repairs.append(f"clamped {clamped} negative durations to 0")
    return data


def _lenient_events(raw_events: list[Any]) -> tuple[list[Any], int]:
    """Convert events one by one with type coercion; drop (and count) hopeless ones.

    Events without a known ``ph`` are dropped uncounted: no stage could use them anyway."""
    raw_events = [raw for raw in raw_events
                  if not isinstance(raw, dict)
                  or (isinstance(raw.get("ph"), str) and raw["ph"] in _KNOWN_PHASES)]
    # msgspec.convert cannot produce Raw values: set those aside and attach them after.
    concrete: dict[int, Any] = {}
    for i, raw in enumerate(raw_events):
        args = raw.get("args") if isinstance(raw, dict) else None
        if isinstance(args, dict) and "Concrete Inputs" in args:
            concrete[i] = args.pop("Concrete Inputs")
    events, skipped = _convert_events(raw_events)
    if concrete and not skipped:
        for i, value in concrete.items():
            if getattr(events[i], "args", None) is not None:
                events[i].args.concrete_inputs = msgspec.Raw(msgspec.json.encode(value))
    return events, skipped


def _convert_events(raw_events: list[Any]) -> tuple[list[Any], int]:
    try:
        return msgspec.convert(raw_events, list[TraceEvent], strict=False), 0
    except msgspec.ValidationError:
        pass
    events: list[Any] = []
    skipped = 0
    for raw in raw_events:
        if not isinstance(raw, dict):
            skipped += 1
            continue
        try:
            events.append(msgspec.convert(raw, TraceEvent, strict=False))
            continue
        except msgspec.ValidationError:
            pass
        # Salvage the event without the field that does not fit (e.g. ts "N/A" is hopeless,
        # but a bad args value only costs us that argument).
        cleaned = {k: v for k, v in raw.items() if k != "args"}
        try:
            event = msgspec.convert(cleaned, TraceEvent, strict=False)
        except msgspec.ValidationError:
            skipped += 1
            continue
        args = raw.get("args")
        if isinstance(args, dict) and hasattr(event, "args"):
            good = {}
            for key, value in args.items():
                try:
                    msgspec.convert({key: value}, Args, strict=False)
                    good[key] = value
                except msgspec.ValidationError:
                    continue
            event.args = msgspec.convert(good, Args, strict=False)
        events.append(event)
    return events, skipped


def _slow_path(path: str, data: bytes, first_error: Exception) -> TraceData:
    repairs: list[str] = []
    doc: Any = None
    text = data
    for attempt in range(4):
        try:
            doc = _GENERIC_DECODER.decode(text)
            break
        except UnicodeDecodeError:
            if "invalid UTF-8 bytes replaced" in repairs:
                raise TraceReadError(path, "not UTF-8 text (not a JSON trace?)") from None
            # A name in another encoding (a Latin-1 file path): keep the event, with U+FFFD
            # for the bytes that do not decode.
            text = text.decode("utf-8", "replace").encode("utf-8")
            repairs.append("invalid UTF-8 bytes replaced")
            continue
        except msgspec.DecodeError as exc:
            message = str(exc)
            truncated = _truncated_reason(message)
            if truncated:
                raise TraceReadError(path, truncated) from exc
            if attempt == 0 and b"N/A" in text:
                text = _NA_RE.sub(rb'\1"N/A"', text)
                repairs.append("quoted N/A values")
                continue
            if _NON_FINITE_REPAIR not in repairs and (b"NaN" in text or b"Infinity" in text):
                fixed = _NON_FINITE_RE.sub(rb"\1null", text)
                if fixed != text:
                    text = fixed
                    repairs.append(_NON_FINITE_REPAIR)
                    continue
            if attempt <= 1 and "escape" in message.lower():
                text = _BAD_ESCAPE_RE.sub(rb"\\\\", text)
                repairs.append("escaped backslashes in Windows paths")
                continue
            if attempt <= 1 and b"\\" in text and "N/A" not in message:
                # A bad escape can surface as another message once N/A was fixed.
                fixed = _BAD_ESCAPE_RE.sub(rb"\\\\", text)
                if fixed != text:
                    text = fixed
                    repairs.append("escaped backslashes in Windows paths")
                    continue
            raise TraceReadError(path, f"invalid JSON: {message}") from exc
    if doc is None:
        raise TraceReadError(path, f"invalid JSON: {first_error}")
    if isinstance(doc, list):
        raw_events, top = doc, {}
    elif isinstance(doc, dict):
        raw_events = doc.get("traceEvents")
        if raw_events is None:
            raise TraceReadError(path, "not a PyTorch profiler trace: no 'traceEvents' list")
        if not isinstance(raw_events, list):
            raise TraceReadError(path, "'traceEvents' is not a list")
        top = doc
    else:
        raise TraceReadError(path, "not a PyTorch profiler trace: JSON is not an object")
    events, skipped = _lenient_events(raw_events)
    if skipped:
        repairs.append(f"skipped {skipped} malformed events")
    props = top.get("deviceProperties")
    dist = top.get("distributedInfo")
    version = top.get("torch_version") or top.get("pytorch_version")
    return TraceData(
        path=path,
        events=events,
        device_properties=[p for p in props if isinstance(p, dict)]
        if isinstance(props, list)
        else [],
        distributed_info=dist if isinstance(dist, dict) else None,
        schema_version=top.get("schemaVersion"),
        trace_name=top.get("traceName") if isinstance(top.get("traceName"), str) else None,
        torch_version=version if isinstance(version, str) else None,
        cuda_runtime_version=top.get("cuda_runtime_version"),
        skipped_events=skipped,
        repairs=repairs,
        byte_size=len(data),
    )


def decode_trace(path: str, raw: bytes) -> TraceData:
    """Decode the bytes of a trace file (gzip or not); ``path`` is only used in messages."""
    if not raw:
        raise TraceReadError(path, "empty file")
    return _decode_json(path, gunzip(path, raw))


def _decode_json(path: str, data: bytes) -> TraceData:
    if len(data) < 4096 and not data.strip():
        raise TraceReadError(path, "empty file (no JSON in it)")
    try:
        decoded = _from_file_struct(path, _FAST_DECODER.decode(data), len(data))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        # msgspec raises UnicodeDecodeError for invalid UTF-8 inside a string.
        decoded = _slow_path(path, data, exc)
    return _check_times(decoded)


def read_trace(path: str) -> TraceData:
    """Read and decode one trace file. Raises ``TraceReadError`` naming the file and why."""
    try:
        if "://" in path:
            from tb_syncfinder.discovery import open_trace_bytes

            raw = open_trace_bytes(path)
        else:
            with open(path, "rb") as handle:
                raw = handle.read()
    except FileNotFoundError as exc:
        raise TraceReadError(path, "no such file") from exc
    except IsADirectoryError as exc:
        raise TraceReadError(path, "is a directory, not a trace file") from exc
    except OSError as exc:
        raise TraceReadError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not raw:
        raise TraceReadError(path, "empty file")
    data = gunzip(path, raw)
    del raw  # the compressed bytes need not stay alive during the decode
    return _decode_json(path, data)
