"""Where the catalog's DuckDB file lives, how dbt is pointed at it, and how it is queried.

The catalog is one embedded DuckDB file, ``catalog/warehouse/catalog.duckdb`` under the
data root. A writer (staging, the dbt build) never writes that file in place: it works on
a copy and swaps the copy in whole when its block succeeds (`catalog_database`), so a
process killed at any point leaves the old catalog or the new one, and readers never wait
for a writer.

* Local root: writers take the catalog's writer lock (``<root>/.locks/catalog/warehouse/
  catalog.duckdb.lock``, across processes and platforms sharing the root; bounded by
  ``$EGO_CATALOG_WAIT_S``, default 600 s, then `CatalogBusy`), copy the file into a hidden
  working folder beside it (``.catalog.duckdb.<random>.tmp/catalog.duckdb``: same name,
  so dbt sees the same DuckDB catalog), checkpoint it when done and rename it onto the
  published name. Working folders of killed writers are removed by the next writer.
* ``s3://`` root (DuckDB cannot write a file on S3): the copy is a download, published by
  one PUT of the whole file (an object is replaced whole). Writers of one deployment are
  serialized by the Dagster single-writer pool; there is no lock across deployments on S3.

A published file that DuckDB cannot open is not copied: the writer starts from an empty
file, and staging then stages every item again (a rebuild). `catalog_problem` tells a
reader whether the file can answer queries (every model built).

dbt (``dbt/`` at the repository root) reads the file's path from the environment
variable ``EGO_CATALOG_DB`` (`dbt_env`). `run_dbt` runs dbt in this process through
dbtRunner; Dagster runs it through dagster-dbt instead (ego_assets/defs/catalog.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ego_assets.storage import LockTimeout, Storage
from ego_assets.trajectory.store import STAGING_SUFFIX, remove_leftovers

log = logging.getLogger(__name__)

WAREHOUSE_STAGE = "catalog"
WAREHOUSE_KEY = "warehouse"
DATABASE_FILE = "catalog.duckdb"
DB_ENV = "EGO_CATALOG_DB"
PROJECT_ENV = "EGO_DBT_PROJECT_DIR"
WAIT_ENV = "EGO_CATALOG_WAIT_S"
DEFAULT_WAIT_S = 600.0


class CatalogBusy(RuntimeError):
    """Another writer held the catalog for longer than the bounded wait."""


class DbtFailed(RuntimeError):
    """A dbt command failed (a model error or a failing test); the message names them."""


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

    ``write``: a working copy (an empty path when none is published yet, or the published
    one is unreadable) that replaces the published file when the block succeeds; the
    block raising publishes nothing. Otherwise the published file (local; it may not
    exist) or a downloaded copy (S3).

    Raises:
        CatalogBusy: (local, ``write``) another writer held the catalog longer than
            ``$EGO_CATALOG_WAIT_S`` seconds.
    """
    location = published_location(storage)
    if storage.is_local and not write:
        yield Path(location.path)
        return
    if storage.is_local:
        published = Path(location.path)
        published.parent.mkdir(parents=True, exist_ok=True)
        with _writer_lock(storage, published):
            remove_leftovers(published)  # working folders of killed writers
            work_dir = Path(
                tempfile.mkdtemp(
                    prefix=f".{DATABASE_FILE}.", suffix=STAGING_SUFFIX, dir=published.parent
                )
            )
            try:
                work = work_dir / DATABASE_FILE
                if published.exists():
                    shutil.copyfile(published, work)
                    _usable_or_removed(work, published)
                yield work
                if work.exists():  # else the block wrote nothing: nothing to publish
                    _seal(work)
                    Path(f"{published}.wal").unlink(missing_ok=True)  # an in-place writer's
                    os.replace(work, published)
            finally:
                shutil.rmtree(work_dir, ignore_errors=True)
        return
    with tempfile.TemporaryDirectory(prefix="ego-catalog-") as tmp:
        path = Path(tmp) / DATABASE_FILE
        if location.exists():
            location.fs.get_file(location.path, str(path))
            if write:
                _usable_or_removed(path, location)
        yield path
        if write and path.exists():
            _seal(path)
            location.fs.put_file(str(path), location.path)  # one object: old or new, whole
            location.fs.invalidate_cache(location.parent.path)


@contextmanager
def _writer_lock(storage: Storage, published: Path) -> Iterator[None]:
    """The catalog file's writer lock (`Storage.writer_lock`), bounded (``$EGO_CATALOG_WAIT_S``)."""
    wait_s = float(os.environ.get(WAIT_ENV) or DEFAULT_WAIT_S)
    with ExitStack() as held:
        try:
            held.enter_context(storage.writer_lock(published, timeout_s=wait_s))
        except LockTimeout as busy:
            raise CatalogBusy(
                f"the catalog {published} is being written by {busy.holder}; gave up after "
                f"waiting {wait_s:g} s (${WAIT_ENV}): run again when that writer has finished"
            ) from None
        yield


def _usable_or_removed(copy: Path, published: Any) -> None:
    """Keep the copy ``copy`` of the published catalog when DuckDB opens it; else delete
    it (the writer then starts from an empty file: everything is staged again)."""
    try:
        with duckdb.connect(str(copy)) as con:
            con.execute("select count(*) from duckdb_tables()").fetchall()
    except duckdb.Error as exc:
        log.warning("catalog %s is unreadable (%s): rebuilding it", published, _first_line(exc))
        copy.unlink(missing_ok=True)
        Path(f"{copy}.wal").unlink(missing_ok=True)


def _seal(database: Path) -> None:
    """Make the file ``database`` alone hold every commit: DuckDB checkpoints when its
    last connection closes; a write-ahead log left beside it (a writer that did not close,
    e.g. a dbt subprocess that was stopped) is checkpointed here."""
    if not Path(f"{database}.wal").exists():
        return
    with duckdb.connect(str(database)) as con:
        con.execute("checkpoint")
    if Path(f"{database}.wal").exists():
        raise RuntimeError(f"{database}.wal remains after a checkpoint; not publishing")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def model_names(project_dir: Path | None = None) -> list[str]:
    """The dbt models (one relation each in the catalog file)."""
    return sorted(p.stem for p in ((project_dir or dbt_project_dir()) / "models").glob("*.sql"))


def catalog_problem(database: Path) -> str | None:
    """Why ``database`` cannot answer the catalog's queries; None when every model is there."""
    if not Path(database).exists():
        return "no catalog yet"
    try:
        with duckdb.connect(str(database), read_only=True) as con:
            present = {
                name
                for (name,) in con.sql(
                    "select table_name from duckdb_tables() where schema_name = 'main' "
                    "union all select view_name from duckdb_views() "
                    "where schema_name = 'main' and not internal"
                ).fetchall()
            }
    except duckdb.Error as exc:
        return f"unreadable: {_first_line(exc)}"
    missing = [m for m in model_names() if m not in present]
    return f"models not built yet: {', '.join(missing)}" if missing else None


def published_problem(storage: Storage) -> str | None:
    """`catalog_problem` of the published catalog of ``storage``."""
    with catalog_database(storage, write=False) as database:
        return catalog_problem(database)


def dbt_env(database: Path) -> dict[str, str]:
    """Environment entries that point the dbt profile at ``database``."""
    return {DB_ENV: str(Path(database).resolve())}


def run_dbt(args: Sequence[str], database: Path, project_dir: Path | None = None) -> Any:
    """Run one dbt command in this process against ``database``; returns dbt's result.

    Raises:
        DbtFailed: dbt failed (a model error or a failing test); the message names the
            failing nodes.
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
        raise DbtFailed(f"dbt {' '.join(args)} failed: {detail}")
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
