"""Capture sets from the CLI: where a capture is, subset backfills (one per set), and the
migration from one set to several (tested end to end on a Dagster instance)."""

import dagster as dg
import pytest

from ego_assets.capture_sets import PER_CAPTURE_ASSETS, capture_set
from ego_assets.cli import main
from ego_assets.defs import capture_ops
from ego_assets.defs.capture_ops import MOVED_FROM_TAG, asset_graph, launch_backfills, migrate
from ego_assets.defs.partitions import SET0, CaptureSet, group_by_set, register_captures

KEYS = [f"cap-{i:03d}" for i in range(24)]
CODE_VERSIONS = {name: f"{name}-v1" for name in PER_CAPTURE_ASSETS}


def _targets(backfill) -> dict[dg.AssetKey, set[str]]:
    out: dict[dg.AssetKey, set[str]] = {}
    subset = backfill.asset_backfill_data.target_subset
    for ap in subset.iterate_asset_partitions():
        out.setdefault(ap.asset_key, set()).add(ap.partition_key)
    return out


def test_a_subset_backfill_is_one_backfill_per_set():
    chosen = KEYS[:10]
    with dg.instance_for_test() as instance:
        register_captures(instance, KEYS, 3)
        launched = launch_backfills(
            instance, asset_graph(3), chosen, ("quality_report", "trajectory"), 3
        )
        by_set = group_by_set(chosen, 3)
        assert [b.capture_set for b in launched] == list(by_set)
        assert sum(b.captures for b in launched) == len(chosen)
        stored = {b.backfill_id: b for b in instance.get_backfills()}
        assert set(stored) == {b.backfill_id for b in launched}
        for b in launched:
            cs = b.capture_set
            assert b.assets == ("trajectory", "quality_report")
            members = set(by_set[cs])
            assert _targets(stored[b.backfill_id]) == {
                cs.key("trajectory"): members,
                cs.key("quality_report"): members,
            }
            assert stored[b.backfill_id].tags == {"ego/backfill": "cli"}


def test_backfill_rejects_unknown_assets():
    with dg.instance_for_test() as instance, pytest.raises(KeyError, match="per-capture"):
        launch_backfills(instance, asset_graph(1), KEYS[:1], ("quality_catalog",), 1)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return tmp_path


def test_cli_backfill_all_and_where(home, capsys):
    with dg.DagsterInstance.get() as instance:
        register_captures(instance, KEYS, 2)
    assert main(["backfill", "--all", "--sets", "2", "--assets", "raw_capture"]) == 0
    out = capsys.readouterr().out.splitlines()
    with dg.DagsterInstance.get() as instance:
        backfills = instance.get_backfills()
    assert len(backfills) == 2
    assert {b.backfill_id for b in backfills} == {line.split()[0] for line in out[:2]}
    assert out[-1].startswith(f"2 backfills, {len(KEYS)} captures, raw_capture")
    covered = {p for b in backfills for ps in _targets(b).values() for p in ps}
    assert covered == set(KEYS)

    key = next(k for k in KEYS if capture_set(k, 2) == 1)
    assert main(["where", key, "--sets", "2"]) == 0
    text = capsys.readouterr().out
    assert f"{key}: set 1  partitions captures_s001" in text
    assert "group: captures_s001" in text and "s001/trajectory" in text
    assert "job: capture_job_s001" in text
    assert main(["where", key, "--sets", "0"]) == 2  # rejected: sets start at 1


# ------------------------------------------------------------------------- migration


def _materialize_under_one_set(instance) -> None:
    """Every capture registered in set 0 with one materialization per per-capture asset,
    carrying metadata, a data version and the code version (as a run would)."""
    instance.add_dynamic_partitions(SET0.partitions_name, KEYS)
    for key in KEYS:
        for name in PER_CAPTURE_ASSETS:
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    asset_key=name,
                    partition=key,
                    metadata={"capture": key, "frames": len(key) * 10, "asset": name},
                    tags={
                        "dagster/data_version": f"{name}:{key}",
                        "dagster/code_version": CODE_VERSIONS[name],
                    },
                )
            )


def _latest(instance, asset_key: dg.AssetKey, key: str):
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    )
    return result.records[0].asset_materialization if result.records else None


def _registered(instance, cs: CaptureSet) -> list[str]:
    return list(instance.get_dynamic_partitions(cs.partitions_name))


def _stale_defs(sets: int) -> dg.Definitions:
    from ego_assets.definitions import build_defs
    from ego_assets.defs.resources import StorageResource

    return build_defs(StorageResource(root="unused"), sets=sets)


def _stale_tick(defs, instance, cursor):
    context = dg.SensorEvaluationContext(
        instance_ref=instance.get_ref(), instance=instance, definitions=defs, cursor=cursor
    )
    return defs.get_sensor_def("stale_code_sensor").evaluate_tick(context)


def test_migrate_one_set_to_three(monkeypatch):
    with dg.instance_for_test() as instance:
        _materialize_under_one_set(instance)
        before = {
            (name, key): _latest(instance, dg.AssetKey(name), key)
            for name in PER_CAPTURE_ASSETS
            for key in KEYS
        }
        cursor = _stale_tick(_stale_defs(1), instance, None).cursor  # versions recorded
        expected = {k: capture_set(k, 3) for k in KEYS}
        moving = [k for k in KEYS if expected[k] != 0]
        assert 0 < len(moving) < len(KEYS)

        dry = migrate(instance, 3, 1, page_size=5)
        assert not dry.applied and dry.moved == len(moving)
        assert dry.registered == {0: len(KEYS)}
        assert dry.target == {i: list(expected.values()).count(i) for i in range(3)}
        assert _registered(instance, SET0) == KEYS  # a dry run changes nothing

        # interrupted half way: the first deletion from the old set fails
        real_delete = instance.delete_dynamic_partition
        calls = []

        def crash(name, key):
            calls.append(key)
            if len(calls) == 2:
                raise RuntimeError("killed")
            real_delete(name, key)

        monkeypatch.setattr(instance, "delete_dynamic_partition", crash)
        with pytest.raises(RuntimeError, match="killed"):
            migrate(instance, 3, 1, apply=True, page_size=5)
        monkeypatch.setattr(instance, "delete_dynamic_partition", real_delete)

        done = migrate(instance, 3, 1, apply=True, page_size=5)
        assert done.applied

        # every capture is in exactly its hash set
        for i in range(3):
            cs = CaptureSet(i)
            assert sorted(_registered(instance, cs)) == sorted(k for k in KEYS if expected[k] == i)
        for key in moving:
            cs = CaptureSet(expected[key])
            for name in PER_CAPTURE_ASSETS:
                old = before[(name, key)]
                new = _latest(instance, cs.key(name), key)
                assert new is not None, (name, key)
                assert new.metadata == old.metadata
                assert new.tags["dagster/data_version"] == old.tags["dagster/data_version"]
                assert new.tags["dagster/code_version"] == CODE_VERSIONS[name]
                assert new.tags[MOVED_FROM_TAG] == name
                # exactly one copy in the new set despite the crash
                count = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=cs.key(name), asset_partitions=[key]),
                    limit=10,
                ).records
                assert len(count) == 1
        # the old set lost them: what its assets show materialized is what stayed there
        staying = {k for k in KEYS if expected[k] == 0}
        for name in PER_CAPTURE_ASSETS:
            shown = instance.get_materialized_partitions(dg.AssetKey(name))
            assert shown & set(_registered(instance, SET0)) == staying

        # the stale-code sensor of the three-set deployment requests nothing
        defs3 = _stale_defs(3)
        tick = _stale_tick(defs3, instance, cursor)
        assert not tick.run_requests
        assert not _stale_tick(defs3, instance, tick.cursor).run_requests

        # a second run changes nothing
        events = instance.event_log_storage.get_maximum_record_id()
        again = migrate(instance, 3, 3, apply=True, page_size=5)
        assert (again.moved, again.reported) == (0, 0)
        assert again.registered == again.target == dry.target
        assert instance.event_log_storage.get_maximum_record_id() == events


def test_cli_migrate_dry_run_then_apply(home, capsys):
    with dg.DagsterInstance.get() as instance:
        _materialize_under_one_set(instance)
    assert main(["partitions", "migrate", "--sets", "2"]) == 0
    out = capsys.readouterr().out
    moving = sum(1 for k in KEYS if capture_set(k, 2) == 1)
    assert f"captures to move: {moving}" in out and "dry run" in out
    with dg.DagsterInstance.get() as instance:
        assert _registered(instance, CaptureSet(1)) == []
    assert main(["partitions", "migrate", "--sets", "2", "--apply"]) == 0
    out = capsys.readouterr().out
    assert f"captures moved: {moving}" in out
    assert f"materializations re-reported: {moving * len(PER_CAPTURE_ASSETS)}" in out
    with dg.DagsterInstance.get() as instance:
        assert len(_registered(instance, CaptureSet(1))) == moving
        assert len(_registered(instance, SET0)) == len(KEYS) - moving


def test_migration_memory_is_one_page(monkeypatch):
    """Pages are read with the page size asked for, never the whole definition."""
    seen = []
    real = capture_ops.page_captures

    def spy(instance, after, limit, capture_set):
        seen.append(limit)
        return real(instance, after, limit, capture_set=capture_set)

    monkeypatch.setattr(capture_ops, "page_captures", spy)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SET0.partitions_name, KEYS)
        migrate(instance, 2, 1, page_size=4)
    assert seen and set(seen) == {4}
