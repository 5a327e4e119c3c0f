"""Storage and the landing scan on S3 (moto's server on loopback), plus the sensor on S3."""

import json
import os
import time
from datetime import UTC

import dagster as dg
import pytest
import s3fs

from ego_assets.capture.files import MARKER_FILE
from ego_assets.capture.manifest import write_marker
from ego_assets.definitions import build_defs
from ego_assets.defs import sensors
from ego_assets.defs.partitions import CAPTURES_PARTITIONS_NAME, run_captures
from ego_assets.defs.resources import StorageResource
from ego_assets.landing import GRACE_S, scan_landing
from ego_assets.storage import Storage


def _storage(server, url, **kwargs):
    return Storage(url, storage_options=server.storage_options, **kwargs)


def _stage_files(folder, files):
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


V1 = {"index.json": '{"v": 1}', "a.txt": "alpha", "deep/b.bin": "beta", "old.txt": "gone soon"}
V2 = {"index.json": '{"v": 2}', "a.txt": "alpha 2", "deep/b.bin": "beta 2", "deep/c.txt": "c"}


def test_write_dir_uploads_every_file_and_another_instance_reads_them_back(s3_server, s3_bucket):
    url = f"{s3_bucket}/ego"
    with _storage(s3_server, url).write_dir("raw", "cap-1", index_file="index.json") as stage:
        _stage_files(stage, V1)
    assert s3_server.keys(f"{url}/raw/cap-1") == sorted(V1)
    fresh = Storage(url, storage_options={**s3_server.storage_options, "skip_instance_cache": True})
    assert fresh.exists("raw", "cap-1", "index.json")
    assert not fresh.exists("raw", "cap-1", "missing.json")
    with fresh.read_dir(fresh.stage_path("raw", "cap-1")) as local:
        assert {
            p.relative_to(local).as_posix(): p.read_text() for p in local.rglob("*") if p.is_file()
        } == V1
    assert str(fresh.stage_path("raw", "cap-1")) == f"{url}/raw/cap-1"


def test_rewrite_replaces_objects_and_removes_those_of_the_older_version(s3_server, s3_bucket):
    storage = _storage(s3_server, s3_bucket)
    for version in (V1, V2):
        with storage.write_dir("trajectory", "cap-1", index_file="index.json") as stage:
            _stage_files(stage, version)
    assert s3_server.keys(f"{s3_bucket}/trajectory/cap-1") == sorted(V2)
    assert (storage.stage_path("trajectory", "cap-1") / "deep/b.bin").read_text() == "beta 2"


def test_index_file_goes_up_last_after_the_old_index_was_removed(s3_server, s3_bucket, monkeypatch):
    storage = _storage(s3_server, s3_bucket)
    with storage.write_dir("raw", "cap-1", index_file="index.json") as stage:
        _stage_files(stage, V1)
    seen: dict[str, list[str]] = {}
    fs = storage.root.fs
    put, put_file = fs.put, fs.put_file

    def spy_put(lpath, rpath, *args, **kwargs):
        seen["before body"] = s3_server.keys(f"{s3_bucket}/raw/cap-1")
        return put(lpath, rpath, *args, **kwargs)

    def spy_put_file(lpath, rpath, *args, **kwargs):
        seen["before index"] = s3_server.keys(f"{s3_bucket}/raw/cap-1")
        return put_file(lpath, rpath, *args, **kwargs)

    monkeypatch.setattr(fs, "put", spy_put)
    monkeypatch.setattr(fs, "put_file", spy_put_file)
    with storage.write_dir("raw", "cap-1", index_file="index.json") as stage:
        _stage_files(stage, V2)
    assert "index.json" not in seen["before body"]
    assert seen["before index"] == sorted((set(V1) | set(V2)) - {"index.json"})
    assert s3_server.keys(f"{s3_bucket}/raw/cap-1") == sorted(V2)


def test_failed_block_or_upload_leaves_no_index(s3_server, s3_bucket, monkeypatch):
    storage = _storage(s3_server, s3_bucket)
    with (
        pytest.raises(RuntimeError),
        storage.write_dir("raw", "new", index_file="index.json") as st,
    ):
        _stage_files(st, V1)
        raise RuntimeError("reader failed")
    assert s3_server.keys(f"{s3_bucket}/raw/new") == []
    with storage.write_dir("raw", "cap-1", index_file="index.json") as stage:
        _stage_files(stage, V1)

    def broken_put(*args, **kwargs):
        raise OSError("connection reset")

    monkeypatch.setattr(storage.root.fs, "put", broken_put)
    with pytest.raises(OSError), storage.write_dir("raw", "cap-1", index_file="index.json") as st:
        _stage_files(st, V2)
    assert not storage.exists("raw", "cap-1", "index.json")


def test_index_file_must_be_written(s3_server, s3_bucket):
    storage = _storage(s3_server, s3_bucket)
    with (
        pytest.raises(ValueError, match=r"index file 'index\.json' was not written"),
        storage.write_dir("raw", "cap-1", index_file="index.json") as stage,
    ):
        _stage_files(stage, {"a.txt": "a"})
    assert s3_server.keys(s3_bucket) == []


def _land(s3_server, tmp_path, url, key, files=None):
    folder = tmp_path / "uploads" / key
    _stage_files(folder, files or {"metadata.json": "{}", "data/a.csv": "x\n1\n"})
    write_marker(folder, "holos")
    s3_server.upload_dir(folder, f"{url}/landing/{key}")


def test_landing_scan_lists_s3_markers_with_last_modified_bounded_and_resumes(
    s3_server, s3_bucket, tmp_path
):
    storage = _storage(s3_server, s3_bucket)
    assert scan_landing(storage, None, limit=2).keys == ()
    for key in ["c-3", "c-1", "c-2"]:
        _land(s3_server, tmp_path, s3_bucket, key)
    s3_server.client().put_object(
        Bucket=s3_bucket[5:], Key="landing/uploading/data.csv", Body=b"x\n"
    )
    s3_server.client().put_object(
        Bucket=s3_bucket[5:], Key=f"landing/c-9/sub/{MARKER_FILE}", Body=b"{}"
    )
    first = scan_landing(storage, None, limit=2)
    second = scan_landing(storage, first.cursor, limit=2)
    assert len(first.keys) == 2 and first.pending == 1
    assert len(second.keys) == 1 and second.pending == 0
    assert sorted(first.keys + second.keys) == ["c-1", "c-2", "c-3"]
    cursor = json.loads(second.cursor)
    head = s3_server.client().head_object(
        Bucket=s3_bucket[5:], Key=f"landing/{cursor['key']}/{MARKER_FILE}"
    )
    assert cursor["mtime_ns"] == int(head["LastModified"].astimezone(UTC).timestamp()) * 10**9
    third = scan_landing(storage, second.cursor, limit=2)
    assert third.keys == () and third.cursor == second.cursor
    _land(s3_server, tmp_path, s3_bucket, "c-0")  # same second as c-1..c-3, smallest key
    assert scan_landing(storage, second.cursor, limit=2).keys == ("c-0",)


def test_landing_scan_on_s3_is_one_list_request_per_tick(
    s3_server, s3_bucket, tmp_path, monkeypatch
):
    storage = _storage(s3_server, s3_bucket)
    for key in ["a", "b", "c", "d"]:
        _land(s3_server, tmp_path, s3_bucket, key)
    calls: list[str] = []
    call_s3 = s3fs.S3FileSystem._call_s3

    async def counting(self, method, *args, **kwargs):
        calls.append(method)
        return await call_s3(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counting)
    scan = scan_landing(storage, None, limit=10)
    assert sorted(scan.keys) == ["a", "b", "c", "d"]
    assert calls == ["list_objects_v2"]


def _land_local(landing, key, mtime):
    folder = landing / key
    _stage_files(folder, {"metadata.json": "{}"})
    write_marker(folder, "holos")
    os.utime(folder / MARKER_FILE, (mtime, mtime))


def test_marker_appearing_late_within_the_grace_window_is_handed_out_once(tmp_path):
    storage = Storage(tmp_path)
    now = time.time()
    _land_local(tmp_path / "landing", "cap-b", now)
    first = scan_landing(storage, None, limit=5)
    assert first.keys == ("cap-b",)
    _land_local(tmp_path / "landing", "cap-a", now)  # same time, smaller key, seen later
    _land_local(tmp_path / "landing", "cap-old", now - GRACE_S - 5)  # too late to notice
    second = scan_landing(storage, first.cursor, limit=5)
    assert second.keys == ("cap-a",)
    assert json.loads(second.cursor)["key"] == "cap-b"
    assert scan_landing(storage, second.cursor, limit=5).keys == ()
    legacy = json.dumps({"mtime_ns": json.loads(first.cursor)["mtime_ns"], "key": "cap-b"})
    assert scan_landing(storage, legacy, limit=5).keys == ()


def test_landing_sensor_registers_s3_captures_with_cursor_and_per_tick_bound(
    s3_server, s3_bucket, tmp_path, monkeypatch
):
    monkeypatch.setattr(sensors, "MAX_CAPTURES_PER_TICK", 2)
    for key in ["s-1", "s-2", "s-3"]:
        _land(s3_server, tmp_path, s3_bucket, key)
    resource = StorageResource(root=s3_bucket, endpoint_url=s3_server.endpoint_url)
    requested: list[str] = []
    cursor = None
    with dg.instance_for_test() as instance:
        for expected in (2, 1):
            context = dg.build_sensor_context(
                instance=instance,
                cursor=cursor,
                resources={"storage": resource},
                definitions=build_defs(resource),
            )
            result = sensors.landing_sensor(context)
            assert isinstance(result, dg.SensorResult)
            # one run for the tick's captures (packed when there are several)
            (request,) = result.run_requests
            keys = run_captures(request.tags)
            assert len(keys) == expected
            # the sensor registers the captures' partitions itself (one bulk insert)
            assert result.dynamic_partitions_requests == []
            registered = instance.get_dynamic_partitions(CAPTURES_PARTITIONS_NAME)
            assert registered[-expected:] == keys
            requested += keys
            cursor = result.cursor
        context = dg.build_sensor_context(
            instance=instance,
            cursor=cursor,
            resources={"storage": resource},
            definitions=build_defs(resource),
        )
        assert isinstance(sensors.landing_sensor(context), dg.SkipReason)
    assert sorted(requested) == ["s-1", "s-2", "s-3"]
