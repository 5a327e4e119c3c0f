"""The landing sensor packs a tick's captures into ranged runs; a bad capture among good
ones fails alone: the good ones are recorded, run again without it and exported."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from ego_assets.catalog.receipts import read_receipt
from ego_assets.definitions import build_defs
from ego_assets.defs.demo import sensor_tags, unpacked
from ego_assets.defs.episodes import DATA_VERSION_TAG, FAILED_CAPTURES
from ego_assets.defs.partitions import (
    CAPTURES_PER_RUN_ENV,
    CAPTURES_TAG,
    PACKED_TAG,
    SET0,
    captures_per_run_from_env,
    register_captures,
    register_captures_packed,
)
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.sensors import FOLLOW_UP_TAG, SENSOR_NAME
from ego_assets.exports.registry import names as export_names
from ego_assets.fileio import file_sha256
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.factories import garble_holos_pose_row

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
KEYS = ["pk-01", "pk-02", "pk-03", "pk-04"]
BAD = "pk-03"
GOOD = [k for k in KEYS if k != BAD]


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    """Four 2 s iPhone captures; pk-03's device_pose.csv row 4 is garbled."""
    root = tmp_path_factory.mktemp("packed")
    for seed, key in enumerate(KEYS):
        synthesize("holos-iphone", root / key, seconds=2.0, seed=seed, capture_id=key)
    garble_holos_pose_row(root / BAD)
    return root


def _land(staged: Path, root: Path, keys: list[str]) -> None:
    base = time.time() - 100
    for i, key in enumerate(keys):
        shutil.copytree(staged / key, root / "landing" / key)
        marker = root / "landing" / key / "ego_capture.json"
        os.utime(marker, (base + i, base + i))


def _tick(defs: dg.Definitions, instance, storage: StorageResource, cursor: str | None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"storage": storage}, definitions=defs
    )
    result = defs.get_sensor_def(SENSOR_NAME)(context)
    return result, result.cursor if isinstance(result, dg.SensorResult) else context.cursor


def _execute(defs: dg.Definitions, instance, request: dg.RunRequest):
    job = defs.resolve_job_def(request.job_name or "capture_job")
    return job.execute_in_process(
        instance=instance,
        partition_key=request.partition_key,
        tags=sensor_tags(request, SENSOR_NAME),
        raise_on_error=False,
    )


def _materialized(instance, asset: str) -> set[str]:
    return set(instance.get_materialized_partitions(dg.AssetKey(asset)))


def test_captures_per_run_comes_from_the_environment():
    assert captures_per_run_from_env({}) == 16
    assert captures_per_run_from_env({CAPTURES_PER_RUN_ENV: "4"}) == 4
    for bad in ("0", "-2", "many"):
        with pytest.raises(ValueError, match=CAPTURES_PER_RUN_ENV):
            captures_per_run_from_env({CAPTURES_PER_RUN_ENV: bad})


def test_a_tick_packs_its_new_captures_and_runs_registered_ones_alone():
    keys = [f"cap-{i:02d}" for i in range(7)]
    with dg.instance_for_test() as instance:
        register_captures(instance, ["cap-03"])  # registered before (say, by the demo)
        requests = register_captures_packed(instance, keys, 1, per_run=4)
        # cap-03 sits before the others in the partitions: the new ones are still
        # contiguous there (cap-00..02 and cap-04..06 follow one another)
        assert instance.get_dynamic_partitions("captures") == [
            "cap-03",
            *(k for k in keys if k != "cap-03"),
        ]
    ranged, alone, rest = requests
    assert ranged.run_key == "cap-00...cap-04" and ranged.partition_key is None
    assert ranged.job_name == "capture_job"
    assert dict(ranged.tags) == {
        RANGE_START: "cap-00",
        RANGE_END: "cap-04",
        PACKED_TAG: "4",
        CAPTURES_TAG: "cap-00,cap-01,cap-02,cap-04",
    }
    assert (rest.run_key, rest.tags[CAPTURES_TAG]) == ("cap-05...cap-06", "cap-05,cap-06")
    # a capture registered before: an ordinary one-capture run (run key = capture key)
    assert (alone.run_key, alone.partition_key) == ("cap-03", "cap-03")
    assert RANGE_START not in alone.tags and PACKED_TAG not in alone.tags
    # the demo runs a packed request capture by capture
    assert [r.run_key for r in unpacked(ranged)] == ["cap-00", "cap-01", "cap-02", "cap-04"]
    assert [r.partition_key for r in unpacked(alone)] == ["cap-03"]


def test_a_tick_of_one_capture_gets_a_single_capture_run():
    with dg.instance_for_test() as instance:
        (request,) = register_captures_packed(instance, ["only-one"], 1)
    assert (request.run_key, request.partition_key) == ("only-one", "only-one")
    assert dict(request.tags) == {
        "dagster/partition": "only-one",
        "dagster/partition_set": "capture_job_partition_set",
    }


def test_a_bad_capture_in_a_packed_run_fails_alone_and_the_others_are_exported(
    staged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # runs are created as the sensor daemon creates them: one planned event per partition
    # (RUN_WORKER_ENV's subset switch is set where the code location loads, not there)
    monkeypatch.delenv("DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS", raising=False)
    _land(staged, tmp_path, KEYS)
    storage = StorageResource(root=str(tmp_path))
    store = Storage(tmp_path)
    defs = build_defs(storage, catalog=False)
    with dg.instance_for_test() as instance:
        result, cursor = _tick(defs, instance, storage, None)
        (packed,) = result.run_requests  # one ranged run for the tick's four captures
        assert packed.run_key == f"{KEYS[0]}...{KEYS[-1]}"
        assert (packed.tags[RANGE_START], packed.tags[RANGE_END]) == (KEYS[0], KEYS[-1])
        assert packed.tags[CAPTURES_TAG] == ",".join(KEYS)

        first = _execute(defs, instance, packed)
        assert not first.success
        failures = [e for e in first.all_events if e.is_step_failure]
        assert [e.step_key for e in failures] == ["trajectory"]
        message = failures[0].step_failure_data.error.message
        assert "1 of 4 captures failed" in message
        assert f"capture '{BAD}', file 'device_pose.csv'" in message and "row 4" in message
        metadata = failures[0].step_failure_data.user_failure_data.metadata
        assert list(metadata[FAILED_CAPTURES].value) == [BAD]
        # each good capture's trajectory is recorded on its own partition, with its own
        # content hash; the bad one has none and nothing of it was written
        assert _materialized(instance, "raw_capture") == set(KEYS)
        assert _materialized(instance, "trajectory") == set(GOOD)
        for key in GOOD:
            record = instance.get_latest_data_version_record(
                dg.AssetKey("trajectory"), partition_key=key
            )
            event = record.asset_materialization
            assert event.tags[DATA_VERSION_TAG] == event.metadata["data_version"].value
        assert not (tmp_path / "trajectory" / BAD).exists()

        # the next tick runs the good captures again without the bad one
        result, _ = _tick(defs, instance, storage, cursor)
        before, after = result.run_requests
        assert before.tags[CAPTURES_TAG] == "pk-01,pk-02" and before.run_key == "pk-01...pk-02"
        assert (after.partition_key, after.run_key) == ("pk-04", "pk-04")
        for request in (before, after):
            assert request.tags[FOLLOW_UP_TAG] == first.run_id
            assert _execute(defs, instance, request).success

        for asset in ("trajectory", "quality_report", *export_names()):
            assert _materialized(instance, asset) == set(GOOD), asset
        for key in GOOD:
            reused = instance.get_latest_data_version_record(
                dg.AssetKey("trajectory"), partition_key=key
            ).asset_materialization
            assert reused.metadata["reused"].value is True  # not computed twice
            for name in export_names():
                receipt = read_receipt(store, name, key)
                assert receipt is not None and receipt.status == "exported", (name, key)
                assert receipt.capture_key == key
                if receipt.files == 1:  # one file: its bytes and digest as received
                    exported = tmp_path / receipt.path
                    assert exported.stat().st_size == receipt.bytes
                    assert file_sha256(exported) == receipt.sha256
        # the export gate is recorded per capture
        check = dg.AssetCheckKey(dg.AssetKey("quality_report"), "export_gate")
        history = instance.event_log_storage.get_asset_check_execution_history(check, limit=50)
        verdicts = {r.partition: r.status.value for r in history if r.status.value != "PLANNED"}
        assert {k: verdicts.get(k) for k in KEYS} == {**dict.fromkeys(GOOD, "SUCCEEDED"), BAD: None}
        # nothing partial of the bad capture anywhere
        for stage in ("trajectory", "quality", "exports"):
            assert not list((tmp_path / stage).glob(f"**/{BAD}*")), stage
        for name in export_names():
            assert read_receipt(store, name, BAD) is None
        # and its partition is the one failed
        for asset in ("trajectory", "holos_hdf5"):
            status = instance.get_status_by_partition(dg.AssetKey(asset), KEYS, SET0.partitions_def)
            assert {k: s.value for k, s in status.items()} == {
                **dict.fromkeys(GOOD, "MATERIALIZED"),
                BAD: "FAILED",
            }
