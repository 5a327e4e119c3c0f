"""Dagster entry point: `dagster dev -w workspace.yaml` loads `defs`."""

from __future__ import annotations

import os
from typing import Any

import dagster as dg

from ego_assets.defs.aggregates import build_quality_catalog
from ego_assets.defs.automation import build_stale_code_sensor
from ego_assets.defs.catalog import CATALOG_RESOURCES, catalog_assets
from ego_assets.defs.ceres import build_ceres_dataset, build_ceres_episode
from ego_assets.defs.egosmith import build_egosmith_dataset, build_egosmith_shards
from ego_assets.defs.episodes import apply_run_worker_env
from ego_assets.defs.executors import executor_from_env
from ego_assets.defs.exports import build_export_jobs
from ego_assets.defs.holos import build_holos_hdf5
from ego_assets.defs.imports import ImportSource, build_import_sensor, import_sources_from_env
from ego_assets.defs.ingest import build_raw_capture, build_trajectory
from ego_assets.defs.partitions import CaptureSet, all_sets, configured_sets
from ego_assets.defs.quality import build_quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.schedules import aggregates_job, nightly_aggregates
from ego_assets.defs.sensors import (
    DEFAULT_SENSOR_INTERVAL_S,
    build_capture_job,
    build_landing_sensor,
    sensor_interval_s,
)
from ego_assets.exports import registry


def per_capture_assets(cs: CaptureSet) -> list[dg.AssetsDefinition]:
    """One capture set's per-capture assets, in pipeline order (exporters last)."""
    return [
        build_raw_capture(cs),
        build_trajectory(cs),
        build_quality_report(cs),
        build_holos_hdf5(cs),
        build_egosmith_shards(cs),
        build_ceres_episode(cs),
    ]


def _exporters(assets: list[dg.AssetsDefinition]) -> list[dg.AssetsDefinition]:
    """One set's exporter assets, in registry order."""
    by_name = {a.key.path[-1]: a for a in assets}
    return [by_name[name] for name in registry.names()]


def build_assets(sets: int) -> tuple[list[Any], list[dg.UnresolvedAssetJobDefinition]]:
    """Every asset of a code location with ``sets`` capture sets, and its export jobs
    (one ``export_<format>`` job per exporter and set)."""
    per_set = {cs: per_capture_assets(cs) for cs in all_sets(sets)}
    capture_sets = tuple(per_set)
    assets: list[Any] = [a for set_assets in per_set.values() for a in set_assets]
    assets += [
        build_quality_catalog(capture_sets),
        build_egosmith_dataset(capture_sets),
        build_ceres_dataset(capture_sets),
    ]
    assets += catalog_assets(assets)  # the dataset catalog reads every asset above
    # One on-demand job per exporter (launched by the export API, `ego_assets.api`).
    export_jobs = [j for a in per_set.values() for j in build_export_jobs(_exporters(a))]
    return assets, export_jobs


# The layout of ``EGO_CAPTURE_SETS`` (read once, at load).
ASSETS, EXPORT_JOBS = build_assets(configured_sets())

# read by Dagster in whichever process executes a run (see RUN_WORKER_ENV)
apply_run_worker_env(os.environ)


def build_defs(
    storage: StorageResource,
    sensor_interval: int = DEFAULT_SENSOR_INTERVAL_S,
    executor: dg.ExecutorDefinition | None = None,
    sets: int | None = None,
    import_sources: tuple[ImportSource, ...] = (),
) -> dg.Definitions:
    """Definitions with the given storage (tests and the demo pass their own) over
    ``sets`` capture sets (default ``EGO_CAPTURE_SETS``), with one import sensor per
    ``import_sources`` entry (`ego_assets.defs.imports`)."""
    n = configured_sets() if sets is None else sets
    assets, export_jobs = (ASSETS, EXPORT_JOBS) if n == configured_sets() else build_assets(n)
    capture_jobs = [build_capture_job(cs) for cs in all_sets(n)]
    return dg.Definitions(
        assets=assets,
        jobs=[*capture_jobs, aggregates_job, *export_jobs],
        schedules=[nightly_aggregates],
        sensors=[
            build_landing_sensor(sensor_interval, n, capture_jobs),
            build_stale_code_sensor(n),
            *(build_import_sensor(source) for source in import_sources),
        ],
        resources={"storage": storage, **CATALOG_RESOURCES},
        executor=executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Storage from EGO_DATA_DIR / EGO_LANDING_DIR / EGO_S3_ENDPOINT_URL, sensor interval from
    EGO_SENSOR_INTERVAL_S, capture sets from EGO_CAPTURE_SETS, import sources from
    EGO_IMPORT_SOURCES (all read at load)."""
    storage = StorageResource(
        root=os.environ.get("EGO_DATA_DIR", "data"),
        landing=os.environ.get("EGO_LANDING_DIR") or None,
        endpoint_url=os.environ.get("EGO_S3_ENDPOINT_URL") or None,
    )
    return build_defs(
        storage,
        sensor_interval_s(os.environ),
        executor_from_env(os.environ),
        import_sources=import_sources_from_env(os.environ),
    )
