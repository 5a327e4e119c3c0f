import os
import time

import dagster as dg

from ego_assets.capture.manifest import write_marker
from ego_assets.definitions import build_defs
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


def test_sensor_registers_complete_captures_and_requests_one_run_each(tmp_path):
    base = time.time() - 60
    _land(tmp_path / "landing", "cap-b", base)
    _land(tmp_path / "landing", "cap-a", base + 1)
    (tmp_path / "landing" / "still-uploading").mkdir()
    with dg.instance_for_test() as instance:
        result, _ = _evaluate(tmp_path, instance)
        assert isinstance(result, dg.SensorResult)
        assert [r.partition_key for r in result.run_requests] == ["cap-b", "cap-a"]
        assert [r.run_key for r in result.run_requests] == ["cap-b", "cap-a"]
        (add,) = result.dynamic_partitions_requests
        assert add.partitions_def_name == "captures"
        assert list(add.partition_keys) == ["cap-b", "cap-a"]
        again, _ = _evaluate(tmp_path, instance, cursor=result.cursor)
        assert isinstance(again, dg.SkipReason)


def test_sensor_is_bounded_per_tick(tmp_path):
    base = time.time() - 1000
    for i in range(MAX_CAPTURES_PER_TICK + 3):
        _land(tmp_path / "landing", f"cap-{i:04d}", base + i)
    with dg.instance_for_test() as instance:
        first, _ = _evaluate(tmp_path, instance)
        assert len(first.run_requests) == MAX_CAPTURES_PER_TICK
        second, _ = _evaluate(tmp_path, instance, cursor=first.cursor)
        assert [r.partition_key for r in second.run_requests] == [
            f"cap-{i:04d}" for i in range(MAX_CAPTURES_PER_TICK, MAX_CAPTURES_PER_TICK + 3)
        ]


def test_sensor_skips_invalid_folder_names_without_requesting_them(tmp_path):
    _land(tmp_path / "landing", "bad name", time.time() - 5)
    with dg.instance_for_test() as instance:
        result, context = _evaluate(tmp_path, instance)
        assert isinstance(result, dg.SkipReason)
        assert context.cursor is not None
