"""A folder artefact as one uncompressed tar whose bytes depend only on its files and the
export's time, so the API can announce the tar's size and SHA-256 before anyone asks
for it and the download matches them (``sha256sum`` of the file = ``artifact.sha256``).

Members: every file below the folder, in the order of their POSIX relative paths,
mode 0644, owner 0:0 without names, modification time the export's (``exported_at``);
no folder entries (PAX format: names longer than 100 bytes or non-ASCII get a PAX
header, deterministically).
"""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path
from typing import BinaryIO


def write_tar(folder: Path, out: BinaryIO, mtime: int) -> None:
    """Write the tar of ``folder``'s files to ``out`` (members: see the module docstring)."""
    files = sorted((p.relative_to(folder).as_posix(), p) for p in folder.rglob("*") if p.is_file())
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, path in files:
            info = tarfile.TarInfo(name)
            info.size = path.stat().st_size
            info.mtime = mtime
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)


class HashingWriter:
    """A write-only file that keeps the SHA-256 and the count of what was written (and
    passes it on to ``sink`` when given)."""

    def __init__(self, sink: BinaryIO | None = None) -> None:
        self.sink = sink
        self.size = 0
        self._sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._sha.update(data)
        self.size += len(data)
        if self.sink is not None:
            self.sink.write(data)
        return len(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def tar_digest(folder: Path, mtime: int) -> tuple[int, str]:
    """(bytes, SHA-256 hex) of `write_tar`'s tar of ``folder``, without keeping it."""
    writer = HashingWriter()
    write_tar(folder, writer, mtime)  # type: ignore[arg-type]
    return writer.size, writer.hexdigest()
