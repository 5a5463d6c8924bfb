"""Decode one Kineto trace file, fast and in bounded memory, into typed events holding only
the fields we use.

The file is inflated (gzip is detected by its magic bytes, not by the name) and decoded in
chunks of about ``CHUNK_BYTES`` of JSON: the whole document is never in memory, only the
decoded events are. Each chunk is a run of whole elements of the ``traceEvents`` list,
decoded by ``msgspec`` into ``gc=False`` Structs (about 8x faster than ``json.loads``; the
unknown keys, most of ``args``, are never materialised). Events are a tagged union on
``ph``: complete events (``X``) keep what the analysis reads, metadata (``M``) and flow
starts (``s``) a few fields, and every other phase (flow ends, instants, counters, ...: ~40 %
of a GPU trace) an empty object.

Finding where a chunk may end needs no JSON scanner in Python: a cut is tried right after a
``}`` that is followed by ``,`` (or by the list's closing ``]``), and the chunk is decoded
as ``[`` + elements + ``]`` in place (the separator bytes are overwritten, nothing is
copied). Decoding starts in the same state as the real parser (inside the event list, at an
element), so a successful decode proves the cut is at an element boundary; a ``}`` inside an
event fails at the very end of the chunk and the previous candidate is tried. When no
candidate works (elements that are not objects, odd nesting), elements are stepped over one
by one with msgspec's own parser. Times are checked by the decoder itself (``Meta``
bounds), so a chunk with a NaN, absurd or negative time goes to the slow path below.

Real traces vary (see ``../shared/KINETO_NOTES.md``), so a chunk whose strict decode fails
takes the slow path, which repairs what it can, in order:

* unquoted ``N/A`` values (written by some Kineto versions) are quoted;
* ``NaN`` / ``Infinity`` literals become null;
* Windows paths with unescaped backslashes (``Invalid \\escape``) are escaped;
* invalid UTF-8 bytes are replaced;
* string timestamps / durations and odd argument types are converted leniently, event by
  event; an event that still does not fit is skipped (and counted) rather than failing the
  whole file; negative durations are clamped to 0, non-finite or absurd times dropped;
* a JSON array at the top level (Chrome trace "array format", Ascend ``trace_view.json``)
  is accepted as the event list.

What cannot be repaired raises ``TraceReadError(path, reason)`` with a reason a user can
act on (empty file, truncated JSON of a trace still being written, nesting too deep, not a
trace at all). A trace whose event list is empty is read, and says so in ``repairs``.

Memory: the chunk being decoded plus what is kept of the events; anything else held at
once (a single event, the keys before or after the event list) is limited to
``MAX_HELD_BYTES``, so no input, however large or strange, makes the reader hold more.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import time
import zlib
from collections.abc import Iterator
from itertools import compress
from operator import attrgetter
from typing import IO, Annotated, Any, ClassVar, Union

import msgspec
from msgspec import Meta, Struct

__all__ = [
    "Args",
    "Event",
    "FlowStart",
    "MetaEvent",
    "TraceEvent",
    "TraceData",
    "TraceReadError",
    "read_trace",
    "decode_trace",
    "decode_document",
    "gunzip",
    "CHUNK_BYTES",
    "MAX_HELD_BYTES",
]

# JSON decoded at once (one chunk of whole events). Larger chunks are not faster; smaller
# ones cost a little Python per chunk.
CHUNK_BYTES = 8 << 20
# The most JSON held at once beyond a chunk: one event, or the keys around the event list.
# Kineto writes events of a few hundred bytes; anything near this is not a profiler trace.
MAX_HELD_BYTES = 64 << 20
# Bytes read from the file at once (compressed or not); the inflated pieces are as small,
# so that no large block is allocated per piece.
_READ_BYTES = 1 << 20
# Compressed bytes fed to zlib at once: small, as what zlib leaves unconsumed (when a piece
# is full) is copied on every call.
_INFLATE_INPUT_BYTES = 256 << 10
# An event list whose first entries are none of them trace events is not a trace: give up
# after this many instead of stepping through gigabytes of numbers.
_MAX_ENTRIES_WITHOUT_EVENTS = 100_000


class TraceReadError(Exception):
    """A trace file that cannot be analysed; ``path`` and ``reason`` say which and why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


# Argument values vary between traces (ints, strings such as "N/A", floats): permissive
# unions keep the fast path working on all of them.
_Scalar = Union[int, float, str, None]

# The reason of a trace whose file is not there.
NO_SUCH_FILE = "no such file"

# How the repair note of a trace with nothing to analyse starts (a CI gate cannot pass it).
EMPTY_TRACE = "empty trace"


class Args(Struct, gc=False, omit_defaults=True):
    """The few ``args`` entries the analysis reads; every other key is skipped unread."""

    external_id: Union[int, str, None] = msgspec.field(default=None, name="External id")
    external_id_legacy: Union[int, str, None] = msgspec.field(default=None, name="external id")
    correlation: Union[int, str, None] = None
    python_id: Union[int, str, None] = msgspec.field(default=None, name="Python id")
    python_parent_id: Union[int, str, None] = msgspec.field(default=None, name="Python parent id")
    bytes: _Scalar = None
    device: Union[int, str, None] = None
    stream: Union[int, str, None] = None
    call_stack: Union[str, None] = msgspec.field(default=None, name="Call stack")
    cuda_sync_kind: Union[str, None] = None
    wait_on_stream: _Scalar = None
    kind: _Scalar = None  # hip memcpy kind on ROCm runtime calls ("1" = HtoD, "2" = DtoH)
    name: Union[str, None] = None  # metadata events: process_name / thread_name
    labels: Union[str, None] = None  # metadata events: process_labels ("CPU", "GPU 0")
    sort_index: _Scalar = None  # metadata events: process_sort_index
    # Collective ops and NCCL kernels (the job stage, collectives.py): keys Kineto writes on
    # those events only, so other events pay nothing. Same attribute names as
    # collectives.CommArgs; types vary between versions, hence Any. Not "Input Dims" /
    # "Input type" (record_shapes writes them on every operator): below.
    collective_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    pg_id: Any = msgspec.field(default=None, name="Process Group ID")
    in_msg_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    seq: Any = msgspec.field(default=None, name="Seq")
    # 2023 traces size ``nccl:*`` ops only by their first input: set by the reader on those
    # ops alone, never by the decoder (no key Kineto writes; record_shapes writes these on
    # every operator, and decoding a list per operator would cost time and memory).
    input_dims: Any = msgspec.field(default=None, name="tb_syncfinder: Input Dims")
    input_type: Any = msgspec.field(default=None, name="tb_syncfinder: Input type")
    # ``Concrete Inputs`` (record_shapes) of ``aten::one_hot`` alone, set by the reader the
    # same way: whether ``num_classes`` was passed (its CPU kernel reads either way).
    concrete_inputs: Any = msgspec.field(default=None, name="tb_syncfinder: Concrete Inputs")
    # torch_npu's NPU tasks ("Ascend Hardware" rows): what kind of task (a wait on an event,
    # a placeholder of the profiler's own, a kernel, a copy).
    task_type: Union[str, None] = msgspec.field(default=None, name="Task Type")
    # ... and a copy task's direction ("host to device", "device to host").
    memcpy_direction: Union[str, None] = msgspec.field(default=None, name="memcpy direction")
    sequence_number: _Scalar = msgspec.field(default=None, name="Sequence number")
    fwd_thread_id: _Scalar = msgspec.field(default=None, name="Fwd thread id")


# Times outside these bounds are not clock readings: NaN, infinities, 1e300 (a garbled
# field). ``ts`` is microseconds (since the epoch: ~1.7e15 today), ``dur`` at most ~11 days.
# The decoder checks them (an event outside them sends its chunk to the slow path, which
# clamps negative durations to 0 and drops the rest): every stage after this one sums and
# compares times, and one NaN or negative duration would turn costs into NaN or negative
# numbers without any error.
_MAX_ABS_TS_US = 1e18
_MAX_DUR_US = 1e12
_Ts = Annotated[float, Meta(ge=-_MAX_ABS_TS_US, le=_MAX_ABS_TS_US)]
_Dur = Annotated[float, Meta(ge=0.0, le=_MAX_DUR_US)]


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


class Event(_PhaseEvent, tag="X", gc=False, kw_only=True):
    """One complete (``X``) event. ``ts``/``dur`` are microseconds as Kineto wrote them.
    ``ts`` is required: an event without one is no event at time 0 (placed there, it
    stretched the trace back to the epoch); the lenient path drops and counts it."""

    ph: ClassVar[str] = "X"
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    ts: _Ts
    dur: _Dur = 0.0
    args: Union[Args, None] = None


class MetaEvent(_PhaseEvent, tag="M", gc=False):
    """A metadata event (process / thread names and labels)."""

    ph: ClassVar[str] = "M"
    name: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    args: Union[Args, None] = None


class FlowStart(_PhaseEvent, tag="s", gc=False, kw_only=True):
    """A flow start: ``ac2g`` flows join runtime calls to device activity in old traces."""

    ph: ClassVar[str] = "s"
    cat: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    ts: _Ts
    id: Union[int, str, None] = None


# Every other phase of the Trace Event Format: no stage reads them, so they decode to empty
# objects (counted in ``event_count``, nothing else kept). A phase outside this list sends the
# chunk to the slow path, which drops such events.
_UNUSED_PHASES = "BEiICbneSTpFtfPNODVvRc()"
_UNUSED_EVENT_TYPES = tuple(
    type(f"_Phase{ord(phase)}", (_PhaseEvent,), {"ph": phase}, tag=phase, gc=False)
    for phase in _UNUSED_PHASES
)
_KNOWN_PHASES = frozenset("XMs" + _UNUSED_PHASES)
TraceEvent = Union[(Event, MetaEvent, FlowStart, *_UNUSED_EVENT_TYPES)]  # type: ignore[valid-type]


class _TopLevel(Struct, gc=False):
    """The keys Kineto writes beside ``traceEvents``; read leniently (any JSON value)."""

    traceEvents: Any = None  # noqa: N815 (JSON name); the events are decoded apart, never here
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    torch_version: Any = None
    pytorch_version: Any = None
    cuda_runtime_version: Any = None
    baseTimeNanoseconds: Any = None  # noqa: N815 (since 2024: ts are relative to it)
    host_name: Any = None


class _TopLevelTail(_TopLevel, gc=False):
    """The keys after the event list; a second ``traceEvents`` is kept undecoded."""

    traceEvents: Union[msgspec.Raw, None] = None  # noqa: N815


_NULL = msgspec.Raw(b"null")


class _ProbeArgs(Struct, gc=False):
    # Raw, not Optional[Raw]: msgspec 0.22 accepts that only as null (every chunk with such
    # an op would fail the probe and be decoded a third time, generically). Kept undecoded
    # for every event of the chunk, used for the ops that need them only.
    input_dims: msgspec.Raw = msgspec.field(default=_NULL, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NULL, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NULL, name="Concrete Inputs")


class _Probe(Struct, gc=False):
    """What is read a second time from a chunk that holds a ``nccl:*`` op or
    ``aten::one_hot``."""

    name: Any = None
    ph: Any = None  # only an X event's own probe counts
    args: Union[_ProbeArgs, None] = None


# Lax: numbers written as strings become numbers in the decoder (torch_npu writes every
# "ts" of an Ascend trace_view.json as a string), as the lenient conversion does; fields
# that may be strings keep them.
_EVENTS_DECODER = msgspec.json.Decoder(list[TraceEvent], strict=False)
_PROBE_DECODER = msgspec.json.Decoder(list[_Probe])
_PROBE_ONE_DECODER = msgspec.json.Decoder(_Probe)
_TAIL_DECODER = msgspec.json.Decoder(_TopLevelTail)
_RAW_DECODER = msgspec.json.Decoder(msgspec.Raw)
_GENERIC_DECODER = msgspec.json.Decoder()


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class EventsByKind(msgspec.Struct):
    """The events the analysis reads, sorted by kind: complete events per category (each
    list in file order, categories in order of first appearance), metadata and flow
    starts. Every other phase is never looked at."""

    by_category: dict[str, list[Event]] = msgspec.field(default_factory=dict)
    metadata: list[MetaEvent] = msgspec.field(default_factory=list)
    flow_starts: list[FlowStart] = msgspec.field(default_factory=list)


def events_by_kind(events: list[Any]) -> EventsByKind:
    """``events`` sorted by kind (category strings left as they are)."""
    sorted_events = EventsByKind()
    by_category = sorted_events.by_category
    metadata = sorted_events.metadata
    flow_starts = sorted_events.flow_starts
    for e in events:
        kind = type(e)
        if kind is Event:
            bucket = by_category.get(e.cat)
            if bucket is None:
                by_category[e.cat] = [e]
            else:
                bucket.append(e)
        elif kind is MetaEvent:
            metadata.append(e)
        elif kind is FlowStart:
            flow_starts.append(e)
    return sorted_events


class TraceData(msgspec.Struct):
    """A decoded trace: the events plus the file-level facts Kineto writes beside them."""

    path: str
    events: list[Any]  # TraceEvent values: Event, MetaEvent, FlowStart or an unused phase
    # ``events`` sorted by kind as they were read (``build_timeline``'s input); None where
    # a TraceData is made otherwise (the timeline then sorts them itself).
    by_kind: EventsByKind | None = None
    device_properties: list[dict[str, Any]] = msgspec.field(default_factory=list)
    distributed_info: dict[str, Any] | None = None
    schema_version: Any = None
    trace_name: str | None = None
    torch_version: str | None = None
    cuda_runtime_version: Any = None
    skipped_events: int = 0  # events dropped because they could not be converted
    repairs: list[str] = msgspec.field(default_factory=list)  # which slow-path repairs were needed
    byte_size: int = 0  # uncompressed JSON size
    chunks: int = 0  # chunks of events decoded
    slow_chunks: int = 0  # of which took the slow (repairing, generic) decode
    base_time_ns: int | None = None  # baseTimeNanoseconds (None: ts are absolute unix us)
    host_name: str | None = None

    @property
    def fast_path(self) -> bool:
        """True when every chunk took the typed msgspec decode (no repair needed)."""
        return self.slow_chunks == 0


_NA_RE = re.compile(rb"(?<=[:\[,])(\s*)N/A(?=\s*[,}\]])")
_BAD_ESCAPE_RE = re.compile(rb'\\(?!["\\/bfnrtu])')
# NaN / Infinity literals (Python's json.dump and some exporters write them; JSON has none):
# they become null, so the event that holds one is dropped or loses that argument.
_NON_FINITE_REPAIR = "NaN / Infinity values read as null"
_NON_FINITE_RE = re.compile(rb"(?<=[:\[,])(\s*)-?(?:NaN|Infinity)(?=\s*[,}\]])")
_UTF8_REPAIR = "invalid UTF-8 bytes replaced"
_INVALID_UTF8 = "Invalid UTF-8"  # msgspec 0.23's DecodeError for it
_NA_REPAIR = "quoted N/A values"
_ESCAPE_REPAIR = "escaped backslashes in Windows paths"
_BYTE_RE = re.compile(r" \(byte (\d+)\)$")
_WS = re.compile(rb"[ \t\r\n]*")
_WS_BYTES = frozenset(b" \t\r\n")
_KEY = b'"traceEvents"'
_KEY_COLON = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*")
_KEY_TAIL = re.compile(rb"[ \t\r\n]*(?::[ \t\r\n]*)?")
_OPEN, _CLOSE, _COMMA, _LBRACE = ord("["), ord("]"), ord(","), ord("{")
NCCL_OP_PREFIX = "nccl:"
_PROBE_NCCL = b'"' + NCCL_OP_PREFIX.encode()
ONE_HOT = "aten::one_hot"
_PROBE_ONE_HOT = b'"' + ONE_HOT.encode() + b'"'
# The same with the key as Kineto writes it: CPython's search skips further past a miss of
# a longer needle, and `"nccl:` ends in a byte JSON is full of (a 54 MB NCCL trace: 28 ms
# for the short needle, 16 ms for this one). The short needle is the fallback.
_NAME_KEY = b'"name": '
_PROBE_NCCL_KEYED = _NAME_KEY + _PROBE_NCCL
_PROBE_ONE_HOT_KEYED = _NAME_KEY + _PROBE_ONE_HOT
# The end of the event a probe hit is in, as Kineto lays it out: the first "}" after the hit
# followed by a separator. Only a guess: the decode of exactly that much says if it was.
_EVENT_END = re.compile(rb"\}[ \t\r\n]*[,\]]")
_ELEMENT_BEFORE = frozenset(b",[")
_EVENT_NAME = attrgetter("name")  # every phase's type has one ("" where it is not written)
_TOO_DEEP = "JSON nested too deeply to decode (not a PyTorch profiler trace?)"
_GZIP_MAGIC = b"\x1f\x8b"


# ----- inflating ------------------------------------------------------------------------


def _gzip_error(path: str, exc: zlib.error) -> TraceReadError:
    text = str(exc)
    if "incomplete" in text or "truncated" in text:
        return TraceReadError(path, "truncated gzip data (still being written?)")
    detail = text.split(": ", 1)[-1]  # drop zlib's "Error -3 while decompressing data"
    return TraceReadError(path, f"corrupt gzip data: {detail}")


def _inflate(path: str, handle: IO[bytes], first: bytes, piece: int) -> Iterator[bytes]:
    """The inflated bytes of a gzip file whose first bytes are ``first``, in pieces of at
    most ``piece`` bytes. Incremental, so members of any size (the gzip size trailer wraps
    at 4 GiB and is not used) and concatenated members work; bytes after the last member
    that do not start another one are ignored, as gzip(1) does."""
    inflater = zlib.decompressobj(31)
    pending = first
    produced = False
    while True:
        if inflater.eof:
            rest = inflater.unused_data
            while len(rest) < 2:
                more = handle.read(_INFLATE_INPUT_BYTES)
                if not more:
                    break
                rest += more
            if rest[:2] != _GZIP_MAGIC:
                if not produced and rest:
                    raise TraceReadError(path, "corrupt gzip data: not a valid gzip stream")
                return  # the end, or trailing garbage after a complete stream
            inflater = zlib.decompressobj(31)
            pending = rest
            continue
        data = inflater.unconsumed_tail
        if not data:
            data, pending = pending or handle.read(_INFLATE_INPUT_BYTES), b""
        try:
            if data:
                out = inflater.decompress(data, piece)
            else:
                # The end of the file: zlib may still hold output (the rest of a match).
                out = inflater.flush()
                if not inflater.eof:
                    if out:
                        yield out
                    # A gzip stream without its end marker is what a trace still being
                    # written looks like.
                    raise TraceReadError(path, "truncated gzip data (still being written?)")
        except zlib.error as exc:
            raise _gzip_error(path, exc) from exc
        if out:
            produced = True
            yield out


_INITIAL_BUFFER_BYTES = 64 * 1024


_RESERVE_SLACK_BYTES = 4096


def _json_size_hint(handle: IO[bytes]) -> int | None:
    """About how many bytes of JSON the open file holds (its size, or for gzip the size
    its trailer gives, which is mod 4 GiB and the last member's only: a hint); None where
    the file cannot say. Leaves ``handle`` at its start."""
    try:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(0)
        if size < 18 or handle.read(2) != _GZIP_MAGIC:
            return size
        handle.seek(size - 4)
        inflated = int.from_bytes(handle.read(4), "little")
        return inflated if 0 < inflated <= size * 1100 else None  # deflate: at most ~1032x
    except (OSError, ValueError):
        return None  # not seekable (a pipe): read as it comes
    finally:
        try:
            handle.seek(0)
        except (OSError, ValueError):
            pass


def _piece_bytes(chunk_bytes: int) -> int:
    """Inflated bytes read at once: small, so that no large block is allocated per piece."""
    return max(2, min(chunk_bytes, _READ_BYTES))


def _pieces(path: str, handle: IO[bytes], piece: int) -> Iterator[bytes]:
    """The JSON bytes of an open trace file, inflated if it is gzip, in pieces."""
    first = handle.read(min(_READ_BYTES, piece))
    if not first:
        raise TraceReadError(path, "empty file")
    if first[:2] == _GZIP_MAGIC:
        yield from _inflate(path, handle, first, piece)
        return
    yield first
    while True:
        data = handle.read(piece)
        if not data:
            return
        yield data


def gunzip(path: str, raw: bytes) -> bytes:
    """``raw`` inflated when it is gzip (by its magic bytes, not the name), else as is.
    Raises ``TraceReadError`` for corrupt or truncated gzip data. (Holds the whole JSON:
    for exporting a trace; the reader itself inflates incrementally.)"""
    if raw[:2] != _GZIP_MAGIC:
        return raw
    # The gzip trailer holds the inflated size mod 2**32: inflating into one buffer of that
    # size avoids a list of pieces joined at the end (2x the JSON at the peak). A bound keeps
    # a garbled trailer from reserving gigabytes; anything else (several members, trailing
    # bytes, a member over 4 GiB) is inflated piece by piece.
    expected = int.from_bytes(raw[-4:], "little")
    if 0 < expected <= len(raw) * 1100:  # deflate cannot inflate more than ~1032x
        try:
            inflater = zlib.decompressobj(31)
            data = inflater.decompress(raw, expected)
            if inflater.eof and not inflater.unused_data and len(data) == expected:
                return data
            del data
        except zlib.error:
            pass
    return b"".join(_inflate(path, io.BytesIO(raw), b"", 64 << 20))


def decode_document(path: str, raw: bytes) -> tuple[Any, list[str]]:
    """The whole JSON document of a trace file's bytes (gzip or not), read with the same
    repairs as the event decode (N/A, NaN / Infinity, Windows backslashes, invalid UTF-8),
    and the names of the repairs it needed. Raises ``TraceReadError`` as the reader does
    (truncated, nested too deeply, not JSON). Holds the whole document: for writing the
    trace out again (the annotated trace), never for analysis."""
    if not raw:
        raise TraceReadError(path, "empty file")
    text = gunzip(path, raw)
    repairs: list[str] = []
    try:
        return _repair_decode(path, text, repairs), repairs
    except MemoryError:
        raise TraceReadError(path, "out of memory while reading the trace") from None


# ----- repairs and lenient conversion ----------------------------------------------------


class _BadCut(Exception):
    """A chunk did not end at an element boundary; ``list_end``, when the decoder found the
    event list closed before the cut: the chunk offset of the first byte after it."""

    def __init__(self, list_end: int | None = None) -> None:
        super().__init__()
        self.list_end = list_end


def _needle_hits(buf: bytearray, needle: bytes, lo: int, hi: int) -> list[int]:
    """Every offset of ``needle`` in ``buf[lo:hi]``."""
    hits = []
    at = buf.find(needle, lo, hi)
    while at >= 0:
        hits.append(at)
        at = buf.find(needle, at + 1, hi)
    return hits


def _probe_at(view: memoryview, start: int, end: re.Match[bytes] | None, k: int) -> Any:
    """The probe of the event whose ``{`` is at ``start``: decoded up to the ``}`` of
    ``end`` where that is where the event ends, else up to the end of the chunk (``k``)
    and again up to where msgspec says the value ended. None where it does not decode."""
    if end is not None:
        try:
            return _PROBE_ONE_DECODER.decode(view[start : end.start() + 1])
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass  # not the event's end: a "}" followed by a separator inside a string
    try:
        return _PROBE_ONE_DECODER.decode(view[start : k + 1])
    except msgspec.DecodeError as exc:
        message = str(exc)
        length = _error_byte(message) if "trailing characters" in message else None
        if length is None:
            return None
        try:
            return _PROBE_ONE_DECODER.decode(view[start : start + length])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
    except msgspec.ValidationError:
        return None


def _set_probed_args(probes: list[Any], events: list[Any]) -> None:
    """Copy what the probes read onto their events (parallel lists)."""
    for probe, event in zip(probes, events, strict=True):
        if probe.args is None or getattr(event, "args", None) is None:
            continue
        if isinstance(probe.name, str) and probe.name.startswith(NCCL_OP_PREFIX):
            event.args.input_dims = _GENERIC_DECODER.decode(probe.args.input_dims)
            event.args.input_type = _GENERIC_DECODER.decode(probe.args.input_type)
        elif probe.name == ONE_HOT:
            event.args.concrete_inputs = _GENERIC_DECODER.decode(probe.args.concrete_inputs)


def _error_byte(message: str) -> int | None:
    """The offset msgspec names in a DecodeError message (of the offending byte)."""
    match = _BYTE_RE.search(message)
    if match is None:
        return None
    byte = int(match.group(1))
    # msgspec counts "trailing characters" one past the character it complains about.
    return byte - 1 if "trailing characters" in message else byte


def _readable(message: str, offset: int) -> str:
    """msgspec's message with its byte position made absolute in the file's JSON."""
    byte = _error_byte(message)
    if byte is None or not offset:
        return message
    return _BYTE_RE.sub(f" (byte {byte + offset})", message)


def _repaired(text: bytes, done: list[str]) -> tuple[bytes, str] | None:
    """``text`` with the next repair that changes it applied, and that repair's name."""
    if _NA_REPAIR not in done and b"N/A" in text:
        fixed = _NA_RE.sub(rb'\1"N/A"', text)
        if fixed != text:
            return fixed, _NA_REPAIR
    if _NON_FINITE_REPAIR not in done and (b"NaN" in text or b"Infinity" in text):
        fixed = _NON_FINITE_RE.sub(rb"\1null", text)
        if fixed != text:
            return fixed, _NON_FINITE_REPAIR
    if _ESCAPE_REPAIR not in done and b"\\" in text:
        # "Invalid \escape", or another message once N/A was fixed.
        fixed = _BAD_ESCAPE_RE.sub(rb"\\\\", text)
        if fixed != text:
            return fixed, _ESCAPE_REPAIR
    return None


def _repair_decode(
    path: str, text: bytes, repairs: list[str], *, offset: int = 0, cut: bool = False
) -> Any:
    """Decode ``text`` as generic JSON, repairing what the module docstring lists; the
    repairs made are appended to ``repairs`` (once each).

    ``cut``: ``text`` is a chunk ``[`` + elements + ``]`` whose end was a guess: an error
    at that end, or the list closing before it, raises ``_BadCut``. ``offset``: where
    ``text`` starts in the file's JSON, for messages."""
    done: list[str] = []
    try:
        while True:
            try:
                return _GENERIC_DECODER.decode(text)
            except RecursionError:
                raise TraceReadError(path, _TOO_DEEP) from None
            except (UnicodeDecodeError, msgspec.DecodeError) as exc:
                # msgspec before 0.23 raised UnicodeDecodeError for invalid UTF-8, 0.23 a
                # DecodeError saying "Invalid UTF-8 encoded string".
                message = str(exc)
                if isinstance(exc, UnicodeDecodeError) or _INVALID_UTF8 in message:
                    if _UTF8_REPAIR in done:
                        raise TraceReadError(path, "not UTF-8 text (not a JSON trace?)") from None
                    # A name in another encoding (a Latin-1 file path): keep the event, with
                    # U+FFFD for the bytes that do not decode.
                    text = text.decode("utf-8", "replace").encode("utf-8")
                    done.append(_UTF8_REPAIR)
                    continue
                byte = _error_byte(message)
                truncated = "truncated" in message.lower()
                if cut and (truncated or (byte is not None and byte >= len(text) - 1)):
                    raise _BadCut() from None
                if cut and "trailing characters" in message:
                    raise _BadCut(list_end=byte) from None
                if truncated:
                    raise TraceReadError(path, "truncated JSON (still being written?)") from None
                fixed = _repaired(text, done)
                if fixed is None:
                    raise TraceReadError(
                        path, f"invalid JSON: {_readable(message, offset)}"
                    ) from None
                text, repair = fixed
                done.append(repair)
    finally:
        repairs.extend(r for r in done if r not in repairs)


def _as_time(value: Any) -> float | None:
    """A time value as the lenient conversion reads it; None if it is no number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return float("inf")
    return None


class _Counts:
    """What the slow path skipped or changed, over all chunks."""

    def __init__(self) -> None:
        self.malformed = 0  # entries that could not be converted
        self.not_objects = 0  # of them, entries that are no JSON object at all
        self.bad_times = 0  # events dropped for non-finite or absurd times
        self.no_start = 0  # complete events and flow starts dropped for having no ``ts``
        self.clamped = 0  # negative durations set to 0


def _fix_times(raw: dict[str, Any], counts: _Counts) -> bool:
    """Bring a raw event's ``ts`` / ``dur`` within the decoder's bounds: a negative duration
    of an event with a sane start becomes 0; an event whose times are not finite or absurd
    is dropped (False). Values that are no number at all are left for the conversion to
    reject (the event is then skipped as malformed)."""
    ph = raw.get("ph")
    if ph != "X" and ph != "s":
        return True
    if "ts" not in raw:
        counts.no_start += 1
        return False
    ts = _as_time(raw["ts"])
    dur = _as_time(raw["dur"]) if (ph == "X" and "dur" in raw) else 0.0
    # NaN fails every comparison: it is never "finite and negative" below.
    ts_ok = ts is None or -_MAX_ABS_TS_US <= ts <= _MAX_ABS_TS_US
    if dur is not None and not 0.0 <= dur <= _MAX_DUR_US:
        if ts_ok and -_MAX_DUR_US <= dur < 0.0:
            raw["dur"] = 0.0
            counts.clamped += 1
        else:
            counts.bad_times += 1
            return False
    if not ts_ok:
        counts.bad_times += 1
        return False
    return True


def _lenient_events(raw_events: list[Any], counts: _Counts) -> list[Any]:
    """Convert events one by one with type coercion; drop (and count) hopeless ones.

    Events without a known ``ph`` are dropped uncounted: no stage could use them anyway."""
    kept: list[Any] = []
    for raw in raw_events:
        if not isinstance(raw, dict):
            counts.malformed += 1
            counts.not_objects += 1
        elif isinstance(raw.get("ph"), str) and raw["ph"] in _KNOWN_PHASES:
            if _fix_times(raw, counts):
                kept.append(raw)
    # The keys no decoder fills (``Args.input_dims``): set aside and attached after.
    nccl_inputs: dict[int, tuple[Any, Any]] = {}
    one_hot_inputs: dict[int, Any] = {}
    for i, raw in enumerate(kept):
        args = raw.get("args")
        name = raw.get("name")
        if isinstance(args, dict) and isinstance(name, str) and name.startswith(NCCL_OP_PREFIX):
            nccl_inputs[i] = (args.get("Input Dims"), args.get("Input type"))
        elif isinstance(args, dict) and name == ONE_HOT:
            one_hot_inputs[i] = args.get("Concrete Inputs")
    events = _convert_events(kept)
    for i, (dims, types) in nccl_inputs.items():
        event = events[i]
        if event is not None and getattr(event, "args", None) is not None:
            event.args.input_dims, event.args.input_type = dims, types
    for i, concrete in one_hot_inputs.items():
        event = events[i]
        if event is not None and getattr(event, "args", None) is not None:
            event.args.concrete_inputs = concrete
    good = [e for e in events if e is not None]
    counts.malformed += len(events) - len(good)
    return good


def _convert_events(raw_events: list[Any]) -> list[Any]:
    """Each raw event converted, or None where it cannot be (same length and order)."""
    try:
        return msgspec.convert(raw_events, list[TraceEvent], strict=False)
    except msgspec.ValidationError:
        pass
    events: list[Any] = []
    for raw in raw_events:
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
            events.append(None)
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
    return events


# ----- the streaming decoder --------------------------------------------------------------


class _WholeDocument(Exception):
    """The event list is not where Kineto writes it: decode the (small) document whole."""


class _Reader:
    """Decode one trace from its inflated pieces; see the module docstring.

    The JSON being looked at is ``buf[lo:hi]`` of one buffer allocated once (grown only for
    an event larger than a chunk): no large block is allocated and freed per chunk, which
    would leave the C heap fragmented (the process then keeps ~0.6x the JSON in holes)."""

    def __init__(
        self, path: str, pieces: Iterator[bytes], chunk_bytes: int, max_held_bytes: int
    ) -> None:
        self.path = path
        self.pieces = pieces
        self.chunk_bytes = max(chunk_bytes, 1)
        self.max_held = max(max_held_bytes, 1)
        # Starts small and doubles up to what the trace needs (``_make_room``): a full-size
        # buffer, zeroed for every trace, cost 1.7 ms per file, most of the time of a small
        # trace (1,000 rank traces of 3 KB: 1.7 s).
        self.buf = bytearray(
            min(_INITIAL_BUFFER_BYTES, 2 * self.chunk_bytes + 2 * _piece_bytes(chunk_bytes))
        )
        self.lo = self.hi = 0
        self.base = 0  # offset of buf[0] in the file's JSON (for messages)
        self.total = 0  # JSON bytes read so far
        self.eof = False
        self.events: list[Any] = []
        self.by_kind = EventsByKind()
        # Per category: one string object shared by its events, and its list in
        # ``by_kind`` (see ``_keep``).
        self.categories: dict[str, tuple[str, list[Event]]] = {}
        self.entries = 0  # elements of the event list, trace events or not
        self.repairs: list[str] = []
        self.counts = _Counts()
        self.chunks = 0
        self.slow_chunks = 0
        self.top: dict[str, Any] = {}
        self.after_element = False  # buf[lo] is whitespace after an element, not a separator

    # -- buffer -----------------------------------------------------------------------------
    def _fill(self, drop_whitespace: bool = False) -> bool:
        """Append the next piece; False at the end of the file. May move the held bytes to
        the front of the buffer (``lo`` becomes 0): callers keep offsets from ``lo``.

        ``drop_whitespace``: a piece of only whitespace is not kept (outside the event list
        a hostile file may hold gigabytes of it); one space still separates the tokens
        around it, and offsets in messages past it are off by what was dropped."""
        if self.eof:
            return False
        piece = next(self.pieces, None)
        if piece is None:
            self.eof = True
            return False
        self.total += len(piece)
        if drop_whitespace and piece.isspace():
            if self.hi == self.lo:
                self.lo = self.hi = 0
                self.base = self.total
                return True
            if self.buf[self.hi - 1] in _WS_BYTES:
                return True
            piece = b" "
        n = len(piece)
        if self.hi + n > len(self.buf):
            self._make_room(n)
        self.buf[self.hi : self.hi + n] = piece
        self.hi += n
        return True

    def reserve(self, json_bytes: int) -> None:
        """Size the buffer, before the first piece, for a file of about ``json_bytes`` of
        JSON: all of it where it is less than a chunk, else a chunk and the pieces around
        it. Doubling from a small buffer allocated and zeroed twice what it ends at (the
        pages of a fresh block are most of that cost: 27 ms of a 54 MB read)."""
        if self.hi == 0:
            piece = _piece_bytes(self.chunk_bytes)
            size = min(json_bytes + _RESERVE_SLACK_BYTES, self.chunk_bytes + 2 * piece)
            if size > len(self.buf):
                self.buf = bytearray(size)

    def _make_room(self, n: int) -> None:
        live = self.hi - self.lo
        if self.lo:
            with memoryview(self.buf) as view:
                view[:live] = view[self.lo : self.hi]
            self.base += self.lo
            self.lo, self.hi = 0, live
        if live + n > len(self.buf):
            grown = bytearray(max(2 * len(self.buf), live + n))
            grown[:live] = self.buf[:live]
            self.buf = grown

    def _offset(self, index: int) -> int:
        """Where ``buf[index]`` is in the file's JSON."""
        return self.base + index

    def _too_large(self, what: str) -> TraceReadError:
        return TraceReadError(
            self.path,
            f"{what} larger than {self.max_held >> 20} MiB at byte "
            f"{self._offset(self.lo)} of the JSON: not a PyTorch profiler trace, "
            "or a damaged one",
        )

    def _read_rest(self, what: str) -> None:
        while self._fill(drop_whitespace=True):
            if self.hi - self.lo > self.max_held:
                raise self._too_large(what)

    # -- the document -----------------------------------------------------------------------
    def read(self) -> TraceData:
        first = self._skip_whitespace()
        if first not in (_LBRACE, _OPEN):
            return self._whole_document()
        if first == _LBRACE:
            try:
                self._object_header()
            except _WholeDocument:
                return self._whole_document()
        self._event_list()
        self._tail(is_object=first == _LBRACE)
        return self._result()

    def _skip_whitespace(self) -> int:
        """Drop leading whitespace (any amount: none of it is kept); the byte after it."""
        while True:
            self.lo = _WS.match(self.buf, self.lo, self.hi).end()
            if self.lo < self.hi:
                return self.buf[self.lo]
            self.lo = self.hi = 0
            self.base = self.total
            if not self._fill(drop_whitespace=True):
                raise TraceReadError(self.path, "empty file (no JSON in it)")

    def _whole_document(self) -> TraceData:
        """A document whose event list is not where Kineto writes it (or that has none):
        decoded whole for an exact answer; the size limit keeps that bounded."""
        self._read_rest("a JSON document without a 'traceEvents' list")
        text = bytes(self.buf[self.lo : self.hi])
        doc = _repair_decode(self.path, text, self.repairs, offset=self._offset(self.lo))
        del text
        self.lo = self.hi
        if isinstance(doc, list):
            raw_events, top = doc, {}
        elif isinstance(doc, dict):
            raw_events = doc.get("traceEvents")
            if raw_events is None:
                raise TraceReadError(
                    self.path, "not a PyTorch profiler trace: no 'traceEvents' list"
                )
            if not isinstance(raw_events, list):
                raise TraceReadError(self.path, "'traceEvents' is not a list")
            top = doc
        else:
            kind = {str: "a string", bool: "a boolean", type(None): "null"}.get(
                type(doc), "a number"
            )
            raise TraceReadError(
                self.path,
                f"not a PyTorch profiler trace: the JSON is {kind}, not a trace "
                "object or an array of events",
            )
        self.top = top
        self.entries = len(raw_events)
        self.chunks = self.slow_chunks = 1
        self.events = _lenient_events(raw_events, self.counts)
        self.by_kind = events_by_kind(self.events)
        return self._result()

    def _object_header(self) -> None:
        """Find the top-level ``"traceEvents": [`` and read the keys before it; ``lo`` is
        then at that ``[``. Raises ``_WholeDocument`` when there is none."""
        search = 1  # from lo
        while True:
            buf = self.buf
            k = buf.find(_KEY, self.lo + search, self.hi)
            if k < 0:
                if self.hi - self.lo > self.max_held:
                    raise self._too_large("the JSON before a 'traceEvents' list")
                search = max(1, self.hi - self.lo - len(_KEY))
                if not self._fill(drop_whitespace=True):
                    raise _WholeDocument()
                continue
            after = _KEY_TAIL.match(buf, k + len(_KEY), self.hi).end()
            if after >= self.hi and not self.eof:
                search = k - self.lo
                self._fill(drop_whitespace=True)
                continue  # see the first byte after `"traceEvents" :`
            colon = _KEY_COLON.match(buf, k + len(_KEY), self.hi)
            if colon is None or not self._is_top_level_key(k):
                search = k + 1 - self.lo  # a value, or a key of a nested object
                continue
            start = colon.end()
            if start >= self.hi or buf[start] != _OPEN:
                raise _WholeDocument()  # null, an object, ...: the whole path says what
            self.lo = start
            return

    def _is_top_level_key(self, k: int) -> bool:
        """Whether the ``"traceEvents"`` at ``k`` is a key of the top-level object: the JSON
        before it, closed right after it, must decode (its keys are then kept)."""
        prefix = bytes(self.buf[self.lo : k]).rstrip()
        if not prefix.endswith((b"{", b",")):
            return False
        repairs: list[str] = []
        try:
            top = _repair_decode(
                self.path, prefix + b'"traceEvents":null}', repairs, offset=self._offset(self.lo)
            )
        except TraceReadError as exc:
            if exc.reason == _TOO_DEEP:
                raise
            return False
        if not isinstance(top, dict):
            return False
        self.top = top
        self.repairs.extend(r for r in repairs if r not in self.repairs)
        return True

    def _event_list(self) -> None:
        """Decode the event list chunk by chunk. On entry ``buf[lo]`` is its ``[``; each
        round ``buf[lo]`` is the ``[`` or the ``,`` before the next element; on exit ``lo``
        is right after the list's ``]``."""
        while True:
            while not self.eof and self.hi - self.lo < self.chunk_bytes:
                self._fill(drop_whitespace=self._between_elements())
            found = self._cut_and_decode(self.lo)
            if found is None:  # not one whole element after lo yet
                if self.eof:
                    raise TraceReadError(self.path, "truncated JSON (still being written?)")
                if self.hi - self.lo > self.max_held:
                    raise self._too_large("one event")
                # One more piece: the element is longer than what is held.
                self._fill(drop_whitespace=self._between_elements())
                continue
            end, closed = found
            if self.entries >= _MAX_ENTRIES_WITHOUT_EVENTS and not self.events:
                raise self._not_a_trace()
            if closed:
                self.lo = end + 1
                return
            self.lo = end

    def _between_elements(self) -> bool:
        """Whether only whitespace follows the separator (or the element) ending at ``lo``:
        more whitespace then means nothing, and what is held of it is dropped (so this
        check stays cheap)."""
        if _WS.match(self.buf, self.lo + 1, self.hi).end() < self.hi:
            return False
        self.hi = self.lo + 1
        return True

    def _not_a_trace(self) -> TraceReadError:
        # Events with a 'ph' but times or fields no reader takes ("ts": "abc") are said as
        # that: "an object with a 'ph'" sent the user looking for a 'ph' that was there.
        counts = self.counts
        unreadable = [
            f"{n} {'entry' if n == 1 else 'entries'} {what}"
            for n, what in (
                (counts.not_objects, "that are no object"),
                (
                    counts.malformed - counts.not_objects,
                    "with a field of the wrong type (a 'ts' that is no number?)",
                ),
                (counts.no_start, "without a 'ts'"),
                (counts.bad_times, "with times no profiler writes"),
            )
            if n
        ]
        return TraceReadError(
            self.path,
            f"not a PyTorch profiler trace: none of the {self.entries} entries of "
            "its event list is a readable trace event (an object with a 'ph')"
            + (f": {', '.join(unreadable)}" if unreadable else ""),
        )

    def _cut_and_decode(self, pos: int) -> tuple[int, bool] | None:
        """Decode the longest run of whole elements after ``pos`` that ends at a cut
        candidate. Returns (index of the "," or "]" after it, whether that is the list's
        end), or None when no element is whole yet."""
        buf, end = self.buf, self.hi
        first = _WS.match(buf, pos + 1, end).end()
        if self.after_element:
            # buf[pos] is whitespace after an element: the separator is still to come.
            if first >= end:
                return None
            if buf[first] == _CLOSE:
                self.after_element = False
                return first, True
            if buf[first] != _COMMA:
                raise TraceReadError(
                    self.path,
                    f"invalid JSON: expected ',' or ']' after an event (byte "
                    f"{self._offset(first)})",
                )
            self.after_element = False
            self.lo = pos = first
            first = _WS.match(buf, pos + 1, end).end()
        elif first < end and buf[first] == _CLOSE and buf[pos] == _OPEN:
            return first, True  # an empty list
        hi = end
        tries = 0
        while tries < 8:
            j = buf.rfind(b"}", pos + 1, hi)
            if j < 0:
                break
            hi = j
            k = _WS.match(buf, j + 1, end).end()
            if k >= end and j + 1 < end:
                # Only whitespace after this "}" so far (maybe a lot of it): cut right
                # after it, on that whitespace; the separator is looked for next round.
                tries += 1
                try:
                    self._decode_chunk(pos, j + 1)
                except _BadCut:
                    continue
                self.after_element = True
                return j + 1, False
            if k >= end or (buf[k] != _COMMA and buf[k] != _CLOSE):
                continue
            tries += 1
            try:
                self._decode_chunk(pos, k)
            except _BadCut as bad:
                if bad.list_end is not None:
                    hi = min(hi, pos + bad.list_end)
                continue
            return k, buf[k] == _CLOSE
        return self._walk(pos)

    def _walk(self, pos: int) -> tuple[int, bool] | None:
        """Step over elements one at a time with msgspec's parser (exact, slower): for
        elements that are not objects, or when no ``}`` candidate was a boundary."""
        buf = self.buf
        last: tuple[int, bool] | None = None
        p = pos
        with memoryview(buf) as view:
            for _ in range(_MAX_ENTRIES_WITHOUT_EVENTS):
                try:
                    _RAW_DECODER.decode(view[p + 1 : self.hi])
                    break  # one value up to the end of what was read: maybe not whole
                except RecursionError:
                    raise TraceReadError(self.path, _TOO_DEEP) from None
                except msgspec.DecodeError as exc:
                    message = str(exc)
                    if "trailing characters" not in message:
                        break  # not whole yet, or malformed: the chunk decode says which
                    q = p + 1 + (_error_byte(message) or 0)
                    if buf[q] == _COMMA:
                        last, p = (q, False), q
                        continue
                    if buf[q] == _CLOSE:
                        last = (q, True)
                    break
        if last is None:
            if self.eof and self.hi > pos + 1:
                # Nothing more will come: decode what there is, for the exact error.
                self._decode_chunk(pos, self.hi - 1, at_end=True)
            return None
        try:
            self._decode_chunk(pos, last[0])
        except _BadCut:
            raise TraceReadError(
                self.path, f"invalid JSON near byte {self._offset(last[0])}"
            ) from None
        return last

    def _decode_chunk(self, a: int, k: int, at_end: bool = False) -> None:
        """Decode ``buf[a..k]`` as ``[`` elements ``]`` (the bytes at ``a`` and ``k`` are
        overwritten for the decode, then restored) and keep its events. Raises ``_BadCut``
        when ``k`` is no element boundary. ``at_end``: the last bytes of the file, as they
        are (for the error they make)."""
        buf = self.buf
        saved_a, saved_k = buf[a], buf[k]
        buf[a] = _OPEN
        if not at_end:
            buf[k] = _CLOSE
        events: list[Any] | None = None
        try:
            with memoryview(buf) as view, view[a : k + 1] as chunk:
                try:
                    events = self.decoder.decode(chunk)
                except msgspec.DecodeError as exc:
                    message = str(exc)
                    byte = _error_byte(message)
                    if not at_end and (
                        "truncated" in message.lower() or (byte is not None and byte >= k - a)
                    ):
                        raise _BadCut() from None
                    if "trailing characters" in message:
                        raise _BadCut(list_end=byte) from None
                except (msgspec.ValidationError, UnicodeDecodeError):
                    pass  # the slow path converts what it can
                except RecursionError:
                    raise TraceReadError(self.path, _TOO_DEEP) from None
                if events is None:
                    raw = bytes(chunk)
                else:
                    self._decoded(view, a, k, events)
        finally:
            buf[a], buf[k] = saved_a, saved_k
        self.chunks += 1
        if events is None:
            events = self._slow_chunk(raw, a, at_end)
        else:
            self.entries += len(events)
        self._keep(events)

    # The two hooks a reader of another kind (``windows``: the events' times, or each
    # event's own bytes) replaces, with ``decoder``; everything else is shared.
    decoder: msgspec.json.Decoder = _EVENTS_DECODER

    def _decoded(self, view: memoryview, a: int, k: int, events: list[Any]) -> None:
        """After the fast decode of ``buf[a..k]`` (still closed as a list in ``view``).

        Whether the chunk has an op to probe is read from its decoded names (a few hundred
        distinct ones), not by searching its bytes: those searches were 37 ms of every
        54 MB read, with or without such an op."""
        one_hot = self._one_hot_inputs_wanted()
        probed = {
            name
            for name in set(map(_EVENT_NAME, events))
            if name.startswith(NCCL_OP_PREFIX) or (one_hot and name == ONE_HOT)
        }
        if probed and not self._probe_each(view, a, k, events, probed):
            with view[a : k + 1] as chunk:
                self._attach_probed_args(chunk, events)

    def _one_hot_inputs_wanted(self) -> bool:
        """Whether ``aten::one_hot``'s inputs are worth a probe: only a trace recorded with
        shapes has them, and only one without a GPU has a latent finding they settle (a
        GPU trace's one_hot reads or not by itself; probing its chunks cost 5-13 %)."""
        top = self.top
        return (
            bool(top.get("record_shapes"))
            and not top.get("deviceProperties")
            and top.get("cuda_runtime_version") is None
        )

    def _keep(self, events: list[Any]) -> None:
        """Keep a chunk's events, sorted by kind for the timeline (one pass over them
        while the chunk is fresh in the cache, instead of a second pass over all events
        later), each category string shared: a dozen distinct values among 10^5 events,
        each its own 55-65 byte object as decoded (7 MB of a 54 MB trace), and the later
        stages' category checks read a few hot strings instead of scattered ones. (Names
        would save as much again, but hashing them cost 15 % of the read.)"""
        categories = self.categories
        by_kind = self.by_kind
        metadata = by_kind.metadata
        flow_starts = by_kind.flow_starts
        for e in events:
            kind = type(e)
            if kind is Event:
                shared = categories.get(e.cat)
                if shared is None:
                    cat = e.cat
                    shared = categories[cat] = (cat, [])
                    by_kind.by_category[cat] = shared[1]
                e.cat = shared[0]
                shared[1].append(e)
            elif kind is MetaEvent:
                metadata.append(e)
            elif kind is FlowStart:
                flow_starts.append(e)
        self.events += events

    def _slow_chunk(self, raw: bytes, a: int, at_end: bool) -> list[Any]:
        repairs: list[str] = []
        doc = _repair_decode(self.path, raw, repairs, offset=self._offset(a), cut=not at_end)
        self.repairs.extend(r for r in repairs if r not in self.repairs)
        self.slow_chunks += 1
        if not isinstance(doc, list):  # cannot be: the chunk starts with "["
            raise TraceReadError(self.path, "invalid JSON: the event list is not an array")
        self.entries += len(doc)
        return _lenient_events(doc, self.counts)

    def _probe_each(
        self,
        view: memoryview,
        a: int,
        k: int,
        events: list[Any],
        probed: set[str],
    ) -> bool:
        """``_attach_probed_args`` for the few events that need it, each decoded alone
        from where its name is in the bytes (a chunk holds ~10^4 events and a handful of
        these: decoding all of them again was 0.13 s of a 2023 NCCL rank's 1.2 s). False,
        with nothing set, when the bytes and the events do not line up one to one (the
        caller then probes the whole chunk). ``probed``: the chunk's names of ops to probe
        (only their needles are searched)."""
        # The events are picked by name in C (a set lookup of a hashed name), then by type:
        # a Python test of each event's name was 30 ms of a 20 MB read with shapes.
        named = compress(events, map(probed.__contains__, map(_EVENT_NAME, events)))
        wanted = [e for e in named if type(e) is Event]
        if not wanted:
            return True  # the names were of events of other phases: nothing to probe
        if len(wanted) > len(events) // 8:
            return False  # as many decodes alone as the chunk again: probe it whole
        nccl = any(name.startswith(NCCL_OP_PREFIX) for name in probed)
        one_hot = ONE_HOT in probed
        for keyed in (True, False):
            skip = len(_NAME_KEY) if keyed else 0  # hits at the name's opening quote
            needles = [
                *([_PROBE_NCCL_KEYED if keyed else _PROBE_NCCL] if nccl else []),
                *([_PROBE_ONE_HOT_KEYED if keyed else _PROBE_ONE_HOT] if one_hot else []),
            ]
            hits = sorted(
                at + skip for needle in needles for at in _needle_hits(self.buf, needle, a, k)
            )
            if len(hits) == len(wanted):
                probes = self._probes_at(view, a, k, hits, wanted)
                if probes is not None:
                    _set_probed_args(probes, wanted)
                    return True
        return False

    def _probes_at(
        self, view: memoryview, a: int, k: int, hits: list[int], wanted: list[Any]
    ) -> list[Any] | None:
        """The probe of each event of ``wanted`` from the name hit at the same place in
        ``hits``; None when one does not decode there or names another event."""
        buf = self.buf
        probes = []
        for at, event in zip(hits, wanted, strict=True):
            start = buf.rfind(b"{", a, at)
            if start < 0:
                return None
            # An element of the list starts after "[" or ",": a "{" after ":" is an object
            # inside some event's args ("meta": {"name": "nccl:..."}).
            before = start - 1
            while before > a and buf[before] in _WS_BYTES:
                before -= 1
            if buf[before] not in _ELEMENT_BEFORE:
                return None
            probe = _probe_at(view, start, _EVENT_END.search(buf, at, k + 1), k)
            # Another phase's event of that name (an instant) is no X event's own: in a file
            # where another writer left the X event without the space the keyed needle has,
            # the counts of hits and events could still agree.
            if probe is None or probe.ph != "X" or probe.name != event.name:
                return None  # the "{" was not this event's own (a key before "name")
            probes.append(probe)
        return probes

    def _attach_probed_args(self, chunk: memoryview, events: list[Any]) -> None:
        """Set ``args.input_dims`` / ``input_type`` on the chunk's ``nccl:*`` ops (2023
        collective sizes), ``args.concrete_inputs`` on its ``aten::one_hot``."""
        try:
            probes = _PROBE_DECODER.decode(chunk)
        except (msgspec.ValidationError, msgspec.DecodeError):
            probes = None  # odd args on an event of a phase nobody reads
        if probes is not None and len(probes) == len(events):
            _set_probed_args(probes, events)
            del probes
            return
        for raw, event in zip(_GENERIC_DECODER.decode(chunk), events, strict=True):
            args = raw.get("args") if isinstance(raw, dict) else None
            if not isinstance(args, dict) or getattr(event, "args", None) is None:
                continue
            name = raw.get("name")
            if isinstance(name, str) and name.startswith(NCCL_OP_PREFIX):
                event.args.input_dims = args.get("Input Dims")
                event.args.input_type = args.get("Input type")
            elif name == ONE_HOT:
                event.args.concrete_inputs = args.get("Concrete Inputs")

    def _tail(self, is_object: bool) -> None:
        """Check and read what follows the event list (the other top-level keys)."""
        self._read_rest("the JSON after the event list")
        tail = bytes(self.buf[self.lo : self.hi]).strip()
        offset = self._offset(self.lo)
        self.lo = self.hi
        if not is_object:
            if tail:
                raise TraceReadError(
                    self.path,
                    f"invalid JSON: trailing characters after the event list (byte {offset})",
                )
            return
        if not tail:
            raise TraceReadError(self.path, "truncated JSON (still being written?)")
        if tail[:1] == b"}":
            if tail[1:].strip():
                raise TraceReadError(
                    self.path, "invalid JSON: trailing characters after the trace object"
                )
            return
        if tail[:1] != b",":
            raise TraceReadError(
                self.path,
                f"invalid JSON: expected ',' or '}}' after the event list (byte {offset})",
            )
        text = b"{" + tail[1:]
        try:
            rest = _TAIL_DECODER.decode(text)
        except RecursionError:
            raise TraceReadError(self.path, _TOO_DEEP) from None
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            rest = _repair_decode(self.path, text, self.repairs, offset=offset)
            if not isinstance(rest, dict):
                raise TraceReadError(self.path, "invalid JSON after the event list") from None
            fields = dict(rest)
        else:
            fields = {key: getattr(rest, key) for key in rest.__struct_fields__}
        if fields.pop("traceEvents", None) is not None:
            self.repairs.append("a second 'traceEvents' key was ignored")
        for key, value in fields.items():
            if value is not None:
                self.top.setdefault(key, value)

    # -- the result -------------------------------------------------------------------------
    def _result(self) -> TraceData:
        counts = self.counts
        if not self.events and self.entries:
            raise self._not_a_trace()
        repairs = list(self.repairs)
        if counts.malformed:
            repairs.append(f"skipped {counts.malformed} malformed events")
        if counts.bad_times:
            repairs.append(f"skipped {counts.bad_times} events with non-finite or absurd times")
        if counts.no_start:
            repairs.append(f"skipped {counts.no_start} events without a start time (ts)")
        if counts.clamped:
            repairs.append(f"clamped {counts.clamped} negative durations to 0")
        if not self.events:
            repairs.append(f"{EMPTY_TRACE}: its event list holds no events")
        elif not any(type(e) is Event for e in self.events):
            repairs.append(f"{EMPTY_TRACE}: no complete ('X') events, nothing to analyse")
        top = self.top
        props = top.get("deviceProperties")
        dist = top.get("distributedInfo")
        version = top.get("torch_version") or top.get("pytorch_version")
        name = top.get("traceName")
        return TraceData(
            path=self.path,
            events=self.events,
            by_kind=self.by_kind,
            device_properties=[p for p in props if isinstance(p, dict)]
            if isinstance(props, list)
            else [],
            distributed_info=dist if isinstance(dist, dict) else None,
            schema_version=top.get("schemaVersion"),
            trace_name=name if isinstance(name, str) else None,
            torch_version=version if isinstance(version, str) else None,
            cuda_runtime_version=top.get("cuda_runtime_version"),
            base_time_ns=_int_or_none(top.get("baseTimeNanoseconds")),
            host_name=host if isinstance(host := top.get("host_name"), str) and host else None,
            skipped_events=counts.malformed + counts.bad_times + counts.no_start,
            repairs=repairs,
            byte_size=self.total,
            chunks=self.chunks,
            slow_chunks=self.slow_chunks,
        )


# ----- entry points -----------------------------------------------------------------------


def _read(
    path: str,
    handle: IO[bytes],
    chunk_bytes: int,
    max_held_bytes: int,
    reader_cls: type[_Reader] = _Reader,
    **reader_args: Any,
) -> Any:
    """``reader_cls(...).read()`` over the file's JSON, every failure a ``TraceReadError``
    naming the file (a reader of another kind, ``windows``, returns what its ``_result``
    makes)."""
    try:
        hint = _json_size_hint(handle)
        pieces = _pieces(path, handle, _piece_bytes(chunk_bytes))
        reader = reader_cls(path, pieces, chunk_bytes, max_held_bytes, **reader_args)
        if hint is not None:
            reader.reserve(hint)
        return reader.read()
    except TraceReadError:
        raise
    except RecursionError:
        raise TraceReadError(path, _TOO_DEEP) from None
    except MemoryError:
        raise TraceReadError(path, "out of memory while reading the trace") from None
    except OSError as exc:
        raise TraceReadError(path, f"cannot read: {exc.strerror or exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a reader bug must still name the file
        raise TraceReadError(
            path, f"internal error while reading ({type(exc).__name__}: {exc})"
        ) from exc


def decode_trace(
    path: str, raw: bytes, *, chunk_bytes: int = CHUNK_BYTES, max_held_bytes: int = MAX_HELD_BYTES
) -> TraceData:
    """Decode the bytes of a trace file (gzip or not); ``path`` is only used in messages."""
    if not raw:
        raise TraceReadError(path, "empty file")
    return _read(path, io.BytesIO(raw), chunk_bytes, max_held_bytes)


# A plain JSON file at least this large whose last bytes are not the end of a JSON document
# is refused before it is read: a trace still being written, or cut, took 12 s to fail at
# 750 MB (and in TensorBoard, again at each retry).
_TAIL_CHECK_BYTES = 16 << 20
_TAIL_BYTES = 4096


def open_trace(path: str) -> IO[bytes]:
    """The trace file opened for reading (a remote one fetched), or ``TraceReadError``."""
    try:
        if "://" in path:
            from tb_syncfinder.discovery import open_trace_bytes

            return io.BytesIO(open_trace_bytes(path))
        handle = _open_local(path)
        try:
            if stat.S_ISFIFO(os.fstat(handle.fileno()).st_mode):
                return _pipe_stream(path, handle)
            _refuse_an_unfinished_file(path, handle)
        except BaseException:
            handle.close()
            raise
        return handle
    except FileNotFoundError as exc:
        if os.path.islink(path):
            target = os.readlink(path)
            raise TraceReadError(
                path, f"a symbolic link to {target}, which does not exist"
            ) from exc
        raise TraceReadError(path, NO_SUCH_FILE) from exc
    except IsADirectoryError as exc:
        raise TraceReadError(path, "is a directory, not a trace file") from exc
    except OSError as exc:
        raise TraceReadError(path, f"cannot read: {exc.strerror or exc}") from exc


_PIPE_WRITER_WAIT_S = 1.0


def _open_local(path: str) -> IO[bytes]:
    """``open(path, "rb")`` that never waits: a named pipe (FIFO) is opened without waiting
    for a writer (a FIFO named like a trace in a logdir held an analysis process forever,
    and two of them every process of the plugin's pool), then read as a file again."""
    nonblocking = getattr(os, "O_NONBLOCK", 0)  # POSIX only: Windows has no FIFO to wait on
    flags = os.O_RDONLY | nonblocking | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if nonblocking:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _pipe_stream(path: str, handle: IO[bytes]) -> IO[bytes]:
    """A named pipe's stream (``report <(zcat trace.json.gz)`` gives one), read as it
    comes once its first bytes are in, or ``TraceReadError`` where nothing opens it for
    writing within ``_PIPE_WRITER_WAIT_S`` (a read without a writer ends at once; one may
    be opening it as this is read)."""
    give_up_at = time.monotonic() + _PIPE_WRITER_WAIT_S
    fd = handle.fileno()
    while True:
        first = os.read(fd, 1 << 16)
        if first or time.monotonic() >= give_up_at:
            break
        time.sleep(0.05)
    if not first:  # the caller closes the handle
        raise TraceReadError(
            path, "a named pipe (FIFO) that nothing writes to, not a trace file: nothing to read"
        )
    return io.BufferedReader(_AfterFirstBytes(first, handle))


class _AfterFirstBytes(io.RawIOBase):
    """``first``, then the rest of ``handle``: a pipe whose first read waited for its
    writer, streamed on (read whole, a 300 MB trace held 620 MB)."""

    def __init__(self, first: bytes, handle: IO[bytes]) -> None:
        self._first = memoryview(first)
        self._handle = handle

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._first:
            n = min(len(buffer), len(self._first))
            buffer[:n] = self._first[:n]
            self._first = self._first[n:]
            return n
        return self._handle.readinto(buffer)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._handle.close()
        super().close()


def _refuse_an_unfinished_file(path: str, handle: IO[bytes]) -> None:
    """``TraceReadError`` for a large plain JSON file that does not end as a JSON document
    does (a ``}`` or ``]`` after trailing whitespace); leaves ``handle`` at its start."""
    try:
        size = handle.seek(0, os.SEEK_END)
    except OSError:
        return  # not seekable (a pipe): read as it comes
    try:
        if size < _TAIL_CHECK_BYTES:
            return
        handle.seek(0)
        if handle.read(2) == b"\x1f\x8b":
            return  # gzip: its end says nothing without inflating it
        handle.seek(size - _TAIL_BYTES)
        tail = handle.read(_TAIL_BYTES).rstrip(b" \t\r\n")
        if tail and tail[-1:] not in (b"}", b"]"):
            raise TraceReadError(
                path,
                "truncated JSON (still being written?): it does not end with the closing "
                "bracket of its JSON",
            )
    finally:
        handle.seek(0)


_STILL_WRITTEN = " (still being written?)"
# A profiler writes its trace in one go: a file cut short that has not changed for this
# long is not being written any more (cut in a copy, a full disk, a killed writer). The
# plugin's loader stops re-reading such a file after as long (``WRITING_QUIET_S``).
_WRITTEN_WITHIN_S = 60.0


def explain_truncated(path: str, reason: str, now: float | None = None) -> str:
    """``reason`` of a truncated trace, with its question "still being written?" answered
    from the file's age where it can be: a file cut short hours ago was asked that at
    every read, in the CLI and in TensorBoard."""
    if _STILL_WRITTEN not in reason or "://" in path:
        return reason
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return reason
    if (time.time() if now is None else now) - mtime < _WRITTEN_WITHIN_S:
        return reason
    return settled_truncation(reason, mtime)


def settled_truncation(reason: str, mtime_s: float | None) -> str:
    """``reason`` with its question "still being written?" answered no: since ``mtime_s``
    (None: unknown, a remote file) the file has not changed. The time, not an age: the
    reason is kept (summaries, the plugin's cache) and read later."""
    if _STILL_WRITTEN not in reason:
        return reason
    since = (
        # In UTC, named: the text lands in JSON, SARIF and summaries read on other
        # machines (a runner's local time read 10:36 in one zone and 19:36 in another).
        f"unchanged since {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(mtime_s))}: "
        if mtime_s is not None
        else ""
    )
    return reason.replace(_STILL_WRITTEN, f" ({since}cut short, not being written)")


def read_trace(
    path: str, *, chunk_bytes: int = CHUNK_BYTES, max_held_bytes: int = MAX_HELD_BYTES
) -> TraceData:
    """Read and decode one trace file. Raises ``TraceReadError`` naming the file and why.

    ``chunk_bytes``: JSON decoded at once; ``max_held_bytes``: the most JSON held besides
    (one event, the keys around the event list). Memory stays near the decoded events plus
    about two chunks, whatever the file holds."""
    with open_trace(path) as handle:
        return _read(path, handle, chunk_bytes, max_held_bytes)
