"""Per-trace summaries: one trace's analysis (a ``TraceResult``) kept as a compact versioned
file and read back instead of parsing the trace again, by the CLI, the Ray fan-out and the
plugin.

Where: beside the trace by default (``<its folder>/.sync_advisor/<its file name>.summary``),
so a summarised logdir carries its summaries wherever it is read from (a local disk, NFS, or
``s3://``/``gs://`` through torch-tb-profiler's io layer, as the traces are); or in a folder
the user names (one file per trace, named by a hash of the trace's path).

What: a msgpack map holding the format, the shape of the stored models (their field names),
the package version with a digest of its code (``code_version``: a git or development
install keeps its version string while its code changes), the trace's path, size and mtime,
the analysis options that change a result (source roots, path map, source packs, the
detail-view context window), the size and mtime of each source file a line was resolved in,
and the result itself, zlib-compressed. A summary is used only when format, shape, version
and code are this package's and the trace's size and mtime are those recorded; anything
else is recomputed, never trusted. One made with other options, or whose source files
changed or are not here, is reported as such (``Lookup.same_options``): the CLI recomputes
it, the plugin may still serve it. Results with an error are not stored (a trace still
being written must be read again).
"""

from __future__ import annotations

import functools
import os
import zlib
from collections.abc import Sequence
from typing import Any

import msgspec

from tb_syncfinder import models
from tb_syncfinder.code_version import code_version
from tb_syncfinder.discovery import is_remote, stat_trace
from tb_syncfinder.models import (
    Stamp,
    TraceRef,
    TraceResult,
    file_stamps,
    result_stamps,
    stamps_hold,
)


def _logger() -> Any:
    # Imported here: logging costs a report ~5 ms at start-up, and only failures log.
    import logging

    return logging.getLogger(__name__)


# 2: a result carries its RankTrace (the job stage's input, issue 17).
FORMAT = "tb_syncfinder.summary/2"
FOLDER = ".sync_advisor"  # beside the traces; discovery never takes it for a run
SUFFIX = ".summary"
_COMPRESS_ABOVE = 16 * 1024


def stored_shape() -> str:
    """The field names of everything a stored TraceResult holds: adding a field to the
    models changes it, so a summary written before (which lacks the field) is never used."""
    classes = (
        TraceResult,
        models.TraceInfo,
        models.Sync,
        models.Frame,
        models.Source,
        models.StepStats,
        models.TraceSavings,
        models.RankTrace,
        models.DistributedInfo,
        models.ProcessGroupInfo,
        models.Collective,
        models.StepSpan,
        models.HostWait,
    )
    return ";".join(f"{c.__name__}:{','.join(c.__struct_fields__)}" for c in classes)


STORED_SHAPE = stored_shape()


def options_fingerprint(options: Any) -> dict[str, Any]:
    """The analysis options that change a trace's result, as plain data."""
    # The roots as the resolver uses them: none given means the working directory.
    roots = list(options.source_roots) or [os.getcwd()]
    return {
        "source_roots": [os.path.realpath(str(r)) for r in roots],
        "path_map": [list(p) if not isinstance(p, str) else p for p in options.path_map],
        "source_packs": [[p.recorded_prefix, p.directory] for p in options.source_packs],
        "context_window_us": options.context_window_us,
        "context_max_events": options.context_max_events,
        "whatif": getattr(options, "whatif", True),
        # Only when given (a summary written without it stays valid without it): the
        # figures without the profiler are fitted to this step time.
        **(
            {"unprofiled_step_us": options.unprofiled_step_us}
            if getattr(options, "unprofiled_step_us", None)
            else {}
        ),
        # Likewise: the record_function spans counted as steps in a trace without markers.
        **(
            {"step_annotation": options.step_annotation}
            if getattr(options, "step_annotation", None)
            else {}
        ),
    }


class _Envelope(msgspec.Struct):
    format: str
    shape: str
    version: str
    path: str
    size: int | None
    mtime_ns: int | None
    options: dict[str, Any]
    # resolved source file -> [size, mtime_ns], a notebook's with the digest of its cells
    # and their numbers, a folder's with its notebooks (``Stamp``)
    sources: dict[str, list[Any]]
    compressed: bool
    result: bytes  # the TraceResult's msgpack, zlib-compressed when ``compressed``


@functools.cache
def _decoders() -> tuple[msgspec.msgpack.Decoder, msgspec.msgpack.Decoder]:
    """The envelope's and the result's decoders, made at the first summary read: making
    the result's resolves every record type (5 ms), which a report with none never needs."""
    return msgspec.msgpack.Decoder(_Envelope), msgspec.msgpack.Decoder(TraceResult)


_ENCODER = msgspec.msgpack.Encoder()


class Lookup(msgspec.Struct):
    """What ``SummaryStore.get`` found: the result, or why there is none to use."""

    result: TraceResult | None
    reason: str | None = None  # "no summary", "trace changed", ... when result is None
    same_options: bool = True  # made with the options asked for


def _present(stamps: dict[str, Stamp | None]) -> dict[str, list[Any]]:
    """[size, mtime_ns] of each source file that exists, a notebook's with its code digest
    (a missing one is left out, so a summary whose sources are gone no longer matches)."""
    return {path: list(stamp) for path, stamp in stamps.items() if stamp is not None}


class SummaryStore:
    """Summaries beside each trace (``directory=None``) or in ``directory``."""

    def __init__(self, directory: str | None = None) -> None:
        # Absolute: a Ray task on another node runs in a folder of its own.
        if directory is not None and not is_remote(directory):
            directory = os.path.abspath(directory)
        self.directory = directory
        # Notebooks read to check summaries' stamps (``models.file_stamps``): once per save,
        # not once per summary of a trace of their cells.
        self._notebooks_read: dict[str, Any] = {}

    def path_for(self, trace_path: str) -> str:
        if self.directory is not None:
            import hashlib  # here: ~3 ms of start-up that a report beside its traces skips

            digest = hashlib.sha256(trace_path.encode("utf-8", "surrogateescape")).hexdigest()
            return os.path.join(self.directory, digest[:2], digest + SUFFIX)
        if is_remote(trace_path):
            folder, _, name = trace_path.rstrip("/").rpartition("/")
            return f"{folder}/{FOLDER}/{name}{SUFFIX}"
        folder, name = os.path.split(trace_path)
        return os.path.join(folder, FOLDER, name + SUFFIX)

    # ----- reading ----------------------------------------------------------------------
    def get(self, ref: TraceRef, options: Any) -> Lookup:
        """The stored result of ``ref`` if it is still valid for the trace as it is now."""
        try:
            size, mtime_ns = stat_trace(ref.path)
        except OSError as exc:
            return Lookup(None, f"trace cannot be read ({exc})")
        raw = self._read(self.path_for(ref.path))
        if raw is None:
            return Lookup(None, "no summary")
        try:
            envelope = _decoders()[0].decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return Lookup(None, "summary unreadable")
        if (envelope.format, envelope.shape) != (FORMAT, STORED_SHAPE):
            return Lookup(None, "summary from another version")
        if envelope.version != code_version():
            return Lookup(
                None,
                f"summary made by other code ({envelope.version}; this is {code_version()})",
            )
        if envelope.path != ref.path or (envelope.size, envelope.mtime_ns) != (size, mtime_ns):
            return Lookup(None, "trace changed since its summary")
        payload = envelope.result
        try:
            if envelope.compressed:
                payload = zlib.decompress(payload)
            result = _decoders()[1].decode(payload)
        except (zlib.error, msgspec.DecodeError, msgspec.ValidationError):
            return Lookup(None, "summary unreadable")
        # The run and worker are the reader's view of the logdir (a run renamed by
        # --logdir_spec is the same trace): take them from the ref.
        result.info.run, result.info.worker, result.info.span = ref.run, ref.worker, ref.span
        same = (
            envelope.options == options_fingerprint(options)
            and stamps_hold(envelope.sources, self._notebooks_read)
            # A source file not found then, copied in since: its lines would be found now.
            and not _present(file_stamps(result.source_probes))
        )
        return Lookup(result, None, same)

    @staticmethod
    def _read(path: str) -> bytes | None:
        try:
            if is_remote(path):
                from torch_tb_profiler import io as tb_io

                if not tb_io.exists(path):
                    return None
                return tb_io.read(path)
            with open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - an unreadable summary is only a miss
            _logger().info("summary %s unreadable (%s)", path, exc)
            return None

    # ----- writing ----------------------------------------------------------------------
    def put(self, ref: TraceRef, result: TraceResult, options: Any) -> bool:
        """Store ``result`` for the trace as it is now; False (and a log line) when it
        cannot be written or must not be kept (a result with an error)."""
        if result.info.error:
            return False
        reason = self.write_failure(ref, result, options)
        if reason:
            _logger().warning("%s", reason)
        return reason is None

    def write_failure(self, ref: TraceRef, result: TraceResult, options: Any) -> str | None:
        """``put`` for a caller that shows the failure itself (a Ray task, whose log lines
        never reach the driver): why the summary could not be written, or None (written,
        or not to be kept: a result with an error, a trace gone since)."""
        if result.info.error:
            return None
        try:
            size, mtime_ns = stat_trace(ref.path)
        except OSError:
            return None
        payload = _ENCODER.encode(result)
        compressed = len(payload) > _COMPRESS_ABOVE
        if compressed:
            payload = zlib.compress(payload, 1)
        # As the analysis read them: an edit made meanwhile then differs from the summary.
        sources = _present(result_stamps(result))
        data = _ENCODER.encode(
            _Envelope(
                FORMAT,
                STORED_SHAPE,
                code_version(),
                ref.path,
                size,
                mtime_ns,
                options_fingerprint(options),
                sources,
                compressed,
                payload,
            )
        )
        target = self.path_for(ref.path)
        try:
            self._write(target, data)
        except Exception as exc:  # noqa: BLE001 - a summary is an optimisation only
            return f"cannot write summary {target} ({exc})"
        return None

    @staticmethod
    def _write(path: str, data: bytes) -> None:
        if is_remote(path):
            from torch_tb_profiler import io as tb_io
            from torch_tb_profiler.io.file import get_filesystem

            folder = path.rsplit("/", 1)[0]
            if not tb_io.exists(folder):
                tb_io.makedirs(folder)
            get_filesystem(path).write(path, data, binary_mode=True)
            return
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        # Write then rename: a reader (a plugin, another task) never sees half a summary.
        # Created as open() creates files (0666 less the umask, as the traces beside it):
        # mkstemp's 0600 kept a TensorBoard of another user, or a colleague, from reading it.
        tmp = os.path.join(folder, f".tmp-{os.getpid()}-{os.urandom(6).hex()}{SUFFIX}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


def summarised(
    refs: Sequence[TraceRef], store: SummaryStore, options: Any
) -> tuple[dict[str, TraceResult], list[TraceRef]]:
    """The refs whose summaries are valid (path -> result) and those left to analyse.
    A summary made with other source options counts as missing (its lines were resolved
    against other folders)."""
    found: dict[str, TraceResult] = {}
    missing: list[TraceRef] = []
    for ref in refs:
        lookup = store.get(ref, options)
        if lookup.result is not None and lookup.same_options:
            found[ref.path] = lookup.result
        else:
            missing.append(ref)
    return found, missing


def has_summaries(store: SummaryStore, trace_paths: Sequence[str]) -> bool:
    """Whether any of ``trace_paths`` has a summary file, valid or not. Beside the traces
    that is one look per ``.sync_advisor`` folder, not one per trace: the plugin asks at
    every scan, and on remote storage each look is a request."""
    if store.directory is not None:
        return _exists(store.directory) and any(
            _exists(store.path_for(path)) for path in trace_paths
        )
    return any(
        _exists(folder)
        for folder in {os.path.dirname(store.path_for(path)) for path in trace_paths}
    )


def _exists(path: str) -> bool:
    try:
        if is_remote(path):
            from torch_tb_profiler import io as tb_io

            return bool(tb_io.exists(path))
        return os.path.exists(path)
    except Exception:  # noqa: BLE001 - an unreachable store has no summaries to offer
        return False


def summarise_command(folder: str, store: SummaryStore) -> str:
    """The command that writes the summaries of the traces under ``folder``."""
    import shlex

    where = f" --summaries-dir {shlex.quote(store.directory)}" if store.directory else ""
    return f"tb-syncfinder report --write-summaries{where} {shlex.quote(folder)}"
