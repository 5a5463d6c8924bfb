"""Disk cache of analysed traces, so that a TensorBoard restart answers immediately.

An entry is one pickled ``TraceResult``, keyed by the trace's path, size and mtime, the
package version and its code (a development install keeps its version string across
changes), and the analysis options (source roots change the resolved lines). With it are
the size and mtime of each source file its lines were resolved in: an entry whose source
files changed since is a miss (the lines, and what the report says of a file edited since
profiling, are found again). A stale or unreadable entry is a miss, never an error: the
trace is simply analysed again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from tb_syncfinder import __version__
from tb_syncfinder.code_version import code_digest
from tb_syncfinder.models import result_stamps, stamps_hold

logger = logging.getLogger(__name__)

# Bumped when what the plugin stores changes shape independently of the package version.
CACHE_FORMAT = 3  # 3: (result, source file stamps); 2: the models became msgspec Structs


def _stored_shape() -> str:
    """The field names of everything a cached TraceResult holds: adding a field to the
    models changes the key, so an old pickle (which lacks it) is never served."""
    from tb_syncfinder import models

    classes = (
        models.TraceResult,
        models.TraceInfo,
        models.Sync,
        models.Frame,
        models.Source,
        models.StepStats,
    )
    return ";".join(f"{c.__name__}:{','.join(c.__struct_fields__)}" for c in classes)


STORED_SHAPE = _stored_shape()


CODE_DIGEST = code_digest()


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/tb_syncfinder`` or ``~/.cache/tb_syncfinder``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tb_syncfinder")


def cache_key(path: str, size: int | None, mtime_ns: int | None, options_digest: str) -> str:
    """Hex digest naming one (file version, package version, options) combination."""
    text = "\0".join(
        [
            str(CACHE_FORMAT),
            STORED_SHAPE,
            __version__,
            CODE_DIGEST,
            path,
            str(size),
            str(mtime_ns),
            options_digest,
        ]
    )
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


class DiskCache:
    """Pickled results under ``directory``; ``directory=None`` disables it."""

    def __init__(self, directory: str | None) -> None:
        self.directory = Path(directory) if directory else None
        # Notebooks read to check entries' stamps (``models.file_stamps``): once per save.
        self._notebooks_read: dict[str, Any] = {}
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                logger.warning("sync_advisor: cache dir %s unusable (%s)", directory, exc)
                self.directory = None

    def _file(self, key: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / (key + ".pickle")

    def get(self, key: str) -> Any | None:
        file = self._file(key)
        if file is None:
            return None
        try:
            with open(file, "rb") as f:
                result, stamps = pickle.load(f)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - a corrupt entry is just a miss
            logger.info("sync_advisor: dropping unreadable cache entry %s (%s)", file, exc)
            self._drop(file)
            return None
        if not stamps_hold(stamps, self._notebooks_read):
            logger.info("sync_advisor: source files changed since %s was cached", file)
            self._drop(file)
            return None
        return result

    @staticmethod
    def _drop(file: Path) -> None:
        try:
            file.unlink()
        except OSError:
            pass

    def put(self, key: str, result: Any, stamps: dict[str, Any] | None = None) -> None:
        """``stamps``: ``models.result_stamps(result)``, when already taken."""
        file = self._file(key)
        if file is None:
            return
        if stamps is None:
            stamps = result_stamps(result)
        value = (result, stamps)
        tmp = None
        try:
            # Write then rename: a reader (another TensorBoard on the same cache) never sees
            # half an entry.
            fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=".tmp-", suffix=".pickle")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, file)
        except Exception as exc:  # noqa: BLE001 - caching is an optimisation only
            logger.warning("sync_advisor: cannot write cache entry %s (%s)", file, exc)
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
