"""Holos HDF5 export: the file against the format, read back with h5py and xarray.

Exports of every source kind (synthetic Vision Pro, iPhone, WebXR, MANO video and the
real Project Aria MPS sample) are written once per module and checked with the format's
own reading recipes; a small hand-built trajectory pins the clock rules exactly.
"""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from ego_assets.formats import holos_h5
from ego_assets.formats.holos_clock import Rows, hold_rows, same_rows
from ego_assets.formats.holos_hdf5 import read_opaque, write_file
from ego_assets.formats.holos_hdf5_validate import validate_file
from ego_assets.formats.holos_writer import ARKIT_OMITTED, CONVENTIONS
from ego_assets.trajectory.joints import ARKIT27
from ego_assets.trajectory.model import CaptureInfo, Trajectory
from ego_assets.trajectory.streams import make_stream
from ego_assets_tests.holos_files import HISTORY, KINDS


@pytest.mark.parametrize("kind", KINDS)
def test_every_source_kind_exports_a_conforming_file(holos_exports, kind):
    path, notes = holos_exports[kind]
    assert validate_file(path) == []
    assert notes["samples"] > 0
    with h5py.File(path) as f:
        assert f.attrs["Conventions"] == CONVENTIONS
        assert list(f["data"]) == ["demo_0"]
        assert f["data/demo_0"].attrs["num_samples"] == notes["samples"] == f["data"].attrs["total"]
        assert [m.decode() for m in f["mask/all"][...]] == ["demo_0"]
        env = json.loads(f["data"].attrs["env_args"])
        assert env["env_name"] == "holos_capture" and env["type"] == 99
        assert env["env_kwargs"]["source_kind"] == kind
    # nothing dropped silently: what the capture lacks is listed
    assert notes["skipped"], kind
    assert all(set(s) == {"item", "reason"} for s in notes["skipped"])


def test_vision_pro_h5py_reading_recipe(holos_exports, holos_captures):
    """The format's h5py recipe: joint lookup by name and procedure steps as slices."""
    path, _ = holos_exports["holos-visionpro"]
    _, trajectory = holos_captures["holos-visionpro"]
    right = trajectory.stream("hand_right_world")
    with h5py.File(path) as f:
        assert f.attrs["title"]
        demo = f["data/demo_0"]
        t = demo["time"][...]
        joints_world = demo["obs/hand_right_joints_world"][...]
        joints = [j.decode() for j in f["joint"][...]]
        assert len(joints) == 26 and ARKIT_OMITTED[0] not in joints
        assert f["joint"].attrs["omitted_joints"] == "forearmArm"
        wrist = joints_world[:, joints.index("forearmWrist"), :3]
        steps = f["holos/events/procedure_steps"][...]
        titles = [s["title"].decode() for s in steps]
        ts = demo["timestamp_ns"][...]
        assert demo.attrs["master_clock"].startswith("hand_right_world")
    # the master clock is the right hand's own clock: values are the samples themselves
    np.testing.assert_array_equal(ts, np.unique(right.timestamp_ns))
    src = ARKIT27.index("forearmWrist")
    tracked = right.fields["hand_valid"] & right.fields["joint_valid"][:, src]
    expected = np.where(tracked[:, None], right.fields["position"][:, src], np.nan)
    np.testing.assert_array_equal(wrist, expected)
    assert titles == [s.title for s in trajectory.annotations.procedure_steps]
    for s, step in zip(steps, trajectory.annotations.procedure_steps, strict=True):
        start, end = s["start_sample"], s["end_sample"]
        assert start < end
        assert t[start] >= step.t_start and (start == 0 or t[start - 1] < step.t_start)
        assert t[end - 1] < step.t_end and (end == len(t) or t[end] >= step.t_end)


def test_xarray_reads_obs_and_raw_groups_with_their_scales(holos_exports, holos_captures):
    xr = pytest.importorskip("xarray")
    path, _ = holos_exports["holos-visionpro"]
    _, trajectory = holos_captures["holos-visionpro"]
    obs = xr.open_dataset(path, group="data/demo_0/obs", engine="h5netcdf")
    sel = obs["hand_right_joints_world"].sel(joint="forearmWrist", pose_component=["x", "y", "z"])
    assert sel.dims == ("time", "pose_component") and sel.shape[1] == 3
    tree = xr.open_datatree(path, engine="h5netcdf", phony_dims="sort")
    demo = tree["data/demo_0"].to_dataset()
    assert np.issubdtype(demo["time"].dtype, np.datetime64)
    start = np.datetime64(trajectory.info.start_ns, "ns")
    first = np.datetime64(int(demo["timestamp_ns"].values[0]), "ns")
    assert abs(demo["time"].values[0] - first) < np.timedelta64(1, "us")
    assert demo["time"].values[0] >= start
    raw = xr.open_dataset(path, group="holos/raw/device_pose", engine="h5netcdf")
    assert dict(raw["pose"].sizes) == {
        "time": len(trajectory.stream("device_pose")),
        "pose_component": 7,
    }
    np.testing.assert_array_equal(
        raw["pose"].values[:, :3], trajectory.stream("device_pose").fields["position"]
    )
    names = {str(v) for v in tree.to_dict()}
    assert not any("phony_dim" in d for node in tree.subtree for d in node.dims), names


def test_media_comes_back_byte_for_byte_with_its_mime_tag(holos_exports, holos_captures):
    path, _ = holos_exports["holos-visionpro"]
    folder, trajectory = holos_captures["holos-visionpro"]
    with h5py.File(path) as f:
        ds = f["media/camera_left"]
        assert ds.id.get_type().get_tag() == b"video/quicktime"
        raw = np.empty(ds.shape, dtype="V1")
        ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=ds.id.get_type())
        assert raw.tobytes() == (folder / "media/camera_left.mov").read_bytes()
        ref = trajectory.media_ref("camera_left")
        assert (ds.attrs["codec"], ds.attrs["width"], ds.attrs["height"]) == (
            ref.codec,
            ref.width,
            ref.height,
        )
        assert ds.attrs["fps"] == pytest.approx(ref.fps)
        tag, audio = read_opaque(f["media/audio"])
        assert tag == "audio/wav" and audio == (folder / "media/audio.wav").read_bytes()
        assert (
            f["media/audio"].attrs["sample_rate_hz"] == trajectory.media_ref("audio").sample_rate_hz
        )
        session = json.loads(f["holos/metadata/session"][()].decode())
        assert session == json.loads((folder / "metadata.json").read_text())
        thumb = f["holos/metadata/thumbnail"]
        assert thumb.dtype == np.uint8 and thumb.ndim == 3 and thumb.shape[2] == 3
        assert thumb.attrs["CLASS"] == b"IMAGE" and thumb.attrs["IMAGE_VERSION"] == b"1.2"
        text = f["holos/transcript/full_text"][()].decode()
        assert text == trajectory.annotations.transcript_text
        segments = f["holos/transcript/segments"][...]
        assert [s["text"].decode() for s in segments] == [
            s.text for s in trajectory.annotations.transcript
        ]
        vlm = f["holos/vlm/output"][...]
        assert [v["output"].decode() for v in vlm] == [v.output for v in trajectory.annotations.vlm]


def test_iphone_actions_are_position_deltas_of_the_wrist_landmark(holos_exports):
    path, _ = holos_exports["holos-iphone"]
    with h5py.File(path) as f:
        demo = f["data/demo_0"]
        actions = demo["actions"][...]
        side = demo["actions"].attrs["source_hand"]
        points = demo[f"obs/hand_{side}_landmarks_3d"][...]
        landmarks = [n.decode() for n in f["landmark"][...]]
        assert demo["obs/imu_accel"].shape == (len(actions), 3)
        assert f["holos/raw/imu"].attrs["source"]
        assert f["holos/raw/hand_landmarks_2d/right/points"].shape[2] == 2
        states = [n.decode() for n in demo["state_component"][...]]
    assert actions.shape == (len(points), 3)
    wrist = points[:, landmarks.index("wrist")]
    ok = np.isfinite(wrist).all(axis=1)
    both = ok[:-1] & ok[1:]
    np.testing.assert_allclose(actions[:-1][both], (wrist[1:] - wrist[:-1])[both])
    assert np.all(actions[-1] == 0) and np.isfinite(actions).all()
    assert states[:7] == [f"device_pose.{c}" for c in ("x", "y", "z", "qx", "qy", "qz", "qw")]
    assert "hand_right_wrist.z" in states and "hand_right_wrist.qw" not in states


def test_other_sources_write_what_they_have_and_list_the_rest(holos_exports):
    webxr_path, webxr_notes = holos_exports["webxr"]
    with h5py.File(webxr_path) as f:
        assert [j.decode() for j in f["joint"][:2]] == ["wrist", "thumb-metacarpal"]
        assert f["data/demo_0/obs/hand_right_joints_world"].shape[1:] == (25, 7)
        assert "holos/raw/pinch" in f and "holos/raw/recorder_slots" in f
    skipped = {s["item"] for s in webxr_notes["skipped"]}
    assert {"obs/hand_left_joints_local", "obs/imu_accel", "holos/transcript"} <= skipped
    mano_path, mano_notes = holos_exports["mano-video"]
    with h5py.File(mano_path) as f:
        assert f["landmark"].attrs["joint_set"] == "mano21"
        assert f["data/demo_0/actions"].shape[1] == 3
        assert "holos/raw/mano_right/betas" in f
        assert f["media/video"].id.get_type().get_tag() == b"video/mp4"
    assert "obs/device_pose" in {s["item"] for s in mano_notes["skipped"]}
    aria_path, _ = holos_exports["aria-mps"]
    with h5py.File(aria_path) as f:
        assert f.attrs["clock"] == "device"
        assert f["data/demo_0/time"].attrs["units"].startswith("seconds since 1970-01-01T")
        assert "device clock" in f["data/demo_0/time"].attrs["comment"]
        assert f["landmark"].attrs["joint_set"] == "aria21"
        assert f["data/demo_0/obs/hand_right_landmarks_3d"].attrs["frame"] == "device"


def _tiny_trajectory() -> Trajectory:
    """Right hand at 10 Hz for 1 s; device pose at 4 Hz with a 0.5 s hole."""
    start = 1_800_000_000_000_000_000
    hand_ns = start + np.arange(10, dtype=np.int64) * 100_000_000
    pos = np.zeros((10, 27, 3))
    pos[:, :, 0] = np.arange(10)[:, None] * 0.01
    rot = np.tile([0.0, 0.0, 0.0, 1.0], (10, 27, 1))
    angle = np.arange(10) * 0.1
    rot[:, 0] = np.stack([np.zeros(10), np.sin(angle / 2), np.zeros(10), np.cos(angle / 2)], 1)
    valid = np.ones(10, bool)
    valid[4] = False
    hand = make_stream(
        "hand_right_world",
        "hand_joints",
        hand_ns,
        start,
        {"position": pos, "rotation": rot, "hand_valid": valid},
        {"joint_set": "arkit27", "hand": "right", "frame": "world"},
    )
    dev_ns = start + np.array([0, 250, 300, 900], dtype=np.int64) * 1_000_000
    device = make_stream(
        "device_pose",
        "pose",
        dev_ns,
        start,
        {
            "position": np.arange(12, dtype=np.float64).reshape(4, 3),
            "rotation": np.tile([0.0, 0.0, 0.0, 1.0], (4, 1)),
            "valid": np.ones(4, bool),
        },
        {"frame": "world"},
    )
    info = CaptureInfo(
        capture_id="tiny", source_kind="holos-visionpro", source_version="t", start_ns=start
    )
    return Trajectory(info=info, streams=(hand, device))


def test_zero_order_hold_nan_rules_and_the_wrist_delta(tmp_path):
    path = tmp_path / "tiny.h5"
    write_file(_tiny_trajectory(), tmp_path, path, history_time=HISTORY)
    assert validate_file(path) == []
    with h5py.File(path) as f:
        demo = f["data/demo_0"]
        dev = demo["obs/device_pose"][:, 0]
        actions = demo["actions"][...]
        wrist = demo["obs/hand_right_joints_world"][:, 0, :]
        assert demo.attrs["resampling"].startswith("zero-order hold")
    # hand samples at 0.0 .. 0.9 s; device at 0, .25, .30, .90 s (x = 0, 3, 6, 9)
    expected = [0, 0, 0, 6, 6, 6, np.nan, np.nan, np.nan, 9]
    np.testing.assert_array_equal(dev, expected)
    assert np.isnan(wrist[4]).all()  # hand not tracked at sample 4
    np.testing.assert_allclose(actions[0, :3], [0.01, 0, 0])
    half = 0.05  # rotation about y by 0.1 rad per sample
    np.testing.assert_allclose(actions[0, 3:], [0, np.sin(half), 0, np.cos(half)], atol=1e-12)
    identity = [0, 0, 0, 0, 0, 0, 1]
    np.testing.assert_array_equal(actions[3], identity)  # sample 4 missing
    np.testing.assert_array_equal(actions[4], identity)
    np.testing.assert_array_equal(actions[-1], identity)


@pytest.mark.parametrize("pick", [None, slice(0, 4), np.array([0, 2, 4]), 3])
@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("masked", ["none", "rows", "entries"])
def test_rows_blocks_are_the_held_array(pick, gather, masked):
    rng = np.random.default_rng(7)
    position = rng.normal(size=(50, 5, 3)).astype(np.float32)
    rotation = rng.normal(size=(50, 5, 4))
    position[3, 1] = np.nan  # a NaN in the source stays NaN
    index = rng.integers(0, 50, size=37) if gather else np.arange(50)
    whole = np.concatenate([position.astype(np.float64), rotation], axis=2)
    whole = whole if pick is None else whole[:, pick]
    t = len(index)
    valid = {
        "none": np.ones(t, bool),
        "rows": rng.random(t) > 0.3,
        "entries": rng.random((t, *whole.shape[1:-1])) > 0.3,
    }[masked]
    expected = hold_rows(whole, index, valid)
    rows = Rows(
        (position, rotation),
        np.dtype(np.float64),
        index=same_rows(index),
        pick=pick,
        valid=None if valid.all() else valid,
    )
    assert (rows.index is None) == (not gather)
    assert rows.shape == expected.shape
    np.testing.assert_array_equal(rows.array(), expected)
    got = np.concatenate([rows.block(a, min(a + 8, t)) for a in range(0, t, 8)])
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.float64


def test_block_size_does_not_change_the_bytes(holos_captures, tmp_path, monkeypatch):
    folder, trajectory = holos_captures["holos-visionpro"]
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    write_file(trajectory, folder, a, history_time=HISTORY)
    monkeypatch.setattr(holos_h5, "BLOCK_BYTES", 1)  # one chunk per write
    write_file(trajectory, folder, b, history_time=HISTORY)
    assert a.read_bytes() == b.read_bytes()


def test_same_inputs_same_bytes_except_history(holos_captures, tmp_path):
    folder, trajectory = holos_captures["holos-iphone"]
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    write_file(trajectory, folder, a, history_time="2026-01-01T00:00:00Z")
    write_file(trajectory, folder, b, history_time="2027-12-31T23:59:59Z")
    da, db = a.read_bytes(), b.read_bytes()
    assert da != db
    assert da.replace(b"2026-01-01T00:00:00Z", b"X" * 20) == db.replace(
        b"2027-12-31T23:59:59Z", b"X" * 20
    )


def test_decode_frames_adds_image_frames_and_frame_indices(holos_captures, tmp_path):
    av = pytest.importorskip("av")
    folder, trajectory = holos_captures["holos-iphone"]
    path = tmp_path / "frames.h5"
    write_file(trajectory, folder, path, decode_frames=True, history_time=HISTORY)
    assert validate_file(path) == []
    frames_stream = trajectory.stream("camera_back_frames")
    with av.open(str(folder / "media/camera_back.mov")) as container:
        first = next(container.decode(video=0)).to_ndarray(format="rgb24")
    with h5py.File(path) as f:
        frames = f["holos/raw/video/camera_back/frames"]
        assert frames.shape == (len(frames_stream), *first.shape)
        assert frames.chunks == (1, *first.shape)
        assert frames.attrs["CLASS"] == b"IMAGE"
        assert frames.attrs["INTERLACE_MODE"] == b"INTERLACE_PIXEL"
        row0 = int(np.flatnonzero(frames_stream.fields["frame_index"] == 0)[0])
        np.testing.assert_array_equal(frames[row0], first)
        index = f["data/demo_0/obs/camera_back_frame_index"][...]
        ts = f["data/demo_0/timestamp_ns"][...]
    nearest = np.abs(frames_stream.timestamp_ns[None, :] - ts[:, None]).min(axis=1)
    np.testing.assert_array_equal(np.abs(frames_stream.timestamp_ns[index] - ts), nearest)


def test_extra_files_are_embedded_verbatim(holos_captures, tmp_path):
    folder, trajectory = holos_captures["webxr"]
    extra = tmp_path / "raw"
    shutil.copytree(folder, extra)
    (extra / "notes").mkdir()
    (extra / "notes/field.bin").write_bytes(bytes(range(256)) * 9)
    with_extra = Trajectory(
        info=trajectory.info,
        streams=trajectory.streams,
        annotations=trajectory.annotations,
        media=trajectory.media,
        files=trajectory.files,
        extra_files=(*trajectory.extra_files, "notes/field.bin"),
    )
    path = tmp_path / "x.h5"
    notes = write_file(with_extra, extra, path, history_time=HISTORY)
    assert "notes/field.bin" in notes.extras
    assert validate_file(path) == []
    with h5py.File(path) as f:
        tag, data = read_opaque(f["holos/files/notes/field.bin"])
    assert tag == "application/octet-stream" and data == bytes(range(256)) * 9


def test_validator_names_deviations(holos_exports, tmp_path):
    path = tmp_path / "broken.h5"
    shutil.copy(holos_exports["holos-visionpro"][0], path)
    with h5py.File(path, "a") as f:
        f.attrs["Conventions"] = "CF-1.8"
        del f["data/demo_0/actions"].attrs["derivation"]
        f["data/demo_0/obs/hand_right_joints_world"].attrs["units"] = "mm"
        f.create_dataset("data/stray", data=[1, 2, 3])
    problems = validate_file(path)
    text = "\n".join(problems)
    assert "Conventions" in text
    assert "/data/demo_0/actions: attribute 'derivation' missing" in problems
    assert "hand_right_joints_world: units must be 'm'" in text
    assert "/data/stray: only demo_<int> groups may live in /data" in problems
