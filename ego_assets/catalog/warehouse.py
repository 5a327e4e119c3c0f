"""Where the catalog's DuckDB file lives, how dbt is pointed at it, and how it is queried.

The catalog is one embedded DuckDB file, ``catalog/warehouse/catalog.duckdb`` under the
data root. On a local root the file is used in place. DuckDB cannot write a file on S3,
so on an ``s3://`` root every writer (staging, the dbt build) works on a local copy:
`catalog_database` downloads the published file (when there is one), yields the local
copy and, when the block succeeds and ``write`` is set, uploads it back through
`Storage.write_dir` (index file last, so a reader never sees half a file). Readers
(`ego-assets catalog`) download it likewise. Writers are serialized by the Dagster
single-writer pool; DuckDB itself allows one writing process per file.

dbt (``dbt/`` at the repository root) reads the file's path from the environment
variable ``EGO_CATALOG_DB`` (`dbt_env`). `run_dbt` runs dbt in this process through
dbtRunner; Dagster runs it through dagster-dbt instead (ego_assets/defs/catalog.py).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ego_assets.storage import Storage

WAREHOUSE_STAGE = "catalog"
WAREHOUSE_KEY = "warehouse"
DATABASE_FILE = "catalog.duckdb"
DB_ENV = "EGO_CATALOG_DB"
PROJECT_ENV = "EGO_DBT_PROJECT_DIR"


def dbt_project_dir() -> Path:
    """The dbt project: ``$EGO_DBT_PROJECT_DIR`` (images), else ``dbt/`` of the repository."""
    configured = os.environ.get(PROJECT_ENV)
    return Path(configured) if configured else Path(__file__).resolve().parents[2] / "dbt"


def published_location(storage: Storage) -> Any:
    """The catalog file's location under the data root (a UPath)."""
    return storage.stage_path(WAREHOUSE_STAGE, WAREHOUSE_KEY) / DATABASE_FILE


@contextmanager
def catalog_database(storage: Storage, *, write: bool) -> Iterator[Path]:
    """A local path of the catalog's DuckDB file (see the module docstring).

    Local root: the file itself (its folder created). S3 root: a downloaded copy, or a
    fresh path when none is published yet; uploaded on success when ``write``.
    """
    location = published_location(storage)
    if storage.is_local:
        path = Path(location.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="ego-catalog-") as tmp:
        path = Path(tmp) / DATABASE_FILE
        if location.exists():
            location.fs.get_file(location.path, str(path))
        yield path
        if write:
            with storage.write_dir(WAREHOUSE_STAGE, WAREHOUSE_KEY, index_file=DATABASE_FILE) as out:
                shutil.move(str(path), out / DATABASE_FILE)


def dbt_env(database: Path) -> dict[str, str]:
    """Environment entries that point the dbt profile at ``database``."""
    return {DB_ENV: str(Path(database).resolve())}


def run_dbt(args: Sequence[str], database: Path, project_dir: Path | None = None) -> Any:
    """Run one dbt command in this process against ``database``; returns dbt's result.

    Raises:
        RuntimeError: dbt failed (a model error or a failing test); the message names
            the failing nodes.
    """
    from dbt.cli.main import dbtRunner

    project_dir = project_dir or dbt_project_dir()
    where = ["--project-dir", str(project_dir), "--profiles-dir", str(project_dir)]
    previous = os.environ.get(DB_ENV)
    os.environ.update(dbt_env(database))
    try:
        manifest = _parsed_manifest(project_dir, where)
        result = dbtRunner(manifest=manifest).invoke([*args, *where])
    finally:
        _release_duckdb()
        if previous is None:
            os.environ.pop(DB_ENV, None)
        else:
            os.environ[DB_ENV] = previous
    if not result.success:
        failed = []
        for node in getattr(result.result, "results", None) or []:
            if str(node.status) in ("error", "fail"):
                failed.append(f"{node.node.name}: {node.message}")
        detail = "; ".join(failed) or str(result.exception)
        raise RuntimeError(f"dbt {' '.join(args)} failed: {detail}")
    return result


_MANIFESTS: dict[Path, Any] = {}


def parse_project(project_dir: Path | None = None) -> Any:
    """``dbt parse`` (writes ``target/manifest.json``); returns the parsed manifest."""
    from dbt.cli.main import dbtRunner

    project_dir = project_dir or dbt_project_dir()
    where = ["--project-dir", str(project_dir), "--profiles-dir", str(project_dir)]
    parsed = dbtRunner().invoke(["parse", "--quiet", *where])
    if not parsed.success:
        raise RuntimeError(f"dbt parse failed in {project_dir}: {parsed.exception}")
    return parsed.result


def dbt_executable() -> str:
    """The ``dbt`` command installed beside this Python (PATH may not hold the venv)."""
    beside = Path(sys.executable).parent / "dbt"
    return str(beside) if beside.exists() else "dbt"


def _parsed_manifest(project_dir: Path, where: list[str]) -> Any:
    """The project's parsed manifest, parsed once per process (dbt's fixed cost)."""
    if project_dir not in _MANIFESTS:
        _MANIFESTS[project_dir] = parse_project(project_dir)
    return _MANIFESTS[project_dir]


def _release_duckdb() -> None:
    """Close the DuckDB handle dbt-duckdb keeps for the life of the process, so that the
    file can be opened again (read-only, or by another process) after dbt returns."""
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager

    env = DuckDBConnectionManager._ENV  # the adapter's one cached environment
    if env is not None:
        env.close()
    DuckDBConnectionManager.close_all_connections()


def query(database: Path, sql: str) -> pa.Table:
    """Run ``sql`` on the catalog read-only; the result as an Arrow table."""
    with duckdb.connect(str(database), read_only=True) as con:
        return con.sql(sql).to_arrow_table()
