import os
import time

import dagster as dg

from ego_assets.capture.manifest import write_marker
from ego_assets.definitions import build_defs
from ego_assets.defs.partitions import DEFAULT_CAPTURES_PER_RUN, run_captures
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.sensors import MAX_CAPTURES_PER_TICK, landing_sensor


def _land(landing, key, mtime):
    folder = landing / key
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text("{}")
    write_marker(folder, "holos")
    os.utime(folder / "ego_capture.json", (mtime, mtime))


def _evaluate(tmp_path, instance, cursor=None):
    storage = StorageResource(root=str(tmp_path))
    context = dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"storage": storage},
        definitions=build_defs(storage),
    )
    return landing_sensor(context), context


def _captures(requests) -> list[str]:
    return [key for r in requests for key in run_captures(r.tags)]


def test_sensor_registers_complete_captures_and_packs_them_into_one_run(tmp_path):
    base = time.time() - 60
    _land(tmp_path / "landing", "cap-b", base)
    _land(tmp_path / "landing", "cap-a", base + 1)
    (tmp_path / "landing" / "still-uploading").mkdir()
    with dg.instance_for_test() as instance:
        result, _ = _evaluate(tmp_path, instance)
        assert isinstance(result, dg.SensorResult)
        # one ranged run over the tick's captures, in landing (= registration) order
        (request,) = result.run_requests
        assert request.partition_key is None and request.run_key == "cap-b...cap-a"
        assert dict(request.tags) == {
            "dagster/asset_partition_range_start": "cap-b",
            "dagster/asset_partition_range_end": "cap-a",
            "ego/packed": "2",
            "ego/captures": "cap-b,cap-a",
        }
        # registered by the sensor itself, in one insert, in landing order
        assert not result.dynamic_partitions_requests
        assert instance.get_dynamic_partitions("captures") == ["cap-b", "cap-a"]
        again, _ = _evaluate(tmp_path, instance, cursor=result.cursor)
        assert isinstance(again, dg.SkipReason)
        # a tick with one capture: a single-capture run, tagged as Dagster's own
        # resolution would tag the partitioned run
        _land(tmp_path / "landing", "cap-c", time.time() - 1)
        lone, _ = _evaluate(tmp_path, instance, cursor=result.cursor)
        (single,) = lone.run_requests
        assert (single.partition_key, single.run_key) == ("cap-c", "cap-c")
    # Resolving the job reads Dagster's definitions state through the current instance;
    # a test instance makes that independent of instances other tests left behind.
    with dg.instance_for_test():
        job = build_defs(StorageResource(root=str(tmp_path))).resolve_job_def("capture_job")
        expected = job.get_tags_for_partition_key(single.partition_key, None)
        assert dict(single.tags) == dict(expected)


def test_sensor_is_bounded_per_tick(tmp_path):
    base = time.time() - 1000
    for i in range(MAX_CAPTURES_PER_TICK + 3):
        _land(tmp_path / "landing", f"cap-{i:04d}", base + i)
    with dg.instance_for_test() as instance:
        first, _ = _evaluate(tmp_path, instance)
        assert len(_captures(first.run_requests)) == MAX_CAPTURES_PER_TICK
        assert len(first.run_requests) == -(-MAX_CAPTURES_PER_TICK // DEFAULT_CAPTURES_PER_RUN)
        second, _ = _evaluate(tmp_path, instance, cursor=first.cursor)
        assert _captures(second.run_requests) == [
            f"cap-{i:04d}" for i in range(MAX_CAPTURES_PER_TICK, MAX_CAPTURES_PER_TICK + 3)
        ]


def test_sensor_skips_invalid_folder_names_without_requesting_them(tmp_path):
    _land(tmp_path / "landing", "bad name", time.time() - 5)
    with dg.instance_for_test() as instance:
        result, context = _evaluate(tmp_path, instance)
        assert isinstance(result, dg.SkipReason)
        assert context.cursor is not None


def _tick_statements(tmp_path, instance, cursor, landed: list[str]) -> tuple[int, str]:
    """SQL statements of one tick as the daemon runs it: the sensor's evaluation in the
    code server (with an instance ref, so run requests are resolved against the
    instance) plus the daemon's run-key lookup for the requested keys."""
    from dagster._core.storage.dagster_run import RunsFilter
    from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

    from ego_assets_tests.sql_count import sql_statements

    storage = StorageResource(root=str(tmp_path))
    defs = build_defs(storage)
    base = time.time() - 100
    for i, key in enumerate(landed):
        _land(tmp_path / "landing", key, base + i)
    with sql_statements() as statements:
        context = dg.SensorEvaluationContext(
            instance_ref=instance.get_ref(),
            cursor=cursor,
            instance=instance,
            sensor_name=landing_sensor.name,
            resources={"storage": storage},
            definitions=defs,
        )
        data = defs.get_sensor_def(landing_sensor.name).evaluate_tick(context)
        keys = [r.run_key for r in data.run_requests]
        instance.get_runs(
            filters=RunsFilter(tags={SENSOR_NAME_TAG: landing_sensor.name, RUN_KEY_TAG: keys})
        )
    assert _captures(data.run_requests) == landed
    assert not data.dynamic_partitions_requests  # nothing left for the daemon to check per key
    return len(statements), data.cursor


def test_tick_queries_do_not_grow_with_registered_captures(tmp_path):
    """Same number of instance queries for 20 new captures over 100 or 5,000 registered."""
    counts = []
    for registered in (100, 5000):
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("captures", [f"old-{i:05d}" for i in range(registered)])
            root = tmp_path / str(registered)
            count, _ = _tick_statements(root, instance, None, [f"new-{i:02d}" for i in range(20)])
            counts.append(count)
            assert len(instance.get_dynamic_partitions("captures")) == registered + 20
    assert counts[0] == counts[1]
    # a bulk insert, two queries to pack, the failed packed runs (none) and the run-key
    # lookup, not one query per key
    assert counts[0] <= 13


def test_a_landed_capture_runs_every_per_capture_asset_all_three_exports_included(tmp_path):
    from ego_assets.definitions import ASSETS
    from ego_assets_tests.test_celery_scaleout import CAPTURE_JOB_ASSETS

    # Resolving the job reads Dagster's definitions state through the current instance;
    # a test instance makes that independent of instances other tests left behind.
    with dg.instance_for_test():
        job = build_defs(StorageResource(root=str(tmp_path))).resolve_job_def("capture_job")
    in_job = {key.to_user_string() for key in job.asset_layer.executable_asset_keys}
    per_capture = {a.key.to_user_string() for a in ASSETS if a.partitions_def is not None}
    assert in_job == per_capture == set(CAPTURE_JOB_ASSETS)
    assert {"holos_hdf5", "egosmith_shards", "ceres_episode"} <= in_job


def test_three_sets_register_per_set_and_run_each_sets_job(tmp_path):
    """S=3: each capture is registered in its set (one insert per set) and run by its
    set's capture_job; the tick's query count still does not grow with the partitions."""
    from dagster._core.storage.dagster_run import RunsFilter
    from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

    from ego_assets.defs.partitions import CaptureSet, partition_for_capture
    from ego_assets_tests.sql_count import sql_statements

    new = [f"new-{i:02d}" for i in range(20)]
    counts = []
    for registered in (100, 5000):
        root = tmp_path / str(registered)
        storage = StorageResource(root=str(root))
        defs = build_defs(storage, sets=3)
        base = time.time() - 100
        for i, key in enumerate(new):
            _land(root / "landing", key, base + i)
        with dg.instance_for_test() as instance:
            old = [f"old-{i:05d}" for i in range(registered)]
            for i in range(3):
                instance.add_dynamic_partitions(CaptureSet(i).partitions_name, old)
            with sql_statements() as statements:
                context = dg.SensorEvaluationContext(
                    instance_ref=instance.get_ref(),
                    cursor=None,
                    instance=instance,
                    sensor_name="landing_sensor",
                    resources={"storage": storage},
                    definitions=defs,
                )
                data = defs.get_sensor_def("landing_sensor").evaluate_tick(context)
                instance.get_runs(
                    filters=RunsFilter(tags={SENSOR_NAME_TAG: "landing_sensor", RUN_KEY_TAG: new})
                )
            counts.append(len(statements))
            assert sorted(_captures(data.run_requests)) == new
            # one packed run per set: its captures, in landing order, all of that set
            assert len(data.run_requests) == 3
            for request in data.run_requests:
                keys = run_captures(request.tags)
                assert keys == [k for k in new if k in keys]
                for key in keys:
                    where = partition_for_capture(key, 3)
                    assert request.job_name == where.capture_set.job_name("capture_job")
                    assert instance.has_dynamic_partition(where.partitions_name, key)
                assert request.run_key == f"{keys[0]}...{keys[-1]}"
            jobs = {r.job_name for r in data.run_requests}
            assert jobs == {"capture_job", "capture_job_s001", "capture_job_s002"}
    assert counts[0] == counts[1]
    assert counts[0] <= 17  # one insert per set, two to pack, the run-key lookup
