"""Find complete captures in the landing zone, in a stable order, after a cursor.

A capture is complete when its marker (``ego_capture.json``) exists; uploaders write it
last. Captures are ordered by (marker modification time ns, key); the cursor is the
last (mtime, key) handed out, so each tick returns only captures completed since, at
most ``limit`` of them. Folder names that are not valid capture keys are reported and
passed over (they can never be partitions).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ego_assets.capture.files import MARKER_FILE
from ego_assets.keys import is_valid_capture_key
from ego_assets.storage import Storage


@dataclass(frozen=True, slots=True)
class LandingScan:
    """One scan: new capture keys (ordered), rejected folder names, the next cursor."""

    keys: tuple[str, ...]
    rejected: tuple[str, ...]
    cursor: str | None
    pending: int


def _parse_cursor(cursor: str | None) -> tuple[int, str]:
    if not cursor:
        return (-1, "")
    data = json.loads(cursor)
    return (int(data["mtime_ns"]), str(data["key"]))


def scan_landing(storage: Storage, cursor: str | None, limit: int) -> LandingScan:
    """Complete captures after ``cursor``, at most ``limit`` (the rest stay ``pending``)."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    after = _parse_cursor(cursor)
    if not storage.landing.exists():
        return LandingScan((), (), cursor, 0)
    complete: list[tuple[int, str]] = []
    for folder in storage.landing.iterdir():
        marker = folder / MARKER_FILE
        if not marker.exists():
            continue
        mtime_ns = int(marker.stat().st_mtime * 1e9)
        if (mtime_ns, folder.name) > after:
            complete.append((mtime_ns, folder.name))
    complete.sort()
    taken = complete[:limit]
    if not taken:
        return LandingScan((), (), cursor, 0)
    keys = tuple(name for _, name in taken if is_valid_capture_key(name))
    rejected = tuple(name for _, name in taken if not is_valid_capture_key(name))
    last_mtime, last_key = taken[-1]
    next_cursor = json.dumps({"mtime_ns": last_mtime, "key": last_key}, sort_keys=True)
    return LandingScan(keys, rejected, next_cursor, len(complete) - len(taken))
