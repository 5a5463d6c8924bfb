"""Which code made a stored result: the package version and a digest of its Python files.

A development or git install keeps its version string while its code changes, so a
result kept on disk (the plugin's cache, a per-trace summary) names both: one analysed by
other code is computed again, never served.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tb_syncfinder import __version__


@functools.cache
def code_digest() -> str:
    """SHA-256 over the package's ``.py`` files; ~5 ms, once a process."""
    return digest_of(Path(__file__).resolve().parent)


def digest_of(root: Path) -> str:
    """SHA-256 over the ``.py`` files under ``root`` (their paths and text). Line endings
    are read as ``\n``: a Windows checkout of the same code (CRLF) reads the summaries a
    Linux cluster wrote."""
    import hashlib  # here: a report that reads no summary never needs it (~3 ms)

    digest = hashlib.sha256()
    for file in sorted(root.rglob("*.py")):
        try:
            digest.update(file.relative_to(root).as_posix().encode())
            digest.update(file.read_bytes().replace(b"\r\n", b"\n"))
        except OSError:
            continue
    return digest.hexdigest()


def code_version() -> str:
    """``<version>+<first 16 hex digits of the code digest>``."""
    return f"{__version__}+{code_digest()[:16]}"
