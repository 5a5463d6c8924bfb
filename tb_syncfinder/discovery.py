"""Find trace files the way the PyTorch Profiler tab (torch-tb-profiler) does.

Naming follows torch-tb-profiler 0.4.3 so that a run / worker / span means the same thing
in both tabs:

* a **run** is a directory under the logdir holding at least one file that matches
  ``consts.WORKER_PATTERN`` (``<worker>[.<timestamp>].pt.trace.json[.gz]``); its name is the
  path relative to the logdir, or the directory's own name when it is the logdir itself
  (``TorchProfilerPlugin._get_run_dirs`` / ``_get_run_name``);
* the **worker** is the part of the file name before the optional ``.<timestamp>`` and the
  **span** is that timestamp (``RunLoader.load``). torch-tb-profiler shows spans as their
  1-based rank among a worker's timestamps; we keep the timestamp itself, because a rank
  changes meaning when a newer file appears while TensorBoard is running, and sort by it so
  the order is the same;
* the Ascend fork (torch-tb-profiler-ascend) adds runs whose sub-directories are named
  ``<worker>_<timestamp>_ascend_pt`` and hold ``ASCEND_PROFILER_OUTPUT/trace_view.json``:
  worker = the name before the timestamp, span = the timestamp, run = the parent directory.

Remote logdirs (``s3://``, ``gs://``, ``hdfs://``, Azure blob URLs) go through
``torch_tb_profiler.io``, imported only for them: it pulls in boto3 and friends (~0.3 s),
which a local CLI run should not pay. Locally their io layer is ``os`` with
``followlinks=True``, which is what is used here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import stat
import zlib
from collections.abc import Iterator
from typing import Any

from tb_syncfinder.models import TraceRef

# Ascend (torch_npu) layout, as in torch-tb-profiler-ascend's consts.WORKER_SPAN_PATTERN:
# ``<worker>_<timestamp>_ascend_pt``. The timestamp may be missing: published recordings
# (MindStudio Insight's samples) name their folders ``rank0_ascend_pt``.
ASCEND_DIR_PATTERN = re.compile(r"^(.*?)(?:_(\d+(?:\.\d+)?))?_ascend_pt$")
ASCEND_OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
ASCEND_TRACE_FILE = "trace_view.json"

__all__ = [
    "ASCEND_DIR_PATTERN",
    "TraceNotFoundError",
    "find_traces",
    "is_remote",
    "is_trace_file_name",
    "list_runs",
    "open_trace_bytes",
    "unnamed_traces",
    "worker_pattern",
]


class TraceNotFoundError(FileNotFoundError):
    """The path given to ``find_traces`` does not exist (message names the path)."""

    def __init__(self, path: str, reason: str = "no such file or directory") -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def worker_pattern() -> re.Pattern[str]:
    """torch-tb-profiler's own ``consts.WORKER_PATTERN`` (cheap import: no io, no torch)."""
    from torch_tb_profiler import consts

    return consts.WORKER_PATTERN


def is_trace_file_name(name: str) -> bool:
    """True for a file name the PyTorch Profiler tab would load as a worker."""
    return worker_pattern().match(name) is not None


def is_remote(path: str) -> bool:
    """True for URLs that torch_tb_profiler.io serves (s3://, gs://, hdfs://, https blob)."""
    return "://" in path


def _remote_io() -> Any:
    from torch_tb_profiler import io as tb_io  # heavy: only for remote paths

    return tb_io


@functools.lru_cache(maxsize=256)
def _warn_once(message: str) -> None:
    """Once per message and process: TensorBoard's plugin walks the logdir at every poll."""
    import logging  # only here: a walk that finds nothing to say never loads it

    logging.getLogger(__name__).warning("sync advisor: %s", message)


class _LocalFs:
    """The subset of torch_tb_profiler.io used here, for local paths, without its imports."""

    @staticmethod
    def exists(path: str) -> bool:
        return os.path.exists(path)

    @staticmethod
    def isdir(path: str) -> bool:
        return os.path.isdir(path)

    @staticmethod
    def listdir(path: str) -> list[str]:
        return os.listdir(path)

    @staticmethod
    def join(path: str, *paths: str) -> str:
        return os.path.join(path, *paths)

    @staticmethod
    def abspath(path: str) -> str:
        return os.path.abspath(os.path.expanduser(os.path.expandvars(path)))

    @staticmethod
    def basename(path: str) -> str:
        return os.path.basename(path)

    @staticmethod
    def relpath(path: str, start: str) -> str:
        return os.path.relpath(path, start)

    @staticmethod
    def walk(top: str) -> Iterator[tuple[str, list[str], list[str]]]:
        """``os.walk`` with ``followlinks=True`` like torch-tb-profiler (users build symlink
        trees of runs), but never into a folder that is one of its own ancestors: two links
        to each other's folders made 82 runs, 41 folders deep, each analysed on its own.
        A folder reached by two paths that are no loop (``latest -> run_42``) is still a run
        under each, as in the PyTorch Profiler tab."""
        ancestors: dict[str, frozenset[tuple[int, int]]] = {}
        for root, dirs, files in os.walk(top, followlinks=True):
            try:
                st = os.stat(root)
            except OSError:
                dirs[:] = []
                continue
            key = (st.st_dev, st.st_ino)
            above = ancestors.get(os.path.dirname(root), frozenset())
            # An inode number of 0 (some FUSE and SMB mounts) names no folder: not a loop.
            if st.st_ino and key in above:
                dirs[:] = []
                _warn_once(f"{root} is a link to a folder above it; not followed")
                continue
            ancestors[root] = above | {key}
            yield root, dirs, files


def _fs(path: str) -> Any:
    return _remote_io() if is_remote(path) else _LocalFs


def _strip_trailing_sep(path: str) -> str:
    stripped = path.rstrip("/\\")
    return stripped or path


def _parent(path: str) -> str:
    if is_remote(path):
        return path.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(path)


def shown_name(name: str) -> str:
    """A run or worker name as text: a folder or file name whose bytes are not UTF-8
    (decoded by ``os`` with lone surrogates) with those bytes as ``\\xff``. A lone
    surrogate cannot be put in a URL (the tab's ``encodeURIComponent`` throws, and the
    whole run list stayed "Loading runs...") nor come back in one; the name is a key only,
    the trace's path keeps the real bytes."""
    if name.isascii():
        return name
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte decoded to (a Windows name)
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _worker_and_span(file_name: str) -> tuple[str, str | None] | None:
    match = worker_pattern().match(file_name)
    if not match:
        return None
    span = match.group(2)
    # Drop the leading dot, as RunLoader.
    return shown_name(match.group(1)), (span[1:] if span else None)


def _sort_key(ref: TraceRef) -> tuple[str, int, str, str]:
    # Spans are timestamps: order them numerically when they are, as bisect.insort on
    # equal-length digit strings does in RunLoader.
    span = ref.span or ""
    return (ref.worker, len(span), span, ref.path)


def _run_traces(fs: Any, run_dir: str, run_name: str) -> list[TraceRef]:
    """The traces of one run directory: worker files and Ascend worker directories."""
    refs: list[TraceRef] = []
    try:
        entries = fs.listdir(run_dir)
    except OSError:
        return refs
    for entry in entries:
        entry = entry.rstrip("/")
        full = fs.join(run_dir, entry)
        ascend = ASCEND_DIR_PATTERN.match(entry)
        if ascend:
            trace = fs.join(full, ASCEND_OUTPUT_DIR, ASCEND_TRACE_FILE)
            if fs.exists(trace):
                worker = shown_name(ascend.group(1))
                refs.append(TraceRef(trace, run_name, worker, ascend.group(2)))
            continue
        parsed = _worker_and_span(entry)
        if parsed is None or fs.isdir(full):
            continue
        refs.append(TraceRef(full, run_name, parsed[0], parsed[1]))
    refs = _one_of_each_gzip_copy(fs, refs)
    refs.sort(key=_sort_key)
    return refs


def _one_of_each_gzip_copy(fs: Any, refs: list[TraceRef]) -> list[TraceRef]:
    """``w.pt.trace.json`` beside ``w.pt.trace.json.gz`` (``gzip -k``, ``gunzip -k``) is one
    trace twice: both were read, and every count of the worker's span doubled. The newer
    file is kept (the .gz where they tie or a time is unknown; the one that exists where
    the other is a link to nothing, an unfetched copy), the other named in a warning."""
    paths = {ref.path for ref in refs}
    dropped = set()
    for gz in (ref.path for ref in refs if ref.path.endswith(".gz")):
        plain = gz[:-3]
        if plain not in paths:
            continue
        kept = gz
        if fs is _LocalFs:
            times = {}
            for candidate in (gz, plain):
                with contextlib.suppress(OSError):
                    times[candidate] = os.stat(candidate).st_mtime_ns
            if len(times) == 1 or (times and times[plain] > times[gz]):
                kept = max(times, key=times.__getitem__)
        skipped = plain if kept == gz else gz
        dropped.add(skipped)
        _warn_once(
            f"{skipped} and {kept} name one trace, one of them gzipped: read once, from {kept}"
        )
    return [ref for ref in refs if ref.path not in dropped]


def _run_dirs(fs: Any, logdir: str) -> Iterator[str]:
    """Directories that are runs, as TorchProfilerPlugin._get_run_dirs (+ the Ascend fork)."""
    pattern = worker_pattern()
    for root, subdirs, files in fs.walk(logdir):
        root = _strip_trailing_sep(root)
        if any(pattern.match(f) for f in files):
            yield root
        # An Ascend worker directory makes its parent a run; the parent may hold GPU traces
        # too, in which case it was yielded above already.
        elif any(
            ASCEND_DIR_PATTERN.match(d)
            and fs.exists(fs.join(root, d, ASCEND_OUTPUT_DIR, ASCEND_TRACE_FILE))
            for d in subdirs
        ):
            yield root


def list_runs(logdir: str) -> dict[str, list[TraceRef]]:
    """Runs under ``logdir`` (itself included), by run name, each with its traces.

    Run names are those the PyTorch Profiler tab shows: the path relative to the logdir
    (forward slashes), or the logdir's own name when the logdir itself is a run.
    Raises ``TraceNotFoundError`` when ``logdir`` does not exist.
    """
    fs = _fs(logdir)
    if not fs.exists(logdir):
        raise TraceNotFoundError(logdir)
    root = _strip_trailing_sep(fs.abspath(logdir))
    runs: dict[str, list[TraceRef]] = {}
    for run_dir in _run_dirs(fs, root):
        if run_dir == root:
            name = fs.basename(run_dir) or run_dir
        else:
            name = fs.relpath(run_dir, root).replace(os.sep, "/")
        name = shown_name(name)
        if name in runs:  # "a\xffb" taken by a folder of that very text: both kept
            name = next(
                f"{name} ({n})" for n in range(2, len(runs) + 3) if f"{name} ({n})" not in runs
            )
        traces = _run_traces(fs, run_dir, name)
        if traces:
            runs[name] = traces
    return dict(sorted(runs.items()))


def _single_file_ref(fs: Any, path: str) -> TraceRef:
    name = fs.basename(path)
    parent = _parent(path)
    run = shown_name(fs.basename(parent) or parent)
    parsed = _worker_and_span(name)
    if parsed is not None:
        return TraceRef(path, run, parsed[0], parsed[1])
    if name == ASCEND_TRACE_FILE and fs.basename(parent) == ASCEND_OUTPUT_DIR:
        worker_dir = _parent(parent)
        ascend = ASCEND_DIR_PATTERN.match(fs.basename(worker_dir))
        if ascend:
            run_dir = _parent(worker_dir)
            run_name = shown_name(fs.basename(run_dir) or run_dir)
            return TraceRef(path, run_name, shown_name(ascend.group(1)), ascend.group(2))
    # Any other file name: the user named it, so take it; the worker is its name without
    # the JSON suffixes.
    worker = re.sub(r"(\.pt)?(\.trace)?\.json(\.gz)?$", "", name) or name
    return TraceRef(path, run, shown_name(worker), None)


def run_folder(path: str) -> str:
    """The folder of the run a trace file is of: its own folder, or for an Ascend trace
    (``RUN/W_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json``) ``RUN``, as ``list_runs``
    and a single file's ``TraceRef`` take it."""
    fs = _fs(path)
    parent = _parent(path)
    if fs.basename(path) == ASCEND_TRACE_FILE and fs.basename(parent) == ASCEND_OUTPUT_DIR:
        worker_dir = _parent(parent)
        if ASCEND_DIR_PATTERN.match(fs.basename(worker_dir)):
            return _parent(worker_dir)
    return parent


def find_traces(path: str) -> list[TraceRef]:
    """Every trace under ``path``: a trace file (any name), a run folder or a logdir of runs,
    or one torch_npu worker's folder (``W_ascend_pt``, or its ``ASCEND_PROFILER_OUTPUT``).

    Returns ``[]`` for a directory without traces; raises ``TraceNotFoundError`` when
    ``path`` does not exist.
    """
    fs = _fs(path)
    if not fs.exists(path):
        raise TraceNotFoundError(path)
    if not fs.isdir(path):
        return [_single_file_ref(fs, fs.abspath(path))]
    worker_trace = _ascend_worker_trace(fs, _strip_trailing_sep(fs.abspath(path)))
    if worker_trace is not None:
        return [_single_file_ref(fs, worker_trace)]
    return [ref for refs in list_runs(path).values() for ref in refs]


def _ascend_worker_trace(fs: Any, folder: str) -> str | None:
    """The trace of a torch_npu worker's folder given itself (a user pasting the folder
    torch_npu printed), or of its ``ASCEND_PROFILER_OUTPUT``; None for any other folder."""
    name = fs.basename(folder)
    if ASCEND_DIR_PATTERN.match(name):
        trace = fs.join(folder, ASCEND_OUTPUT_DIR, ASCEND_TRACE_FILE)
    elif name == ASCEND_OUTPUT_DIR and ASCEND_DIR_PATTERN.match(fs.basename(_parent(folder))):
        trace = fs.join(folder, ASCEND_TRACE_FILE)
    else:
        return None
    return trace if fs.exists(trace) else None


# How a profiler trace written under a name of the user's begins: Kineto's JSON opens with
# its schema version (or, from other writers, its events or device list); the legacy
# autograd profiler's is a list of events.
_TRACE_START = re.compile(
    rb'\A\s*(?:\{\s*"(?:schemaVersion|traceEvents|deviceProperties|distributedInfo)"'
    rb'|\[\s*\{\s*"(?:name|ph|cat|pid)")'
)
UNNAMED_TRACE_REASON = (
    "begins like a profiler trace, but is not read as one: only files named "
    "NAME.pt.trace.json[.gz] are a run's traces, in TensorBoard as in a logdir's report "
    "(accelerate's ProfileKwargs and prof.export_chrome_trace() take any name). Rename it "
    "so, or pass the file itself to tb-syncfinder report"
)


def unnamed_traces(
    path: str,
    limit: int = 3,
    looked: int = 200,
    memo: dict[tuple[str, int, int], bool] | None = None,
) -> list[str]:
    """JSON files under ``path`` (itself included, a few levels down) that begin like a
    profiler trace but are not named as a run's trace: accelerate's ``profile_0.json``, a
    ``prof.export_chrome_trace("trace.json")``. Neither tab lists them, and a logdir's other
    runs hid that they were passed over. At most ``limit``, of the first ``looked`` JSON
    files; ``memo`` keeps what each file's first bytes said, by (path, size, mtime), for a
    caller that looks again (the plugin's polls)."""
    found: list[str] = []
    if is_remote(path) or not os.path.isdir(path):
        return found
    pattern = worker_pattern()
    top = os.path.abspath(path).rstrip(os.sep)
    if top.endswith(os.sep + ASCEND_OUTPUT_DIR):
        return found  # one torch_npu worker's output, its trace_view.json read as its trace
    seen = 0
    named: set[str] = set()  # a file reached by two links (``latest -> run_42``) named once
    # The runs' own walk: links followed, never round a loop.
    for folder, subdirs, files in _LocalFs.walk(top):
        subdirs.sort()  # the same files named, poll after poll
        if folder[len(top) :].count(os.sep) >= 5:
            subdirs[:] = []
        if ASCEND_DIR_PATTERN.match(os.path.basename(folder)):
            subdirs[:] = []  # torch_npu's own files, read (or not) as its worker's
            continue
        for name in sorted(files):
            if not name.endswith((".json", ".json.gz")) or pattern.match(name):
                continue
            seen += 1
            if seen > looked:
                return found
            file = os.path.join(folder, name)
            if _begins_like_a_trace(file, memo) and os.path.realpath(file) not in named:
                named.add(os.path.realpath(file))
                found.append(file)
                if len(found) >= limit:
                    return found
    return found


def _begins_like_a_trace(file: str, memo: dict[tuple[str, int, int], bool] | None) -> bool:
    try:
        st = os.stat(file)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False  # a named pipe would wait for a writer, in the plugin's poll thread
    key = (file, st.st_size, st.st_mtime_ns)
    if memo is not None and key in memo:
        return memo[key]
    head = b""
    with contextlib.suppress(OSError, EOFError, zlib.error):
        with open(file, "rb") as handle:
            head = handle.read(4096)
        if head[:2] == b"\x1f\x8b":
            head = zlib.decompressobj(31).decompress(head, 4096)
    if head[:3] == b"\xef\xbb\xbf":
        head = head[3:]
    begins = _TRACE_START.match(head) is not None
    if memo is not None:
        memo[key] = begins
    return begins


def unread_ascend_reason(folder: str, why: str) -> str:
    """Why a folder ``unread_ascend_folders`` found has nothing to read, and what to run."""
    if why == "db":
        return (
            "torch_npu's output exported as a database only (export_type db), which is not "
            "read: export it as text too (torch_npu's export_type text writes "
            "trace_view.json)"
        )
    if why == "no_view":
        return (
            "torch_npu's parsed output holds no trace_view.json (its parse failed or is "
            "still running: see the folder's logs/)"
        )
    return (
        "torch_npu's raw data, not parsed yet: parse it with "
        "`from torch_npu.profiler.profiler import analyse; "
        f"analyse(profiler_path={os.path.dirname(folder)!r})`"
    )


def unread_ascend_folders(path: str, limit: int = 3) -> list[tuple[str, str]]:
    """torch_npu worker folders under ``path`` (itself included, a few levels down) without
    a ``trace_view.json`` to read, with why: ``"unparsed"`` (the raw data, not parsed yet),
    ``"db"`` (parsed into a database only, ``export_type=db``) or ``"no_view"`` (parsed,
    without it: failed, or still running). At most ``limit``."""
    found: list[tuple[str, str]] = []
    if is_remote(path) or not os.path.isdir(path):
        return found
    top = os.path.abspath(path).rstrip(os.sep)
    # Links followed, as the runs' own walk does (a depth bound keeps a loop finite).
    for folder, subdirs, _files in os.walk(top, followlinks=True):
        if folder[len(top) :].count(os.sep) >= 3:
            subdirs[:] = []
        if not ASCEND_DIR_PATTERN.match(os.path.basename(folder)):
            continue
        subdirs[:] = []  # its own contents are torch_npu's, not other workers
        output = os.path.join(folder, ASCEND_OUTPUT_DIR)
        if os.path.exists(os.path.join(output, ASCEND_TRACE_FILE)):
            continue
        try:
            names = os.listdir(output)
        except OSError:
            names = None
        if names is None:
            why = "unparsed"
        elif any(n.endswith(".db") for n in names) and not any(
            n.endswith((".json", ".csv")) for n in names
        ):
            why = "db"
        else:
            why = "no_view"
        found.append((folder, why))
        if len(found) >= limit:
            break
    return found


def open_trace_bytes(path: str) -> bytes:
    """The raw bytes of a trace file (still gzip-compressed if it is), local or remote.

    Remote paths are read through ``torch_tb_profiler.io`` (s3, gs, Azure blob, hdfs).
    """
    if is_remote(path):
        with _remote_errors_as_oserror(path):
            return _remote_io().read(path)
    if not stat.S_ISREG(os.stat(path).st_mode):
        # A named pipe would wait for a writer: never in a request's thread.
        raise OSError(f"{path}: not a regular file")
    with open(path, "rb") as handle:
        return handle.read()


def stat_trace(path: str) -> tuple[int | None, int | None]:
    """(size, mtime in ns) of a trace file, local or remote; the io layer gives remote files
    no mtime. Raises OSError when the file cannot be stat'ed."""
    if is_remote(path):
        from torch_tb_profiler.io import file as tb_file  # `stat` is not re-exported by io

        with _remote_errors_as_oserror(path):
            return tb_file.stat(path).length, None
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


@contextlib.contextmanager
def _remote_errors_as_oserror(path: str) -> Iterator[None]:
    """Cloud SDKs raise their own exception types (botocore, google.api_core, azure): make
    them OSErrors that name the path, so callers treat them like any unreadable file."""
    try:
        yield
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - any SDK failure means "cannot read this file"
        raise OSError(f"{path}: {type(exc).__name__}: {exc}") from exc
