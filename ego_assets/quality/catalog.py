"""The quality catalog: every episode's quality row in one Parquet table.

``quality/<key>/quality.parquet`` holds one row per episode (`ego_assets.quality.report`
``ROW_SCHEMA``). `build_catalog` concatenates those rows, matching columns by name (a
column missing from an older report version is null there), adds ``capture_key`` (the
platform's partition key: the folder name) and sorts by it.
`write_quality_catalog` reads every *complete* report of a `Storage` (its gate file, the
stage's index, is present), adds the gate's columns (`GATE_COLUMNS`: export verdict,
policy version, blocking reasons, waivers) and writes ``catalog/quality/quality.parquet``
atomically (local: folder rename; S3: index-last upload).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ego_assets.quality.gate import GATE_FILE, Gate
from ego_assets.quality.report import REPORT_PARQUET
from ego_assets.storage import Storage

log = logging.getLogger(__name__)

CATALOG_STAGE = "catalog"
CATALOG_KEY = "quality"
CATALOG_FILE = "quality.parquet"
# Columns added from each episode's gate.json.
GATE_COLUMNS = pa.schema(
    [
        ("export", pa.string()),  # "allowed" or "blocked"
        ("policy_version", pa.int64()),
        ("blocked_exports", pa.string()),  # comma-separated export names
        ("blocking_reasons", pa.string()),  # "; "-separated finding texts
        ("waivers", pa.string()),  # "; "-separated "metric by who: why"
    ]
)


@dataclass(frozen=True, slots=True)
class CatalogSummary:
    """What `write_quality_catalog` wrote.

    Attributes:
        uri: location of the catalog Parquet file.
        episodes: number of rows (one per episode).
        columns: number of columns.
        failed: episodes whose report status is ``fail``.
        blocked: episodes the export policy blocks.
        waived: episodes with at least one waiver in force.
    """

    uri: str
    episodes: int
    columns: int
    failed: int
    blocked: int = 0
    waived: int = 0


def build_catalog(rows: Mapping[str, pa.Table]) -> pa.Table:
    """One table from per-episode report tables, columns unified by name.

    Args:
        rows: capture key -> that episode's report table (normally one row).

    Returns:
        ``capture_key`` (string) followed by the union of the report columns, one row
        per report row, sorted by ``capture_key``; an empty table (no columns) if
        ``rows`` is empty.
    """
    if not rows:
        return pa.table({})
    keyed = [
        table.add_column(0, "capture_key", pa.array([key] * table.num_rows, pa.string()))
        for key, table in rows.items()
    ]
    merged = pa.concat_tables(keyed, promote_options="permissive")
    return merged.take(pc.sort_indices(merged, sort_keys=[("capture_key", "ascending")]))


def read_report_rows(storage: Storage) -> dict[str, pa.Table]:
    """Capture key -> quality row, for every episode whose quality folder is complete."""
    root = storage.root / "quality"
    if not root.exists():
        return {}
    tables: dict[str, pa.Table] = {}
    for folder in sorted(root.iterdir(), key=lambda p: p.name):
        if not (folder / GATE_FILE).exists():
            log.info("quality/%s has no %s yet; left out of the catalog", folder.name, GATE_FILE)
            continue
        with (folder / REPORT_PARQUET).open("rb") as f:
            table = pq.read_table(f)
        gate = Gate.from_json((folder / GATE_FILE).read_text())
        for name, value in gate_row(gate).items():
            column = pa.array([value] * table.num_rows, GATE_COLUMNS.field(name).type)
            table = table.append_column(GATE_COLUMNS.field(name), column)
        tables[folder.name] = table
    return tables


def gate_row(gate: Gate) -> dict[str, str | int]:
    """The `GATE_COLUMNS` values of one episode."""
    return {
        "export": gate.verdict,
        "policy_version": gate.policy_version,
        "blocked_exports": ",".join(gate.blocked_exports),
        "blocking_reasons": "; ".join(gate.reasons),
        "waivers": "; ".join(f"{w.metric} by {w.by}: {w.reason}" for w in gate.waivers),
    }


def write_quality_catalog(storage: Storage) -> CatalogSummary:
    """Build the catalog of ``storage`` and write it to ``catalog/quality/quality.parquet``."""
    catalog = build_catalog(read_report_rows(storage))
    with storage.write_dir(CATALOG_STAGE, CATALOG_KEY, index_file=CATALOG_FILE) as stage:
        pq.write_table(catalog, stage / CATALOG_FILE, compression="zstd")
    uri = str(storage.stage_path(CATALOG_STAGE, CATALOG_KEY) / CATALOG_FILE)
    return CatalogSummary(
        uri,
        catalog.num_rows,
        catalog.num_columns,
        _count(catalog, "status", "fail"),
        _count(catalog, "export", "blocked"),
        _count(catalog, "waivers", "", negate=True),
    )


def _count(table: pa.Table, column: str, value: str, negate: bool = False) -> int:
    """Rows whose ``column`` equals ``value`` (differs, with ``negate``); 0 without it."""
    if column not in table.column_names:
        return 0
    hits = pc.equal(table[column], value)
    return int(pc.sum(pc.invert(hits) if negate else hits).as_py() or 0)
