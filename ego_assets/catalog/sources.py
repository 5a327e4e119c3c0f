"""Stage every episode's rows into the catalog's DuckDB file (schema ``platform``).

The dbt models (``dbt/``) read these tables, one current row per episode (and per
format for receipts):

============================  ==================================  ====================
table                         read from (index: the stage's file   row
                              that marks a complete version)
============================  ==================================  ====================
``raw_manifests``             ``raw/<key>/manifest.json``         `MANIFEST_SCHEMA`
``trajectory_headers``        ``trajectory/<key>/capture.json``   `HEADER_SCHEMA`
                              (index ``lineage.json``)
``quality_rows``              ``quality/<key>/quality.parquet``   `quality_schema`
                              (index ``gate.json``)
``quality_gates``             ``quality/<key>/gate.json``         `GATE_SCHEMA`
``export_receipts_<format>``  ``receipts/<format>/<key>.json``    `RECEIPT_SCHEMA`
``export_formats``            exporters' code versions now        `FORMATS_SCHEMA`
============================  ==================================  ====================

and the release versions and consent withdrawals (``release_versions``,
``release_episodes``, ``consent_withdrawals``; `ego_assets.catalog.releases`).

Work is proportional to what changed: one listing per source gives every item's
fingerprint (local: the index file's modification time and size; S3: the index
object's ETag and LastModified). Only items whose fingerprint differs from the one in
``platform.item_versions`` are read (concurrently through the storage layer's file
system, in chunks), and their rows replace the old ones. An item that disappeared loses
its row and keeps a ``item_versions`` row with a null fingerprint; each row also keeps
the batch that first staged its capture (``first_batch``). Every run that
changes something is one ``platform.batches`` row, and every row it writes carries that
``_batch``: the incremental models rebuild only the capture keys of newer batches.
All of a run's writes are one DuckDB transaction.

Why stage through the storage layer rather than let DuckDB read the bucket: DuckDB
reads S3 through its ``httpfs`` extension, downloaded at run time (impossible on these
machines), and the pip-packaged extensions (``duckdb-ext-httpfs``) are built only up to
DuckDB 1.4 while dbt-duckdb 1.11 brings DuckDB 2.0. More importantly, a glob over the
bucket would read half-uploaded stage folders: only the platform's index-file rule
(storage.py) says when a folder is complete, and only its listing is uncached.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

from ego_assets.capture.manifest import RawManifest
from ego_assets.capture.provenance import PROVENANCE_FILE
from ego_assets.catalog.receipts import RECEIPT_SCHEMA, RECEIPTS_DIR, ExportReceipt
from ego_assets.catalog.releases import RELEASE_TABLES, stage_releases
from ego_assets.exports import registry
from ego_assets.keys import is_valid_capture_key
from ego_assets.pipeline import LINEAGE_FILE
from ego_assets.quality.gate import GATE_FILE, Gate
from ego_assets.quality.report import REPORT_PARQUET, ROW_SCHEMA
from ego_assets.storage import RAW_CAPTURE_DIR, RAW_MANIFEST_FILE, Storage, is_local
from ego_assets.trajectory.records import to_jsonable
from ego_assets.trajectory.store import CAPTURE_JSON

log = logging.getLogger(__name__)

SCHEMA = "platform"
READ_CHUNK = 500  # files fetched per concurrent read

MANIFEST_SCHEMA = pa.schema(
    [
        ("capture_key", pa.string()),
        ("raw_kind", pa.string()),
        ("raw_files", pa.int64()),
        ("raw_bytes", pa.int64()),
        ("content_sha256", pa.string()),
        ("landed_at", pa.timestamp("us")),
        ("source_dataset", pa.string()),
    ]
)
HEADER_SCHEMA = pa.schema(
    [
        ("capture_key", pa.string()),
        ("capture_id", pa.string()),
        ("source_kind", pa.string()),
        ("source_version", pa.string()),
        ("device", pa.string()),
        ("task", pa.string()),
        ("demonstrator", pa.string()),
        ("split", pa.string()),
        ("dataset_name", pa.string()),
        ("duration_s", pa.float64()),
        ("n_streams", pa.int64()),
        ("stream_names", pa.list_(pa.string())),
        ("started_at", pa.timestamp("us")),
        ("trajectory_data_version", pa.string()),
    ]
)
GATE_SCHEMA = pa.schema(
    [
        ("capture_key", pa.string()),
        ("gate_passed", pa.bool_()),
        ("gate_status", pa.string()),
        ("gate_worst_metric", pa.string()),
        ("gate_data_version", pa.string()),
        ("policy_version", pa.int64()),
        ("blocked_formats", pa.list_(pa.string())),
        ("blocking_reasons", pa.list_(pa.string())),
        ("waived", pa.bool_()),
        ("waivers", pa.string()),
        ("gx_errors", pa.int64()),
        ("gx_warnings", pa.int64()),
    ]
)
FORMATS_SCHEMA = pa.schema([("format", pa.string()), ("current_code_version", pa.string())])
ITEMS_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("capture_key", pa.string()),
        ("fingerprint", pa.string()),
        # The batch that first staged any item of this capture (kept when the item is
        # re-staged or removed). A refresh whose changed captures were all first staged
        # after its watermark has no older rows to read or replace (dbt/macros).
        ("first_batch", pa.int64()),
    ]
)
BATCHES_SCHEMA = pa.schema(
    [("_batch", pa.int64()), ("staged_at", pa.timestamp("us")), ("items_changed", pa.int64())]
)


# Tables every staging run keeps besides the sources' own (see the module docstring).
BOOKKEEPING_TABLES = ("export_formats", "item_versions", "batches")


def quality_schema() -> pa.Schema:
    """``capture_key`` followed by the quality report's `ROW_SCHEMA`."""
    return pa.schema([("capture_key", pa.string()), *ROW_SCHEMA])


@dataclass(frozen=True, slots=True)
class Listed:
    """One source item found by a listing: its files and its fingerprint."""

    key: str
    files: tuple[str, ...]  # fs paths to read, in the order the row builder expects
    fingerprint: str
    modified: dt.datetime  # UTC, naive
    optional: int = 0  # the last ``optional`` files may be absent (read as b"")


RowBuilder = Callable[[Listed, tuple[bytes, ...]], dict[str, Any] | pa.Table]


@dataclass(frozen=True, slots=True)
class Source:
    """A staged table: where its items are and how a row is made from their files."""

    table: str
    schema: pa.Schema
    folder: str  # below the data root
    index: str | None  # file inside each key's folder; None: items are <key>.json files
    reads: tuple[str, ...]  # files to read per item (names inside the key's folder)
    build: RowBuilder
    optional: tuple[str, ...] = ()  # read after ``reads`` when present, else b""


@dataclass(slots=True)
class StagingSummary:
    """What `stage_rows` did: the batch number (None when nothing changed) and counts."""

    batch: int | None
    changed: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    formats_changed: int = 0

    @property
    def total_changed(self) -> int:
        return sum(self.changed.values()) + sum(self.removed.values()) + self.formats_changed


def _manifest_row(item: Listed, data: tuple[bytes, ...]) -> dict[str, Any]:
    manifest = RawManifest.from_json(data[0].decode("utf-8"))
    provenance = json.loads(data[1]) if data[1] else {}
    return {
        "capture_key": item.key,
        "raw_kind": manifest.kind,
        "raw_files": len(manifest.files),
        "raw_bytes": manifest.total_bytes,
        "content_sha256": manifest.content_sha256,
        "landed_at": item.modified,
        "source_dataset": provenance.get("dataset") if isinstance(provenance, dict) else None,
    }


def _task(header: Mapping[str, Any]) -> str | None:
    """The task specification's title, else the first segment's task, else the first
    instruction; None when the capture states none."""
    spec = header["info"].get("task_specification") or {}
    segments = header.get("annotations", {}).get("segments") or []
    instructions = header.get("annotations", {}).get("instructions") or []
    for candidate in (
        spec.get("title"),
        segments[0].get("task") if segments else None,
        instructions[0] if instructions else None,
    ):
        if candidate:
            return str(candidate)
    return None


def _header_row(item: Listed, data: tuple[bytes, ...]) -> dict[str, Any]:
    header = json.loads(data[0])
    lineage = json.loads(data[1])
    info = header["info"]
    study = info.get("study") or {}
    start_ns = info.get("start_ns")
    started = None
    if info.get("clock", "epoch") == "epoch" and start_ns is not None:
        started = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(start_ns) // 1000)
    streams = header.get("streams", [])
    return {
        "capture_key": item.key,
        "capture_id": info.get("capture_id"),
        "source_kind": info.get("source_kind"),
        "source_version": info.get("source_version") or None,
        "device": info.get("device") or None,
        "task": _task(header),
        "demonstrator": study.get("demonstrator_id") or None,
        "split": info.get("split") or None,
        "dataset_name": info.get("dataset_name") or None,
        "duration_s": header.get("duration_s"),
        "n_streams": len(streams),
        "stream_names": sorted(s["name"] for s in streams),
        "started_at": started,
        "trajectory_data_version": lineage.get("data_version"),
    }


def _quality_row(item: Listed, data: tuple[bytes, ...]) -> pa.Table:
    table = pq.read_table(pa.BufferReader(data[0]))
    return table.add_column(0, "capture_key", pa.array([item.key] * table.num_rows, pa.string()))


def _gate_row(item: Listed, data: tuple[bytes, ...]) -> dict[str, Any]:
    gate = Gate.from_json(data[0].decode("utf-8"))
    return {
        "capture_key": item.key,
        "gate_passed": gate.passed,
        "gate_status": gate.status,
        "gate_worst_metric": gate.worst_metric or None,
        "gate_data_version": gate.data_version,
        "policy_version": gate.policy_version,
        "blocked_formats": [f.name for f in registry.formats() if not gate.allows(f.policy_key)],
        "blocking_reasons": list(gate.reasons),
        "waived": bool(gate.waived),
        "waivers": json.dumps([to_jsonable(w) for w in gate.waivers], sort_keys=True)
        if gate.waivers
        else None,
        "gx_errors": len(gate.errors),
        "gx_warnings": len(gate.warnings),
    }


def _receipt_row(item: Listed, data: tuple[bytes, ...]) -> dict[str, Any]:
    receipt = ExportReceipt.from_json(data[0].decode("utf-8"), where=item.files[0])
    if receipt.capture_key != item.key:
        raise ValueError(f"{item.files[0]}: capture_key {receipt.capture_key!r} != file name")
    return receipt.to_row()


def sources() -> tuple[Source, ...]:
    """Every staged table but ``export_formats``, ``item_versions`` and ``batches``."""
    return (
        Source(
            "raw_manifests",
            MANIFEST_SCHEMA,
            "raw",
            RAW_MANIFEST_FILE,
            (RAW_MANIFEST_FILE,),
            _manifest_row,
            (f"{RAW_CAPTURE_DIR}/{PROVENANCE_FILE}",),  # imported captures only
        ),
        Source(
            "trajectory_headers",
            HEADER_SCHEMA,
            "trajectory",
            LINEAGE_FILE,
            (CAPTURE_JSON, LINEAGE_FILE),
            _header_row,
        ),
        Source(
            "quality_rows", quality_schema(), "quality", GATE_FILE, (REPORT_PARQUET,), _quality_row
        ),
        Source("quality_gates", GATE_SCHEMA, "quality", GATE_FILE, (GATE_FILE,), _gate_row),
        *(
            Source(
                f"export_receipts_{fmt}",
                RECEIPT_SCHEMA,
                f"{RECEIPTS_DIR}/{fmt}",
                None,
                (),
                _receipt_row,
            )
            for fmt in registry.names()
        ),
    )


def _utc_naive(stamp: dt.datetime) -> dt.datetime:
    if stamp.tzinfo is None:
        return stamp
    return stamp.astimezone(dt.UTC).replace(tzinfo=None)


def list_items(storage: Storage, source: Source) -> list[Listed]:
    """Every complete item of ``source`` (one listing; keys that are not capture keys,
    such as staging folders, are skipped)."""
    base = storage.root / source.folder
    if is_local(base):
        return _list_local(Path(base.path), source)
    return _list_remote(base, source)


def _list_local(base: Path, source: Source) -> list[Listed]:
    items: list[Listed] = []
    try:
        entries = list(os.scandir(base))
    except FileNotFoundError:
        return items
    for entry in entries:
        if source.index is None:
            key = entry.name.removesuffix(".json")
            if not entry.name.endswith(".json") or not is_valid_capture_key(key):
                continue
            index = Path(entry.path)
            files: tuple[str, ...] = (entry.path,)
        else:
            key = entry.name
            if not is_valid_capture_key(key):
                continue
            index = Path(entry.path) / source.index
            files = tuple(str(Path(entry.path) / n) for n in source.reads + source.optional)
        try:
            stat = index.stat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        modified = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=stat.st_mtime_ns // 1000)
        fingerprint = f"{stat.st_mtime_ns}:{stat.st_size}"
        items.append(Listed(key, files, fingerprint, modified, len(source.optional)))
    return items


def _list_remote(base: UPath, source: Source) -> list[Listed]:
    fs = base.fs
    root = base.path.rstrip("/")
    try:
        found = fs.find(root, detail=True, maxdepth=1 if source.index is None else 2)
    except FileNotFoundError:
        return []
    items: list[Listed] = []
    for path, info in found.items():
        parts = path[len(root) + 1 :].split("/")
        if source.index is None:
            if len(parts) != 1 or not parts[0].endswith(".json"):
                continue
            key = parts[0].removesuffix(".json")
            files: tuple[str, ...] = (path,)
        else:
            if len(parts) != 2 or parts[1] != source.index:
                continue
            key = parts[0]
            files = tuple(f"{root}/{key}/{name}" for name in source.reads + source.optional)
        if not is_valid_capture_key(key):
            continue
        modified = info.get("LastModified") or info.get("last_modified") or dt.datetime(1970, 1, 1)
        fingerprint = f"{info.get('ETag', '')}:{modified}:{info.get('size')}"
        items.append(Listed(key, files, fingerprint, _utc_naive(modified), len(source.optional)))
    return items


def _read_items(
    storage: Storage, items: list[Listed]
) -> Iterator[tuple[Listed, tuple[bytes, ...]]]:
    """Each item with its files' bytes, fetched ``READ_CHUNK`` files at a time
    (concurrently on S3); items with a file gone since the listing are skipped."""
    fs = storage.root.fs
    for start in range(0, len(items), READ_CHUNK):
        chunk = items[start : start + READ_CHUNK]
        paths = [p for item in chunk for p in item.files]
        got = fs.cat(paths, on_error="return")
        for item in chunk:
            data = tuple(got.get(p) for p in item.files)
            required = data[: len(data) - item.optional]
            data = required + tuple(
                d if isinstance(d, bytes) else b"" for d in data[len(required) :]
            )
            if any(not isinstance(d, bytes) for d in required):
                log.info("%s: a file went away since the listing; staged next time", item.key)
                continue
            yield item, tuple(d for d in data if isinstance(d, bytes))


def _table_ddl(schema: pa.Schema) -> str:
    """DuckDB column definitions for an Arrow schema."""
    with duckdb.connect() as con:
        con.register("empty_rows", schema.empty_table())
        columns = con.execute("describe select * from empty_rows").fetchall()
    return ", ".join(f'"{name}" {dtype}' for name, dtype, *_ in columns)


def _ensure_table(con: duckdb.DuckDBPyConnection, table: str, schema: pa.Schema) -> None:
    """Create ``platform.<table>`` (schema + ``_batch``) or add the columns it lacks."""
    existing = {
        row[0]
        for row in con.execute(
            "select column_name from information_schema.columns "
            "where table_schema = ? and table_name = ?",
            [SCHEMA, table],
        ).fetchall()
    }
    if not existing:
        con.execute(f'create table {SCHEMA}."{table}" ({_table_ddl(schema)}, _batch bigint)')
        return
    for name in schema.names:
        if name not in existing:
            ddl = _table_ddl(pa.schema([schema.field(name)]))
            con.execute(f'alter table {SCHEMA}."{table}" add column {ddl}')


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Every ``platform`` table, empty when new (so every dbt source exists)."""
    con.execute(f"create schema if not exists {SCHEMA}")
    for source in sources():
        _ensure_table(con, source.table, source.schema)
    _ensure_table(con, "export_formats", FORMATS_SCHEMA)
    for table, schema in RELEASE_TABLES.items():
        _ensure_table(con, table, schema)
    _ensure_table(con, "item_versions", ITEMS_SCHEMA)
    con.execute(f"create table if not exists {SCHEMA}.batches ({_table_ddl(BATCHES_SCHEMA)})")


def _rows_table(source: Source, rows: list[dict[str, Any] | pa.Table]) -> pa.Table:
    dicts = [r for r in rows if isinstance(r, dict)]
    tables = [r for r in rows if isinstance(r, pa.Table)]
    if dicts:
        tables.append(pa.Table.from_pylist(dicts, schema=source.schema))
    if not tables:
        return source.schema.empty_table()
    merged = pa.concat_tables(tables, promote_options="permissive")
    known = [name for name in source.schema.names if name in merged.column_names]
    return merged.select(known)


class _Batch:
    """The number of the run's batch, allocated on first use."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.number: int | None = None

    def get(self) -> int:
        if self.number is None:
            last = self.con.execute(f"select coalesce(max(_batch), 0) from {SCHEMA}.batches")
            self.number = int(last.fetchall()[0][0]) + 1
        return self.number


def _stage_source(
    con: duckdb.DuckDBPyConnection, storage: Storage, source: Source, batch: _Batch
) -> tuple[int, int]:
    """Stage one source; (changed, removed) item counts."""
    listed = list_items(storage, source)
    listing = pa.table(
        {
            "capture_key": pa.array([i.key for i in listed], pa.string()),
            "fingerprint": pa.array([i.fingerprint for i in listed], pa.string()),
        }
    )
    con.register("listing", listing)
    changed_keys = {
        row[0]
        for row in con.execute(
            f"select l.capture_key from listing l left join {SCHEMA}.item_versions v "
            "on v.source = ? and v.capture_key = l.capture_key "
            "where v.fingerprint is distinct from l.fingerprint",
            [source.table],
        ).fetchall()
    }
    removed = [
        row[0]
        for row in con.execute(
            f"select capture_key from {SCHEMA}.item_versions where source = ? "
            "and fingerprint is not null and capture_key not in (select capture_key from listing)",
            [source.table],
        ).fetchall()
    ]
    todo = [i for i in listed if i.key in changed_keys]
    done: list[Listed] = []
    rows: list[dict[str, Any] | pa.Table] = []
    for item, data in _read_items(storage, todo):
        rows.append(source.build(item, data))
        done.append(item)
    if not done and not removed:
        return 0, 0
    number = batch.get()
    table = _rows_table(source, rows)
    touched = [i.key for i in done] + removed
    con.register("new_rows", table)
    con.register(
        "versions",
        pa.table(
            {
                "capture_key": pa.array(touched, pa.string()),
                "fingerprint": pa.array(
                    [i.fingerprint for i in done] + [None] * len(removed), pa.string()
                ),
            }
        ),
    )
    target = f'{SCHEMA}."{source.table}"'
    con.execute(f"delete from {target} where capture_key in (select capture_key from versions)")
    names = ", ".join(f'"{n}"' for n in table.column_names)
    con.execute(f"insert into {target} ({names}, _batch) select {names}, {number} from new_rows")
    record_item_versions(con, source.table, number)
    for name in ("listing", "new_rows", "versions"):
        con.unregister(name)
    return len(done), len(removed)


def record_item_versions(con: duckdb.DuckDBPyConnection, source: str, number: int) -> None:
    """Replace the ``item_versions`` rows of ``source`` for the registered relation
    ``versions`` (capture_key, fingerprint; null: removed), written by batch ``number``."""
    # The capture's first batch, over every source's rows (rows staged before the column
    # existed count from their own batch); this batch for a capture never seen.
    con.execute(
        "create or replace temp table catalog_first_batches as "
        "select capture_key, min(coalesce(first_batch, _batch)) as first_batch "
        f"from {SCHEMA}.item_versions where capture_key in (select capture_key from versions) "
        "group by capture_key"
    )
    con.execute(
        f"delete from {SCHEMA}.item_versions where source = ? "
        "and capture_key in (select capture_key from versions)",
        [source],
    )
    con.execute(
        f"insert into {SCHEMA}.item_versions (source, capture_key, fingerprint, first_batch, "
        f"_batch) select ?, v.capture_key, v.fingerprint, coalesce(f.first_batch, {number}), "
        f"{number} from versions v left join catalog_first_batches f using (capture_key)",
        [source],
    )
    con.execute("drop table catalog_first_batches")


def _stage_formats(
    con: duckdb.DuckDBPyConnection, code_versions: Mapping[str, str | None] | None, batch: _Batch
) -> int:
    rows = con.execute(f"select format, current_code_version from {SCHEMA}.export_formats")
    stored = dict(rows.fetchall())
    if code_versions is None:  # keep what the last staging with versions recorded
        code_versions = {fmt: stored.get(fmt) for fmt in registry.names()}
    wanted = {fmt: code_versions.get(fmt) for fmt in registry.names()}
    changed = [
        fmt for fmt, version in wanted.items() if fmt not in stored or stored[fmt] != version
    ]
    if not changed:
        return 0
    number = batch.get()
    for fmt in changed:
        con.execute(f"delete from {SCHEMA}.export_formats where format = ?", [fmt])
        con.execute(
            f"insert into {SCHEMA}.export_formats values (?, ?, ?)", [fmt, wanted[fmt], number]
        )
    return len(changed)


def stage_rows(
    storage: Storage, database: Path, code_versions: Mapping[str, str | None] | None = None
) -> StagingSummary:
    """Bring ``database``'s ``platform`` tables up to date with ``storage``.

    Args:
        storage: the platform's data root.
        database: the catalog's local DuckDB file (created when missing).
        code_versions: export format -> the exporter's code version deployed now (a
            format absent or None: no exporter deployed, its receipts are never stale by
            code version). None: keep the versions recorded by the last staging.

    Returns:
        The batch written (None when nothing changed) and per-table counts.
    """
    Path(database).parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(database)) as con:
        ensure_schema(con)
        con.execute("begin transaction")
        try:
            batch = _Batch(con)
            summary = StagingSummary(batch=None)
            for source in sources():
                changed, removed = _stage_source(con, storage, source, batch)
                summary.changed[source.table] = changed
                summary.removed[source.table] = removed
            summary.changed.update(stage_releases(con, storage, batch.get, record_item_versions))
            summary.formats_changed = _stage_formats(con, code_versions, batch)
            summary.batch = batch.number
            if batch.number is not None:
                con.execute(
                    f"insert into {SCHEMA}.batches values (?, ?, ?)",
                    [batch.number, _utc_naive(dt.datetime.now(dt.UTC)), summary.total_changed],
                )
            con.execute("commit")
        except BaseException:
            con.execute("rollback")
            raise
    return summary
