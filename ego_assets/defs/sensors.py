"""Landing-zone sensor: registers complete captures as partitions and requests their runs."""

from collections.abc import Mapping

import dagster as dg

from ego_assets.defs.ceres import ceres_episode
from ego_assets.defs.egosmith import egosmith_shards
from ego_assets.defs.holos import holos_hdf5
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.partitions import capture_run_request, register_captures
from ego_assets.defs.quality import quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.landing import scan_landing

# Captures registered per tick: keeps each tick far below the 60 s sensor timeout.
MAX_CAPTURES_PER_TICK = 200
# Seconds between ticks; deployments (and the end-to-end test) set EGO_SENSOR_INTERVAL_S,
# read when the definitions load. The daemon's sensor loop itself wakes every ~5 s.
SENSOR_INTERVAL_ENV = "EGO_SENSOR_INTERVAL_S"
DEFAULT_SENSOR_INTERVAL_S = 30

# Every per-capture asset, all three exporters included (a landed capture is exported to
# Holos HDF5, EgoSmith and CERES); the unpartitioned aggregates run in `aggregates_job`.
capture_job = dg.define_asset_job(
    "capture_job",
    selection=dg.AssetSelection.assets(
        raw_capture, trajectory, quality_report, holos_hdf5, egosmith_shards, ceres_episode
    ),
    description="Everything per capture, from the raw copy to the checked outputs and exports.",
)


def sensor_interval_s(environ: Mapping[str, str]) -> int:
    """Tick interval from ``EGO_SENSOR_INTERVAL_S`` (whole seconds >= 1), default 30."""
    text = environ.get(SENSOR_INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_SENSOR_INTERVAL_S
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{SENSOR_INTERVAL_ENV} must be a whole number of seconds >= 1: {text!r}")
    return int(text)


def build_landing_sensor(interval_s: int = DEFAULT_SENSOR_INTERVAL_S) -> dg.SensorDefinition:
    """`landing_sensor` ticking every ``interval_s`` seconds."""
    return dg.sensor(
        name="landing_sensor",
        job=capture_job,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Watches the landing zone: every complete capture (marker written) becomes a "
            "partition of `captures` (registered by the sensor in one bulk insert) and one "
            "capture_job run (run key = capture key, so a capture already run, e.g. by "
            "`make demo`, is never run again)."
        ),
    )(_landing_sensor)


def _landing_sensor(
    context: dg.SensorEvaluationContext, storage: StorageResource
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
    # here, and run requests that need no per-key existence check (see `register_captures`).
    keys = register_captures(context.instance, scan.keys)
    context.log.info(f"registered {len(keys)} captures; {scan.pending} left for the next tick")
    return dg.SensorResult(
        run_requests=[capture_run_request(k, capture_job.name) for k in keys],
        cursor=scan.cursor,
    )


landing_sensor = build_landing_sensor()
