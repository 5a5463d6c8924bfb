"""Traces larger than memory: analysed in windows of whole steps, one window at a time.

The engine holds about three times a trace's JSON in memory (the decoded events, the
timeline, the replay graph; docs/performance.md). A trace past the memory budget is read
twice instead of once, with the reader's own chunking, repairs and errors:

1. ``scan``: the ``ProfilerStep#N`` spans, and the start time of every event; ``plan``
   groups whole steps into windows of at most ``window_bytes`` of JSON (by how many events
   start in each step).
2. ``split``: every event's own JSON bytes, as written, appended to the file of its window
   in a temporary folder. The engine analyses the window files one after the other (each
   deleted once read) and ``merge`` makes one ``TraceResult`` of them.

Where an event goes: metadata to every window; a runtime call and a host operator to the
window of their start; python frames and user annotations to every window they overlap (the
stacks of the calls in each); device activity with the runtime call that launched it (by
the ids the timeline joins them by: ``correlation``, ``External id`` or the ``ac2g`` flow,
recorded in pass 1: the file may hold the activity first, and it may run steps after its
launch behind a queue), else by its start. Each window's file also holds the step
before its own steps and the step after, as context (``_file_ranges``): the engine reports
only the window's own range (``engine._analyze_data``'s ``core``), so nothing is counted
twice, while a sync's bubble in the next step and device work launched in the step before
are seen. A trace without at least two steps is never split.

The windows are replayed in time order, each from where the one before left it
(``whatif.ReplayCarry``): "every sync removed" and each site's syncs removed go on from
the window before (its context step pinned where that window's replay had it, the device
queues and the step completions with it), so a host that ran ahead of the device in one
window is still ahead in the next, however many windows later the saving lands.

What a window still cannot see: the saving of a sync alone that lands two or more steps
after its window, device work launched two or more steps before its first step other than
in when its steps complete and in the last item on each lane, which the window's lanes and
synchronize calls wait for (GPU idle does not see it), and how a sync delays a collective
two or more steps later (the job stage keeps its bound for those).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import IO, Any, Optional, Union

import msgspec
from msgspec import Struct

from tb_syncfinder.models import TraceResult, TraceSavings, tally_library_copies
from tb_syncfinder.reader import (
    CHUNK_BYTES,
    MAX_HELD_BYTES,
    TraceReadError,
    _as_time,
    _read,
    _Reader,
    _repair_decode,
    open_trace,
)
from tb_syncfinder.timeline import (
    ANNOTATION,
    DEVICE,
    DEVICE_SYNC,
    OTHER,
    PYTHON,
    RUNTIME,
    STEP_RE,
    category_class,
)

log = logging.getLogger(__name__)

# What the engine holds per byte of JSON at its peak (docs/performance.md: 2.7x to 2.9x on
# the synthetic traces), with a margin: a trace is split when this many times its JSON is
# more than the memory available, into windows a third of that size.
PEAK_PER_JSON_BYTE = 3.5
# Windows smaller than this are not worth a second read of the trace.
MIN_WINDOW_BYTES = 64 << 20
# More windows than this would each be tiny: a larger window is used instead.
MAX_WINDOWS = 256
_STEP_PREFIX = "ProfilerStep#"
_STEP_NEEDLE = _STEP_PREFIX.encode()
_TS = attrgetter("ts")
_NO_START = float("-inf")
_ID_LIMIT = 1 << 63  # what array('q') holds; a larger id goes by the activity's own start
_NO_END = float("inf")


def available_memory_bytes() -> Optional[int]:
    """The memory this process may still use: ``MemAvailable`` of /proc/meminfo, less
    where its cgroup's limit (a container's, ``docker --memory``, a Kubernetes pod's) or its
    address-space limit (``ulimit -v``) leaves less. None where none is known."""
    budget = memory_budget()
    return budget[0] if budget is not None else None


def memory_budget() -> Optional[tuple[int, str]]:
    """``available_memory_bytes`` and what sets it, in words for the user: "the machine's
    available memory", "the container's memory limit" or "ulimit -v"."""
    rooms = [
        (room, source)
        for room, source in (
            (_mem_available(), "the machine's available memory"),
            (cgroup_room(), "the container's memory limit"),
            (_rlimit_room(), "ulimit -v"),
        )
        if room
    ]
    if not rooms:
        return None
    room, source = min(rooms, key=lambda pair: pair[0])
    return max(0, room), source


def _mem_available() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# Limits at least this large are "no limit" (cgroup v1 writes 2^63 rounded to a page).
_NO_LIMIT = 1 << 60


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None  # absent, or cgroup v2's "max"


def cgroup_room(
    cgroup_root: str = "/sys/fs/cgroup", self_cgroup: str = "/proc/self/cgroup"
) -> Optional[int]:
    """What the memory cgroup of this process has left under its limit (v2 ``memory.max``
    less ``memory.current``, v1 ``memory.limit_in_bytes`` less ``memory.usage_in_bytes``);
    None when it has no limit or none is readable. A container usually mounts its own
    cgroup at the root, so the root is read when the recorded path is not there."""
    try:
        with open(self_cgroup, encoding="ascii") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            base, files = cgroup_root, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            base = os.path.join(cgroup_root, "memory")
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        for folder in (os.path.join(base, path.lstrip("/")), base):
            limit = _read_int(os.path.join(folder, files[0]))
            used = _read_int(os.path.join(folder, files[1]))
            if limit is not None and used is not None:
                if limit < _NO_LIMIT:
                    rooms.append(limit - used)
                break
    return min(rooms) if rooms else None


def _rlimit_room() -> Optional[int]:
    """What ``ulimit -v`` leaves of the address space (less what it holds now)."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return None
    size = 0
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    size = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return soft - size


def auto_window_bytes(memory_share: float = 1.0) -> Optional[int]:
    """The window size for this machine now, for an analysis that may count on
    ``memory_share`` of the memory available: None (never split) where the available
    memory is unknown."""
    available = available_memory_bytes()
    if available is None:
        return None
    return max(MIN_WINDOW_BYTES, int(available * memory_share / PEAK_PER_JSON_BYTE / 3))


def may_need_windows(path: str, window_bytes: Optional[int]) -> bool:
    """Whether the file may hold more JSON than one window (``json_bytes``)."""
    if not window_bytes:
        return False
    size = json_bytes(path)
    return size is not None and size > window_bytes


def size_text(n_bytes: float) -> str:
    """An amount of JSON or memory as the messages say it: ``1.5 GB``, ``167 MB``."""
    return f"{n_bytes / 1e9:.1f} GB" if n_bytes >= 1e9 else f"{n_bytes / 1e6:.0f} MB"


def json_bytes(path: str) -> Optional[int]:
    """How much JSON the file holds, from its size (a gzip file's from its trailer, the
    inflated size modulo 4 GiB: taken as at least 3x the file); None when it cannot be
    read (the whole read says why) or is no local file."""
    try:
        st = os.stat(path)  # a URL fails here: remote traces are read whole
        if not stat.S_ISREG(st.st_mode):
            return None  # a FIFO would block an open, and lose what a read takes from it
        size = st.st_size
        with open(path, "rb") as handle:
            if handle.read(2) != b"\x1f\x8b":
                return size
            handle.seek(-4, os.SEEK_END)
            inflated = int.from_bytes(handle.read(4), "little")
    except OSError:
        return None
    while inflated < 3 * size:
        inflated += 1 << 32
    return inflated


# --------------------------------------------------------------------------------------
# Pass 1: the steps and the start of every event


class _RouteArgs(Struct, gc=False):
    # How the timeline joins a launch and its device work (``timeline.correlation_of``).
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")


class _WindowEvent(Struct, gc=False):
    """The fields both passes read of an event (the rest are skipped unread)."""

    ph: Any = None
    cat: Any = ""
    name: Any = ""
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    args: Union[_RouteArgs, None] = None
    id: Any = None  # a flow's


def _launch_key(args: Any) -> Any:
    """The id a runtime call's device work is joined by, as the timeline joins them."""
    key = args.correlation
    if type(key) is not int:
        key = args.external_id
        if type(key) is not int:
            key = args.external_id_legacy
    return key


def _device_key(args: Any) -> Any:
    key = args.correlation
    return key if type(key) is int else args.external_id


@dataclass
class Scan:
    """What the first read found."""

    json_bytes: int
    entries: int
    steps: list[tuple[float, float]]  # (start, end) of each ProfilerStep#N, by start
    starts: array  # the start of every event with a time ('d')
    top: dict[str, Any]  # the top-level keys besides traceEvents
    repairs: list[str]
    # The runtime calls' correlation ids ('q', sorted) and their starts ('d'): a device
    # activity goes with its launch, which the file may hold after it (and it may run
    # steps later than it was launched, behind a queue).
    launch_ids: array = field(default_factory=lambda: array("q"))
    launch_ts: array = field(default_factory=lambda: array("d"))


class _Scanner(_Reader):
    decoder = msgspec.json.Decoder(list[_WindowEvent], strict=False)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.starts = array("d")
        self.steps: dict[int, tuple[float, float]] = {}
        self.step_in_chunk = True
        self.launch_ids = array("q")
        self.launch_ts = array("d")
        self.class_of: dict[Any, int] = {}

    def _result(self) -> _Scanner:  # type: ignore[override]
        return self

    def _decoded(self, view: memoryview, a: int, k: int, events: list[Any]) -> None:
        self.step_in_chunk = self.buf.find(_STEP_NEEDLE, a, k) >= 0

    def _slow_chunk(self, raw: bytes, a: int, at_end: bool) -> list[Any]:
        self.step_in_chunk = True
        return super()._slow_chunk(raw, a, at_end)

    def _keep(self, events: list[Any]) -> None:
        self.events = [None]  # the reader's "no events at all" check; nothing is kept
        self.starts.extend([t for t in map(_TS, events) if t is not None])
        class_of = self.class_of
        ids, times = self.launch_ids, self.launch_ts
        for e in events:
            ph = e.ph
            if ph == "s":  # an ac2g flow from a launch (traces whose calls lack ids)
                key = e.id
                if e.cat == "ac2g" and type(key) is int and e.ts is not None:
                    if -_ID_LIMIT <= key < _ID_LIMIT:
                        ids.append(key)
                        times.append(e.ts)
                continue
            args = getattr(e, "args", None) if ph == "X" else None
            if args is None or e.ts is None:
                continue
            key = _launch_key(args)
            if type(key) is not int:
                continue
            cat = e.cat
            cls = class_of.get(cat)
            if cls is None:
                cls = class_of[cat] = category_class(cat) if isinstance(cat, str) else OTHER
            if cls == RUNTIME and -_ID_LIMIT <= key < _ID_LIMIT:
                ids.append(key)
                times.append(e.ts)
        if not self.step_in_chunk:
            return
        for e in events:
            name = e.name
            if (
                isinstance(name, str)
                and name.startswith(_STEP_PREFIX)
                and e.cat != "gpu_user_annotation"
                and e.ts is not None
            ):
                match = STEP_RE.match(name)
                if match:
                    number = int(match.group(1))
                    span = (e.ts, e.ts + (e.dur or 0.0))
                    # A step recorded twice (two threads): its earliest start.
                    if number not in self.steps or span < self.steps[number]:
                        self.steps[number] = span


def scan(path: str) -> Scan:
    """Pass 1 over ``path`` (raises ``TraceReadError`` as ``read_trace`` does)."""
    with open_trace(path) as handle:
        reader = _read(path, handle, CHUNK_BYTES, MAX_HELD_BYTES, _Scanner)
    launch_ids, launch_ts = reader.launch_ids, reader.launch_ts
    if launch_ids:
        import numpy as np  # here: only a trace this large is scanned

        ids = np.frombuffer(launch_ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        launch_ids = array("q", ids[order].tobytes())
        launch_ts = array("d", np.frombuffer(launch_ts, dtype=np.float64)[order].tobytes())
    return Scan(
        json_bytes=reader.total,
        entries=reader.entries,
        steps=sorted(reader.steps.values()),
        starts=reader.starts,
        top=dict(reader.top),
        repairs=list(reader.repairs),
        launch_ids=launch_ids,
        launch_ts=launch_ts,
    )


def plan(found: Scan, window_bytes: int) -> list[float]:
    """Where windows 1.. start (step starts), for windows of at most ``window_bytes`` of
    JSON as far as whole steps allow; [] when the trace fits in one window or has fewer
    than two steps."""
    if found.json_bytes <= window_bytes or len(found.steps) < 2 or not found.entries:
        return []
    window_bytes = max(window_bytes, found.json_bytes // MAX_WINDOWS + 1)
    import numpy as np  # here: only a trace this large needs it

    per_event = found.json_bytes / found.entries
    step_starts = [start for start, _end in found.steps]
    # Events before the first step, then per step: a sorted copy of the starts in numpy
    # (a list of 38 million floats for a 10 GB trace would take 1.2 GB).
    starts = np.sort(np.frombuffer(found.starts, dtype=np.float64))
    ends = np.searchsorted(starts, np.asarray(step_starts, dtype=np.float64), side="left")
    counts = np.diff(np.concatenate(([0], ends, [len(starts)]))).tolist()
    del starts
    bounds: list[float] = []
    held = counts[0]
    for n in range(len(step_starts)):
        events_in_step = counts[n + 1]
        if held and (held + events_in_step) * per_event > window_bytes and n > 0:
            bounds.append(step_starts[n])
            held = 0
        held += events_in_step
    return bounds


# --------------------------------------------------------------------------------------
# Pass 2: each event's bytes to its window's file


_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_HOST_CONTAINERS = (PYTHON, ANNOTATION)
_LAUNCHED = (DEVICE, DEVICE_SYNC)


class _Router(_Reader):
    decoder = msgspec.json.Decoder(list[_WindowEvent], strict=False)

    def __init__(
        self,
        *args: Any,
        starts: list[float],
        ends: list[float],
        files: list[IO[bytes]],
        found: Scan,
    ) -> None:
        super().__init__(*args)
        self.starts = starts  # per window: where its file starts (a step before its own)
        self.ends = ends  # and ends (a step after its own)
        self.files = files
        self.written = [0] * len(files)
        self.launch_ids = found.launch_ids
        self.launch_ts = found.launch_ts
        self.class_of: dict[Any, int] = {}
        self.routed = 0

    def _result(self) -> _Router:  # type: ignore[override]
        return self

    def _decoded(self, view: memoryview, a: int, k: int, events: list[Any]) -> None:
        firsts, lasts = self._spans(events)
        if firsts == lasts and min(firsts, default=0) == max(firsts, default=0) and events:
            # Every event of the chunk goes to one window, as most chunks do (26 of 30 at
            # 250 MB): its bytes are written as they are, without taking each event's own
            # bytes out of them first (a second parse of the chunk and a join).
            with view[a + 1 : k] as inner:
                self._write(firsts[0], bytes(inner).strip(), len(events))
            self.routed += len(events)
            return
        with view[a : k + 1] as chunk:
            data = bytes(chunk)
        self._distribute(firsts, lasts, _RAW_LIST.decode(data))
        self.routed += len(events)

    def _slow_chunk(self, raw: bytes, a: int, at_end: bool) -> list[Any]:
        repairs: list[str] = []
        doc = _repair_decode(self.path, raw, repairs, offset=self._offset(a), cut=not at_end)
        self.repairs.extend(r for r in repairs if r not in self.repairs)
        self.slow_chunks += 1
        if not isinstance(doc, list):
            raise TraceReadError(self.path, "invalid JSON: the event list is not an array")
        self.entries += len(doc)
        events, raws = [], []
        for item in doc:
            if not isinstance(item, dict):
                continue  # the window's own read skips it too
            args = item.get("args")
            events.append(
                _WindowEvent(
                    ph=item.get("ph"),
                    cat=item.get("cat", ""),
                    name=item.get("name", ""),
                    ts=_as_time(item.get("ts")),
                    dur=_as_time(item.get("dur")),
                    args=(
                        _RouteArgs(
                            args.get("correlation"),
                            args.get("External id"),
                            args.get("external id"),
                        )
                        if isinstance(args, dict)
                        else None
                    ),
                )
            )
            raws.append(msgspec.json.encode(item))
        self._route(events, raws)
        return []

    def _keep(self, events: list[Any]) -> None:
        self.events = [None]  # nothing is kept: the bytes went to the window files

    def _route(self, events: Sequence[Any], raws: Sequence[Any]) -> None:
        firsts, lasts = self._spans(events)
        self._distribute(firsts, lasts, raws)
        self.routed += len(events)

    def _spans(self, events: Sequence[Any]) -> tuple[list[int], list[int]]:
        """Per event, the first and last window whose file it goes to."""
        starts = self.starts
        ends = self.ends
        every = (0, len(self.files) - 1)
        launch_ids = self.launch_ids
        launch_ts = self.launch_ts
        n_launches = len(launch_ids)
        class_of = self.class_of
        firsts: list[int] = []
        lasts: list[int] = []
        for e in events:
            if e.ph == "M":  # process / thread names and labels: every window needs them
                first, last = every
            elif (ts := e.ts) is None:
                first = last = 0  # no time: nothing reads it; kept once
            else:
                # The windows whose file holds this instant: its own, and the one before or
                # after when it is in the first or last step of its own.
                first = bisect_right(ends, ts)
                last = bisect_right(starts, ts) - 1
                cat = e.cat
                cls = class_of.get(cat)
                if cls is None:
                    cls = class_of[cat] = category_class(cat) if isinstance(cat, str) else OTHER
                if cls in _LAUNCHED:
                    args = e.args
                    correlation = _device_key(args) if args is not None else None
                    if type(correlation) is int:
                        at = bisect_left(launch_ids, correlation)
                        if at < n_launches and launch_ids[at] == correlation:
                            launched = launch_ts[at]
                            first = bisect_right(ends, launched)
                            last = bisect_right(starts, launched) - 1
                elif cls in _HOST_CONTAINERS and e.dur:
                    if not (isinstance(e.name, str) and e.name.startswith(_STEP_PREFIX)):
                        last = max(last, bisect_left(starts, ts + e.dur) - 1)
            firsts.append(first)
            lasts.append(last)
        return firsts, lasts

    def _distribute(self, firsts: list[int], lasts: list[int], raws: Sequence[Any]) -> None:
        """Each event's own bytes to the files of the windows from its first to its last."""
        out: list[list[Any]] = [[] for _ in self.files]
        for first, last, raw in zip(firsts, lasts, raws, strict=True):
            if first == last:
                out[first].append(raw)
            else:
                for w in range(first, last + 1):
                    out[w].append(raw)
        for w, pieces in enumerate(out):
            if pieces:
                self._write(w, b",".join(pieces), len(pieces))

    def _write(self, w: int, data: bytes, count: int) -> None:
        """``count`` events' JSON (``data``, separated by commas) to window ``w``'s file."""
        try:
            if self.written[w]:
                self.files[w].write(b",")
            self.files[w].write(data)
        except OSError as exc:
            # Not the trace's read failing: the reader would say "cannot read".
            raise TraceReadError(self.path, "window write failed") from _NoRoom(exc)
        self.written[w] += count


def _header(top: dict[str, Any]) -> bytes:
    rest = {k: v for k, v in top.items() if k != "traceEvents" and v is not None}
    encoded = msgspec.json.encode(rest)
    return (encoded[:-1] + b"," if rest else b"{") + b'"traceEvents":['


@dataclass
class Windows:
    """The window files of one trace (in ``folder``; ``close`` removes them). Window ``n``
    reports ``cores[n]`` (from one bound to the next); its file also holds the step before
    and the step after, as context."""

    folder: str
    paths: list[str]
    bounds: list[float]
    entries: int
    repairs: list[str] = field(default_factory=list)
    cores: list[tuple[float, float]] = field(default_factory=list)
    # What removes the folder at the interpreter's exit, if ``close`` has not (``split``).
    remove_at_exit: Optional[Callable[[], Any]] = None

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.remove_at_exit is not None:
            atexit.unregister(self.remove_at_exit)


def _file_ranges(found: Scan, bounds: list[float]) -> tuple[list[float], list[float]]:
    """Per window, where its file starts and ends: one step before its first step and
    one step after its last (a sync's bubble lands in the next step; device work launched
    in the step before may still run)."""
    step_starts = sorted({start for start, _end in found.steps})
    starts = [_NO_START]
    ends = []
    for bound in bounds:
        n = bisect_left(step_starts, bound)
        starts.append(step_starts[n - 1] if n > 0 else bound)
        ends.append(step_starts[n + 1] if n + 1 < len(step_starts) else _NO_END)
    ends.append(_NO_END)
    return starts, ends


# The window folders: named after the host and process that write them, so that a later
# run can tell the folders of a process that is gone (killed before it could remove them:
# SIGKILL, an out-of-memory kill, a power cut) and remove them.
_FOLDER_PREFIX = "tb-syncfinder-windows-"
_FOLDER_RE = re.compile(re.escape(_FOLDER_PREFIX) + r"(.+)-(\d+)-[^-]+$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


def remove_stale_folders(parent: Optional[str] = None) -> list[str]:
    """Remove the window folders under ``parent`` (the temporary folder) left by processes
    of this host and user that are no longer running; returns them."""
    parent = parent or tempfile.gettempdir()
    host = _host()
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        match = _FOLDER_RE.match(entry.name)
        if match is None or match.group(1) != host:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
            os.kill(int(match.group(2)), 0)
            continue  # still running (or a process reusing its number): left alone
        except ProcessLookupError:
            pass
        except (OSError, ValueError, OverflowError):
            continue  # another user's process, or not ours to judge
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


class _NoRoom(Exception):
    """A window file could not be written (its folder's disk is full, or not writable)."""


def _no_room_reason(folder: str, found: Scan, exc: OSError) -> str:
    parent = os.path.dirname(folder)
    need = size_text(found.json_bytes)
    return (
        f"cannot write its windows to {parent} (the temporary folder, TMPDIR): "
        f"{exc.strerror or exc}. A trace larger than the memory budget is analysed in "
        f"windows written there, about as much disk as its JSON ({need}): free space "
        "there, point TMPDIR at a larger disk, or read it whole with --window-mb 0 (in "
        "TensorBoard, --sync_advisor_window_mb 0) where the memory allows"
    )


def split(path: str, found: Scan, bounds: list[float], folder: Optional[str] = None) -> Windows:
    """Pass 2: write the window files (``len(bounds) + 1`` of them). A file that cannot be
    written (a full disk) raises ``TraceReadError`` naming the temporary folder; whatever
    stops it, nothing is left behind."""
    starts, ends = _file_ranges(found, bounds)
    remove_stale_folders(folder)
    # Named before it is made, and made inside the ``try`` below with its removal at exit
    # registered: SIGTERM's SystemExit, raised between any two statements, never leaves it
    # behind, here or in the caller before it holds the ``Windows``.
    name = f"{_FOLDER_PREFIX}{_host()}-{os.getpid()}-{os.urandom(6).hex()}"
    folder = os.path.join(folder or tempfile.gettempdir(), name)
    remove_at_exit = functools.partial(shutil.rmtree, folder, ignore_errors=True)
    files: list[IO[bytes]] = []
    try:
        try:
            os.mkdir(folder, 0o700)
        except OSError as exc:
            raise TraceReadError(path, _no_room_reason(folder, found, exc)) from None
        atexit.register(remove_at_exit)
        paths = [os.path.join(folder, f"window{n}.json") for n in range(len(bounds) + 1)]
        header = _header(found.top)
        try:
            for window_path in paths:
                handle = open(window_path, "wb")  # noqa: SIM115 - closed below
                files.append(handle)
                handle.write(header)
        except OSError as exc:
            raise _NoRoom(exc) from exc
        with open_trace(path) as source:
            reader = _read(
                path,
                source,
                CHUNK_BYTES,
                MAX_HELD_BYTES,
                _Router,
                starts=starts,
                ends=ends,
                files=files,
                found=found,
            )
        try:
            for handle in files:
                handle.write(b"]}")
            while files:
                files.pop().close()  # a full disk may show only now, as the rest is flushed
        except OSError as exc:
            raise _NoRoom(exc) from exc
    except BaseException as exc:
        for handle in files:
            with contextlib.suppress(OSError):  # a flush on a full disk fails again
                handle.close()
        remove_at_exit()
        atexit.unregister(remove_at_exit)
        if isinstance(exc, _NoRoom):
            raise TraceReadError(path, _no_room_reason(folder, found, exc.args[0])) from None
        if isinstance(exc, TraceReadError) and isinstance(exc.__cause__, _NoRoom):
            raise TraceReadError(
                path, _no_room_reason(folder, found, exc.__cause__.args[0])
            ) from None
        raise
    # 16 bytes per runtime call, not needed past this pass: back before the analyses.
    found.launch_ids, found.launch_ts = array("q"), array("d")
    edges = [_NO_START, *bounds, _NO_END]
    cores = list(zip(edges[:-1], edges[1:], strict=True))
    return Windows(folder, paths, bounds, reader.routed, list(found.repairs), cores, remove_at_exit)


# --------------------------------------------------------------------------------------
# The windows' results as one


def window_note(
    n_windows: int, window_bytes: int, asked: bool = False, replayed: bool = True
) -> str:
    """What analysing a trace in ``n_windows`` windows of about ``window_bytes`` of JSON
    leaves out, and why it was split: the window size the user asked for (``asked``,
    ``--window-mb``), or the memory budget this machine has. ``replayed``: whether any
    window was replayed (an NPU's tasks are not: what the replay leaves out is not said)."""
    size = f"{window_bytes / 1e9:.1f} GB" if window_bytes >= 1e9 else f"{window_bytes / 1e6:.1f} MB"
    why = (
        "the window size asked for with --window-mb (TensorBoard: --sync_advisor_window_mb)"
        if asked
        else "the trace is larger than the memory budget"
    )
    if not replayed:
        return (
            f"analysed in {n_windows} windows of whole steps (about {size} of JSON each; "
            f"{why}): the device's idle from work launched two or more steps before a "
            "window is not seen"
        )
    return (
        f"analysed in {n_windows} windows of whole steps (about {size} of JSON each; "
        f"{why}), each replayed from where the window "
        "before left every sync removed and each site's: a single sync's saving that "
        "lands two or more steps after its window is not seen, nor GPU idle from device "
        "work launched two or more steps before a window"
    )


def merge(
    results: Sequence[TraceResult], note: str, cores: Sequence[tuple[float, float]]
) -> TraceResult:
    """One ``TraceResult`` of the windows' results (in time order), as the engine makes for
    a trace read whole: lists joined, totals added, sync and wait ids already unique (the
    engine numbers each window's syncs on from the last). ``cores``: each window's own
    time range (``Windows.cores``)."""
    first = results[0]
    info = first.info
    for other in results[1:]:
        o = other.info
        info.steps += o.steps
        info.event_count += o.event_count
        info.has_stacks = info.has_stacks or o.has_stacks
        info.has_gpu_activity = info.has_gpu_activity or o.has_gpu_activity
        info.has_runtime = info.has_runtime or o.has_runtime
        info.unjudged_uploads += o.unjudged_uploads  # each window's own steps only
        info.unjudged_upload_host_us += o.unjudged_upload_host_us
        info.step_markers = info.step_markers and o.step_markers
        info.device = info.device if info.device not in (None, "cpu") else o.device
        info.device_name = info.device_name or o.device_name
        info.torch_version = info.torch_version or o.torch_version
        info.repairs += [r for r in o.repairs if r not in info.repairs]
        info.unrun_syncs += [u for u in o.unrun_syncs if u not in info.unrun_syncs]
        info.library_copies = tally_library_copies([*info.library_copies, *o.library_copies])
        first.syncs += other.syncs
        first.latent += other.latent
        first.steps += other.steps
        first.contexts.update(other.contexts)
        first.profiler_overhead += other.profiler_overhead
        first.warmup_allocator += other.warmup_allocator
        first.collective_worker += other.collective_worker
        first.source_stamps.update(other.source_stamps)
        first.source_probes += [p for p in other.source_probes if p not in first.source_probes]
    if info.has_gpu_activity or info.has_runtime:
        info.unrun_syncs = []  # a window ran on the device: not a CPU-only trace after all
        info.library_copies = []
    first.savings = _merge_savings([r.savings for r in results], note)
    info.saving_method = first.savings.method
    info.saving_note = first.savings.reason or ("; ".join(first.savings.notes) or None)
    with_rank = [(r.rank, core) for r, core in zip(results, cores, strict=True) if r.rank]
    if with_rank:
        first.rank = _merge_ranks(with_rank)
    return first


def _merge_savings(parts: Sequence[TraceSavings], note: str) -> TraceSavings:
    replayed = [p for p in parts if p.method == "replay"]
    merged = TraceSavings(
        method="replay" if replayed else "bound",
        reason=None if replayed else parts[0].reason,
        device_idle_read=all(p.device_idle_read for p in parts),
    )
    for part in parts:
        merged.all_syncs_us += part.all_syncs_us
        for key, value in part.sites.items():
            merged.sites[key] = merged.sites.get(key, 0.0) + value
        merged.window_us += part.window_us
        merged.gpu_idle_us += part.gpu_idle_us
        merged.gpu_idle_from_syncs_us += part.gpu_idle_from_syncs_us  # signed per window
        merged.fidelity_error = max(merged.fidelity_error, part.fidelity_error)
        merged.notes += [n for n in part.notes if n not in merged.notes]
        merged.bound_sites.update(part.bound_sites)
        if replayed and part.method != "replay":
            for key in part.sites:
                merged.bound_sites.setdefault(key, f"a window not replayed: {part.reason}")
    merged.gpu_idle_from_syncs_us = max(0.0, merged.gpu_idle_from_syncs_us)
    merged.notes.append(note)
    return merged


def _issued(collective: Any) -> Optional[float]:
    return collective.enqueue_ts if collective.enqueue_ts is not None else collective.exec_ts


def _merge_ranks(ranks: Sequence[tuple[Any, tuple[float, float]]]) -> Any:
    """The job stage's view of one rank's trace from its windows (each with its own time
    range; its file also held a step each side): the collectives, steps and waits of each
    window's own range, collectives numbered on (``Collective.index`` is the position in
    the rank's issue order), blocking-call waits given ids unique over the windows, and
    each sync's replayed effect on collectives (``replayed_earlier``) kept wherever the
    collective is reported, the next window's first step included."""
    first = ranks[0][0]
    lo, hi = first.span
    collectives: list[Any] = []
    steps: list[Any] = []
    waits: list[Any] = []
    notes: list[str] = []
    # Each window's collectives by their window index, then by when they were issued (the
    # same collective in two window files has the same issue time and name).
    numbered: dict[tuple[Any, Any], int] = {}
    for rank, (start, end) in ranks:
        for collective in rank.collectives:
            issued = _issued(collective)
            own = start <= issued < end if issued is not None else start == _NO_START
            if own:
                numbered[(issued, collective.name)] = len(collectives)
                collectives.append(collective)
        steps += [step for step in rank.steps if start <= step.ts < end]
        for wait in rank.waits:
            if not start <= wait.ts < end:
                continue
            if not wait.is_sync:  # "<prefix>-w<n>", numbered per window: made unique
                wait.id = f"{wait.id}.{len(waits)}"
            waits.append(wait)
        notes += [n for n in rank.notes if n not in notes]
        lo, hi = min(lo, rank.span[0]), max(hi, rank.span[1])
    replayed: dict[str, dict[int, float]] = {}
    for rank, _core in ranks:
        by_index = {collective.index: collective for collective in rank.collectives}
        for sync_id, per in rank.replayed_earlier.items():
            for index, value in per.items():
                collective = by_index.get(index)
                if collective is None:
                    continue
                at = numbered.get((_issued(collective), collective.name))
                if at is not None:
                    replayed.setdefault(sync_id, {})[at] = value
    for index, collective in enumerate(collectives):
        collective.index = index
    first.collectives = collectives
    first.steps = steps
    first.waits = waits
    first.notes = notes
    first.replayed_earlier = replayed
    first.span = (lo, hi)
    return first
