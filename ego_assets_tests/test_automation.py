"""Staleness automation: a code-version bump re-runs exactly the stale captures, as a backfill."""

import dagster as dg
import pytest
from dagster._core.definitions.automation_tick_evaluation_context import build_run_requests

from ego_assets.defs.automation import (
    STALE_CODE_CONDITION,
    stale_code_sensor,
    with_stale_code_automation,
)
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.quality import quality_report
from ego_assets.defs.resources import StorageResource

DONE = ["c01", "c02", "c03"]  # raw, trajectory and quality materialized under v1
RAW_ONLY = "c04"  # raw copy exists, trajectory never ran: missing, not stale
NO_RAW = "c05"  # registered, never ingested: its upstream is missing
TRAJ = dg.AssetKey("trajectory")
QUALITY = dg.AssetKey("quality_report")


def _defs(trajectory_version: str) -> dg.Definitions:
    bumped = trajectory.map_asset_specs(
        lambda spec: spec.replace_attributes(code_version=trajectory_version)
    )
    return dg.Definitions(
        assets=with_stale_code_automation([raw_capture, bumped, quality_report]),
        sensors=[stale_code_sensor],
        resources={"storage": StorageResource(root="unused")},
    )


def _report(instance, asset: str, key: str) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=asset, partition=key))


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("captures", [*DONE, RAW_ONLY, NO_RAW])
        for key in DONE:
            for asset in ("raw_capture", "trajectory", "quality_report"):
                _report(inst, asset, key)
        _report(inst, "raw_capture", RAW_ONLY)
        yield inst


def test_condition_is_on_every_per_capture_asset_below_raw_capture():
    graph = _defs("normalize-1").resolve_asset_graph()
    assert graph.get(TRAJ).automation_condition == STALE_CODE_CONDITION
    assert graph.get(QUALITY).automation_condition == STALE_CODE_CONDITION
    assert graph.get(dg.AssetKey("raw_capture")).automation_condition is None
    assert stale_code_sensor.emit_backfills is True
    assert stale_code_sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_code_version_bump_requests_only_materialized_partitions_with_upstream(instance):
    v1 = _defs("normalize-1")
    first = dg.evaluate_automation_conditions(defs=v1, instance=instance)
    assert first.total_requested == 0  # the first evaluation only records code versions
    same = dg.evaluate_automation_conditions(defs=v1, instance=instance, cursor=first.cursor)
    assert same.total_requested == 0

    v2 = _defs("normalize-2")
    bumped = dg.evaluate_automation_conditions(defs=v2, instance=instance, cursor=same.cursor)
    assert bumped.get_requested_partitions(TRAJ) == set(DONE)
    assert bumped.get_requested_partitions(QUALITY) == set()  # its own code is unchanged
    assert bumped.total_requested == len(DONE)

    # one tick later nothing is requested again (no storm while the backfill runs)
    later = dg.evaluate_automation_conditions(defs=v2, instance=instance, cursor=bumped.cursor)
    assert later.total_requested == 0

    # what the sensor submits: one backfill covering the three partitions
    graph = v2.resolve_asset_graph()
    requests = build_run_requests(
        bumped._requested_subsets, graph, run_tags=None, emit_backfills=True
    )
    assert len(requests) == 1
    (request,) = requests
    assert request.requires_backfill_daemon()
    subset = request.asset_graph_subset
    assert subset is not None
    assert {p.partition_key for p in subset.iterate_asset_partitions()} == set(DONE)


def test_capture_updated_in_the_bump_tick_is_not_run_twice(instance):
    v1 = _defs("normalize-1")
    first = dg.evaluate_automation_conditions(defs=v1, instance=instance)
    _report(instance, "trajectory", "c02")  # a run of the new code already redid c02
    v2 = _defs("normalize-2")
    bumped = dg.evaluate_automation_conditions(defs=v2, instance=instance, cursor=first.cursor)
    assert bumped.get_requested_partitions(TRAJ) == {"c01", "c03"}
