"""Dagster entry point: `dagster dev -w workspace.yaml` loads `defs`."""

from __future__ import annotations

import os

import dagster as dg

from ego_assets.defs.aggregates import AGGREGATES
from ego_assets.defs.automation import stale_code_sensor
from ego_assets.defs.catalog import CATALOG_RESOURCES, catalog_assets
from ego_assets.defs.ceres import CERES_ASSETS, ceres_episode
from ego_assets.defs.egosmith import EGOSMITH_ASSETS, egosmith_shards
from ego_assets.defs.episodes import apply_run_worker_env
from ego_assets.defs.executors import executor_from_env
from ego_assets.defs.exports import build_export_jobs
from ego_assets.defs.holos import holos_hdf5
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.quality import quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.schedules import aggregates_job, nightly_aggregates
from ego_assets.defs.sensors import (
    DEFAULT_SENSOR_INTERVAL_S,
    build_landing_sensor,
    capture_job,
    sensor_interval_s,
)

ASSETS = [
    raw_capture,
    trajectory,
    quality_report,
    holos_hdf5,
    *AGGREGATES,
    *EGOSMITH_ASSETS,
    *CERES_ASSETS,
]
ASSETS += catalog_assets(ASSETS)  # the dataset catalog reads every asset above
# One on-demand job per exporter (launched by the export API, `ego_assets.api`).
EXPORT_JOBS = build_export_jobs([holos_hdf5, ceres_episode, egosmith_shards])

# read by Dagster in whichever process executes a run (see RUN_WORKER_ENV)
apply_run_worker_env(os.environ)


def build_defs(
    storage: StorageResource,
    sensor_interval: int = DEFAULT_SENSOR_INTERVAL_S,
    executor: dg.ExecutorDefinition | None = None,
) -> dg.Definitions:
    """Definitions with the given storage (tests and the demo pass their own)."""
    return dg.Definitions(
        assets=ASSETS,
        jobs=[capture_job, aggregates_job, *EXPORT_JOBS],
        schedules=[nightly_aggregates],
        sensors=[build_landing_sensor(sensor_interval), stale_code_sensor],
        resources={"storage": storage, **CATALOG_RESOURCES},
        executor=executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Storage from EGO_DATA_DIR / EGO_LANDING_DIR / EGO_S3_ENDPOINT_URL, sensor interval from
    EGO_SENSOR_INTERVAL_S (all read at load)."""
    storage = StorageResource(
        root=os.environ.get("EGO_DATA_DIR", "data"),
        landing=os.environ.get("EGO_LANDING_DIR") or None,
        endpoint_url=os.environ.get("EGO_S3_ENDPOINT_URL") or None,
    )
    return build_defs(storage, sensor_interval_s(os.environ), executor_from_env(os.environ))
