"""Staleness: a code-version bump re-runs exactly the stale captures, as paged backfills."""

import json

import dagster as dg
import pytest

from ego_assets.defs import automation
from ego_assets.defs.automation import STALE_TARGET, stale_code_sensor
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.quality import quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets_tests.sql_count import sql_statements

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
        assets=[raw_capture, bumped, quality_report],
        sensors=[stale_code_sensor],
        resources={"storage": StorageResource(root="unused")},
    )


def _report(instance, asset: str, key: str) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=asset, partition=key))


def _tick(defs: dg.Definitions, instance, cursor: str | None):
    context = dg.SensorEvaluationContext(
        instance_ref=instance.get_ref(), instance=instance, definitions=defs, cursor=cursor
    )
    return defs.get_sensor_def(stale_code_sensor.name).evaluate_tick(context)


def _requested(data) -> dict[dg.AssetKey, set[str]]:
    """Partitions per asset of the tick's backfill request (at most one request)."""
    assert len(data.run_requests) <= 1
    out: dict[dg.AssetKey, set[str]] = {}
    for request in data.run_requests:
        assert request.requires_backfill_daemon()
        for ap in request.asset_graph_subset.iterate_asset_partitions():
            out.setdefault(ap.asset_key, set()).add(ap.partition_key)
    return out


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("captures", [*DONE, RAW_ONLY, NO_RAW])
        for key in DONE:
            for asset in ("raw_capture", "trajectory", "quality_report"):
                _report(inst, asset, key)
        _report(inst, "raw_capture", RAW_ONLY)
        yield inst


def test_sensor_targets_every_per_capture_asset_below_raw_capture_and_no_asset_automates():
    defs = _defs("normalize-1")
    graph = defs.resolve_asset_graph()
    assert STALE_TARGET.resolve(graph) == {TRAJ, QUALITY}
    assert stale_code_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    # no automation condition anywhere in the code location: Dagster would evaluate every
    # partition of such an asset on each tick of an automation sensor
    from ego_assets.definitions import build_defs

    full = build_defs(StorageResource(root="unused")).resolve_asset_graph()
    assert all(full.get(k).automation_condition is None for k in full.get_all_asset_keys())


def test_code_version_bump_requests_only_materialized_partitions_with_upstream(instance):
    v1 = _defs("normalize-1")
    first = _tick(v1, instance, None)
    assert not first.run_requests  # the first tick only records code versions
    same = _tick(v1, instance, first.cursor)
    assert not same.run_requests

    v2 = _defs("normalize-2")
    bumped = _tick(v2, instance, same.cursor)
    assert _requested(bumped) == {TRAJ: set(DONE)}  # quality's own code is unchanged

    # one tick later nothing is requested again (no storm while the backfill runs)
    later = _tick(v2, instance, bumped.cursor)
    assert not later.run_requests


def test_capture_updated_in_the_bump_tick_is_not_run_twice(instance):
    v1 = _defs("normalize-1")
    first = _tick(v1, instance, None)
    _report(instance, "trajectory", "c02")  # a run of the new code already redid c02
    bumped = _tick(_defs("normalize-2"), instance, first.cursor)
    assert _requested(bumped) == {TRAJ: {"c01", "c03"}}


def test_a_bump_is_paged_one_page_per_tick(instance, monkeypatch):
    monkeypatch.setattr(automation, "page_captures", _small_pages(2))
    first = _tick(_defs("normalize-1"), instance, None)
    v2 = _defs("normalize-2")
    pages = []
    cursor = first.cursor
    for _ in range(4):
        data = _tick(v2, instance, cursor)
        pages.append(_requested(data).get(TRAJ, set()))
        cursor = data.cursor
    # pages of two captures in registration order: c01 c02 | c03 c04 | c05 ; then done
    assert pages == [{"c01", "c02"}, {"c03"}, set(), set()]
    assert json.loads(cursor)["pending"] == {}


def _small_pages(limit: int):
    from ego_assets.defs.partitions import page_captures

    def page(instance, after, limit_: int = limit, **kwargs):
        return page_captures(instance, after, limit, **kwargs)

    return page


def _statements_per_tick(registered: int) -> tuple[int, int]:
    """SQL statements of a steady tick and of the bump tick over ``registered`` captures."""
    with dg.instance_for_test() as instance:
        keys = [f"c{i:05d}" for i in range(registered)]
        instance.add_dynamic_partitions("captures", keys)
        for asset in ("raw_capture", "trajectory"):
            for key in (keys[0], keys[-1]):
                _report(instance, asset, key)
        v1 = _defs("normalize-1")
        first = _tick(v1, instance, None)
        with sql_statements() as steady:
            same = _tick(v1, instance, first.cursor)
        with sql_statements() as bump:
            _tick(_defs("normalize-2"), instance, same.cursor)
        return len(steady), len(bump)


def test_tick_queries_do_not_grow_with_registered_captures():
    small, large = _statements_per_tick(100), _statements_per_tick(5000)
    assert small == large
    assert small[0] <= 3  # steady tick: the event-log high-water mark, nothing per capture


def test_the_automation_sensors_old_cursor_counts_as_a_first_tick(instance):
    """Upgrading from the automation-condition sensor of the same name never re-runs."""
    from dagster._core.definitions.asset_daemon_cursor import AssetDaemonCursor
    from dagster_shared.serdes import serialize_value

    old = serialize_value(AssetDaemonCursor.empty(3))
    first = _tick(_defs("normalize-2"), instance, old)
    assert not first.run_requests
    assert json.loads(first.cursor)["versions"]["trajectory"] == "normalize-2"


def _three_sets_defs(trajectory_version: str) -> dg.Definitions:
    from ego_assets.defs.automation import build_stale_code_sensor
    from ego_assets.defs.ingest import build_raw_capture, build_trajectory
    from ego_assets.defs.partitions import CaptureSet

    assets = []
    for i in range(3):
        cs = CaptureSet(i)
        bumped = build_trajectory(cs).map_asset_specs(
            lambda spec: spec.replace_attributes(code_version=trajectory_version)
        )
        assets += [build_raw_capture(cs), bumped]
    return dg.Definitions(
        assets=assets,
        sensors=[build_stale_code_sensor(3)],
        resources={"storage": StorageResource(root="unused")},
    )


def test_three_sets_are_walked_per_set_and_asset_with_constant_queries():
    from ego_assets.defs.partitions import CaptureSet, group_by_set

    def run(registered: int) -> tuple[int, dict[dg.AssetKey, set[str]]]:
        with dg.instance_for_test() as instance:
            keys = [f"c{i:05d}" for i in range(registered)]
            done = keys[:6]  # the same captures at both sizes: the same sets
            by_set = group_by_set(keys, 3)
            for cs, members in by_set.items():
                instance.add_dynamic_partitions(cs.partitions_name, members)
            for cs, members in group_by_set(done, 3).items():
                for key in members:
                    for asset in ("raw_capture", "trajectory"):
                        instance.report_runless_asset_event(
                            dg.AssetMaterialization(asset_key=cs.key(asset), partition=key)
                        )
            first = _tick(_three_sets_defs("normalize-1"), instance, None)
            with sql_statements() as bump:
                data = _tick(_three_sets_defs("normalize-2"), instance, first.cursor)
            expected = {
                cs.key("trajectory"): set(members) for cs, members in group_by_set(done, 3).items()
            }
            assert _requested(data) == expected
            state = json.loads(data.cursor)
            assert state["pending"] == {}
            assert set(state["versions"]) == {
                CaptureSet(i).key("trajectory").to_user_string() for i in range(3)
            }
            return len(bump), _requested(data)

    small, large = run(100), run(5000)
    assert small[0] == large[0]
