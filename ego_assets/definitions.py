"""Dagster entry point of the capture code location (`ego_assets`): `defs`.

`workspace.yaml` loads two code locations: this one (per-capture assets, capture and export
jobs, sensors: what every capture run loads) and `ego_assets.catalog_definitions`
(`ego_assets_catalog`: the aggregates, the dbt catalog, their job and schedule). This
module imports neither dbt nor the catalog; `build_defs` (tests, the demo) merges both
into one `Definitions` unless asked for the capture part only.
"""

from __future__ import annotations

import os

import dagster as dg

from ego_assets.defs.automation import build_stale_code_sensor
from ego_assets.defs.capture_location import build_assets, storage_from_env
from ego_assets.defs.episodes import apply_run_worker_env
from ego_assets.defs.executors import executor_from_env
from ego_assets.defs.imports import ImportSource, build_import_sensor, import_sources_from_env
from ego_assets.defs.landing_inline import DEFAULT_INLINE_MAX_S, inline_max_s
from ego_assets.defs.partitions import (
    DEFAULT_CAPTURES_PER_RUN,
    all_sets,
    captures_per_run_from_env,
    configured_sets,
)
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.sensors import (
    DEFAULT_SENSOR_INTERVAL_S,
    build_capture_job,
    build_landing_sensor,
    sensor_interval_s,
)

# The per-capture assets of ``EGO_CAPTURE_SETS`` (read once, at load).
ASSETS, _ = build_assets(configured_sets())

# read by Dagster in whichever process executes a run (see RUN_WORKER_ENV)
apply_run_worker_env(os.environ)


def build_defs(
    storage: StorageResource,
    sensor_interval: int = DEFAULT_SENSOR_INTERVAL_S,
    executor: dg.ExecutorDefinition | None = None,
    sets: int | None = None,
    import_sources: tuple[ImportSource, ...] = (),
    catalog: bool = True,
    captures_per_run: int = DEFAULT_CAPTURES_PER_RUN,
    sensor_inline_s: float = DEFAULT_INLINE_MAX_S,
) -> dg.Definitions:
    """Definitions with the given storage (tests and the demo pass their own) over
    ``sets`` capture sets (default ``EGO_CAPTURE_SETS``), with one import sensor per
    ``import_sources`` entry (`ego_assets.defs.imports`); with ``catalog``, merged with
    the catalog code location's (`ego_assets.catalog_definitions`: the whole workspace
    in one process, as the demo runs it); the landing sensor packs up to
    ``captures_per_run`` captures of a tick per run and takes a lone capture of at most
    ``sensor_inline_s`` seconds through every asset itself (0: never)."""
    n = configured_sets() if sets is None else sets
    # Without a deployment executor, capture and export runs execute their steps in the
    # run worker: the multiprocess default would load the code location again for every
    # step. The builders are cached per set and format, so this costs little per call.
    capture_executor = dg.in_process_executor if executor is None else None
    assets, export_jobs = build_assets(n, capture_executor)
    capture_jobs = [build_capture_job(cs, capture_executor) for cs in all_sets(n)]
    capture = dg.Definitions(
        assets=assets,
        jobs=[*capture_jobs, *export_jobs],
        sensors=[
            build_landing_sensor(
                sensor_interval, n, capture_jobs, captures_per_run, sensor_inline_s
            ),
            build_stale_code_sensor(n),
            *(build_import_sensor(source) for source in import_sources),
        ],
        resources={"storage": storage},
        executor=executor,
    )
    if not catalog:
        return capture
    from ego_assets.catalog_definitions import build_catalog_defs  # dbt: only when asked

    return dg.Definitions.merge(capture, build_catalog_defs(storage, n, assets))


@dg.definitions
def defs() -> dg.Definitions:
    """Storage from EGO_DATA_DIR / EGO_LANDING_DIR / EGO_S3_ENDPOINT_URL, sensor interval from
    EGO_SENSOR_INTERVAL_S, capture sets from EGO_CAPTURE_SETS, captures per packed run from
    EGO_CAPTURES_PER_RUN, the landing sensor's inline captures from EGO_SENSOR_INLINE_MAX_S,
    import sources from EGO_IMPORT_SOURCES (all read at load); no
    catalog (its own code location)."""
    return build_defs(
        storage_from_env(os.environ),
        sensor_interval_s(os.environ),
        executor_from_env(os.environ),
        import_sources=import_sources_from_env(os.environ),
        catalog=False,
        captures_per_run=captures_per_run_from_env(os.environ),
        sensor_inline_s=inline_max_s(os.environ),
    )
