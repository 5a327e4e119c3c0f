"""Landing-zone sensor: registers complete captures as partitions and requests their runs.

Each capture goes to its capture set (`ego_assets.defs.partitions`): registered in that
set's partitions definition and run by that set's ``capture_job`` (``capture_job_s001``
...), so one tick costs one insert per set it touches, whatever the number registered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import dagster as dg

from ego_assets.capture_sets import PER_CAPTURE_ASSETS
from ego_assets.defs.partitions import (
    CAPTURE_JOB,
    SET0,
    CaptureSet,
    all_sets,
    capture_run_request,
    register_captures,
    resolve_sets,
)
from ego_assets.defs.resources import StorageResource
from ego_assets.landing import scan_landing

# Captures registered per tick: keeps each tick far below the 60 s sensor timeout.
MAX_CAPTURES_PER_TICK = 200
# Seconds between ticks; deployments (and the end-to-end test) set EGO_SENSOR_INTERVAL_S,
# read when the definitions load. The daemon's sensor loop itself wakes every ~5 s.
SENSOR_INTERVAL_ENV = "EGO_SENSOR_INTERVAL_S"
DEFAULT_SENSOR_INTERVAL_S = 30


@functools.cache  # one definition per set and executor (the module-level one is set 0's)
def build_capture_job(
    cs: CaptureSet, executor_def: dg.ExecutorDefinition | None = None
) -> dg.UnresolvedAssetJobDefinition:
    """Set ``cs``'s ``capture_job``: everything per capture for one of its captures, on
    ``executor_def`` (None: the code location's)."""
    return dg.define_asset_job(
        cs.job_name(CAPTURE_JOB),
        selection=dg.AssetSelection.assets(*(cs.key(name) for name in PER_CAPTURE_ASSETS)),
        description="Everything per capture, from the raw copy to the checked outputs and exports.",
        executor_def=executor_def,
    )


capture_job = build_capture_job(SET0)


def sensor_interval_s(environ: Mapping[str, str]) -> int:
    """Tick interval from ``EGO_SENSOR_INTERVAL_S`` (whole seconds >= 1), default 30."""
    text = environ.get(SENSOR_INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_SENSOR_INTERVAL_S
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{SENSOR_INTERVAL_ENV} must be a whole number of seconds >= 1: {text!r}")
    return int(text)


def build_landing_sensor(
    interval_s: int = DEFAULT_SENSOR_INTERVAL_S,
    sets: int | None = None,
    jobs: list[dg.UnresolvedAssetJobDefinition] | None = None,
) -> dg.SensorDefinition:
    """`landing_sensor` ticking every ``interval_s`` seconds over ``sets`` capture sets
    (default ``EGO_CAPTURE_SETS``), requesting runs of each set's ``capture_job``
    (``jobs``: those jobs, default built here)."""
    n = resolve_sets(sets)
    targets = jobs if jobs is not None else [build_capture_job(cs) for cs in all_sets(n)]
    return dg.sensor(
        name="landing_sensor",
        jobs=targets,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Watches the landing zone: every complete capture (marker written) becomes a "
            "partition of its capture set (`captures`, `captures_s001`, ...; registered by "
            "the sensor in one bulk insert per set) and one run of its set's capture_job "
            "(run key = capture key, so a capture already run, e.g. by `make demo`, is never "
            "run again)."
        ),
    )(_landing_sensor_over(n))


def _landing_sensor_over(sets: int) -> Callable[..., dg.SensorResult | dg.SkipReason]:
    def landing_sensor(
        context: dg.SensorEvaluationContext, storage: StorageResource
    ) -> dg.SensorResult | dg.SkipReason:
        return _landing_sensor(context, storage, sets)

    return landing_sensor


def _landing_sensor(
    context: dg.SensorEvaluationContext, storage: StorageResource, sets: int
) -> dg.SensorResult | dg.SkipReason:
    """New complete captures in the landing zone -> partitions + one run request each.

    The daemon then drops requests whose run key already ran (one query over the new keys).
    """
    scan = scan_landing(storage.get_storage(), context.cursor, MAX_CAPTURES_PER_TICK)
    for name in scan.rejected:
        context.log.warning(f"landing folder {name!r} is not a valid capture key; skipped")
    if not scan.keys:
        if scan.cursor != context.cursor:
            context.update_cursor(scan.cursor)
        return dg.SkipReason("no new complete captures")
    # O(new captures) in instance queries, whatever the number registered: one bulk insert
    # per set here, and run requests that need no per-key existence check (see
    # `register_captures`).
    keys = register_captures(context.instance, scan.keys, sets)
    context.log.info(f"registered {len(keys)} captures; {scan.pending} left for the next tick")
    return dg.SensorResult(
        run_requests=[capture_run_request(k, sets) for k in keys],
        cursor=scan.cursor,
    )


landing_sensor = build_landing_sensor(sets=1)
