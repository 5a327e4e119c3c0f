"""Consent withdrawal: the durable record, the quarantine, and what later releases leave out.

* **Record.** ``<root>/consent/withdrawals/<UTC time>-<demonstrator>.json``, one file per
  withdrawal (who withdrew, when, why, who recorded it, the demonstrator's capture keys
  the catalog knew then). Written to a temporary sibling and hard-linked onto its name,
  which fails when the name exists: a record is never replaced or edited (append-only).
* **Quarantine.** Each of those captures' per-capture folders is moved, one ``rename``
  each under that folder's writer lock, to ``<root>/quarantine/<key>/<same path>``:
  the landing copy first (so no sensor ingests it again), then ``raw/<key>``,
  ``trajectory/<key>``, ``quality/<key>`` and every export the receipts name with the
  receipts themselves. Nothing the platform reads (sensor, backfills, catalog staging,
  the packed datasets, releases) finds them afterwards; nothing is deleted (deleting is
  the operator's decision). Local data roots only.
* **Releases.** `apply_withdrawals` leaves out of every later build the episodes of a
  withdrawn demonstrator, those the catalog still selects and those an earlier version
  of the release held, and writes one note per withdrawal. Release versions already
  written are immutable: the catalog model ``withdrawn_holdings`` lists them.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import duckdb

from ego_assets.catalog.receipts import RECEIPTS_DIR
from ego_assets.exports import registry
from ego_assets.releases.select import SelectionResult
from ego_assets.storage import QUARANTINE_DIR, Storage, is_local

WITHDRAWALS_DIR = "consent/withdrawals"
DEMONSTRATOR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
STAGE_FOLDERS = ("raw", "trajectory", "quality")  # per-capture stage folders, in move order


class ConsentError(ValueError):
    """A withdrawal that cannot be recorded; nothing was written (one line)."""


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """One recorded withdrawal of consent (``withdrawn_at``: UTC, ISO 8601 with ``Z``)."""

    id: str
    demonstrator: str
    reason: str
    by: str
    withdrawn_at: str
    capture_keys: tuple[str, ...] = ()

    @property
    def date(self) -> str:
        """The UTC date of the withdrawal, ``YYYY-MM-DD``."""
        return self.withdrawn_at[:10]

    def left_out_reason(self) -> str:
        """Why a release leaves one of this demonstrator's episodes out."""
        return f"consent withdrawn on {self.date} (demonstrator {self.demonstrator}): {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "demonstrator": self.demonstrator,
            "reason": self.reason,
            "by": self.by,
            "withdrawn_at": self.withdrawn_at,
            "capture_keys": list(self.capture_keys),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Withdrawal:
        return cls(
            id=str(data["id"]),
            demonstrator=str(data["demonstrator"]),
            reason=str(data["reason"]),
            by=str(data["by"]),
            withdrawn_at=str(data["withdrawn_at"]),
            capture_keys=tuple(data.get("capture_keys", ())),
        )


def withdrawals_dir(root: Path) -> Path:
    """``<root>/consent/withdrawals/``."""
    return Path(root) / WITHDRAWALS_DIR


def load_withdrawals(root: Path) -> list[Withdrawal]:
    """Every withdrawal recorded under the data root ``root``, oldest first."""
    folder = withdrawals_dir(root)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob("*.json"):
        if path.name.startswith("."):
            continue
        try:
            found.append(Withdrawal.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConsentError(f"withdrawal record {path}: unreadable: {exc}") from None
    return sorted(found, key=lambda w: (w.withdrawn_at, w.id))


def record_withdrawal(
    root: Path,
    demonstrator: str,
    reason: str,
    by: str,
    capture_keys: list[str],
    now: dt.datetime | None = None,
) -> tuple[Withdrawal, Path]:
    """Write a new withdrawal record (never replacing one); the record and its path."""
    stamp = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    record = Withdrawal(
        id=f"{stamp:%Y%m%dT%H%M%S%fZ}-{demonstrator}",
        demonstrator=demonstrator,
        reason=reason,
        by=by,
        withdrawn_at=stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        capture_keys=tuple(sorted(set(capture_keys))),
    )
    path = withdrawals_dir(root) / f"{record.id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record.to_json(), indent=1, sort_keys=True) + "\n"
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as tmp:
        tmp.write(text)
        tmp.flush()
        os.fsync(tmp.fileno())
    try:
        os.link(tmp.name, path)  # complete, and fails when the name exists: append-only
    except FileExistsError:
        raise ConsentError(f"withdrawal record {path} exists already") from None
    finally:
        os.unlink(tmp.name)
    return record, path


def _receipt_exports(root: Path, key: str) -> list[Path]:
    """The export artefacts (relative paths) and receipts of capture ``key`` that exist."""
    found: list[Path] = []
    for fmt in registry.names():
        receipt = Path(RECEIPTS_DIR) / fmt / f"{key}.json"
        if not (root / receipt).is_file():
            continue
        try:
            artefact = json.loads((root / receipt).read_text())["path"]
        except (ValueError, KeyError) as exc:
            raise ConsentError(f"capture {key}: {receipt}: unreadable receipt: {exc}") from None
        if artefact and (root / artefact).exists():
            found.append(Path(artefact))
        found.append(receipt)
    return found


def quarantine_capture(storage: Storage, key: str) -> list[tuple[Path, Path]]:
    """Move every per-capture folder of ``key`` under ``quarantine/<key>/``; the moves
    (from, to) made, in order. A path already moved is skipped; a destination taken by an
    earlier quarantine gets a ``.<n>`` suffix."""
    root = Path(storage.root.path)
    sources: list[Path] = []
    if is_local(storage.landing):
        landing = Path(storage.landing_path(key).path)
        if landing.exists() or landing.is_symlink():
            sources.append(landing)
    sources += [root / stage / key for stage in STAGE_FOLDERS if (root / stage / key).exists()]
    sources += [root / p for p in _receipt_exports(root, key)]
    moved = []
    for source in sources:
        try:
            relative = source.relative_to(root)
        except ValueError:  # a landing zone outside the data root
            relative = Path("landing") / key
        base = target = root / QUARANTINE_DIR / key / relative
        n = 1
        while target.exists() or target.is_symlink():
            target = base.with_name(f"{base.name}.{n}")
            n += 1
        target.parent.mkdir(parents=True, exist_ok=True)
        with storage.writer_lock(source):
            if not (source.exists() or source.is_symlink()):
                continue
            try:
                os.replace(source, target)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                shutil.move(source, target)  # a landing zone on another file system
        moved.append((source, target))
    return moved


def demonstrator_captures(database: Path, demonstrator: str) -> tuple[bool, list[str]]:
    """(whether the catalog knows ``demonstrator``, the capture keys it lists for them):
    trajectory headers and release versions staged in the catalog file ``database``."""
    if not Path(database).is_file():
        raise ConsentError(f"no catalog at {database}: run `ego-assets catalog --build` first")
    keys: set[str] = set()
    with duckdb.connect(str(database), read_only=True) as con:
        tables = {
            name
            for (name,) in con.execute(
                "select table_name from duckdb_tables() where schema_name = 'platform'"
            ).fetchall()
        }
        known = False
        for table in ("trajectory_headers", "release_episodes"):
            if table not in tables:
                continue
            rows = con.execute(
                f"select distinct capture_key from platform.{table} where demonstrator = ?",
                [demonstrator],
            ).fetchall()
            known = known or bool(rows)
            keys.update(k for (k,) in rows)
    return known, sorted(keys)


def known_demonstrators(database: Path) -> list[str]:
    """Every demonstrator named in the catalog's trajectory headers (sorted)."""
    with duckdb.connect(str(database), read_only=True) as con:
        rows = con.execute(
            "select distinct demonstrator from platform.trajectory_headers "
            "where demonstrator is not null order by 1"
        ).fetchall()
    return [d for (d,) in rows]


@dataclass(frozen=True, slots=True)
class WithdrawResult:
    """A recorded withdrawal, its record file and the quarantine moves (from, to)."""

    withdrawal: Withdrawal
    path: Path
    moved: list[tuple[Path, Path]] = field(default_factory=list)


def withdraw(
    data: str | Path,
    demonstrator: str,
    reason: str,
    by: str,
    now: dt.datetime | None = None,
    landing: str | Path | None = None,
) -> WithdrawResult:
    """Record that ``demonstrator`` withdrew consent and quarantine their captures
    (``landing``: the landing zone when not ``<data>/landing``).

    Raises:
        ConsentError: a bad id or empty reason, an S3 root, no catalog, or a demonstrator
            the catalog does not know (or an earlier withdrawal names); nothing is written.
    """
    from ego_assets.catalog.warehouse import catalog_database

    if not DEMONSTRATOR_RE.fullmatch(demonstrator):
        raise ConsentError(f"--demonstrator {demonstrator!r}: not a demonstrator id")
    if not reason.strip():
        raise ConsentError("--reason: required, a non-empty sentence")
    if not by.strip():
        raise ConsentError("--by: required, who records the withdrawal")
    storage = Storage(data, landing=landing)
    if not storage.is_local:
        raise ConsentError(f"{storage.root}: only local data roots are supported for now")
    root = Path(storage.root.path)
    earlier = [w for w in load_withdrawals(root) if w.demonstrator == demonstrator]
    with catalog_database(storage, write=False) as database:
        known, keys = demonstrator_captures(database, demonstrator)
        if not known and not earlier:
            names = known_demonstrators(database)
            shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
            raise ConsentError(
                f"unknown demonstrator {demonstrator!r}: no capture or release in the catalog "
                f"of {root} names them (known: {shown or 'none'})"
            )
    keys = sorted(set(keys) | {k for w in earlier for k in w.capture_keys})
    record, path = record_withdrawal(root, demonstrator, reason.strip(), by.strip(), keys, now)
    moved = [move for key in keys for move in quarantine_capture(storage, key)]
    return WithdrawResult(record, path, moved)


def apply_withdrawals(
    selection: SelectionResult,
    withdrawals: list[Withdrawal],
    previous: dict[str, Any] | None = None,
) -> SelectionResult:
    """``selection`` without the episodes of withdrawn demonstrators, each moved to
    ``left_out`` with the withdrawal's reason, plus one note per withdrawal.

    An episode is withdrawn when its demonstrator or its capture key is named by a
    withdrawal (the earliest one counts). ``previous`` (the latest version's manifest)
    carries its withdrawn episodes and earlier consent entries forward, so a capture the
    quarantine removed from the catalog is still listed.
    """
    if not withdrawals:
        return selection
    by_person: dict[str, Withdrawal] = {}
    by_key: dict[str, Withdrawal] = {}
    for record in withdrawals:  # oldest first: keep the first
        by_person.setdefault(record.demonstrator, record)
        for key in record.capture_keys:
            by_key.setdefault(key, record)

    def withdrawn(key: str, demonstrator: str | None) -> Withdrawal | None:
        return by_key.get(key) or (by_person.get(demonstrator) if demonstrator else None)

    consent: dict[str, Withdrawal] = {}
    kept = []
    w: Withdrawal | None
    for episode in selection.episodes:
        w = withdrawn(episode.capture_key, episode.demonstrator)
        if w is None:
            kept.append(episode)
        else:
            consent[episode.capture_key] = w
    other: list[dict[str, str]] = []
    for item in selection.left_out:
        w = withdrawn(item["capture_key"], None)
        if w is None:
            other.append(item)
        else:
            consent[item["capture_key"]] = w
    if previous is not None:
        for e in previous.get("episodes", []):
            w = withdrawn(e["capture_key"], e.get("demonstrator"))
            if w is not None:
                consent.setdefault(e["capture_key"], w)
        ids = {w.id: w for w in withdrawals}
        for item in previous.get("left_out", []):
            if item.get("withdrawal") in ids:
                consent.setdefault(item["capture_key"], ids[item["withdrawal"]])
    if not consent:
        return selection
    left_out = other + [
        {"capture_key": key, "reason": w.left_out_reason(), "withdrawal": w.id}
        for key, w in consent.items()
    ]
    left_out.sort(key=lambda item: item["capture_key"])
    notes = []
    for record in withdrawals:
        n = sum(1 for v in consent.values() if v.id == record.id)
        if n:
            notes.append(
                f"{n} episode{'s' if n != 1 else ''} of demonstrator {record.demonstrator} "
                f"left out: consent withdrawn on {record.date}, {record.reason}"
            )
    return replace(selection, episodes=kept, left_out=left_out, notes=[*selection.notes, *notes])
