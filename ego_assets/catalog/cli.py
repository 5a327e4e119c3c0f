"""``ego-assets catalog``: the catalog's tables in a terminal, or one SQL query's result.

Without ``--sql`` it prints `dataset_composition` (largest groups first) and
`export_coverage`. ``--build`` stages the rows and runs ``dbt build`` first, for use
without a running Dagster (exporter code versions then stay as the last Dagster staging
recorded them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import duckdb
import pyarrow as pa

from ego_assets.catalog.sources import stage_rows
from ego_assets.catalog.warehouse import (
    CatalogBusy,
    DbtFailed,
    catalog_database,
    catalog_problem,
    query,
    run_dbt,
)
from ego_assets.storage import Storage

COMPOSITION_SQL = """
select task, source_kind, device, demonstrator, split, episodes,
       round(hours, 3) as hours, usable_episodes, round(usable_hours, 3) as usable_hours,
       blocked_episodes
from dataset_composition
order by hours desc, episodes desc, task, source_kind, device, demonstrator, split
"""
COVERAGE_SQL = """
select format, coalesce(current_code_version, '-') as code_version, episodes, exported,
       skipped, blocked, stale, missing, exported_bytes
from export_coverage order by format
"""
MAX_ROWS = 25


def format_table(table: pa.Table, max_rows: int = MAX_ROWS) -> str:
    """``table`` as aligned text columns (at most ``max_rows`` rows, then a count line)."""
    names = table.column_names
    rows = [
        ["" if v is None else str(v) for v in row.values()]
        for row in table.slice(0, max_rows).to_pylist()
    ]
    widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if table.num_rows > max_rows:
        lines.append(f"... {table.num_rows - max_rows} more rows")
    return "\n".join(lines)


def run_catalog(
    data: str | Path,
    *,
    endpoint_url: str | None = None,
    sql: str | None = None,
    build: bool = False,
    out: TextIO | None = None,
) -> int:
    """Print the catalog of the data root ``data``; 0 on success, 1 when there is no
    usable catalog, the build failed or waited too long for another writer, or ``sql``
    failed (each with a one-line reason)."""
    out = out or sys.stdout
    options = {"endpoint_url": endpoint_url} if endpoint_url else {}
    storage = Storage(data, storage_options=options)
    try:
        with catalog_database(storage, write=build) as database:
            if build:
                summary = stage_rows(storage, database)
                print(f"staged {summary.total_changed} changed files", file=out)
                run_dbt(["build", "--quiet"], database)
            return _print_catalog(storage, database, sql, out)
    except (CatalogBusy, DbtFailed) as exc:
        print(f"catalog not built: {exc}", file=out)
        return 1


def _print_catalog(storage: Storage, database: Path, sql: str | None, out: TextIO) -> int:
    """Print ``sql``'s result, else the composition and coverage tables of ``database``."""
    problem = catalog_problem(database)
    if problem:
        print(
            f"no catalog under {storage.root} ({problem}): run `ego-assets catalog --build` "
            "or the aggregates job",
            file=out,
        )
        return 1
    if sql:
        try:
            result = query(database, sql)
        except duckdb.Error as exc:
            print(f"query failed: {' '.join(str(exc).split())}", file=out)
            return 1
        print(format_table(result, max_rows=1000), file=out)
        return 0
    print("dataset composition (hours by task, kind, device, demonstrator, split)", file=out)
    print(format_table(query(database, COMPOSITION_SQL)), file=out)
    print("\nexport coverage", file=out)
    print(format_table(query(database, COVERAGE_SQL)), file=out)
    return 0
