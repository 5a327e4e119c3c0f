import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ego_assets.capture import read_capture
from ego_assets.synth import KINDS, synthesize
from ego_assets.trajectory import store
from ego_assets.trajectory.model import TrajectoryHeader
from ego_assets.trajectory.packed import streams_table, table_streams
from ego_assets.trajectory.store import (
    read_header,
    read_stream,
    read_trajectory,
    write_trajectory,
)
from ego_assets.trajectory.streams import SampleFlag, make_stream, sample_flags
from ego_assets_tests.factories import START_NS, full_trajectory, hand_stream


def test_time_is_seconds_since_capture_start():
    s = hand_stream(n=4, rate_hz=100.0)
    np.testing.assert_allclose(s.time, [0.0, 0.01, 0.02, 0.03])
    assert s.timestamp_ns[1] == START_NS + 10_000_000


def test_flags_mark_duplicate_backwards_and_non_finite_samples_without_repairing():
    ts = np.array([0, 10, 10, 5, 20], dtype=np.int64)
    values = np.zeros((5, 3))
    values[4, 1] = np.nan
    flags = sample_flags(ts, {"position": values})
    assert list(flags) == [0, 0, SampleFlag.DUPLICATE_TIMESTAMP, SampleFlag.BACKWARDS_TIMESTAMP, 4]
    stream = make_stream(
        "p",
        "pose",
        ts,
        0,
        {"position": values, "rotation": np.zeros((5, 4)), "valid": np.ones(5, bool)},
        {"frame": "world"},
    )
    assert list(stream.timestamp_ns) == [0, 10, 10, 5, 20]  # kept as read
    assert np.isnan(stream.fields["position"][4, 1])


def test_stream_rejects_wrong_shapes_dtypes_and_missing_attrs():
    ts = np.arange(3, dtype=np.int64)
    good = {"position": np.zeros((3, 3)), "rotation": np.zeros((3, 4)), "valid": np.ones(3, bool)}
    with pytest.raises(ValueError, match="attr 'frame'"):
        make_stream("p", "pose", ts, 0, good, {})
    with pytest.raises(ValueError, match="field 'rotation'"):
        make_stream("p", "pose", ts, 0, {**good, "rotation": np.zeros((3, 3))}, {"frame": "w"})
    with pytest.raises(ValueError, match="dtype"):
        make_stream("p", "pose", ts, 0, {**good, "valid": np.ones(3)}, {"frame": "w"})
    with pytest.raises(ValueError, match="missing field 'position'"):
        make_stream(
            "p",
            "pose",
            ts,
            0,
            {"rotation": good["rotation"], "valid": good["valid"]},
            {"frame": "w"},
        )
    with pytest.raises(ValueError, match="dim J"):
        make_stream(
            "h",
            "hand_joints",
            ts,
            0,
            {
                "position": np.zeros((3, 25, 3)),
                "radius": np.zeros((3, 24)),
                "hand_valid": np.ones(3, bool),
            },
            {"joint_set": "webxr25", "hand": "left", "frame": "world"},
        )


def test_trajectory_round_trips_through_parquet_and_capture_json(tmp_path):
    original = full_trajectory()
    write_trajectory(original, tmp_path / "ep")
    loaded = read_trajectory(tmp_path / "ep")
    assert loaded.info == original.info
    assert loaded.annotations == original.annotations
    assert loaded.media == original.media and loaded.quirks == original.quirks
    assert [s.name for s in loaded.streams] == sorted(s.name for s in original.streams)
    for stream in original.streams:
        back = loaded.stream(stream.name)
        np.testing.assert_array_equal(back.timestamp_ns, stream.timestamp_ns)
        np.testing.assert_array_equal(back.time, stream.time)
        assert dict(back.attrs) == dict(stream.attrs)
        for name, values in stream.fields.items():
            np.testing.assert_array_equal(back.fields[name], values)
    hand = loaded.stream("hand_right_world")
    assert hand.fields["position"][3, 5].tolist() == pytest.approx([0.003, 0.05, 0.5])
    assert not hand.fields["joint_valid"][2, 3]
    assert loaded.stream("device_pose").fields["tracking_state"][5] == "limited"
    assert loaded.annotations.segments[0].outcome == "retry"


def test_capture_json_lists_streams_with_rows_and_dims(tmp_path):
    write_trajectory(full_trajectory(), tmp_path / "ep")
    header, index = read_header(tmp_path / "ep")
    entry = next(e for e in index if e["name"] == "hand_right_world")
    assert entry["rows"] == 9 and entry["dims"] == {"J": 27}
    assert entry["file"] == "streams.parquet"
    assert header.info.cameras[0].distortion == (0.01, -0.002, 0.0, 0.0, 0.0)
    raw = json.loads((tmp_path / "ep" / "capture.json").read_text())
    assert raw["model_version"] == "ego-trajectory-1"
    assert raw["info"]["quaternion_order"] == "xyzw" and raw["info"]["length_unit"] == "m"


def test_unknown_model_version_and_unknown_keys_are_rejected(tmp_path):
    write_trajectory(full_trajectory(), tmp_path / "ep")
    data = json.loads((tmp_path / "ep" / "capture.json").read_text())
    with pytest.raises(ValueError, match="model_version"):
        TrajectoryHeader.from_dict({**data, "model_version": "ego-trajectory-0"})
    data["info"]["colour"] = "blue"
    with pytest.raises(ValueError, match="unknown keys"):
        TrajectoryHeader.from_dict(data)


def test_rewrite_replaces_the_folder_atomically_and_failed_write_keeps_the_old(tmp_path):
    target = tmp_path / "ep"
    write_trajectory(full_trajectory(), target)
    before = (target / "capture.json").read_bytes()

    class Boom(Exception):
        pass

    class Exploding:
        def __getattr__(self, name):
            raise Boom

    with pytest.raises(Boom):
        write_trajectory(Exploding(), target)  # type: ignore[arg-type]
    assert (target / "capture.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ep"]


def test_same_trajectory_writes_the_same_bytes(tmp_path):
    write_trajectory(full_trajectory(), tmp_path / "a")
    write_trajectory(full_trajectory(), tmp_path / "b")
    for name in ("capture.json", "streams.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_read_single_stream(tmp_path):
    write_trajectory(full_trajectory(), tmp_path / "ep")
    frames = read_stream(tmp_path / "ep", "camera_left_frames")
    assert frames.fields["world_to_camera"].shape == (3, 4, 4)
    assert frames.fields["frame_index"].tolist() == [0, 1, 2]


finite = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=6),
    joints=st.integers(min_value=1, max_value=5),
    list_max_rows=st.sampled_from([store.LIST_MAX_ROWS, 0]),  # 0: a column per component
    data=st.data(),
)
def test_stream_table_coder_round_trips(n, joints, list_max_rows, data):
    ts = np.asarray(
        data.draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n)), dtype=np.int64
    )
    values = np.asarray(
        data.draw(st.lists(finite, min_size=n * joints * 3, max_size=n * joints * 3)),
        dtype=np.float64,
    )
    valid = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    stream = make_stream(
        "h",
        "hand_joints",
        ts,
        0,
        {"position": values.reshape(n, joints, 3), "hand_valid": valid},
        {"joint_set": "x", "hand": "left", "frame": "world"},
    )
    back = table_streams(streams_table([stream], list_max_rows))["h"]
    np.testing.assert_array_equal(back.timestamp_ns, stream.timestamp_ns)
    np.testing.assert_array_equal(back.fields["position"], stream.fields["position"])
    np.testing.assert_array_equal(back.fields["hand_valid"], stream.fields["hand_valid"])
    np.testing.assert_array_equal(back.flags, stream.flags)


LAYOUT1 = Path(__file__).parent / "data" / "trajectory-layout1"  # written by the store before
# layout 2 (commit 7eed8da): every shaped field one column per component, no "layout" key
LAYOUT2 = Path(__file__).parent / "data" / "trajectory-layout2"  # written by 6fb95a9 (layout 2)
# with LIST_MAX_ROWS 6: the pose (6 rows) and frames (3) as list columns, the hand (9 rows)
# a column per component


def _assert_same_streams(a, b):
    by_name = {s.name: s for s in b.streams}
    assert sorted(by_name) == sorted(s.name for s in a.streams)
    for sa in a.streams:
        sb = by_name[sa.name]
        assert (sa.kind, dict(sa.attrs)) == (sb.kind, dict(sb.attrs))
        np.testing.assert_array_equal(sa.timestamp_ns, sb.timestamp_ns)
        np.testing.assert_array_equal(sa.time, sb.time)
        np.testing.assert_array_equal(sa.flags, sb.flags)
        assert sorted(sa.fields) == sorted(sb.fields)
        for name, values in sa.fields.items():
            assert values.dtype == sb.fields[name].dtype
            np.testing.assert_array_equal(values, sb.fields[name])


def test_a_trajectory_is_stored_as_one_file_of_whole_arrays(tmp_path):
    write_trajectory(full_trajectory(), tmp_path / "ep")
    assert sorted(p.name for p in (tmp_path / "ep").iterdir()) == [
        "capture.json",
        "streams.parquet",
    ]
    parquet = pq.ParquetFile(tmp_path / "ep" / "streams.parquet")
    schema = parquet.schema_arrow
    assert parquet.metadata.num_rows == 1 and schema.metadata[b"layout"] == b"3"
    assert schema.field("hand_right_world/position").type.value_type == pa.float64()
    assert schema.field("hand_right_world/joint_valid").type.value_type == pa.bool_()
    assert schema.field("device_pose/tracking_state").type.value_type == pa.string()
    assert "hand_right_world/position.0.0" not in schema.names
    values = pq.read_table(tmp_path / "ep" / "streams.parquet").column("hand_right_world/position")
    original = full_trajectory().stream("hand_right_world").fields["position"]
    assert values[0].values.to_numpy().tolist() == original.reshape(-1).tolist()  # row-major
    entries = json.loads(schema.metadata[b"streams"])
    assert [e["name"] for e in entries] == ["camera_left_frames", "device_pose", "hand_right_world"]
    assert entries[2]["fields"]["position"] == {"shape": [27, 3], "unit": "m", "dtype": "float64"}
    chunks = [parquet.metadata.row_group(0).column(i) for i in range(len(schema))]
    encodings = {chunk.path_in_schema: chunk.encodings for chunk in chunks}
    assert "BYTE_STREAM_SPLIT" in encodings["hand_right_world/position.list.element"]
    _assert_same_streams(read_trajectory(tmp_path / "ep"), full_trajectory())


def test_long_streams_store_one_column_per_component(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "LIST_MAX_ROWS", 4)  # device_pose has 6 rows, the frames 3
    write_trajectory(full_trajectory(), tmp_path / "ep")
    schema = pq.read_schema(tmp_path / "ep" / "streams.parquet")
    assert "device_pose/position.2" in schema.names and "device_pose/position" not in schema.names
    assert "device_pose/tracking_state" in schema.names  # text stays one column
    assert "camera_left_frames/world_to_camera" in schema.names
    _assert_same_streams(read_trajectory(tmp_path / "ep"), full_trajectory())


def test_streams_on_one_clock_store_it_once(tmp_path):
    """A stream with the clock of one before it (bit for bit) names that stream instead
    of storing the clock again; it reads back alone as a whole."""
    full = full_trajectory()
    pose = full.stream("device_pose")
    twin = make_stream(
        "a_twin",
        "pose",
        pose.timestamp_ns,
        START_NS,
        {k: pose.fields[k] for k in ("position", "rotation", "valid")},
        {"frame": "world"},
    )
    later = make_stream(  # same timestamps, another start: another clock
        "z_shifted", "pose", pose.timestamp_ns, START_NS - 1, dict(twin.fields), {"frame": "world"}
    )
    write_trajectory(replace(full, streams=(*full.streams, twin, later)), tmp_path / "ep")
    schema = pq.read_schema(tmp_path / "ep" / "streams.parquet")
    clocks = {e["name"]: e["clock"] for e in json.loads(schema.metadata[b"streams"])}
    assert clocks == {
        "a_twin": None,
        "camera_left_frames": None,
        "device_pose": "a_twin",
        "hand_right_world": None,
        "z_shifted": None,
    }
    assert "device_pose/timestamp_ns" not in schema.names
    assert "z_shifted/time" in schema.names
    alone = read_stream(tmp_path / "ep", "device_pose")
    np.testing.assert_array_equal(alone.timestamp_ns, pose.timestamp_ns)
    np.testing.assert_array_equal(alone.time, pose.time)
    assert alone.fields["tracking_state"].tolist() == pose.fields["tracking_state"].tolist()
    np.testing.assert_array_equal(read_stream(tmp_path / "ep", "z_shifted").time, later.time)


@pytest.mark.parametrize("kind", KINDS)
def test_every_synthetic_kind_reads_back_as_it_was_written(tmp_path, kind):
    """What a capture reader made of each synthetic kind, stored and read back: the same
    header and every array with its dtype, shape and bytes (NaN payloads included)."""
    synthesize(kind, tmp_path / "cap", seconds=2, seed=3, capture_id="rt")
    original = read_capture("rt", tmp_path / "cap")
    write_trajectory(original, tmp_path / "ep")
    streams = [  # name order, fields in their kind's order: as stored
        replace(s, fields={f.name: s.fields[f.name] for f in s.spec.fields if f.name in s.fields})
        for s in sorted(original.streams, key=lambda s: s.name)
    ]
    _assert_identical(read_trajectory(tmp_path / "ep"), replace(original, streams=tuple(streams)))


def test_stores_of_layout_1_read_as_they_were_written():
    schema = pq.read_schema(LAYOUT1 / "streams" / "hand_right_world.parquet")
    assert b"layout" not in schema.metadata and "position.26.2" in schema.names
    old = read_trajectory(LAYOUT1)
    _assert_same_streams(old, full_trajectory())
    assert old.header_to_dict() == full_trajectory().header_to_dict()
    assert read_stream(LAYOUT1, "device_pose").fields["tracking_state"][5] == "limited"


def test_stores_of_layout_2_read_as_they_were_written():
    pose = pq.read_schema(LAYOUT2 / "streams" / "device_pose.parquet")
    assert pose.metadata[b"layout"] == b"2"
    assert pose.field("position").type == pa.list_(pa.float64(), 3)
    hand = pq.read_schema(LAYOUT2 / "streams" / "hand_right_world.parquet")
    assert "position.26.2" in hand.names and "position" not in hand.names
    old = read_trajectory(LAYOUT2)
    _assert_same_streams(old, full_trajectory())
    assert old.header_to_dict() == full_trajectory().header_to_dict()
    frames = read_stream(LAYOUT2, "camera_left_frames")
    assert frames.fields["world_to_camera"].shape == (3, 4, 4)


def test_a_stored_trajectory_is_read_once_per_version_and_shared_read_only(tmp_path):
    target = tmp_path / "ep"
    write_trajectory(full_trajectory(), target)
    first = read_trajectory(target)
    assert read_trajectory(target) is first  # the quality step and three exports: one read
    position = first.stream("hand_right_world").fields["position"]
    assert not position.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        position[0, 0, 0] = 9.0
    # a new write is a new version: read again, with the new values
    changed = full_trajectory()
    moved = changed.stream("hand_right_world").fields["position"]
    moved[0, 0, 0] = 0.125
    write_trajectory(changed, target)
    second = read_trajectory(target)
    assert second is not first
    assert second.stream("hand_right_world").fields["position"][0, 0, 0] == 0.125
    assert first.stream("hand_right_world").fields["position"][0, 0, 0] != 0.125
    store.clear_read_cache()
    third = read_trajectory(target)
    assert third is not second
    _assert_same_streams(third, second)


def _assert_identical(a, b):
    """Same header, streams, attrs and arrays, dtype and bytes (NaN payloads included)."""
    assert a.header_to_dict() == b.header_to_dict()
    assert [(s.name, s.kind, dict(s.attrs)) for s in a.streams] == [
        (s.name, s.kind, dict(s.attrs)) for s in b.streams
    ]
    for x, y in zip(a.streams, b.streams, strict=True):
        pairs = [(x.timestamp_ns, y.timestamp_ns), (x.time, y.time), (x.flags, y.flags)]
        assert list(x.fields) == list(y.fields)
        pairs += [(x.fields[name], y.fields[name]) for name in x.fields]
        for u, v in pairs:
            assert u.dtype == v.dtype and u.shape == v.shape, x.name
            if u.dtype == object:
                assert u.tolist() == v.tolist(), x.name
            else:
                assert u.tobytes() == v.tobytes(), x.name


@pytest.mark.parametrize("list_max_rows", [store.LIST_MAX_ROWS, 4])
def test_a_written_trajectory_is_kept_as_reading_it_back_would_give(
    tmp_path, monkeypatch, list_max_rows
):
    monkeypatch.setattr(store, "LIST_MAX_ROWS", list_max_rows)  # 4: one column per component
    folder = tmp_path / "ep"
    folder.mkdir()
    table = store.write_trajectory_files(full_trajectory(), folder)
    store.clear_read_cache()
    store.remember_written(folder, table)
    kept = read_trajectory(folder)
    store.clear_read_cache()
    read_back = read_trajectory(folder)
    assert kept is not read_back
    _assert_identical(kept, read_back)
    assert not kept.stream("hand_right_world").fields["position"].flags.writeable


def test_the_trajectory_step_hands_quality_what_reading_its_store_gives(tmp_path):
    from ego_assets import pipeline
    from ego_assets.storage import Storage

    storage = Storage(str(tmp_path / "data"))
    for i, kind in enumerate(KINDS):
        key = f"kept-{kind}"
        synthesize(kind, tmp_path / "data" / "landing" / key, seconds=2, seed=i, capture_id=key)
        pipeline.ingest_raw(storage, key)
        store.clear_read_cache()
        pipeline.normalize(storage, key)
        folder = tmp_path / "data" / "trajectory" / key
        assert len(store._READ_CACHE) == 1  # kept by the step, not read
        kept = read_trajectory(folder)
        _assert_identical(kept, store._read_trajectory(folder))


@pytest.mark.parametrize("layout", [1, 2, 3])
def test_a_subset_of_streams_reads_alike_from_every_layout(tmp_path, layout):
    """What a release's fallback derivation reads (`store.read_streams` over index
    entries it picked): the same streams, in the entries' order, from every layout."""
    folder = {1: LAYOUT1, 2: LAYOUT2}.get(layout, tmp_path / "ep")
    if layout == 3:
        write_trajectory(full_trajectory(), folder)
    _, index = read_header(folder)
    picked = [e for e in index if e["kind"] in ("hand_joints", "pose")][::-1]
    streams = store.read_streams(folder, picked)
    assert [s.name for s in streams] == ["hand_right_world", "device_pose"]
    expected = tuple(full_trajectory().stream(s.name) for s in streams)
    _assert_same_streams(SimpleNamespace(streams=streams), SimpleNamespace(streams=expected))
