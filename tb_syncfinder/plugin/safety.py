"""Serving user source files without turning the plugin into a file server.

TensorBoard is often exposed with ``--bind_all``, and a trace is untrusted input: a crafted
stack can name ``/etc/passwd`` or ``../../secret.py``. So a file is served only when, after
``--sync_advisor_path_map`` rewriting and full resolution of ``..`` and symlinks, it is a
regular ``.py`` file under one of the configured source roots, below a size cap.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorboard import errors

MAX_SOURCE_BYTES = 2 * 1024 * 1024
MAX_CONTEXT_LINES = 50
MAX_NAME_CHARS = 4096
MAX_RESOLVER_LOOKUPS = 4096

# A name that still holds a percent escape after the one decoding werkzeug did was encoded
# twice (``%252e%252e%252f``): no real file name from a trace looks like that.
_ENCODED = re.compile(r"%[0-9a-fA-F]{2}")

SOURCE_HINT = (
    "Only .py files under the source roots are served. Start TensorBoard from the project "
    "folder, or add --sync_advisor_source_root DIR (repeatable); for traces recorded on "
    "another machine map their paths with --sync_advisor_path_map FROM=TO."
)


class SourceError(errors.PublicError):
    """Why a source file cannot be served: a TensorBoard client error whose ``http_code``
    is 400, 403 or 404, with a hint on how to make the file servable."""

    def __init__(self, status: int, message: str, hint: str = SOURCE_HINT) -> None:
        super().__init__(message)
        self.http_code = status
        self.message = message
        self.hint = hint

    @property
    def status(self) -> int:
        return self.http_code


@dataclass
class SourceLines:
    file: str  # the name as asked for
    path: str  # the resolved local file that was read
    start: int  # 1-based number of lines[0]
    line: int
    lines: list[str]

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "path": self.path,
            "start": self.start,
            "line": self.line,
            "lines": self.lines,
            "missing": False,
        }


def missing_source_json(name: str, line: int, error: SourceError) -> dict:
    """The ``source`` answer, with ``missing_ok=1``, for a file (or a line of it) that is not
    there or not served: a 200 answer instead of the 404 or 403, so that a browser does not
    log a failed request for what the dashboard expects and says in words. It has the served
    answer's fields, empty (``path`` and ``start`` null, ``lines`` []), ``missing: true``,
    ``status`` (the 404 or 403 it stands for), and its ``error`` and ``hint`` (when it has
    one). A 403 is said the same whether or not the file exists."""
    body: dict = {
        "file": name,
        "path": None,
        "start": None,
        "line": line,
        "lines": [],
        "missing": True,
        "status": error.status,
        "error": error.message,
    }
    if error.hint:
        body["hint"] = error.hint
    return body


class SourceGuard:
    """Finds and reads source files for the ``source`` endpoint, inside the roots only."""

    def __init__(self, roots: list[str], path_map: list[tuple[str, str]] | None = None) -> None:
        # Roots are resolved once: a symlinked root is allowed, but what it points at is the
        # boundary that resolved candidate paths are compared against.
        self.roots = [Path(os.path.realpath(r)) for r in roots if r]
        self.path_map = list(path_map or [])
        self._resolver = None
        self._resolver_lookups = 0
        # Each notebook read to see whether its cells changed, as last read: one growing
        # its outputs while a cell trains is read once per save, not at every request.
        self._notebooks_now: dict[str, Any] = {}

    def _engine_candidate(self, name: str) -> Path | None:
        """The file the engine's resolver would read for ``name`` (suffix match under the
        roots, for traces recorded in another checkout), or None. Checked like any other
        candidate afterwards: the resolver only proposes."""
        from tb_syncfinder.source import SourceResolver

        # The resolver memoises every name it is asked; names come from requests, so start
        # a fresh one now and then instead of letting that memo grow without bound.
        if self._resolver is None or self._resolver_lookups > MAX_RESOLVER_LOOKUPS:
            self._resolver = SourceResolver([str(r) for r in self.roots], self.path_map)
            self._resolver_lookups = 0
        self._resolver_lookups += 1
        try:
            return self._resolver.find_file(name)
        except (OSError, ValueError):
            return None

    def candidates(self, name: str) -> list[Path]:
        """Local paths the trace's file name may refer to, most specific first."""
        names = [name]
        normalised = name.replace("\\", "/")
        for source_prefix, local_prefix in self.path_map:
            for n in (name, normalised):
                if n.startswith(source_prefix):
                    names.insert(0, local_prefix + n[len(source_prefix) :])
        found: list[Path] = []
        for n in names:
            p = Path(n)
            if p.is_absolute():
                found.append(p)
            else:
                found.extend(root / p for root in self.roots)
        return found

    def _inside_roots(self, resolved: Path) -> bool:
        return any(resolved == root or resolved.is_relative_to(root) for root in self.roots)

    @staticmethod
    def _check_name(name: str) -> None:
        """SourceError 400 for a name no file is asked by (empty, too long, control or
        percent-encoded characters)."""
        if not name:
            raise SourceError(400, "parameter 'file' is required")
        if len(name) > MAX_NAME_CHARS:
            raise SourceError(400, "parameter 'file' is too long")
        if "\x00" in name or any(ord(c) < 32 for c in name):
            raise SourceError(400, "parameter 'file' holds control characters")
        if _ENCODED.search(name):
            raise SourceError(400, "parameter 'file' holds percent-encoded characters")

    def resolve(self, name: str) -> Path:
        """The safe local file for ``name``; raises SourceError (400/403/404) otherwise."""
        self._check_name(name)
        if not name.endswith(".py"):
            raise SourceError(403, f"{name}: only .py files are served")
        if not self.roots:
            raise SourceError(403, f"{name}: no source root is configured")
        outside = False
        unreadable = ""
        named = [(c, False) for c in self.candidates(name)]
        for candidate, proposed in [*named, (self._engine_candidate(name), True)]:
            if candidate is None:
                continue
            try:
                resolved = Path(os.path.realpath(candidate))
            except (OSError, ValueError):
                continue
            # Checked on the resolved path: a symlink named x.py pointing at /etc/shadow
            # fails both the suffix and the roots test.
            if resolved.suffix != ".py" or not self._inside_roots(resolved):
                # 403 whether or not it exists: a 404 here would let a caller probe
                # which .py files exist anywhere on the machine. The resolver proposes only
                # files that exist: one it found outside the roots (through a link under
                # them) is passed over, not a 403 its absence would have made a 404.
                outside = outside or not proposed
                continue
            try:
                # os.stat, not Path.is_file: that raises every OSError but "not there"
                # (a name part over 255 bytes, a folder the server may not read).
                if stat.S_ISREG(os.stat(resolved).st_mode):
                    return resolved
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                unreadable = exc.strerror or type(exc).__name__
        if outside:
            raise SourceError(403, f"{name}: outside the source roots")
        if unreadable:
            raise SourceError(404, f"{name}: cannot be read under the source roots ({unreadable})")
        raise SourceError(404, f"{name}: not found under the source roots")

    def _notebook_cell(self, name: str) -> tuple[Path, bytes] | None:
        """A Jupyter cell's code (ipykernel's ``<tmp>/ipykernel_<pid>/<hash>.py``, a file
        that never exists) as the engine reads it: the notebook under the roots that holds
        it, and the cell's text. None for any other name."""
        from tb_syncfinder.models import KERNEL_CELL, stamps_hold

        cell = KERNEL_CELL.search(name.replace("\\", "/")) if name.endswith(".py") else None
        if cell is None:
            return None
        self._engine_candidate(name)  # the resolver, fresh when its memo is full
        assert self._resolver is not None
        try:
            found = self._resolver.notebook_cell(name)
            # The notebooks and folders as the resolver read them, for this cell alone.
            stamps = self._resolver.notebook_stamps(numbers=[int(cell.group(1))])
            if found is None and not stamps_hold(stamps, self._notebooks_now):
                # A notebook saved since the resolver looked (the tab's hint says to save
                # it): look again, with a fresh resolver.
                self._resolver = None
                self._engine_candidate(name)
                assert self._resolver is not None
                found = self._resolver.notebook_cell(name)
        except (OSError, ValueError):
            return None
        if found is None:
            return None
        cell, text = found
        notebook = Path(os.path.realpath(cell.notebook))
        if notebook.suffix != ".ipynb" or not self._inside_roots(notebook):
            return None
        return notebook, text

    def read(self, name: str, line: int, context: int = 5) -> SourceLines:
        """``context`` lines either side of ``line`` (1-based) of the file ``name``."""
        if line < 1:
            raise SourceError(400, "parameter 'line' must be >= 1")
        if not 0 <= context <= MAX_CONTEXT_LINES:
            raise SourceError(400, f"parameter 'context' must be in 0..{MAX_CONTEXT_LINES}")
        self._check_name(name)
        cell = self._notebook_cell(name)
        if cell is not None:
            path, data = cell
        else:
            path = self.resolve(name)
            try:
                size = path.stat().st_size
                if size > MAX_SOURCE_BYTES:
                    raise SourceError(403, f"{name}: larger than {MAX_SOURCE_BYTES} bytes")
                with open(path, "rb") as f:
                    data = f.read(MAX_SOURCE_BYTES + 1)
            except OSError as exc:
                raise SourceError(404, f"{name}: cannot be read ({exc.strerror})") from None
        if len(data) > MAX_SOURCE_BYTES:
            raise SourceError(403, f"{name}: larger than {MAX_SOURCE_BYTES} bytes")
        if b"\x00" in data:
            raise SourceError(403, f"{name}: not a text file")
        # Split where Python counts lines (as the trace's line numbers do): bytes split at
        # \n, \r\n and \r only, not at a \u2028 or form feed inside a string, as text would.
        all_lines = [
            line_bytes.decode("utf-8", errors="replace") for line_bytes in data.splitlines()
        ]
        if line > max(len(all_lines), 1):
            raise SourceError(
                404, f"{name}: has {len(all_lines)} lines, line {line} asked for", hint=""
            )
        start = max(1, line - context)
        end = min(len(all_lines), line + context)
        return SourceLines(
            file=name, path=str(path), start=start, line=line, lines=all_lines[start - 1 : end]
        )
