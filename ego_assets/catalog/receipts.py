"""Export receipts: one small JSON row per episode and export format, read by the catalog.

Every exporter writes one receipt for each episode it exported, after the artefact
itself is in place (`write_receipt`), at::

    receipts/<format>/<capture key>.json

one flat folder per format, so the catalog finds every receipt of a format with one
listing. A receipt says what was written and from what:

=====================  ==============================================================
field                  meaning
=====================  ==============================================================
``receipt_version``    schema version of this row (`RECEIPT_VERSION`)
``capture_key``        the episode (Dagster partition key)
``format``             an export format's ``name`` (`ego_assets.exports.registry`)
``path``               the artefact (file or folder), POSIX path relative to the data root
``bytes``              total size of the artefact in bytes (every file of a folder)
``files``              number of files in the artefact (1 for a single file)
``sha256``             SHA-256 hex of the file; for a folder, of its sorted file list
                       (`folder_digest`, the rule of the raw manifest's content id)
``code_version``       the exporter's code version when it wrote the artefact
``input_data_version`` the data version of what it exported: the episode's quality gate
                       ``data_version`` (quality code + trajectory + waivers)
``exported_at``        UTC time of writing, ISO 8601 (the one time field)
``status``             ``exported``, or ``skipped``: the exporter looked at the episode
                       and wrote no data for it (e.g. EgoSmith without a head camera);
                       ``path`` is then the folder holding its skip record
``reason``             why it was skipped ("" when exported)
=====================  ==============================================================

Whether an export is *current* or *stale* is not stored: it depends on the present, and
the catalog decides it (``dbt/models``): a receipt is current while its
``code_version`` equals the exporter's code version now and its ``input_data_version``
equals the episode's gate ``data_version`` now; otherwise it is stale (a new trajectory,
quality code or waiver since the export: re-running the exporter refreshes it).

The write is atomic (`Storage.write_file`: temp file + rename locally, one PUT on S3),
so the catalog never reads half a receipt. No Dagster here: exporters call it from the
pure library.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
from upath import UPath

from ego_assets.exports.registry import names
from ego_assets.fileio import file_sha256, list_files
from ego_assets.keys import validate_capture_key
from ego_assets.storage import Storage

RECEIPTS_DIR = "receipts"
RECEIPT_VERSION = 2  # 2: status (exported | skipped) and reason
RECEIPT_STATUSES = ("exported", "skipped")

# The receipt as a catalog row (`ExportReceipt.to_row`), in field order.
RECEIPT_SCHEMA = pa.schema(
    [
        ("receipt_version", pa.int64()),
        ("capture_key", pa.string()),
        ("format", pa.string()),
        ("path", pa.string()),
        ("bytes", pa.int64()),
        ("files", pa.int64()),
        ("sha256", pa.string()),
        ("code_version", pa.string()),
        ("input_data_version", pa.string()),
        ("exported_at", pa.timestamp("us", tz="UTC")),
        ("status", pa.string()),
        ("reason", pa.string()),
    ]
)


class ReceiptError(ValueError):
    """A receipt that cannot be written or read; the message names the receipt and field."""


@dataclass(frozen=True, slots=True)
class ExportReceipt:
    """One episode's export in one format (fields: see the module docstring)."""

    capture_key: str
    format: str
    path: str
    bytes: int
    files: int
    sha256: str
    code_version: str
    input_data_version: str
    exported_at: str
    receipt_version: int = RECEIPT_VERSION
    status: str = "exported"  # version 1 receipts had no status: all were exports
    reason: str = ""

    def __post_init__(self) -> None:
        where = f"receipt {self.format}/{self.capture_key}"
        validate_capture_key(self.capture_key)
        if self.format not in names():
            raise ReceiptError(f"{where}: format must be one of {names()}")
        if not self.path or self.path.startswith("/") or ".." in self.path.split("/"):
            raise ReceiptError(f"{where}: path {self.path!r} must be relative to the data root")
        if self.bytes < 0 or self.files < 1:
            raise ReceiptError(f"{where}: bytes must be >= 0 and files >= 1")
        if len(self.sha256) != 64 or set(self.sha256) - set("0123456789abcdef"):
            raise ReceiptError(f"{where}: sha256 must be 64 lowercase hex digits")
        if self.status not in RECEIPT_STATUSES:
            raise ReceiptError(f"{where}: status must be one of {RECEIPT_STATUSES}")
        if (self.status == "skipped") != bool(self.reason):
            raise ReceiptError(f"{where}: a skipped receipt needs a reason, an export none")
        if not self.code_version or not self.input_data_version:
            raise ReceiptError(f"{where}: code_version and input_data_version are required")
        try:
            stamp = dt.datetime.fromisoformat(self.exported_at)
        except ValueError as exc:
            raise ReceiptError(f"{where}: exported_at is not ISO 8601") from exc
        if stamp.utcoffset() != dt.timedelta(0):
            raise ReceiptError(f"{where}: exported_at must be in UTC")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "receipt") -> ExportReceipt:
        """Parse a receipt; `ReceiptError` names ``where`` and the missing/extra field."""
        try:
            body: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReceiptError(f"{where}: not JSON ({exc})") from exc
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(body) - {"receipt_version", "status", "reason"})
        if missing:
            raise ReceiptError(f"{where}: field {missing[0]!r} is missing")
        return cls(**{name: body[name] for name in names if name in body})

    def to_row(self) -> dict[str, Any]:
        """The receipt as a `RECEIPT_SCHEMA` row (``exported_at`` as a datetime)."""
        row = asdict(self)
        row["exported_at"] = dt.datetime.fromisoformat(self.exported_at)
        return {name: row[name] for name in RECEIPT_SCHEMA.names}


def folder_digest(folder: Path, known: Mapping[str, str] | None = None) -> tuple[int, int, str]:
    """(bytes, files, sha256) of every file below ``folder``.

    The digest is SHA-256 of the JSON list of ``{"path", "bytes", "sha256"}`` per file,
    sorted by relative POSIX path (keys sorted): the raw manifest's content id rule.
    ``known``: relative path -> SHA-256 of files the writer hashed as it wrote them (not
    read again).
    """
    folder = Path(folder)
    known = known or {}
    entries: list[dict[str, Any]] = []
    for rel in list_files(folder):
        path = folder / rel
        entries.append(
            {
                "path": rel,
                "bytes": path.stat().st_size,
                "sha256": known.get(rel) or file_sha256(path),
            }
        )
    if not entries:
        raise ReceiptError(f"{folder}: an exported folder must hold at least one file")
    text = json.dumps(entries, sort_keys=True)
    return sum(e["bytes"] for e in entries), len(entries), hashlib.sha256(text.encode()).hexdigest()


def artefact_digest(local: Path, known: Mapping[str, str] | None = None) -> tuple[int, int, str]:
    """(bytes, files, sha256) of a local artefact: one file, or a folder (`folder_digest`;
    ``known``: the SHA-256 of some of its files, by relative path)."""
    local = Path(local)
    if local.is_dir():
        return folder_digest(local, known)
    return local.stat().st_size, 1, file_sha256(local)


def relative_location(storage: Storage, location: UPath) -> str:
    """``location`` as a POSIX path relative to the data root (ReceiptError if outside)."""
    root = storage.root.path.rstrip("/") + "/"
    path = location.path.rstrip("/")
    if location.protocol != storage.root.protocol or not path.startswith(root):
        raise ReceiptError(f"{location} is not below the data root {storage.root}")
    return path[len(root) :]


def make_receipt(
    storage: Storage,
    *,
    export_format: str,
    capture_key: str,
    location: UPath,
    local: Path,
    code_version: str,
    input_data_version: str,
    exported_at: dt.datetime | None = None,
    skipped_reason: str = "",
    known: Mapping[str, str] | None = None,
) -> ExportReceipt:
    """The receipt of an artefact written at ``location`` (under the data root).

    Args:
        storage: the platform storage the artefact lives in.
        export_format: an export format's ``name`` (`ego_assets.exports.registry`).
        capture_key: the episode.
        location: where the artefact (file or folder) now is, e.g. a path below
            ``storage.stage_path("exports", key)``.
        local: a local copy of the same artefact (the exporter's staging file or
            folder; on local storage the artefact itself), digested for bytes/SHA-256.
        code_version: the exporter's code version.
        input_data_version: ``Gate.data_version`` of the gate the exporter passed.
        exported_at: default now (UTC).
        skipped_reason: set when the exporter skipped the episode (status ``skipped``);
            ``location`` is then what it wrote instead (its skip record).
        known: a folder's files the exporter hashed as it wrote them: relative path ->
            SHA-256 (not read again).
    """
    size, count, digest = artefact_digest(local, known)
    stamp = exported_at or dt.datetime.now(dt.UTC)
    return ExportReceipt(
        capture_key=capture_key,
        format=export_format,
        path=relative_location(storage, location),
        bytes=size,
        files=count,
        sha256=digest,
        code_version=code_version,
        input_data_version=input_data_version,
        exported_at=stamp.astimezone(dt.UTC).isoformat(timespec="microseconds"),
        status="skipped" if skipped_reason else "exported",
        reason=skipped_reason,
    )


def receipt_location(storage: Storage, export_format: str, capture_key: str) -> UPath:
    """``receipts/<format>/<key>.json`` below the data root (key and format validated)."""
    if export_format not in names():
        raise ReceiptError(f"format {export_format!r} is not one of {names()}")
    return storage.root / RECEIPTS_DIR / export_format / f"{validate_capture_key(capture_key)}.json"


def write_receipt(storage: Storage, receipt: ExportReceipt) -> UPath:
    """Write ``receipt`` atomically to its `receipt_location`; return that location."""
    location = receipt_location(storage, receipt.format, receipt.capture_key)
    storage.write_file(location, receipt.to_json().encode("utf-8"))
    return location


def read_receipt(storage: Storage, export_format: str, capture_key: str) -> ExportReceipt | None:
    """The stored receipt, or None when that episode has none in that format."""
    location = receipt_location(storage, export_format, capture_key)
    if not location.exists():
        return None
    return ExportReceipt.from_json(location.read_text(), where=str(location))


def receipts_table(receipts: list[ExportReceipt]) -> pa.Table:
    """Receipts as one `RECEIPT_SCHEMA` table (empty but typed when there are none)."""
    return pa.Table.from_pylist([r.to_row() for r in receipts], schema=RECEIPT_SCHEMA)


def record_export(
    storage: Storage,
    *,
    export_format: str,
    capture_key: str,
    location: UPath,
    local: Path,
    code_version: str,
    input_data_version: str,
) -> ExportReceipt:
    """`make_receipt` + `write_receipt`: what an exporter calls once its artefact is in place."""
    receipt = make_receipt(
        storage,
        export_format=export_format,
        capture_key=capture_key,
        location=location,
        local=local,
        code_version=code_version,
        input_data_version=input_data_version,
    )
    write_receipt(storage, receipt)
    return receipt
