"""One storage layer over a local folder or an ``s3://bucket/prefix`` URI (universal-pathlib).

Layout below the root (one folder per capture key and stage)::

    landing/<key>/...          where uploaders drop captures (may live elsewhere: ``landing``)
    raw/<key>/...              immutable copy of the capture + manifest.json
    trajectory/<key>/...       canonical trajectory (capture.json + streams/*.parquet)
    quality/<key>/...          quality report

Writers get a local staging folder (`write_dir`); on success it replaces the target
atomically (local: rename; S3: every object uploaded, the stage's index file last, and
stale objects removed). Readers get a local folder (`read_dir`): the folder itself on
local storage, a downloaded copy on S3.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from upath import UPath

from ego_assets.keys import validate_capture_key
from ego_assets.trajectory.store import atomic_directory

STAGES = ("raw", "trajectory", "quality", "exports")


class Storage:
    """Paths and atomic folder writes for every stage of every capture.

    Args:
        root: local folder or ``s3://bucket/prefix``.
        landing: where captures are dropped; default ``<root>/landing``.
        storage_options: fsspec options for remote roots (e.g. ``endpoint_url``).
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
        if "://" in text:
            return UPath(text, **self.storage_options)
        return UPath(Path(text).resolve())

    @property
    def is_local(self) -> bool:
        return self.root.protocol in ("", "file", "local")

    def stage_path(self, stage: str, key: str) -> UPath:
        """Folder of ``key`` in ``stage`` (key validated)."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages: {STAGES}")
        return self.root / stage / validate_capture_key(key)

    def landing_path(self, key: str) -> UPath:
        return self.landing / validate_capture_key(key)

    def exists(self, stage: str, key: str, file: str) -> bool:
        return (self.stage_path(stage, key) / file).exists()

    @contextmanager
    def write_dir(self, stage: str, key: str, *, index_file: str | None = None) -> Iterator[Path]:
        """A local folder whose content replaces ``stage/key`` when the block succeeds.

        ``index_file`` (e.g. ``capture.json``) is uploaded last on remote storage, so a
        reader that waits for it never sees a partial folder.
        """
        target = self.stage_path(stage, key)
        if self.is_local:
            with atomic_directory(Path(target.path)) as tmp:
                yield tmp
            return
        with tempfile.TemporaryDirectory(prefix=f"ego-{stage}-") as tmp_name:
            tmp = Path(tmp_name)
            yield tmp
            _upload_tree(tmp, target, index_file)

    @contextmanager
    def read_dir(self, location: UPath) -> Iterator[Path]:
        """A local folder with the content of ``location`` (downloaded when remote)."""
        if self.is_local and location.protocol in ("", "file", "local"):
            yield Path(location.path)
            return
        with tempfile.TemporaryDirectory(prefix="ego-read-") as tmp_name:
            tmp = Path(tmp_name)
            for src in location.rglob("*"):
                if src.is_file():
                    rel = (
                        src.relative_to(location).as_posix() if hasattr(src, "relative_to") else ""
                    )
                    dest = tmp / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with src.open("rb") as fin, dest.open("wb") as fout:
                        shutil.copyfileobj(fin, fout)
            yield tmp


def _upload_tree(local: Path, target: UPath, index_file: str | None) -> None:
    files = sorted(p for p in local.rglob("*") if p.is_file())
    rels = [p.relative_to(local).as_posix() for p in files]
    ordered = sorted(zip(rels, files, strict=True), key=lambda rf: rf[0] == index_file)
    for rel, path in ordered:
        dest = target / rel
        with path.open("rb") as fin, dest.open("wb") as fout:
            shutil.copyfileobj(fin, fout)
    keep = set(rels)
    if target.exists():
        for old in target.rglob("*"):
            if old.is_file() and old.relative_to(target).as_posix() not in keep:
                old.unlink()
