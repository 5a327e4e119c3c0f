"""Find complete captures in the landing zone, in a stable order, after a cursor.

A capture is complete when its marker (``ego_capture.json``) exists; uploaders write it
last. Captures are ordered by (marker modification time ns, key): on local disk the
file's mtime, on S3 the marker object's ``LastModified``. Each tick returns at most
``limit`` captures not handed out before; the cursor records the last (mtime, key)
handed out (the watermark) plus the keys handed out within `GRACE_S` seconds below it.

Why the grace window: S3 ``LastModified`` has one-second resolution and is stamped when
the PUT starts, so a marker can become visible *after* a tick that already moved the
watermark past its time (same second, smaller key; or a slow upload). Markers up to
`GRACE_S` older than the watermark are still picked up, once. A marker that appears
with an older time than that (e.g. copied with ``rsync -a``, which keeps old mtimes) is
never seen: uploaders must write the marker fresh.

Cost per tick: local, one ``stat`` per landing folder; S3, one recursive listing of the
landing prefix (one LIST request per 1,000 objects, marker times included), no request
per capture. The landing zone should therefore be expired after ingest (the raw stage
keeps the immutable copy), e.g. with a bucket lifecycle rule.

Folder names that are not valid capture keys are reported and passed over (they can
never be partitions). A symlink in a local landing zone is passed over too: a capture
is a folder uploaded into the zone, and a link could point anywhere. `skipped_entries`
lists every entry passed over, with why. A capture quarantined after a consent
withdrawal (``<root>/quarantine/<key>/``) is passed over if it is uploaded again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ego_assets.capture.files import MARKER_FILE
from ego_assets.errors import CaptureKeyError
from ego_assets.keys import is_valid_capture_key, validate_capture_key
from ego_assets.storage import QUARANTINE_DIR, Storage, is_local

GRACE_S = 60
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class LandingScan:
    """One scan: new capture keys (ordered), rejected folder names, the next cursor.

    ``pending`` counts complete captures left for later ticks by ``limit``;
    ``quarantined``: keys passed over because ``<root>/quarantine/<key>/`` exists (their
    demonstrator withdrew consent; docs/releases.md).
    """

    keys: tuple[str, ...]
    rejected: tuple[str, ...]
    cursor: str | None
    pending: int
    quarantined: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Cursor:
    after: tuple[int, str]
    recent: frozenset[tuple[int, str]] | None  # None: cursor from before the grace window

    @staticmethod
    def parse(cursor: str | None) -> _Cursor:
        if not cursor:
            return _Cursor((-1, ""), frozenset())
        data = json.loads(cursor)
        recent = data.get("recent")
        return _Cursor(
            (int(data["mtime_ns"]), str(data["key"])),
            None if recent is None else frozenset((int(m), str(k)) for m, k in recent),
        )

    def is_new(self, marker: tuple[int, str], grace_ns: int) -> bool:
        if marker > self.after:
            return True
        if self.recent is None or marker[0] < self.after[0] - grace_ns:
            return False
        return marker[1] not in {key for _, key in self.recent}

    def advance(self, taken: list[tuple[int, str]], grace_ns: int) -> str:
        after = max(self.after, taken[-1])
        recent = sorted(
            m for m in (self.recent or frozenset()) | set(taken) if m[0] >= after[0] - grace_ns
        )
        data = {"mtime_ns": after[0], "key": after[1], "recent": [list(m) for m in recent]}
        return json.dumps(data, sort_keys=True)


def list_markers(storage: Storage) -> list[tuple[int, str]]:
    """(marker mtime ns, folder name) of every complete capture in the landing zone."""
    landing = storage.landing
    if is_local(landing):
        root = Path(landing.path)
        if not root.is_dir():
            return []
        found = []
        for folder in root.iterdir():
            if folder.is_symlink():  # a capture is a folder in the zone (`skipped_entries`)
                continue
            try:
                found.append(((folder / MARKER_FILE).stat().st_mtime_ns, folder.name))
            except (FileNotFoundError, NotADirectoryError):
                continue
        return found
    prefix = landing.path.rstrip("/") + "/"
    listing = landing.fs.find(prefix.rstrip("/"), detail=True)
    found = []
    for name, info in listing.items():
        folder, _, file = name.removeprefix(prefix).partition("/")
        if file == MARKER_FILE and name.startswith(prefix):
            found.append((_mtime_ns(info), folder))
    return found


def _mtime_ns(info: dict) -> int:
    """Integer ns since the epoch from an fsspec listing entry (S3 ``LastModified``)."""
    modified = info.get("LastModified", info.get("mtime"))
    if isinstance(modified, datetime):
        return (modified - _EPOCH) // timedelta(microseconds=1) * 1000
    if isinstance(modified, int | float):
        return int(modified * 1e9)
    raise ValueError(f"listing entry {info.get('name')!r} has no modification time")


def scan_landing(
    storage: Storage, cursor: str | None, limit: int, grace_s: float = GRACE_S
) -> LandingScan:
    """Complete captures not handed out before ``cursor``, at most ``limit``.

    The rest stay ``pending`` for the next tick; see the module docstring.
    """
    if limit < 1:
        raise ValueError("limit must be >= 1")
    state = _Cursor.parse(cursor)
    grace_ns = int(grace_s * 1e9)
    complete = sorted(m for m in list_markers(storage) if state.is_new(m, grace_ns))
    taken = complete[:limit]
    if not taken:
        return LandingScan((), (), cursor, 0)
    keys = tuple(name for _, name in taken if is_valid_capture_key(name))
    rejected = tuple(name for _, name in taken if not is_valid_capture_key(name))
    held = quarantined_keys(storage) if keys and storage.is_local else set()
    return LandingScan(
        tuple(k for k in keys if k not in held),
        rejected,
        state.advance(taken, grace_ns),
        len(complete) - len(taken),
        tuple(k for k in keys if k in held),
    )


def quarantined_keys(storage: Storage) -> set[str]:
    """Capture keys with a folder in ``<root>/quarantine/`` (one listing; quarantine, like
    ``ego-assets withdraw``, exists on local data roots only, so S3 ticks stay one LIST)."""
    folder = storage.root / QUARANTINE_DIR
    try:
        return {p.name for p in folder.iterdir()}
    except (FileNotFoundError, NotADirectoryError):
        return set()


def skipped_entries(storage: Storage) -> list[tuple[str, str]]:
    """(name, why) of every landing-zone entry that is not a complete capture the sensor
    takes, sorted by name: files, symlinks, folders without the marker (an upload in
    progress, or one that never finished) and names that are not capture keys. On S3,
    only the last kind (a listing shows no links, and folders are only prefixes)."""
    landing = storage.landing
    if not is_local(landing):
        names = {name for _, name in list_markers(storage)}
        return sorted((n, _key_problem(n)) for n in names if not is_valid_capture_key(n))
    root = Path(landing.path)
    skipped = []
    for entry in sorted(root.iterdir()) if root.is_dir() else []:
        if entry.is_symlink():
            why = f"a symlink to {os.readlink(entry)}, not a folder in the landing zone"
        elif not entry.is_dir():
            why = "a file, not a capture folder"
        elif not (entry / MARKER_FILE).is_file():
            why = f"no {MARKER_FILE}: an upload in progress, or one that never finished"
        elif not is_valid_capture_key(entry.name):
            why = _key_problem(entry.name)
        else:
            continue
        skipped.append((entry.name, why))
    return skipped


def _key_problem(name: str) -> str:
    try:
        validate_capture_key(name)
    except CaptureKeyError as exc:
        return f"the folder name is not a capture key: {exc}"
    return ""
