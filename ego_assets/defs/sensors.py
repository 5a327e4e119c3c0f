"""Landing-zone sensor: registers complete captures as partitions and requests their runs."""

import dagster as dg

from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.partitions import captures_partitions
from ego_assets.defs.quality import quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.landing import scan_landing

# Captures registered per tick: keeps each tick far below the 60 s sensor timeout.
MAX_CAPTURES_PER_TICK = 200

capture_job = dg.define_asset_job(
    "capture_job",
    selection=dg.AssetSelection.assets(raw_capture, trajectory, quality_report),
    description="Everything per capture, from the raw copy to the checked outputs.",
)


@dg.sensor(
    job=capture_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING
)
def landing_sensor(
    context: dg.SensorEvaluationContext, storage: StorageResource
) -> dg.SensorResult | dg.SkipReason:
    """New complete captures in the landing zone -> partitions + one run request each."""
    scan = scan_landing(storage.get_storage(), context.cursor, MAX_CAPTURES_PER_TICK)
    for name in scan.rejected:
        context.log.warning(f"landing folder {name!r} is not a valid capture key; skipped")
    if not scan.keys:
        if scan.cursor != context.cursor:
            context.update_cursor(scan.cursor)
        return dg.SkipReason("no new complete captures")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=k, run_key=k) for k in scan.keys],
        dynamic_partitions_requests=[captures_partitions.build_add_request(list(scan.keys))],
        cursor=scan.cursor,
    )
