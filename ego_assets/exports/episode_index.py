"""Stable episode indices shared by every exporter: one per capture, assigned once, never reused.

Exported datasets number their episodes (LeRobot ``episode_index``, EgoSmith
``episode_index``). An exported shard must never change after it is written, so a capture
keeps the index it got the first time any exporter asked, and no other capture ever gets
that index, whatever ran concurrently or crashed in between.

Layout below ``<storage root>/registry/episode-index/`` (a local folder or S3)::

    claims/<index:06d>.json   {"capture_key": "..."}   who claimed this index
    keys/<capture key>.json   {"index": 17}            the index of this capture

Both kinds of object are only ever *created*, never overwritten or deleted, and every
create is exclusive: it fails when the object exists.

* Local folder: the JSON is written to a temporary file (fsynced) and hard-linked to its
  name with ``os.link``, which fails with ``FileExistsError`` when the name exists (an
  atomic ``O_EXCL`` create that also never shows a half-written file).
* S3: a conditional ``PutObject`` with ``If-None-Match: *`` (s3fs ``pipe_file(...,
  mode="create")``); S3 answers 412 when the key exists. AWS S3 supports it since
  2024-08, as do moto (used by the tests) and MinIO.

`EpisodeIndexRegistry.index_for` returns the existing ``keys/`` entry, or claims the next
free index (exclusive create of ``claims/<n>``, moving on to ``n + 1`` when another run
got there first) and then records it under ``keys/<key>`` (exclusive create again). If
another run recorded the same capture in between, that run's index wins and the claim
just made stays unused: indices are unique and increase, but need not be dense (a crash
between the two creates also leaves an unused claim). Datasets that need ``0..N-1``
renumber at merge time, keeping these indices as provenance.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
from pathlib import Path

from upath import UPath

from ego_assets.keys import validate_capture_key
from ego_assets.storage import Storage, is_local

REGISTRY_DIR = "registry"
DEFAULT_REGISTRY = "episode-index"
CLAIMS = "claims"
KEYS = "keys"
_CLAIM_NAME = re.compile(r"(\d+)\.json")


class EpisodeIndexRegistry:
    """Episode indices of captures, kept in ``<root>/registry/<name>/`` of a `Storage`.

    Args:
        storage: the platform storage (local folder or ``s3://bucket/prefix``).
        name: registry name; every exporter uses the default so a capture has one index
            across all exported datasets.
    """

    def __init__(self, storage: Storage, name: str = DEFAULT_REGISTRY) -> None:
        self.location: UPath = storage.root / REGISTRY_DIR / validate_capture_key(name)
        self._local = is_local(self.location)

    def lookup(self, capture_key: str) -> int | None:
        """The index of ``capture_key``, or None when it has none yet."""
        data = self._read(f"{KEYS}/{validate_capture_key(capture_key)}.json")
        return None if data is None else int(data["index"])

    def index_for(self, capture_key: str) -> int:
        """The index of ``capture_key``, assigning the next free one on first use."""
        found = self.lookup(capture_key)
        if found is not None:
            return found
        index = self._claim(capture_key)
        body = json.dumps({"index": index}).encode()
        if self._create(f"{KEYS}/{capture_key}.json", body):
            return index
        # Another run recorded this capture first: its index stands, ours stays unused.
        winner = self.lookup(capture_key)
        if winner is None:  # pragma: no cover - keys/ entries are never deleted
            raise RuntimeError(f"episode index of {capture_key!r} vanished from {self.location}")
        return winner

    def claimed(self) -> list[int]:
        """Every index claimed so far (used or not), ascending."""
        return sorted(
            int(m.group(1)) for name in self._list(CLAIMS) if (m := _CLAIM_NAME.fullmatch(name))
        )

    def _claim(self, capture_key: str) -> int:
        body = json.dumps({"capture_key": capture_key}).encode()
        taken = self.claimed()
        index = taken[-1] + 1 if taken else 0
        while not self._create(f"{CLAIMS}/{index:06d}.json", body):
            index += 1
        return index

    # --- storage primitives: exclusive create, read, list -------------------------------

    def _create(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` with ``data`` unless it exists; True when this call created it."""
        target = self.location / rel
        if self._local:
            return _create_local(Path(target.path), data)
        fs = target.fs
        try:
            fs.pipe_file(target.path, data, mode="create")
        except FileExistsError:
            return False
        except OSError:
            # A 412 without the condition named, or a 409 from concurrent conditional
            # writes (AWS): the object exists when someone else won, else a real error.
            if fs.exists(target.path):
                return False
            raise
        return True

    def _read(self, rel: str) -> dict | None:
        target = self.location / rel
        try:
            text = target.read_text()
        except FileNotFoundError:
            return None
        return json.loads(text)

    def _list(self, rel: str) -> list[str]:
        folder = self.location / rel
        if self._local:
            try:
                return os.listdir(folder.path)
            except FileNotFoundError:
                return []
        root = folder.path.rstrip("/")
        try:
            return [name.rsplit("/", 1)[-1] for name in folder.fs.ls(root, detail=False)]
        except FileNotFoundError:
            return []


def _create_local(path: Path, data: bytes) -> bool:
    """Exclusive create of a complete file: temp file, fsync, ``os.link`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)  # held until unlinked: sweeps skip a live writer's
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            Path(tmp).unlink(missing_ok=True)
    return True
