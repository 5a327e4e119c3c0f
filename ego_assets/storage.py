"""One storage layer over a local folder or an ``s3://bucket/prefix`` URI (universal-pathlib).

Layout below the root (one folder per capture key and stage)::

    landing/<key>/...          where uploaders drop captures (may live elsewhere: ``landing``)
    raw/<key>/...              manifest.json + capture/ (the capture's files, unchanged)
    trajectory/<key>/...       canonical trajectory (capture.json + streams.parquet)
    quality/<key>/...          quality report

Writers get a local staging folder (`Storage.write_dir`); readers get a local folder
(`Storage.read_dir`): the folder itself on local storage, a downloaded copy on S3.

What a reader can rely on:

* Local: the staged folder replaces the target with one ``rename``; a reader sees the
  old folder or the new one, never a mix.
* S3 has no atomic multi-object rename, so every stage names an *index file* (the raw
  manifest, the trajectory lineage, the quality gate) and readers must treat a folder
  without it as absent. A write deletes the old index first, uploads every other file,
  uploads the index last and then deletes objects the new version no longer has. Hence
  "index present" implies "every file of that version is uploaded"; a failed block or
  failed upload leaves no index. A reader racing a *re*-write of the same key may still
  read a mix of versions; nothing here rewrites a stage whose index already carries
  the wanted data version.
* Two writers of one local folder (an API export beside a backfill of the same capture)
  take turns: `Storage.write_to` holds the folder's writer lock from staging to publish.

Listings are never cached (``use_listings_cache=False``): the sensor, the run workers
and the uploaders are different processes, and a cached listing would hide their objects.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from upath import UPath

from ego_assets.fileio import write_file_atomic
from ego_assets.keys import validate_capture_key
from ego_assets.progress import UPLOAD_TASK, report
from ego_assets.trajectory.store import (
    OLD_MARK,
    STAGING_SUFFIX,
    atomic_directory,
    remove_leftovers,
)

# The raw copy's layout, ``raw/<key>/``: the platform's manifest (its index file) beside
# ``capture/``, the capture's own files unchanged. Exporters, the viewer and the catalog
# locate an episode's files through these names, never through the capture package.
RAW_MANIFEST_FILE = "manifest.json"
RAW_CAPTURE_DIR = "capture"

_P = TypeVar("_P", Path, UPath)  # local paths and storage (S3) paths alike


def raw_capture_dir(raw: _P) -> _P:
    """The folder holding the capture's own files inside the raw copy ``raw/<key>``."""
    return raw / RAW_CAPTURE_DIR


# Writer locks of local targets, ``<root>/.locks/<target below the root>.lock``.
LOCKS_DIR = ".locks"
# Captures whose demonstrator withdrew consent: ``quarantine/<key>/<stage path>``, moved
# out of every stage (ego_assets/releases/consent.py); never ingested again.
QUARANTINE_DIR = "quarantine"


class LockTimeout(TimeoutError):
    """`exclusive_lock` waited its whole ``timeout_s`` (seconds) for ``holder``."""

    def __init__(self, path: Path, holder: str, timeout_s: float) -> None:
        super().__init__(f"{path} is held by {holder}; gave up after waiting {timeout_s:g} s")
        self.path, self.holder, self.timeout_s = path, holder, timeout_s


@contextmanager
def exclusive_lock(path: Path, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``path`` (created, with its folders) for the
    block: one holder at a time across processes and threads (each call opens its own
    descriptor); the kernel drops the lock of a process that died.

    The holder writes ``pid <pid> on <host> since <UTC time>`` into the file. With
    ``timeout_s`` (seconds) the wait is bounded: `LockTimeout` names that holder.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _acquire(fd, path, timeout_s)
        holder = f"pid {os.getpid()} on {socket.gethostname()} since {_utc_now()}\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _acquire(fd: int, path: Path, timeout_s: float | None) -> None:
    """``flock`` ``fd`` exclusively, polling (0.05 s, growing to 1 s) until ``timeout_s``."""
    if timeout_s is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    deadline = time.monotonic() + timeout_s
    pause = 0.05
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = Path(path).read_text(errors="replace").strip() or "another process"
                raise LockTimeout(Path(path), holder, timeout_s) from None
            time.sleep(pause)
            pause = min(1.0, pause * 2)


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


STAGES = ("raw", "trajectory", "quality", "exports", "catalog")

# What killed writers leave beside a target ``<name>``: `atomic_directory`'s staging
# folder and moved-aside old version, a temporary file of `write_file_atomic` (or of the
# episode index): ``.<name>.<8 random>.tmp`` and ``.<name>.old-<pid>``.
_LEFTOVER = re.compile(
    rf"^\.(?P<name>.+?)(?:\.[a-z0-9_]{{8}}{re.escape(STAGING_SUFFIX)}|{re.escape(OLD_MARK)}\d+)$"
)
# Below the root, how deep targets sit (``exports/<format>/<key>``, ``quality/<key>/gate.json``;
# ``registry/<name>/keys/<key>.json``); the landing zone is the uploaders' own.
_SCAN_DEPTH = {"registry": 4}
_DEFAULT_DEPTH = 3
_NOT_SCANNED = (LOCKS_DIR, "landing")
# A temporary file younger than this is left alone: its writer may not hold its lock yet.
TEMPORARY_GRACE_S = 2.0


def find_leftovers(root: Path) -> list[Path]:
    """Every staging leftover (see `_LEFTOVER`) below the local data root ``root``, live
    writers' included; hidden folders are not descended into."""
    found: list[Path] = []

    def scan(folder: Path, depth: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if _LEFTOVER.match(entry.name):
                found.append(Path(entry.path))
            elif (
                depth > 1 and not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)
            ):
                scan(Path(entry.path), depth - 1)

    for top in sorted(Path(root).iterdir()) if Path(root).is_dir() else []:
        if _LEFTOVER.match(top.name):
            found.append(top)
        elif top.is_dir() and not top.name.startswith(".") and top.name not in _NOT_SCANNED:
            scan(top, _SCAN_DEPTH.get(top.name, _DEFAULT_DEPTH) - 1)
    return sorted(found)


def _remove_dead_temporary(path: Path) -> bool:
    """Delete the temporary file ``path`` unless a live writer holds its ``flock``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        if time.time() - os.fstat(fd).st_mtime < TEMPORARY_GRACE_S:
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path.unlink(missing_ok=True)
        return True
    except BlockingIOError:
        return False  # a live writer
    finally:
        os.close(fd)


LOCAL_PROTOCOLS = ("", "file", "local")

logger = logging.getLogger(__name__)


def is_local(path: UPath) -> bool:
    """Whether ``path`` is on the local file system."""
    return path.protocol in LOCAL_PROTOCOLS


class Storage:
    """Paths and whole-folder writes for every stage of every capture.

    Args:
        root: local folder or ``s3://bucket/prefix``.
        landing: where captures are dropped; default ``<root>/landing``.
        storage_options: fsspec options for remote locations (e.g. ``endpoint_url``);
            listings caching is always switched off for them (see the module docstring).
    """

    def __init__(
        self,
        root: str | Path,
        landing: str | Path | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.storage_options = dict(storage_options or {})
        self.root = self._upath(root)
        self.landing = self._upath(landing) if landing else self.root / "landing"

    def _upath(self, location: str | Path) -> UPath:
        text = str(location)
        if "://" in text and not text.startswith("file://"):
            return UPath(text, **{"use_listings_cache": False, **self.storage_options})
        return UPath(Path(text.removeprefix("file://")).resolve())

    @property
    def is_local(self) -> bool:
        """Whether the stages (not necessarily the landing zone) are on local disk."""
        return is_local(self.root)

    def stage_path(self, stage: str, key: str) -> UPath:
        """Folder of ``key`` in ``stage`` (key validated)."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages: {STAGES}")
        return self.root / stage / validate_capture_key(key)

    def landing_path(self, key: str) -> UPath:
        """Folder of ``key`` in the landing zone (key validated)."""
        return self.landing / validate_capture_key(key)

    def exists(self, stage: str, key: str, file: str) -> bool:
        """Whether ``stage/key/file`` exists (one HEAD request on S3)."""
        return (self.stage_path(stage, key) / file).exists()

    def export_path(self, fmt: str, name: str) -> UPath:
        """``exports/<fmt>/<name>``: one export format's folder of a capture (or dataset)."""
        return self.root / "exports" / validate_capture_key(fmt) / validate_capture_key(name)

    @contextmanager
    def write_dir(self, stage: str, key: str, *, index_file: str | None = None) -> Iterator[Path]:
        """A local folder whose content replaces ``stage/key`` when the block succeeds.

        Nothing is written when the block raises. On S3, ``index_file`` (e.g.
        ``manifest.json``) is removed first and uploaded last; see the module docstring.
        """
        with self.write_to(self.stage_path(stage, key), index_file=index_file) as tmp:
            yield tmp

    @contextmanager
    def write_to(self, target: UPath, *, index_file: str | None = None) -> Iterator[Path]:
        """`write_dir` for any folder below the root (e.g. an `export_path`).

        Publishing the folder (a rename locally, the upload on S3) is reported as
        `UPLOAD_TASK` progress (`ego_assets.progress`).
        """
        if is_local(target):
            path = Path(target.path)
            with self.writer_lock(path):  # no live writer's staging folder is a leftover
                remove_leftovers(path)
                with atomic_directory(path) as tmp:
                    yield tmp
                    report(UPLOAD_TASK, 0, 1)
            report(UPLOAD_TASK, 1, 1)
            return
        with tempfile.TemporaryDirectory(prefix="ego-write-") as tmp_name:
            tmp = Path(tmp_name)
            yield tmp
            report(UPLOAD_TASK, 0, 1)
            upload_tree(tmp, target, index_file)
            report(UPLOAD_TASK, 1, 1)

    @contextmanager
    def writer_lock(self, target: Path, timeout_s: float | None = None) -> Iterator[None]:
        """Hold the exclusive lock of one local target folder (``flock``, across processes).

        Two runs may write the same folder at once (an export asked for over the API while
        a backfill exports the same capture): the second waits for the first to publish,
        so neither loses its staging folder to the other's clean-up, and the renames that
        publish a folder never interleave. The lock files live in ``<root>/.locks/`` (no
        listing of a stage or export folder sees them); the kernel drops a lock whose
        process died. ``timeout_s`` bounds the wait (`LockTimeout`; None: no bound).
        """
        root = Path(self.root.path)
        try:
            relative = target.relative_to(root)
        except ValueError:
            relative = Path(*target.parts[1:])
        with exclusive_lock(root / LOCKS_DIR / f"{relative.as_posix()}.lock", timeout_s):
            yield

    def sweep_leftovers(self) -> list[Path]:
        """Remove what killed writers left below a local root; return what was removed.

        A staging or moved-aside folder goes under its target's writer lock (a live
        writer holds it, and its folder stays); a temporary file goes when no live writer
        holds its ``flock`` (`write_file_atomic`). Nothing to do on S3 (writers stage
        locally; an unfinished upload has no index file).
        """
        if not self.is_local:
            return []
        removed = []
        for path in find_leftovers(Path(self.root.path)):
            if not path.is_dir():
                if _remove_dead_temporary(path):
                    removed.append(path)
                continue
            match = _LEFTOVER.match(path.name)
            assert match is not None
            try:
                with self.writer_lock(path.parent / match["name"], timeout_s=0):
                    if path.exists():
                        shutil.rmtree(path, ignore_errors=True)
                        removed.append(path)
            except LockTimeout:
                continue  # a live writer's
        for path in removed:
            logger.info("removed %s, left by a killed writer", path)
        return removed

    def write_file(self, location: UPath, data: bytes) -> None:
        """Replace the single file ``location`` with ``data`` atomically.

        Local: a temporary sibling renamed into place (parent folders created). S3: one
        PUT, which readers see whole or not at all.
        """
        if is_local(location):
            path = Path(location.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file_atomic(path, data)
            return
        location.fs.pipe_file(location.path, data)
        location.fs.invalidate_cache(location.parent.path)

    @contextmanager
    def read_dir(self, location: UPath) -> Iterator[Path]:
        """A local folder with the content of ``location`` (downloaded when remote)."""
        if is_local(location):
            yield Path(location.path)
            return
        with tempfile.TemporaryDirectory(prefix="ego-read-") as tmp_name:
            tmp = Path(tmp_name)
            download_tree(location, tmp)
            yield tmp

    @contextmanager
    def read_file(self, location: UPath) -> Iterator[Path]:
        """A local path with the content of the file ``location`` (downloaded when remote)."""
        if is_local(location):
            yield Path(location.path)
            return
        with tempfile.TemporaryDirectory(prefix="ego-read-") as tmp_name:
            tmp = Path(tmp_name) / location.name
            location.fs.get_file(location.path, str(tmp))
            yield tmp


def _remote_files(location: UPath) -> dict[str, str]:
    """Relative POSIX name -> fsspec path of every object below ``location`` (one listing)."""
    root = location.path.rstrip("/")
    found = location.fs.find(root)
    return {name[len(root) + 1 :]: name for name in found if name.startswith(root + "/")}


def upload_tree(local: Path, target: UPath, index_file: str | None) -> None:
    """Make the objects below ``target`` equal to the files below ``local``.

    Order: delete the old ``index_file``; upload the other files (concurrently); upload
    ``index_file``; delete objects that are not in ``local``.
    """
    fs = target.fs
    root = target.path.rstrip("/")
    rels = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    if index_file is not None and index_file not in rels:
        raise ValueError(f"index file {index_file!r} was not written in {local}")
    existing = _remote_files(target)
    if index_file is not None and index_file in existing:
        fs.rm_file(existing[index_file])
    body = [rel for rel in rels if rel != index_file]
    if body:
        fs.put([str(local / rel) for rel in body], [f"{root}/{rel}" for rel in body])
    if index_file is not None:
        fs.put_file(str(local / index_file), f"{root}/{index_file}")
    stale = [path for rel, path in existing.items() if rel not in set(rels)]
    if stale:
        fs.rm(stale)
    fs.invalidate_cache(root)
    logger.debug("uploaded %d files to %s, removed %d stale", len(rels), target, len(stale))


def download_tree(location: UPath, local: Path) -> None:
    """Download every object below ``location`` into ``local`` (concurrently)."""
    files = _remote_files(location)
    if not files:
        return
    rels = sorted(files)
    for rel in rels:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
    location.fs.get([files[rel] for rel in rels], [str(local / rel) for rel in rels])


def write_file(path: UPath, data: bytes) -> None:
    """Replace one file whole: local, temp file + rename; S3, one PUT (objects are whole)."""
    if is_local(path):
        Path(path.path).parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(Path(path.path), data)
    else:
        path.write_bytes(data)
