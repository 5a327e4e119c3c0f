"""The dataset catalog in Dagster: staging asset, dbt models as assets, dbt tests as checks.

* ``catalog_sources`` (Python multi-asset) stages every episode's rows into the catalog's
  DuckDB file (`ego_assets.catalog.sources.stage_rows`) in one step. It has one asset per
  staged table, keyed ``platform/<table>`` as dagster-dbt keys the dbt sources, each
  downstream (`AllPartitionMapping`) of the per-capture asset it reads: raw_capture,
  trajectory, quality_report, and each exporter that is deployed.
* ``catalog_models`` (`dagster_dbt.dbt_assets`): one asset per dbt model, downstream of
  the staged tables it selects from; each dbt test on a model is an asset check of that
  model. The body runs ``dbt build``.

Both are in the ``aggregates`` group, so the nightly schedule builds them, and both hold
the single-writer pool: DuckDB has one writer per file.
"""

import os
from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
from dagster_dbt import DbtCliResource, DbtProject, dbt_assets

from ego_assets.catalog.releases import RELEASE_TABLES
from ego_assets.catalog.sources import BOOKKEEPING_TABLES, SCHEMA, sources, stage_rows
from ego_assets.catalog.warehouse import (
    DB_ENV,
    catalog_database,
    dbt_executable,
    dbt_project_dir,
    parse_project,
)
from ego_assets.defs.aggregates import AGGREGATES_GROUP
from ego_assets.defs.pools import SINGLE_WRITER_POOL
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry
from ego_assets.storage import exclusive_lock

CATALOG_SOURCES_VERSION = "catalog-sources-1"
# Staged table -> the per-capture asset whose files it reads (receipts: the exporter).
SOURCE_UPSTREAM = {
    "raw_manifests": "raw_capture",
    "trajectory_headers": "trajectory",
    "quality_rows": "quality_report",
    "quality_gates": "quality_report",
}
STAGED_TABLES = (*(s.table for s in sources()), *RELEASE_TABLES, *BOOKKEEPING_TABLES)

dbt_project = DbtProject(project_dir=dbt_project_dir(), profiles_dir=dbt_project_dir())


def _manifest_is_current(project: DbtProject) -> bool:
    """Whether dbt's manifest exists and is newer than every file of the project."""
    manifest = project.manifest_path
    if not manifest.exists():
        return False
    built = manifest.stat().st_mtime
    folders = ("models", "macros", "tests")
    files = [p for f in folders for p in (project.project_dir / f).rglob("*") if p.is_file()]
    files.append(project.project_dir / "dbt_project.yml")
    return all(p.stat().st_mtime <= built for p in files)


def _prepare(project: DbtProject) -> None:
    """Parse the project when its manifest is missing or older than its files (a fresh
    clone, edited models); one process at a time (test workers load this together)."""
    if _manifest_is_current(project):
        return
    with exclusive_lock(project.project_dir / "target" / ".parse.lock"):
        if not _manifest_is_current(project):
            parse_project(project.project_dir)


_prepare(dbt_project)


def exporter_code_versions(assets: Sequence[Any]) -> dict[str, str | None]:
    """Export format -> code version of its deployed exporter asset (absent: not deployed)."""
    versions: dict[str, str | None] = {}
    for asset in assets:
        if not isinstance(asset, dg.AssetsDefinition):
            continue
        for key in asset.keys:
            name = key.to_user_string()
            if name in registry.names():
                versions[name] = asset.code_versions_by_key.get(key)
    return versions


def _upstream_of(table: str) -> str | None:
    """The per-capture asset a staged table is read from (None: bookkeeping tables)."""
    if table.startswith("export_receipts_"):
        return table.removeprefix("export_receipts_")
    return SOURCE_UPSTREAM.get(table)


def build_catalog_sources(assets: Sequence[Any]) -> dg.AssetsDefinition:
    """``catalog_sources``: one asset per staged table, each downstream of the per-capture
    asset it reads among ``assets`` (an exporter that is not deployed: no dependency)."""
    code_versions = exporter_code_versions(assets)
    # per-capture asset name -> its key in every capture set (``trajectory``,
    # ``s001/trajectory``, ...): a staged table reads the files of all of them
    present: dict[str, list[dg.AssetKey]] = {}
    for asset in assets:
        if isinstance(asset, dg.AssetsDefinition):
            for key in asset.keys:
                present.setdefault(key.path[-1], []).append(key)
    specs = []
    for table in STAGED_TABLES:
        upstream = _upstream_of(table)
        deps = [
            dg.AssetDep(key, partition_mapping=dg.AllPartitionMapping())
            for key in present.get(upstream or "", [])
        ]
        specs.append(
            dg.AssetSpec(
                dg.AssetKey([SCHEMA, table]),
                deps=deps,
                group_name=AGGREGATES_GROUP,
                kinds={"python", "duckdb"},
                code_version=CATALOG_SOURCES_VERSION,
                description=f"Staged catalog rows: {SCHEMA}.{table} in the catalog DuckDB file.",
            )
        )

    @dg.multi_asset(name="catalog_sources", specs=specs, pool=SINGLE_WRITER_POOL)
    def catalog_sources(storage: StorageResource) -> Iterator[dg.MaterializeResult]:
        """Stage what changed since the last run (ego_assets.catalog.sources)."""
        with catalog_database(storage.get_storage(), write=True) as database:
            summary = stage_rows(storage.get_storage(), database, code_versions)
        for table in STAGED_TABLES:
            metadata: dict[str, Any] = {
                "batch": summary.batch if summary.batch is not None else "unchanged",
                "changed": summary.changed.get(table, 0),
                "removed": summary.removed.get(table, 0),
            }
            if table == "export_formats":
                metadata["changed"] = summary.formats_changed
                metadata["code_versions"] = dg.MetadataValue.json(code_versions)
            yield dg.MaterializeResult(asset_key=dg.AssetKey([SCHEMA, table]), metadata=metadata)

    return catalog_sources


@dbt_assets(
    manifest=dbt_project.manifest_path,
    project=dbt_project,
    name="catalog_models",
    pool=SINGLE_WRITER_POOL,
)
def catalog_models(
    context: dg.AssetExecutionContext, dbt: DbtCliResource, storage: StorageResource
) -> Iterator[Any]:
    """``dbt build`` of the selected models (and their tests) on the catalog file."""
    with catalog_database(storage.get_storage(), write=True) as database:
        previous = os.environ.get(DB_ENV)
        os.environ[DB_ENV] = str(database)  # dagster-dbt passes os.environ to dbt
        try:
            yield from dbt.cli(["build"], context=context).stream()
        finally:
            if previous is None:
                os.environ.pop(DB_ENV, None)
            else:
                os.environ[DB_ENV] = previous


def catalog_assets(assets: Sequence[Any]) -> list[Any]:
    """The catalog's assets for a code location whose other assets are ``assets``."""
    return [build_catalog_sources(assets), catalog_models]


CATALOG_RESOURCES = {
    "dbt": DbtCliResource(
        project_dir=dbt_project,
        profiles_dir=str(dbt_project_dir()),
        dbt_executable=dbt_executable(),
    )
}
