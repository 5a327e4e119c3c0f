"""Waivers: a person lets one episode through one blocking metric, on the record.

A waiver names a capture key and a metric: a name (``longest_gap_s``: every scope) or a
``<scope>/<name>`` key (``hand:left/tracking_loss_ratio``), plus who granted it, why and
when (UTC, ISO 8601). Waivers live in ``waivers.json`` at the data root, written by
``ego-assets waive``; a ``waivers.json`` in the landing zone (put there by uploaders) is
read as well. Revoking removes the waiver and keeps it, with who revoked it and when, in
the file's ``revoked`` list. The gate of an episode records the waivers it applied, and
their digest is part of the quality data version, so a changed waiver re-decides the gate.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from upath import UPath

from ego_assets.keys import validate_capture_key
from ego_assets.storage import Storage, write_file
from ego_assets.trajectory.records import from_jsonable, to_jsonable

WAIVERS_FILE = "waivers.json"
WAIVERS_VERSION = 1


@dataclass(frozen=True, slots=True)
class Waiver:
    """One waiver.

    Attributes:
        capture_key: the episode.
        metric: metric name (every scope) or ``<scope>/<name>`` key.
        reason: why the episode may go through anyway.
        by: who granted it.
        at: when, UTC ISO 8601.
        revoked_by, revoked_at: who revoked it and when ("" while it holds).
    """

    capture_key: str
    metric: str
    reason: str
    by: str
    at: str
    revoked_by: str = ""
    revoked_at: str = ""

    def covers(self, name: str, key: str) -> bool:
        """Whether this waiver covers the metric ``name`` with key ``key`` (scope/name)."""
        return self.metric in (name, key)


@dataclass(frozen=True, slots=True)
class WaiverFile:
    """Content of ``waivers.json``: the waivers in force and the revoked ones."""

    version: int = WAIVERS_VERSION
    waivers: tuple[Waiver, ...] = ()
    revoked: tuple[Waiver, ...] = ()

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> WaiverFile:
        try:
            return from_jsonable(cls, json.loads(text))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"waiver file {where}: {exc}") from exc


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _locations(storage: Storage) -> tuple[UPath, ...]:
    return (storage.root / WAIVERS_FILE, storage.landing / WAIVERS_FILE)


def _read(path: UPath) -> WaiverFile:
    if not path.exists():
        return WaiverFile()
    return WaiverFile.from_json(path.read_text(encoding="utf-8"), str(path))


def read_waivers(storage: Storage) -> tuple[Waiver, ...]:
    """Every waiver in force: the data root's file, then the landing zone's."""
    out: list[Waiver] = []
    for path in dict.fromkeys(_locations(storage)):
        out.extend(_read(path).waivers)
    return tuple(out)


def waivers_for(waivers: tuple[Waiver, ...], key: str) -> tuple[Waiver, ...]:
    """The waivers of capture ``key``, sorted by metric then time."""
    return tuple(
        sorted((w for w in waivers if w.capture_key == key), key=lambda w: (w.metric, w.at))
    )


def waivers_digest(waivers: tuple[Waiver, ...]) -> str:
    """Short digest of ``waivers`` (part of the quality data version); "none" when empty."""
    if not waivers:
        return "none"
    text = json.dumps([to_jsonable(w) for w in waivers], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _write(storage: Storage, content: WaiverFile) -> None:
    write_file(storage.root / WAIVERS_FILE, content.to_json().encode("utf-8"))


def add_waiver(storage: Storage, key: str, metric: str, reason: str, by: str) -> Waiver:
    """Record a waiver in the data root's ``waivers.json`` (replacing one for the same
    key and metric); ValueError when the reason or the person is missing."""
    validate_capture_key(key)
    if not metric.strip() or not reason.strip() or not by.strip():
        raise ValueError("a waiver needs a metric, a reason (--reason) and a person (--by)")
    current = _read(storage.root / WAIVERS_FILE)
    waiver = Waiver(key, metric.strip(), reason.strip(), by.strip(), _now())
    kept = tuple(w for w in current.waivers if (w.capture_key, w.metric) != (key, waiver.metric))
    _write(storage, replace(current, waivers=(*kept, waiver)))
    return waiver


def revoke_waiver(storage: Storage, key: str, metric: str, by: str) -> Waiver:
    """Revoke the waiver of ``key`` for ``metric``; KeyError when there is none."""
    current = _read(storage.root / WAIVERS_FILE)
    found = [w for w in current.waivers if (w.capture_key, w.metric) == (key, metric)]
    if not found:
        raise KeyError(f"no waiver for capture {key!r} and metric {metric!r} in {WAIVERS_FILE}")
    revoked = replace(found[0], revoked_by=by.strip(), revoked_at=_now())
    kept = tuple(w for w in current.waivers if w is not found[0])
    _write(storage, replace(current, waivers=kept, revoked=(*current.revoked, revoked)))
    return revoked


def describe(waiver: Waiver) -> dict[str, Any]:
    """The waiver as a plain dict (metadata, catalog)."""
    return {k: v for k, v in to_jsonable(waiver).items() if k not in ("revoked_by", "revoked_at")}
