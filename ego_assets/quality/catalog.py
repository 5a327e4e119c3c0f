"""The quality catalog: every episode's quality row in one Parquet table.

``quality/<key>/quality.parquet`` holds one row per episode (`ego_assets.quality.report`
``ROW_SCHEMA``). `build_catalog` concatenates those rows, matching columns by name (a
column missing from an older report version is null there), adds ``capture_key`` (the
platform's partition key: the folder name) and sorts by it.
`write_quality_catalog` reads every *complete* report of a `Storage` (its gate file, the
stage's index, is present) and writes ``catalog/quality/quality.parquet`` atomically
(local: folder rename; S3: index-last upload).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ego_assets.quality.gate import GATE_FILE
from ego_assets.quality.report import REPORT_PARQUET
from ego_assets.storage import Storage

log = logging.getLogger(__name__)

CATALOG_STAGE = "catalog"
CATALOG_KEY = "quality"
CATALOG_FILE = "quality.parquet"


@dataclass(frozen=True, slots=True)
class CatalogSummary:
    """What `write_quality_catalog` wrote.

    Attributes:
        uri: location of the catalog Parquet file.
        episodes: number of rows (one per episode).
        columns: number of columns.
        failed: episodes whose report status is ``fail``.
    """

    uri: str
    episodes: int
    columns: int
    failed: int


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
            tables[folder.name] = pq.read_table(f)
    return tables


def write_quality_catalog(storage: Storage) -> CatalogSummary:
    """Build the catalog of ``storage`` and write it to ``catalog/quality/quality.parquet``."""
    catalog = build_catalog(read_report_rows(storage))
    with storage.write_dir(CATALOG_STAGE, CATALOG_KEY, index_file=CATALOG_FILE) as stage:
        pq.write_table(catalog, stage / CATALOG_FILE, compression="zstd")
    failed = 0
    if "status" in catalog.column_names:
        failed = int(pc.sum(pc.equal(catalog["status"], "fail")).as_py() or 0)
    uri = str(storage.stage_path(CATALOG_STAGE, CATALOG_KEY) / CATALOG_FILE)
    return CatalogSummary(uri, catalog.num_rows, catalog.num_columns, failed)
