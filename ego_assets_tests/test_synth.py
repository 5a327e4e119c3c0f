"""Synthetic capture generator: layouts, determinism, geometry, video, IMU and faults."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.transform import Rotation

from ego_assets.capture import read_capture
from ego_assets.fixtures import real_fixture
from ego_assets.synth import FAULTS, KINDS, synthesize
from ego_assets.synth.motion import POSE_LIBRARY, make_scene
from ego_assets.synth.video import WRIST_RGB, decode_frames
from ego_assets.trajectory.joints import ARKIT27, VISION21, bones

SECONDS = 2.0
SEED = 7

EXPECTED_FILES = {
    "holos-visionpro": {
        "metadata.json",
        "device_pose.csv",
        "hands/left.csv",
        "hands/right.csv",
        "objects/anchors.csv",
        "media/camera_left.mov",
        "media/camera_right.mov",
        "media/camera_left_frames.csv",
        "media/camera_right_frames.csv",
        "media/audio.wav",
        "calibration/stereo.json",
        "transcript.json",
        "events/procedure_steps.json",
        "vlm/outputs.json",
        "thumbnail.jpg",
        "ego_capture.json",
    },
    "holos-iphone": {
        "metadata.json",
        "device_pose.csv",
        "hands/left_landmarks.csv",
        "hands/right_landmarks.csv",
        "imu.csv",
        "media/camera_back.mov",
        "media/camera_back_frames.csv",
        "media/audio.wav",
        "transcript.json",
        "events/procedure_steps.json",
        "vlm/outputs.json",
        "thumbnail.jpg",
        "ego_capture.json",
    },
    "webxr": {
        "session.json",
        "slots.jsonl",
        "segments.json",
        "camera/outward.mp4",
        "camera/frames.csv",
        "calibration.json",
        "task-specification.json",
        "ego_capture.json",
    },
    "mano-video": {
        "meta.json",
        "video.mp4",
        "frames.csv",
        "mano.npz",
        "camera.npz",
        "ego_capture.json",
    },
}
POSE = ["tx", "ty", "tz", "qx", "qy", "qz", "qw"]
ANCHOR_HEADER = [f"anchor_{c}" for c in ("px", "py", "pz", "qx", "qy", "qz", "qw")]
SKELETON_HEADER = ["t_mono_s", "hand_tracked", *ANCHOR_HEADER] + [
    f"{j}_{c}" for j in ARKIT27 for c in ("px", "py", "pz", "qx", "qy", "qz", "qw", "tracked")
]
LANDMARK_HEADER = ["t_mono_s", "hand_confidence"] + [
    f"{j}_{c}" for j in VISION21 for c in ("x", "y", "z", "u", "v", "c")
]
IMU_HEADER = ["t_mono_s"] + [
    f"{n}_{a}" for n in ("user_accel", "rotation_rate", "gravity") for a in "xyz"
]
IMU_HEADER = [
    h + ("_g" if not h.startswith("rotation") and h != "t_mono_s" else "") for h in IMU_HEADER
]
FRAMES_HEADER = ["frame_index", "t_mono_s", "fx", "fy", "cx", "cy", *POSE]


@pytest.fixture(scope="module")
def make(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cache: dict[tuple[str, int, tuple[str, ...]], Path] = {}

    def _make(kind: str, seed: int = SEED, faults: tuple[str, ...] = ()) -> Path:
        key = (kind, seed, faults)
        if key not in cache:
            out = tmp_path_factory.mktemp("synth") / kind
            cache[key] = synthesize(kind, out, seconds=SECONDS, seed=seed, faults=faults)
        return cache[key]

    return _make


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _slots(root: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in (root / "slots.jsonl").read_text().splitlines()]


def _library_bone_lengths(side: str) -> np.ndarray:
    records = json.loads((real_fixture(POSE_LIBRARY) / f"handy_poses_{side}.json").read_text())
    pos = np.asarray([r["jointPositions"] for r in records], dtype=float) / 1000.0
    pairs = np.asarray(bones("webxr25"))
    return np.median(np.linalg.norm(pos[:, pairs[:, 1]] - pos[:, pairs[:, 0]], axis=-1), axis=0)


def _bone_lengths(joints: np.ndarray) -> np.ndarray:
    pairs = np.asarray(bones("webxr25"))
    return np.linalg.norm(joints[..., pairs[:, 1], :] - joints[..., pairs[:, 0], :], axis=-1)


def _skeleton_positions(root: Path, side: str, frame: str = "world") -> np.ndarray:
    """(T, 25, 3) ARKit joints shared with WebXR, as the holos reader gives them.

    ``frame="world"`` joints are derived by the reader as anchor ∘ local.
    """
    stream = read_capture(root.name, root).stream(f"hand_{side}_{frame}")
    return np.asarray(stream.fields["position"][:, :25])


def _red_centroid(img: np.ndarray, side: str = "right") -> np.ndarray:
    ref = np.asarray(WRIST_RGB[side], dtype=float)
    mask = np.abs(img.astype(float) - ref).max(axis=-1) < 60
    ys, xs = np.nonzero(mask)
    assert len(xs) > 20, "wrist marker not found"
    return np.array([xs.mean(), ys.mean()])


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_gives_identical_bytes_and_another_seed_differs(kind, make, tmp_path):  # type: ignore[no-untyped-def]
    first = _files(make(kind, faults=FAULTS))
    again = synthesize(kind, tmp_path / "again", seconds=SECONDS, seed=SEED, faults=FAULTS)
    assert _files(again) == first
    other = _files(make(kind, seed=SEED + 1, faults=FAULTS))
    assert set(other) == set(first)
    differing = [name for name in first if first[name] != other[name]]
    assert len(differing) >= len(first) - 4  # only constant documents may coincide


@pytest.mark.parametrize("kind", KINDS)
def test_capture_has_exactly_the_documented_files_and_a_complete_marker(kind, make):  # type: ignore[no-untyped-def]
    root = make(kind)
    files = _files(root)
    assert set(files) == EXPECTED_FILES[kind]
    marker = json.loads(files["ego_capture.json"])
    assert marker["format"] == "ego-capture-marker" and marker["version"] == 1
    assert marker["kind"] == {"webxr": "webxr", "mano-video": "mano_video"}.get(kind, "holos")
    listed = marker["files"]
    assert [f["path"] for f in listed] == sorted(set(files) - {"ego_capture.json"})
    for entry in listed:
        data = files[entry["path"]]
        assert entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()


def test_holos_csv_headers_and_json_keys_follow_the_doc(make):  # type: ignore[no-untyped-def]
    vp, ph = make("holos-visionpro"), make("holos-iphone")

    def header(p: Path) -> list[str]:
        return p.read_text().splitlines()[0].split(",")

    assert header(vp / "device_pose.csv") == ["t_mono_s", *POSE]
    assert header(ph / "device_pose.csv") == ["t_mono_s", *POSE, "tracking_state"]
    for side in ("left", "right"):
        assert header(vp / f"hands/{side}.csv") == SKELETON_HEADER
        assert header(ph / f"hands/{side}_landmarks.csv") == LANDMARK_HEADER
    assert len(SKELETON_HEADER) == 225 and len(LANDMARK_HEADER) == 128
    first = (vp / "hands/right.csv").read_text().splitlines()[1].split(",")
    wrist, _ = make_scene(SEED, SECONDS).hands["right"].wrist(np.array([0.0]))
    assert first[2:5] == [f"{v:.6f}" for v in wrist[0]]  # anchor = wrist, 6 decimals
    assert header(ph / "imu.csv") == IMU_HEADER
    assert header(vp / "media/camera_left_frames.csv") == FRAMES_HEADER
    assert header(ph / "media/camera_back_frames.csv") == FRAMES_HEADER
    assert header(vp / "objects/anchors.csv") == [
        "t_mono_s",
        "anchor_id",
        "name",
        *POSE,
        "is_tracked",
    ]
    meta = json.loads((vp / "metadata.json").read_text())
    assert meta["schema_version"] == 1 and meta["modality"] == "visionpro"
    assert set(meta["clock"]) == {"mono_origin_epoch_ns", "capture_start_mono_s"}
    first_t = float((vp / "device_pose.csv").read_text().splitlines()[1].split(",")[0])
    assert first_t == meta["clock"]["capture_start_mono_s"]
    stereo = json.loads((vp / "calibration/stereo.json").read_text())
    assert set(stereo["cameras"]) == {"camera_left", "camera_right"}
    cam = stereo["cameras"]["camera_left"]
    assert cam["model"] == "pinhole-radtan5" and len(cam["camera_from_device"]) == 16
    tokens = json.loads((vp / "transcript.json").read_text())["segments"][0]["tokens"]
    assert all(0.0 <= t["start_s"] < t["end_s"] <= SECONDS for t in tokens)
    steps = json.loads((vp / "events/procedure_steps.json").read_text())["steps"]
    assert steps[0]["t_start"] == 0.0 and steps[-1]["t_end"] == SECONDS
    vlm = json.loads((vp / "vlm/outputs.json").read_text())
    assert set(vlm[0]) == {"t_mono", "t_wall", "prompt", "output"}


def test_webxr_and_mano_video_keys_follow_the_doc(make):  # type: ignore[no-untyped-def]
    wx, mv = make("webxr"), make("mano-video")
    session = json.loads((wx / "session.json").read_text())
    assert {"user_agent", "camera_device_id", "study", "task_specification"} <= set(session)
    statuses = {v["status"] for v in session["capture_characteristics"].values()}
    assert statuses == {"known", "unknown", "unavailable"}
    slots = _slots(wx)
    assert len(slots) == SECONDS * 30 and [s["slot"] for s in slots] == list(range(60))
    gaps = [s for s in slots if s["gap"]]
    assert gaps and all(set(s) == {"slot", "t_ms", "gap"} for s in gaps)
    full = next(s for s in slots if not s["gap"])
    assert len(full["right"]["joints"]) == 25 and len(full["right"]["joints"][0]) == 9
    radii = np.asarray([j[7] for j in full["right"]["joints"]])
    assert radii[1:].min() >= 0.005 and radii.max() <= 0.025
    thumb, index = (
        np.asarray(full["right"]["joints"][4][:3]),
        np.asarray(full["right"]["joints"][9][:3]),
    )
    assert full["pinch"]["right"] == pytest.approx(np.linalg.norm(thumb - index), abs=2e-6)
    assert (wx / "camera/frames.csv").read_text().splitlines()[0] == "frame_index,t_ms,slot"
    calib = json.loads((wx / "calibration.json").read_text())
    assert {"rms_error_px", "sample_count", "captured_at", "camera_from_head"} <= set(calib)
    segs = json.loads((wx / "segments.json").read_text())["segments"]
    assert segs[0]["start_slot"] == 0 and segs[-1]["end_slot"] == 60
    assert all(a["end_slot"] == b["start_slot"] for a, b in itertools.pairwise(segs))
    mano = np.load(mv / "mano.npz", allow_pickle=False)
    t = 60
    shapes = {k: mano[k].shape for k in mano.files}
    assert shapes == {
        "trans": (2, t, 3),
        "root_orient": (2, t, 3),
        "hand_pose": (2, t, 15),
        "betas": (2, t, 10),
        "valid_detected": (2, t),
        "valid_infilled": (2, t),
        "joints": (2, t, 21, 3),
    }
    assert np.isfinite(mano["joints"]).all()
    np.testing.assert_array_equal(mano["trans"], mano["joints"][:, :, 0])
    assert (mano["betas"] == mano["betas"][:, :1]).all()
    cam = np.load(mv / "camera.npz", allow_pickle=False)
    assert cam["world_to_camera"].shape == (t, 4, 4) and cam["intrinsics"].shape == (t, 4)
    assert (mv / "frames.csv").read_text().splitlines()[0] == "frame_index,timestamp_ns"
    meta = json.loads((mv / "meta.json").read_text())
    assert meta["mano"] == {"pose_space": "pca", "n_pca": 15, "flat_hand_mean": False}
    assert meta["depth"] is None


def test_mano_video_depth_is_written_only_on_request(tmp_path):  # type: ignore[no-untyped-def]
    out = synthesize("mano-video", tmp_path / "d", seconds=1.0, seed=1, depth=True)
    depth = np.load(out / "depth.npz", allow_pickle=False)["depth"]
    assert depth.shape == (30, 60, 80) and depth.dtype == np.float32
    assert 0.2 < depth.min() < 1.0 and depth.max() == pytest.approx(1.5)
    assert json.loads((out / "meta.json").read_text())["depth"] == {
        "path": "depth.npz",
        "unit": "m",
    }


def test_bone_lengths_are_constant_and_equal_the_pose_library(make):  # type: ignore[no-untyped-def]
    vp, wx = make("holos-visionpro"), make("webxr")
    slots = [s for s in _slots(wx) if not s["gap"]]
    for side in ("left", "right"):
        ref = _library_bone_lengths(side)
        assert ref.min() > 0.01 and ref.max() < 0.08
        for frame in ("world", "local"):
            lengths = _bone_lengths(_skeleton_positions(vp, side, frame))
            assert np.abs(lengths - ref).max() < 3e-6  # 6-decimal (µm) values
        xr = np.asarray([[j[:3] for j in s[side]["joints"]] for s in slots])
        assert np.abs(_bone_lengths(xr) / ref - 1).max() < 1e-6
    local = pd.read_csv(vp / "hands/right.csv")
    assert np.allclose(local[["wrist_px", "wrist_py", "wrist_pz"]], 0.0, atol=1e-8)
    forearm = local[["forearmArm_px", "forearmArm_py", "forearmArm_pz"]].to_numpy()
    assert np.allclose(forearm, [0.0, 0.0, 0.29], atol=1e-8)


def test_holos_video_frame_shows_the_right_wrist_at_its_projection(make):  # type: ignore[no-untyped-def]
    vp = make("holos-visionpro")
    frames, _ = decode_frames(vp / "media/camera_left.mov")
    table = pd.read_csv(vp / "media/camera_left_frames.csv")
    hand = pd.read_csv(vp / "hands/right.csv")
    for k in (5, 40):
        row = table.iloc[k]
        wrist = hand.loc[3 * k, ["anchor_px", "anchor_py", "anchor_pz"]].to_numpy(float)
        assert hand.loc[3 * k, "t_mono_s"] == pytest.approx(row["t_mono_s"], abs=1e-6)
        rot = Rotation.from_quat(row[["qx", "qy", "qz", "qw"]].to_numpy(float))
        x, y, z = rot.inv().apply(wrist - row[["tx", "ty", "tz"]].to_numpy(float))
        expected = [row["cx"] + row["fx"] * x / -z, row["cy"] - row["fy"] * y / -z]
        assert np.linalg.norm(_red_centroid(frames[k]) - expected) < 2.0


def test_webxr_video_frame_shows_the_right_wrist_at_its_distorted_projection(make):  # type: ignore[no-untyped-def]
    wx = make("webxr")
    frames, _ = decode_frames(wx / "camera/outward.mp4")
    calib = json.loads((wx / "calibration.json").read_text())
    m = np.asarray(calib["camera_from_head"]).reshape(4, 4)
    k1, k2, p1, p2, k3 = calib["distortion"]
    slots = _slots(wx)
    k = next(i for i in (10, 11, 12, 13) if not slots[i]["gap"])
    head = slots[k]["head"]
    wrist = np.asarray(slots[k]["right"]["joints"][0][:3])
    p_head = Rotation.from_quat(head["q"]).inv().apply(wrist - np.asarray(head["p"]))
    x, y, z = m[:3, :3] @ p_head + m[:3, 3]
    a, b = x / z, y / z
    r2 = a * a + b * b
    radial = 1 + k1 * r2 + k2 * r2**2 + k3 * r2**3
    ad = a * radial + 2 * p1 * a * b + p2 * (r2 + 2 * a * a)
    bd = b * radial + p1 * (r2 + 2 * b * b) + 2 * p2 * a * b
    expected = [calib["fx"] * ad + calib["cx"], calib["fy"] * bd + calib["cy"]]
    assert np.linalg.norm(_red_centroid(frames[k]) - expected) < 2.0


def test_mano_video_frame_shows_the_right_wrist_at_its_projection(make):  # type: ignore[no-untyped-def]
    mv = make("mano-video")
    frames, _ = decode_frames(mv / "video.mp4")
    cam = np.load(mv / "camera.npz")
    joints = np.load(mv / "mano.npz")["joints"]
    k = 25
    x, y, z = (cam["world_to_camera"][k] @ np.append(joints[1, k, 0], 1.0))[:3]
    fx, fy, cx, cy = cam["intrinsics"][k]
    assert np.linalg.norm(_red_centroid(frames[k]) - [fx * x / z + cx, fy * y / z + cy]) < 2.0


def test_iphone_imu_is_consistent_with_the_device_pose(make):  # type: ignore[no-untyped-def]
    ph = make("holos-iphone")
    imu = pd.read_csv(ph / "imu.csv")
    pose = pd.read_csv(ph / "device_pose.csv")
    gyro = imu[["rotation_rate_x", "rotation_rate_y", "rotation_rate_z"]].to_numpy()
    rot = Rotation.from_quat(pose[["qx", "qy", "qz", "qw"]].to_numpy())
    # imu row 150 and pose row 90 are both at t = 1.5 s
    assert imu.t_mono_s[150] == pytest.approx(pose.t_mono_s[90], abs=1e-9)
    integrated = Rotation.identity()
    for i in range(150):
        integrated = integrated * Rotation.from_rotvec(0.5 * (gyro[i] + gyro[i + 1]) * 0.01)
    truth = rot[0].inv() * rot[90]
    assert truth.magnitude() > 0.01
    assert (integrated.inv() * truth).magnitude() < 1e-5
    gravity = imu[["gravity_x_g", "gravity_y_g", "gravity_z_g"]].to_numpy()
    np.testing.assert_allclose(gravity[50], rot[30].inv().apply([0, -1, 0]), atol=1e-6)
    user = imu[["user_accel_x_g", "user_accel_y_g", "user_accel_z_g"]].to_numpy()
    assert 1e-5 < np.abs(user).max() < 0.05  # small head motion, in g


def test_iphone_landmarks_project_into_camera_back_with_lower_left_origin(make):  # type: ignore[no-untyped-def]
    ph = make("holos-iphone")
    lm = pd.read_csv(ph / "hands/right_landmarks.csv")
    cams = pd.read_csv(ph / "media/camera_back_frames.csv")
    row, cam = lm.iloc[4], cams.iloc[8]  # both t = 4/15 s
    assert row["t_mono_s"] == pytest.approx(cam["t_mono_s"], abs=1e-6)
    p = row[["wrist_x", "wrist_y", "wrist_z"]].to_numpy(float)
    rot = Rotation.from_quat(cam[["qx", "qy", "qz", "qw"]].to_numpy(float))
    x, y, z = rot.inv().apply(p - cam[["tx", "ty", "tz"]].to_numpy(float))
    u_px, v_px = cam["cx"] + cam["fx"] * x / -z, cam["cy"] - cam["fy"] * y / -z
    assert row["wrist_u"] == pytest.approx(u_px / 320, abs=1e-6)
    assert row["wrist_v"] == pytest.approx(1 - v_px / 240, abs=1e-6)
    conf = lm[[f"{j}_c" for j in VISION21]].to_numpy()
    assert (conf > 0).all() and (conf <= 1).all() and (lm.hand_confidence > 0).all()


def _timestamp_faults(t: np.ndarray) -> tuple[int, int]:
    d = np.diff(t)
    return int((d == 0).sum()), int((d < 0).sum())


def _timestamp_columns(root: Path, kind: str) -> dict[str, np.ndarray]:
    if kind == "webxr":
        return {"slots.jsonl": np.asarray([s["t_ms"] for s in _slots(root)])}
    if kind == "mano-video":
        return {"frames.csv": pd.read_csv(root / "frames.csv").timestamp_ns.to_numpy()}
    names = ["device_pose.csv", "hands/right.csv", "hands/right_landmarks.csv", "imu.csv"]
    return {n: pd.read_csv(root / n).t_mono_s.to_numpy() for n in names if (root / n).exists()}


@pytest.mark.parametrize("kind", KINDS)
def test_clean_captures_have_monotonic_timestamps_and_faulted_ones_do_not(kind, make):  # type: ignore[no-untyped-def]
    for name, t in _timestamp_columns(make(kind), kind).items():
        assert _timestamp_faults(t) == (0, 0), name
    for name, t in _timestamp_columns(make(kind, faults=FAULTS), kind).items():
        dup, back = _timestamp_faults(t)
        assert dup >= 3 and back >= 3, name


def _longest_run(mask: np.ndarray) -> int:
    best = run = 0
    for v in mask:
        run = run + 1 if v else 0
        best = max(best, run)
    return best


def test_dropout_and_never_seen_hand_are_in_the_raw_files(make):  # type: ignore[no-untyped-def]
    vp = make("holos-visionpro", faults=("dropout", "hand_never_seen"))
    right = pd.read_csv(vp / "hands/right.csv")
    lost = right.hand_tracked.to_numpy() == 0
    assert _longest_run(lost) >= 45  # >= 0.5 s at 90 Hz
    first = int(np.argmax(lost))
    held = right.iloc[first:][lost[first:]]
    assert (
        (
            held.drop(columns=["t_mono_s", "hand_tracked"]).filter(like="_p")
            == right.filter(like="_p").iloc[first - 1]
        )
        .all()
        .all()
    )
    assert (held.wrist_tracked == 0).all()
    left_vp = pd.read_csv(vp / "hands/left.csv")
    assert (left_vp.hand_tracked == 0).all()
    assert (left_vp[ANCHOR_HEADER] == [0, 0, 0, 0, 0, 0, 1]).all().all()
    ph = make("holos-iphone", faults=("dropout", "hand_never_seen"))
    assert _longest_run(pd.read_csv(ph / "hands/right_landmarks.csv").hand_confidence == 0) >= 8
    left = pd.read_csv(ph / "hands/left_landmarks.csv")
    assert (left.hand_confidence == 0).all() and (left.filter(like="_c") == 0).all().all()
    slots = [
        s for s in _slots(make("webxr", faults=("dropout", "hand_never_seen"))) if not s["gap"]
    ]
    assert all(s["left"] is None and s["pinch"]["left"] is None for s in slots)
    assert _longest_run([s["right"] is None for s in slots]) >= 14
    assert all((s["right"] is None) == (s["pinch"]["right"] is None) for s in slots)
    mano = np.load(make("mano-video", faults=("dropout", "hand_never_seen")) / "mano.npz")
    assert not mano["valid_detected"][0].any() and not mano["valid_infilled"][0].any()
    assert _longest_run(~mano["valid_detected"][1]) >= 15 and mano["valid_infilled"][1].all()


def test_jitter_breaks_bone_length_constancy(make):  # type: ignore[no-untyped-def]
    vp = make("holos-visionpro", faults=("jitter",))
    lengths = _bone_lengths(_skeleton_positions(vp, "right"))
    assert 0.002 < np.std(lengths - lengths.mean(axis=0)) < 0.01


@pytest.mark.parametrize(
    ("kind", "video", "table"),
    [
        ("holos-visionpro", "media/camera_left.mov", "media/camera_left_frames.csv"),
        ("webxr", "camera/outward.mp4", "camera/frames.csv"),
        ("mano-video", "video.mp4", "frames.csv"),
    ],
)
def test_dropped_video_frames_leave_index_and_timing_gaps(kind, video, table, make):  # type: ignore[no-untyped-def]
    root = make(kind, faults=("dropped_video_frames",))
    index = pd.read_csv(root / table).frame_index.to_numpy()
    assert (np.diff(index) > 1).sum() == 2 and len(index) < SECONDS * 30
    frames, pts = decode_frames(root / video)
    assert len(frames) == len(index)
    np.testing.assert_allclose(pts, index / 30, atol=1e-3)


def test_retried_segment_and_repeated_step(make):  # type: ignore[no-untyped-def]
    segs = json.loads((make("webxr", faults=("retried_segment",)) / "segments.json").read_text())
    segs = segs["segments"]
    i = next(i for i, s in enumerate(segs) if s["outcome"] == "retry")
    nxt = segs[i + 1]
    assert (nxt["cycle"], nxt["repetition"], nxt["take"]) == (
        segs[i]["cycle"],
        segs[i]["repetition"],
        segs[i]["take"] + 1,
    )
    vp = make("holos-visionpro", faults=("retried_segment",))
    steps = json.loads((vp / "events/procedure_steps.json").read_text())["steps"]
    ids = [s["step_id"] for s in steps]
    assert len(ids) == 4 and len(set(ids)) == 3


def test_bad_arguments_are_refused_and_inapplicable_faults_noted(tmp_path, caplog):  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="unknown fault"):
        synthesize("webxr", tmp_path / "a", seconds=1.0, seed=0, faults=("gremlins",))
    with pytest.raises(ValueError, match="unknown capture kind"):
        synthesize("aria", tmp_path / "b", seconds=1.0, seed=0)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x").write_text("x")
    with pytest.raises(FileExistsError):
        synthesize("webxr", tmp_path / "c", seconds=1.0, seed=0)
    with caplog.at_level(logging.INFO, logger="ego_assets.synth"):
        synthesize("mano-video", tmp_path / "d", seconds=1.0, seed=0, faults=("retried_segment",))
    assert "does not apply" in caplog.text
