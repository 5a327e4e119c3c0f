"""Storage-free file helpers every room may use: a file's SHA-256, atomic file writes, links.

No package import here (a leaf of the layering, ``docs/architecture.md``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"
_TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def file_sha256(path: Path, *, follow_symlinks: bool = True) -> str:
    """SHA-256 hex digest of a regular file, streamed; ``follow_symlinks=False`` refuses
    a symbolic link (``OSError``) instead of reading what it points at."""
    flags = os.O_RDONLY | (0 if follow_symlinks else os.O_NOFOLLOW)
    with os.fdopen(os.open(path, flags), "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _create_temporary(path: Path) -> tuple[int, Path]:
    """Create a free hidden sibling of ``path``, ``.<name>.<8 of [a-z0-9_]>.tmp`` (the
    name `ego_assets.storage.Storage.sweep_leftovers` knows), mode 0666 less the umask;
    (its open descriptor, its path)."""
    for _ in range(100):
        token = "".join(secrets.choice(_TOKEN_CHARS) for _ in range(8))
        tmp = path.with_name(f".{path.name}.{token}{TEMPORARY_SUFFIX}")
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


@contextmanager
def atomic_output(path: Path, *, fsync: bool = False, lock: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling name of ``path`` that replaces ``path`` once the block
    succeeds (readers see the old file or the new one, never half of one).

    The temporary exists (empty) when the block starts and this writer holds its
    ``flock`` until the rename, so a sweep of leftovers removes only a dead writer's;
    ``lock=False`` for a library that locks the file itself while writing (HDF5).
    ``fsync`` flushes it to disk before the rename. On error it is removed and ``path``
    is left as it was; a killed process leaves it behind (`remove_temporaries`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(path)
    try:
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield tmp
        if fsync:
            os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def write_file_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through `atomic_output`; return ``path``."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link the immutable file ``source`` at ``target`` (copied when they are on two
    file systems); ``target``'s folder is made. Neither is ever written through again."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copyfile(source, target)


def remove_temporaries(path: Path) -> list[Path]:
    """Delete the temporaries a killed `atomic_output` of ``path`` left beside it."""
    path = Path(path)
    pattern = f".{path.name}.*{TEMPORARY_SUFFIX}"
    stale = sorted(path.parent.glob(pattern)) if path.parent.is_dir() else []
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale
