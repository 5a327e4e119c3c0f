"""Staleness-driven re-runs: when a per-capture step's code changes, redo what it made.

Convention (every per-capture asset, exporters included):

* ``code_version`` comes from one constant in the module that implements the step
  (``raw-1`` in ingest, `ego_assets.pipeline.NORMALIZER_VERSION`, the quality report +
  thresholds version; an exporter uses ``f"{EXPORTER}-{FORMAT_SPEC_VERSION}"`` from its
  own module). Bump it exactly when the step's output for unchanged input changes.
* data versions are content hashes (raw manifest SHA-256 -> ``normalize-N:<sha>`` ->
  ``<quality version>:<trajectory version>``), so unchanged inputs are not recomputed:
  the pipeline compares them with the stored lineage and reuses the stored output.

`STALE_CODE_CONDITION` requests a capture's partition when the asset's code version
changed (Dagster evaluates this per asset, so every partition is a candidate) and the
partition has not been requested or updated since, it was materialized before (missing
ones are not stale, they are new work for the landing sensor), none of its upstream
partitions is missing, and no run is materializing it right now.

`stale_code_sensor` evaluates it. It is RUNNING by default: it fires only on a real
code-version change (its first evaluation only records the current versions, so turning
it on never re-runs anything), and with ``emit_backfills=True`` all partitions requested
in one tick become ONE asset backfill that the daemon splits into ranged runs of
`BACKFILL_CHUNK` captures (`BackfillPolicy.multi_run`), never a run per partition. A
10,000-capture re-export after a bump is therefore ~400 runs, throttled by the
``dagster/backfill`` run concurrency limit of the instance.
"""

from collections.abc import Sequence

import dagster as dg

from ego_assets.defs.ingest import raw_capture

STALE_CODE_CONDITION = (
    dg.AutomationCondition.code_version_changed().since(
        dg.AutomationCondition.newly_requested() | dg.AutomationCondition.newly_updated()
    )
    & ~dg.AutomationCondition.missing()
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.in_progress()
).with_label("code version changed since last materialization")

# Every per-capture asset fed by the raw copy (trajectory, quality_report, exporters).
STALE_TARGET = dg.AssetSelection.assets(raw_capture).downstream(include_self=False)


def with_stale_code_automation(
    assets: Sequence[dg.AssetsDefinition],
) -> list[dg.AssetsDefinition]:
    """``assets`` with `STALE_CODE_CONDITION` on every per-capture asset below raw_capture.

    Unpartitioned aggregates and raw_capture itself keep their own conditions (none).
    """
    out = []
    for asset in assets:
        if raw_capture.key in asset.keys or asset.partitions_def is None:
            out.append(asset)
            continue
        out.append(
            asset.map_asset_specs(
                lambda spec: spec.replace_attributes(automation_condition=STALE_CODE_CONDITION)
            )
        )
    return out


stale_code_sensor = dg.AutomationConditionSensorDefinition(
    "stale_code_sensor",
    target=STALE_TARGET,
    default_status=dg.DefaultSensorStatus.RUNNING,
    emit_backfills=True,
    minimum_interval_seconds=60,
    description="Re-runs captures whose step's code version changed, as chunked backfills.",
)
