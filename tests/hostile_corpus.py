"""A corpus of hostile trace files, each with what reading it must give.

``build_corpus(logdir)`` writes run ``good`` (an ordinary CUDA trace: the run that must
stay served beside the others) and run ``hostile``, one worker file per case, and returns
the cases. A case expects either ``error`` (a substring of the file's named error) or a
report (``error`` None) whose ``repairs`` mention ``repair`` and that finds ``syncs`` syncs.

The largest case is a gzip member that inflates to more than 4 GiB, nearly all of it
spaces: it is written in a second by compressing one block of spaces with a full flush
(the compressed bytes of every further block are then the same) and appending those bytes;
only the CRC of the inflated data has to be computed over all of it.
"""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder.reader import settled_truncation

GOOD_SYNCS = 4  # syncs found in the good run's trace
SPACES_BLOCK = 64 << 20
SPACES_BLOCKS = 66  # 66 x 64 MiB = 4.125 GiB of spaces: past the 4 GiB of the size field
PYTHON_DEPTH = 200_000
NESTING_DEPTH = 50_000


@dataclass
class Case:
    name: str  # the worker name: the file is hostile/<name>.pt.trace.json[.gz]
    path: Path
    error: str | None = None  # expected in the file's named error
    repair: str | None = None  # expected in the repairs of its report
    syncs: int | None = None  # syncs its report finds (None: not checked)

    def error_named_in(self, text: str) -> bool:
        """Whether ``text`` names this case's error. A file cut short is "still being
        written?" for its first minute and "cut short, not being written" after
        (``reader.explain_truncated``): which one a test reads depends on how long the
        module ran before it (a loaded CI machine took 146 s), so either answers."""
        if self.error is None:
            return False
        settled = settled_truncation(self.error, self.path.stat().st_mtime)
        return self.error in text or settled in text


def good_trace() -> dict[str, Any]:
    b = KinetoTraceBuilder()
    for step in (1, 2):
        with b.step(step):
            item_sync(b, stack=[("train.py", 30, "train_step")])
            with b.op("aten::nonzero", stack=[("model.py", 12, "forward")], called="nonzero"):
                b.runtime("cudaMemcpyAsync", dur=4, memcpy=("DtoH", "Pageable"), bytes=8)
                b.runtime("cudaStreamSynchronize")
    return b.to_dict()


def _item_trace() -> dict[str, Any]:
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    return b.to_dict()


def _wrong_types() -> dict[str, Any]:
    doc = good_trace()
    events = doc["traceEvents"]
    odd = [
        ("ts", [1, 2]),
        ("pid", {"a": 1}),
        ("args", "not an object"),
        ("name", 5),
        ("dur", "N/A"),
        ("tid", None),
        ("cat", 3.5),
    ]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for (key, value), event in zip(
        odd, kernels + [e for e in events if e.get("ph") == "f"], strict=False
    ):
        event[key] = value
    events.append("an event that is a string")
    return doc


def _nan() -> bytes:
    doc = good_trace()
    for event in doc["traceEvents"][::5]:
        if "dur" in event:
            event["dur"] = float("nan")
    doc["traceEvents"][3].setdefault("args", {})["bytes"] = float("inf")
    return json.dumps(doc).encode()  # Python writes NaN / Infinity literals


def _missing_flows() -> dict[str, Any]:
    doc = good_trace()
    events = []
    for event in doc["traceEvents"]:
        if event.get("cat") == "ac2g":
            continue  # no flow events at all
        args = event.get("args")
        if event.get("cat") == "cuda_runtime" and isinstance(args, dict):
            args.pop("correlation", None)
            args.pop("External id", None)
        events.append(event)
    doc["traceEvents"] = events
    return doc


def _deep_python_stack() -> dict[str, Any]:
    """A python_function parent-id chain PYTHON_DEPTH frames deep, each frame inside the
    previous one in time, with a loss.item() sync at the bottom."""
    b = KinetoTraceBuilder()
    start = b.now
    b.advance(PYTHON_DEPTH + 10)
    with b.step(1):
        item_sync(b, stack=[("train.py", 30, "train_step")])
    end = b.now + PYTHON_DEPTH + 10
    doc = b.to_dict()
    frames = [
        {
            "ph": "X",
            "cat": "python_function",
            "name": f"deep.py({i % 500 + 1}): f{i}",
            "pid": b.pid,
            "tid": b.tid,
            "ts": start + i,
            "dur": end - start - 2 * i,
            "args": {"Python parent id": i if i else None, "Python id": i + 1, "Ev Idx": 0},
        }
        for i in range(PYTHON_DEPTH)
    ]
    doc["traceEvents"] = frames + doc["traceEvents"]
    return doc


def _duplicate_keys() -> bytes:
    text = json.dumps(good_trace())
    # Every event says "ph" twice, and the document has a second (bogus) event list.
    text = text.replace('{"ph": "X",', '{"ph": "i", "ph": "X",')
    return (text[:-1] + ', "traceEvents": [{"ph": "X", "name": "second list"}]}').encode()


def _invalid_utf8() -> bytes:
    text = json.dumps(good_trace()).encode()
    return text.replace(b'"name": "aten::nonzero"', b'"name": "aten::nonzero \xe9\xff"', 1)


def _deep_nesting() -> bytes:
    nested = b"[" * NESTING_DEPTH + b"]" * NESTING_DEPTH
    text = json.dumps(_item_trace()).encode()
    return text.replace(b'"args": {', b'"args": {"deep": ' + nested + b", ", 1)


def _gzip_member(parts: list[bytes], spaces_after: int) -> bytes:
    """One gzip member: parts[0], ``SPACES_BLOCKS`` blocks of spaces, then parts[1]
    (``spaces_after`` = index of the part the spaces follow)."""
    block = b" " * SPACES_BLOCK
    out = [b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"]  # gzip header, no name
    crc, size = 0, 0
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
    for i, part in enumerate(parts):
        out.append(compressor.compress(part))
        crc, size = zlib.crc32(part, crc), size + len(part)
        if i == spaces_after:
            out.append(compressor.compress(block))
            out.append(compressor.flush(zlib.Z_FULL_FLUSH))
            repeated = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
            out.extend([repeated] * (SPACES_BLOCKS - 1))
            for _ in range(SPACES_BLOCKS):
                crc = zlib.crc32(block, crc)
            size += SPACES_BLOCKS * SPACES_BLOCK
    out.append(compressor.flush())
    out.append(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return b"".join(out)


def _over_4gib_of_spaces() -> bytes:
    """A trace whose event list holds 4.125 GiB of spaces between two halves."""
    events = _item_trace()["traceEvents"]
    half = len(events) // 2
    first = json.dumps({"traceEvents": events[:half]}).encode()[:-2] + b","
    second = json.dumps(events[half:]).encode()[1:] + b"}"
    return _gzip_member([first, second], spaces_after=0)


def _huge_event() -> bytes:
    event = json.dumps({"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1, "name": ""}).encode()
    return gzip.compress(b'{"traceEvents": [' + event[:-2] + b"a" * (96 << 20) + b'"}]}', 1)


def build_corpus(logdir: Path, big: bool = True, only: Collection[str] | None = None) -> list[Case]:
    """Write the corpus under ``logdir``; ``big`` adds the multi-gigabyte gzip case;
    ``only``: just the cases of these names (the good run is always written)."""
    good = logdir / "good" / "worker0.pt.trace.json"
    good.parent.mkdir(parents=True, exist_ok=True)
    good.write_text(json.dumps(good_trace()))
    run = logdir / "hostile"
    run.mkdir(parents=True, exist_ok=True)
    half_written = json.dumps(good_trace()).encode()
    contents: list[tuple[Case, Callable[[], bytes]]] = [
        (Case("list_of_numbers", run, error="none of the 3 entries"), lambda: b"[1, 2, 3]"),
        (Case("a_number", run, error="the JSON is a number"), lambda: b"42"),
        (Case("not_a_trace_object", run, error="no 'traceEvents' list"), lambda: b'{"a": 1}'),
        (
            Case("empty_event_list", run, repair="empty trace", syncs=0),
            lambda: b'{"schemaVersion": 1, "traceEvents": []}',
        ),
        (Case("deep_nesting", run, error="nested too deeply"), _deep_nesting),
        (
            Case("wrong_types", run, repair="malformed events", syncs=GOOD_SYNCS),
            lambda: json.dumps(_wrong_types()).encode(),
        ),
        (Case("nan", run, repair="NaN / Infinity", syncs=GOOD_SYNCS), _nan),
        (Case("invalid_utf8", run, repair="invalid UTF-8", syncs=GOOD_SYNCS), _invalid_utf8),
        (
            Case("missing_flows", run, syncs=GOOD_SYNCS),
            lambda: json.dumps(_missing_flows()).encode(),
        ),
        (
            Case("deep_python_stack", run, syncs=1),
            lambda: json.dumps(_deep_python_stack()).encode(),
        ),
        (
            Case("duplicate_keys", run, repair="second 'traceEvents'", syncs=GOOD_SYNCS),
            _duplicate_keys,
        ),
        (
            Case("being_written", run, error="truncated JSON (still being written?)"),
            lambda: _half(half_written),
        ),
        (
            Case("being_written_gz", run, error="truncated gzip data (still being written?)"),
            lambda: _half(gzip.compress(half_written)),
        ),
        (Case("huge_event", run, error="one event larger than 64 MiB"), _huge_event),
    ]
    if big:
        contents.append((Case("over_4gib_of_spaces", run, syncs=1), _over_4gib_of_spaces))
    cases = []
    for case, make in contents:
        if only is not None and case.name not in only:
            continue
        data = make()
        gz = data[:2] == b"\x1f\x8b"
        case.path = run / (case.name + (".pt.trace.json.gz" if gz else ".pt.trace.json"))
        case.path.write_bytes(data)
        cases.append(case)
    return cases


def _half(data: bytes) -> bytes:
    """The first half of ``data``: what a reader sees of a file its writer is still at."""
    return data[: len(data) // 2]
