"""A remote filesystem for tests: a local folder served under ``memtest://bucket`` through
torch_tb_profiler's io layer, the way its s3/gs/azure/hdfs backends are plugged in."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from torch_tb_profiler import io as tb_io
from torch_tb_profiler.io.base import BaseFileSystem, RemotePath, StatData

SCHEME = "memtest"
BUCKET = f"{SCHEME}://bucket"


@contextlib.contextmanager
def remote_bucket(root: Path, writable: bool = False) -> Iterator[str]:
    """Serve ``root`` as ``memtest://bucket`` while the block runs; yields that URL.
    Read-only unless ``writable`` (a bucket the user may write summaries into)."""

    def local(url: str) -> str:
        return str(root / url[len(BUCKET) :].lstrip("/"))

    class MemFs(RemotePath, BaseFileSystem):
        def support_append(self) -> bool:
            return False

        def exists(self, filename: str) -> bool:
            return os.path.exists(local(filename))

        def isdir(self, dirname: str) -> bool:
            return os.path.isdir(local(dirname))

        def listdir(self, dirname: str) -> list[str]:
            return os.listdir(local(dirname))

        def stat(self, filename: str) -> StatData:
            return StatData(os.path.getsize(local(filename)))

        def read(self, filename, binary_mode=False, size=None, continue_from=None):
            if continue_from is not None:
                return (b"" if binary_mode else "", continue_from)
            data = Path(local(filename)).read_bytes()
            return (data if binary_mode else data.decode(), {"opaque_offset": len(data)})

        def write(self, filename, file_content, binary_mode=False):
            if not writable:
                raise OSError("read-only test filesystem")
            Path(local(filename)).write_bytes(
                file_content if binary_mode else file_content.encode()
            )

        def glob(self, filename):
            raise OSError("glob is not used by the loader")

        def makedirs(self, path):
            if not writable:
                raise OSError("read-only test filesystem")
            os.makedirs(local(path), exist_ok=True)

    tb_io.register_filesystem(SCHEME, MemFs())
    try:
        yield BUCKET
    finally:
        from torch_tb_profiler.io import file as tb_file

        tb_file._REGISTERED_FILESYSTEMS.pop(SCHEME, None)
