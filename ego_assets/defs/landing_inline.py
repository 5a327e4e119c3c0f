"""A lone short capture taken through every per-capture asset inside the landing sensor's
tick, without a run.

A capture run has a floor of its own, whatever the capture: the queue, a run worker (a
fork of the warm parent, a process or a pod) opening the instance and the job, run start
and one step per asset, each with its events in the instance: about 4.6 s on a quiet box
for about 0.5 s of work on a 10 s capture (docs/deploy.md, "The path every capture
takes"). When a tick finds exactly one new capture, the sensor (already loaded, in the
code server) does that work itself: the raw copy, the trajectory, the quality report
and every export (in `registry.run_order`: EgoSmith's decode leaves CERES its camera
statistics), through the same pipeline functions the assets call, then hands Dagster
one materialization per asset and the export gate's check evaluation for the
capture's partitions (`dg.SensorResult.asset_events`, written by the daemon as runless
events: the same metadata, data versions and code versions as the assets' steps, tagged
`INLINE_TAG` = ``landing_sensor``).

It gives the capture back to a run (the request the tick would have made, which reuses
what is stored) when the capture is longer than ``EGO_SENSOR_INLINE_MAX_S`` seconds
(default `DEFAULT_INLINE_MAX_S`; 0 turns this off) or its raw copy is larger than
`INLINE_MAX_BYTES`, when its gate blocks an export (the run shows it blocked, as
docs/quality.md says), and when a step fails (the run fails with the error naming
capture and file, in its logs). Nothing is reported until every asset is written, so a
capture is either wholly recorded by the tick or wholly left to its run.

The run coordinator's limits do not apply to this work: it is one capture per tick, at
most one sensor interval apart, on the code server's process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from ego_assets import pipeline
from ego_assets.defs.episodes import partition_materialization, step_metadata
from ego_assets.defs.export_assets import export_config, export_materialization, exporter_for
from ego_assets.defs.ingest import build_raw_capture, build_trajectory
from ego_assets.defs.partitions import CaptureSet
from ego_assets.defs.quality import build_quality_report, gate_check_evaluation, quality_metadata
from ego_assets.exports import registry
from ego_assets.exports.run import run_export
from ego_assets.storage import Storage

INLINE_ENV = "EGO_SENSOR_INLINE_MAX_S"
# EgoDex averages about 9 s an episode, CERES segments tens of seconds; 30 s of capture is
# about 2-3 s of one quiet core, far below the daemon's 60 s limit on a sensor tick.
DEFAULT_INLINE_MAX_S = 30.0
# a raw copy larger than this goes to a run before the trajectory is read (copying it
# already took the tick that long; a video-heavy capture is long)
INLINE_MAX_BYTES = 256 * 2**20
INLINE_TAG = "ego/materialized_by"  # on a materialization the landing sensor wrote
INLINE_BY = "landing_sensor"

InlineEvent = dg.AssetMaterialization | dg.AssetCheckEvaluation


def inline_max_s(environ: Mapping[str, str]) -> float:
    """``EGO_SENSOR_INLINE_MAX_S``: the longest capture (seconds) the landing sensor takes
    through every asset itself when it is alone in a tick; 0 turns that off."""
    return pipeline.seconds_setting(environ, INLINE_ENV, DEFAULT_INLINE_MAX_S)


def _code_version(assets_def: dg.AssetsDefinition, key: dg.AssetKey) -> str | None:
    return assets_def.code_versions_by_key.get(key)


def inline_capture_events(
    cs: CaptureSet, store: Storage, key: str, max_s: float
) -> tuple[list[InlineEvent], str]:
    """Take capture ``key`` of set ``cs`` through every per-capture asset here (see the
    module docstring): the events Dagster records for it, or no events and why a run
    must take it. Raises what a step raises (the caller leaves the capture to a run)."""
    events: list[InlineEvent] = []
    tags = {INLINE_TAG: INLINE_BY}

    def record(
        name: str,
        assets_def: dg.AssetsDefinition,
        result: pipeline.StepResult,
        metadata: Mapping[str, object],
    ) -> None:
        asset_key = cs.key(name)
        md = {**metadata, **step_metadata(result)}
        version = _code_version(assets_def, asset_key)
        events.append(
            partition_materialization(asset_key, key, md, result.data_version, version, tags)
        )

    raw = pipeline.ingest_raw(store, key)
    if int(raw.figures["bytes"]) > INLINE_MAX_BYTES:
        return [], f"raw copy {raw.figures['bytes']} bytes > {INLINE_MAX_BYTES}"
    record("raw_capture", build_raw_capture(cs), raw, {})
    trajectory = pipeline.normalize(store, key)
    duration = float(trajectory.figures["duration_s"])
    if duration > max_s:
        return [], f"{duration:.1f} s long > {INLINE_ENV}={max_s:g}"
    record("trajectory", build_trajectory(cs), trajectory, {})
    quality = pipeline.assess_quality(store, key)
    gate = pipeline.stored_gate(store, key)
    if gate is None or not gate.allows():
        return [], "its gate blocks an export"
    record("quality_report", build_quality_report(cs), quality, quality_metadata(store, key, gate))
    events.append(gate_check_evaluation(cs.key("quality_report"), key, gate))
    exported = {}
    for fmt in registry.run_order():  # EgoSmith's decode serves CERES's camera statistics
        options = dg.Config.model_dump(export_config(fmt)())  # the asset's default config
        exporter = exporter_for(fmt, options)
        result = run_export(store, key, exporter, force=False)
        exported[fmt] = export_materialization(
            cs.key(fmt.name), exporter, store, key, result, INLINE_BY
        )
    events += [exported[fmt] for fmt in registry.formats()]
    return events, ""


def materialized_assets(events: Sequence[InlineEvent]) -> list[str]:
    """The asset names ``events`` materialize, in order (for the tick's log line)."""
    return [
        event.asset_key.path[-1] for event in events if isinstance(event, dg.AssetMaterialization)
    ]
