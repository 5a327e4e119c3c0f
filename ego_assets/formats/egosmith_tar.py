"""EgoSmith's tar shards: `ShardWriter` (``shard-NNNNNN.tar`` files of about a given size,
hashed as they are written) and `tar_sample`, the bytes of one sample.

Members are regular files ``<key>.<ext>``, mode 0444, owner 0:0, mtime 0, each a USTAR
header and its data padded to 512 bytes, exactly what ``tarfile`` writes (tested), so
the same samples always give the same bytes. Part of the writer of
`ego_assets.formats.egosmith_webdataset` (the format: docs/formats/egosmith-webdataset.md).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ego_assets.formats import egosmith_constants

_TAR_BLOCK = tarfile.BLOCKSIZE


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One written shard: file name, samples, size in bytes, SHA-256 of its bytes."""

    name: str
    samples: int
    bytes: int
    sha256: str


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o444
    info.mtime = 0
    return info.tobuf(tarfile.USTAR_FORMAT)


@functools.cache
def _header_template() -> tuple[bytes, int]:
    """`tarfile`'s header for an empty name and size, and the checksum of its bytes
    outside the name and size fields (the checksum field counted as 8 spaces)."""
    head = _tarfile_header("", 0)
    return head, 8 * ord(" ") + sum(head[100:124]) + sum(head[136:148]) + sum(head[156:])


def ustar_header(name: str, size: int) -> bytes:
    """The USTAR header ``tarfile`` writes for the regular file ``name`` of ``size``
    bytes (mode 0444, owner 0:0, mtime 0): its header for an empty name with the name,
    the size and the checksum filled in (five times faster); ``tarfile`` itself for a
    name it would split (over 100 bytes) or spell otherwise (not ASCII)."""
    if len(name) > 100 or not name.isascii() or not 0 <= size < 8**11:
        return _tarfile_header(name, size)
    head, rest = _header_template()
    raw, octal = name.encode(), b"%011o\0" % size
    checksum = b"%06o\0 " % (rest + sum(raw) + sum(octal))
    return b"".join(
        (raw, bytes(100 - len(raw)), head[100:124], octal, head[136:148], checksum, head[156:])
    )


def tar_sample(key: str, members: Sequence[tuple[str, bytes]]) -> bytes:
    """The tar bytes of one sample (``members``: (extension, bytes) pairs).

    Per member a USTAR header (`ustar_header`: regular file ``<key>.<ext>``, mode 0444,
    owner 0:0, mtime 0) and its data padded to 512 bytes: what ``TarFile.addfile``
    writes, built as one string so that it can be made on a worker thread and written
    with one call.
    """
    parts: list[bytes] = []
    for ext, data in members:
        parts += (ustar_header(f"{key}.{ext}", len(data)), data, bytes(-len(data) % _TAR_BLOCK))
    return b"".join(parts)


class ShardWriter:
    """Writes samples into ``shard-NNNNNN.tar`` files of about ``shard_bytes`` each.

    Members are regular files named ``<key>.<ext>`` (no folders, no links), mode 0444,
    owner 0:0 and mtime 0, so the same samples always give the same bytes. A sample never
    straddles two shards; a shard is closed before a sample that would take it past
    ``shard_bytes`` (a single larger sample gets a shard of its own). Each shard is
    hashed (SHA-256) as it is written and ends like ``tarfile`` ends an archive (two
    zero blocks, padded to a 10240-byte record).
    """

    def __init__(self, folder: Path, shard_bytes: int, first: int = 0) -> None:
        self.folder = Path(folder)
        self.shard_bytes = shard_bytes
        self.next_index = first
        self.shards: list[ShardInfo] = []
        self._raw: BinaryIO | None = None
        self._sha = hashlib.sha256()
        self._size = 0
        self._name = ""
        self._samples = 0
        self.last_sample: tuple[str, int] = ("", 0)  # (shard, byte offset) of the last one

    def write(self, key: str, members: Sequence[tuple[str, bytes]]) -> None:
        """Append one sample (``members``: (extension, bytes) pairs)."""
        self.write_sample(tar_sample(key, members))

    def write_sample(self, data: bytes) -> None:
        """Append one sample given as its tar bytes (`tar_sample`)."""
        self.write_samples(data, [0, len(data)])

    def write_samples(self, data: bytes, bounds: Sequence[int]) -> list[tuple[str, int]]:
        """Append the samples ``data[bounds[i]:bounds[i + 1]]`` (tar bytes, in order), as
        many at once as fit in the open shard (one write, one hash update a run);
        return each one's (shard, byte offset)."""
        placed: list[tuple[str, int]] = []
        view = memoryview(data)
        last = len(bounds) - 1
        i = 0
        while i < last:
            if (
                self._raw is not None
                and self._samples
                and self._size + bounds[i + 1] - bounds[i] > self.shard_bytes
            ):
                self._close_shard()
            if self._raw is None:
                self._open_shard()
            # samples i..end-1 fit: bounds[end] - bounds[i] <= room (the first one always)
            fit = bisect.bisect_right(bounds, bounds[i] + self.shard_bytes - self._size) - 1
            end = max(i + 1, min(fit, last))
            placed += [(self._name, self._size + b - bounds[i]) for b in bounds[i:end]]
            self._append(view[bounds[i] : bounds[end]])
            self._samples += end - i
            i = end
        if placed:
            self.last_sample = placed[-1]
        return placed

    def close(self) -> list[ShardInfo]:
        """Finish the open shard; return every shard written."""
        if self._raw is not None:
            self._close_shard()
        return list(self.shards)

    def _append(self, data: bytes | memoryview) -> None:
        assert self._raw is not None
        self._raw.write(data)
        self._sha.update(data)
        self._size += len(data)

    def _open_shard(self) -> None:
        self._name = egosmith_constants.SHARD_PATTERN.format(self.next_index)
        self.next_index += 1
        self._raw = open(self.folder / self._name, "wb")  # noqa: SIM115 - closed in _close_shard
        self._sha = hashlib.sha256()
        self._size = self._samples = 0

    def _close_shard(self) -> None:
        assert self._raw is not None
        end = self._size + 2 * _TAR_BLOCK
        self._append(bytes(end - self._size + -end % tarfile.RECORDSIZE))
        self._raw.close()
        self.shards.append(ShardInfo(self._name, self._samples, self._size, self._sha.hexdigest()))
        self._raw = None
