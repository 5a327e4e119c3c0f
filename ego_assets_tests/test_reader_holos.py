"""The holos reader: exact values from small hand-built Vision Pro and iPhone packages."""

from __future__ import annotations

import importlib
import json
import wave
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ego_assets.capture import read_capture
from ego_assets.capture.holos import HAND_COLUMNS, LANDMARK_COLUMNS
from ego_assets.errors import CaptureFormatError
from ego_assets.trajectory.joints import ARKIT27, VISION21
from ego_assets.trajectory.store import read_trajectory, write_trajectory
from ego_assets.trajectory.streams import SampleFlag
from ego_assets_tests.malformed import set_csv

ORIGIN_NS = 1_793_000_000_000_000_000
START_MONO = 5123.25
HAND_T = (5123.3, 5123.311111, 5123.322222, 5123.333333)
POSE_T = (5123.3, 5123.316667, 5123.333333)


def _write_csv(path: Path, header: list[str] | tuple[str, ...], rows: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(header)] + [",".join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


def hand_value(row: int, joint: int, comp: int, side: str) -> float:
    """Known local (anchor-relative) value of component ``comp`` (px..qw) of ``joint``."""
    base = 1.5 if side == "right" else 0.5
    return round(base + row * 0.1 + joint * 0.001 + comp * 0.0001, 6)


def joint_tracked(row: int, joint: int) -> int:
    return int((row + joint) % 3 != 0)


# Hand anchors (world): right rotated 90 deg about +y at (1 + 0.01 row, 2, 3); left
# unrotated at (-0.2, 1.4, -0.4 + 0.01 row). Quaternions at 6 decimals, as a device writes.
Y90 = (0.0, 0.707107, 0.0, 0.707107)
X90 = (0.707107, 0.0, 0.0, 0.707107)


def anchor_pose(row: int, side: str) -> list[float]:
    if side == "right":
        return [round(1.0 + 0.01 * row, 6), 2.0, 3.0, *Y90]
    return [-0.2, 1.4, round(-0.4 + 0.01 * row, 6), 0.0, 0.0, 0.0, 1.0]


# One joint with a simple local pose: right indexFingerTip at row 0, 10 cm along the
# anchor's x, rotated 90 deg about the anchor's x.
SIMPLE_JOINT = ARKIT27.index("indexFingerTip")
SIMPLE_LOCAL = (0.1, 0.0, 0.0, *X90)


def local_pose(row: int, joint: int, side: str) -> list[float]:
    if (row, joint, side) == (0, SIMPLE_JOINT, "right"):
        return list(SIMPLE_LOCAL)
    return [hand_value(row, joint, k, side) for k in range(7)]


def _hand_rows(side: str) -> list[list[object]]:
    rows: list[list[object]] = []
    for i, t in enumerate(HAND_T):
        row: list[object] = [t, int(i != 2), *anchor_pose(i, side)]
        for j in range(len(ARKIT27)):
            row += local_pose(i, j, side)
            row.append(joint_tracked(i, j))
        rows.append(row)
    return rows


def landmark_value(row: int, joint: int, comp: int, side: str) -> float:
    return round((2.0 if side == "right" else 0.0) + row * 0.1 + joint * 0.001 + comp * 0.0001, 6)


def _landmark_rows(side: str) -> list[list[object]]:
    rows: list[list[object]] = []
    for i, t in enumerate(POSE_T):
        row: list[object] = [t, [0.9, 0.0, 0.75][i]]
        for j in range(len(VISION21)):
            row += [landmark_value(i, j, k, side) for k in range(5)]
            row.append(round(j / 20, 6))
        rows.append(row)
    return rows


def _write_mov(path: Path, frames: int = 3, width: int = 64, height: int = 48) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mov") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            img = np.full((height, width, 3), 40 * i, np.uint8)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _write_wav(path: Path, seconds: float = 0.5, rate: int = 16000) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.zeros(int(seconds * rate), np.int16).tobytes())


# camera_left pose: 90 degrees about +y, at (1, 2, 3)
CAM_Q = (0.0, np.sqrt(0.5), 0.0, np.sqrt(0.5))
CAM_T = (1.0, 2.0, 3.0)


def _write_frames(path: Path) -> None:
    header = ["frame_index", "t_mono_s", "fx", "fy", "cx", "cy", "tx", "ty", "tz"]
    header += ["qx", "qy", "qz", "qw"]
    rows = [
        [i, POSE_T[i], 500.0, 501.0, 32.0, 24.0, *CAM_T, *(round(v, 6) for v in CAM_Q)]
        for i in range(3)
    ]
    _write_csv(path, header, rows)


def write_holos(root: Path, modality: str = "visionpro") -> Path:
    """A small holos package with known values (3-4 rows per CSV) + its marker."""
    root.mkdir(parents=True, exist_ok=True)
    iphone = modality == "iphone"
    _write_holos_metadata(root, modality, iphone)
    _write_holos_tracking(root, iphone)
    _write_holos_media(root, iphone)
    _write_holos_annotations(root)
    (root / "ego_capture.json").write_text(
        json.dumps({"format": "ego-capture-marker", "version": 1, "kind": "holos"})
    )
    return root


def _write_holos_metadata(root: Path, modality: str, iphone: bool) -> None:
    """``metadata.json``: device, app, clock (`ORIGIN_NS`, `START_MONO`), task."""
    meta = {
        "schema": "holos-capture",
        "schema_version": 1,
        "capture_id": "cap-test",
        "organization_id": "org-1",
        "modality": modality,
        "device": {"model": "iPhone 16" if iphone else "Apple Vision Pro", "os": "26.1"},
        "app": {"name": "Holos", "version": "3.2.0"},
        "title": "Pour water",
        "institution": "Test Lab",
        "capture_start": "2026-11-02T10:15:00.000000Z",
        "clock": {"mono_origin_epoch_ns": ORIGIN_NS, "capture_start_mono_s": START_MONO},
        "world_frame": "arkit_world",
        "handedness": "right",
        "up_axis": "Y",
        "task": "pour water into the cup",
        "instructions": ["pick up the jug", "pour"],
    }
    (root / "metadata.json").write_text(json.dumps(meta))


def _write_holos_tracking(root: Path, iphone: bool) -> None:
    """Device pose (a NaN on Vision Pro, tracking states on iPhone), both hands (joints or
    landmarks), two IMU rows and two object anchors."""
    pose_header = ["t_mono_s", "tx", "ty", "tz", "qx", "qy", "qz", "qw"]
    pose_rows: list[list[object]] = [
        [t, 0.1 * i, 1.5, -0.2, 0, 0, 0, 1] for i, t in enumerate(POSE_T)
    ]
    if iphone:
        pose_header.append("tracking_state")
        for row, state in zip(pose_rows, ("normal", "notAvailable", "limited"), strict=True):
            row.append(state)
    else:
        pose_rows[1][1] = "nan"
    _write_csv(root / "device_pose.csv", pose_header, pose_rows)
    for side in ("left", "right"):
        if iphone:
            _write_csv(root / f"hands/{side}_landmarks.csv", LANDMARK_COLUMNS, _landmark_rows(side))
        else:
            _write_csv(root / f"hands/{side}.csv", HAND_COLUMNS, _hand_rows(side))
    imu_header = ["t_mono_s"] + [f"user_accel_{a}_g" for a in "xyz"]
    imu_header += [f"rotation_rate_{a}" for a in "xyz"] + [f"gravity_{a}_g" for a in "xyz"]
    imu_rows = [[POSE_T[0], 0.5, -0.25, 0.1, 0.01, 0.02, 0.03, 0.0, -1.0, 0.0]]
    imu_rows.append([POSE_T[1], 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0])
    _write_csv(root / "imu.csv", imu_header, imu_rows)
    anchor_header = ["t_mono_s", "anchor_id", "name", "tx", "ty", "tz", "qx", "qy", "qz", "qw"]
    _write_csv(
        root / "objects/anchors.csv",
        [*anchor_header, "is_tracked"],
        [
            [POSE_T[0], "a1", "cup", 0.3, 0.9, -0.4, 0, 0, 0, 1, 1],
            [POSE_T[0], "a2", "jug", 0.1, 0.9, -0.4, 0, 0, 0, 1, 0],
        ],
    )


def _write_holos_media(root: Path, iphone: bool) -> None:
    """The camera's frame times and movie, the audio, and (Vision Pro) the stereo
    calibration."""
    camera = "camera_back" if iphone else "camera_left"
    _write_frames(root / f"media/{camera}_frames.csv")
    _write_mov(root / f"media/{camera}.mov")
    _write_wav(root / "media/audio.wav")
    if not iphone:
        cams = {
            name: {
                "model": "pinhole-radtan5",
                "width": 64,
                "height": 48,
                "fx": 500.0,
                "fy": 501.0,
                "cx": 32.0,
                "cy": 24.0,
                "distortion": [0.1, -0.05, 0.001, 0.002, 0.0],
                "camera_from_device": [1, 0, 0, x, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1],
            }
            for name, x in (("camera_left", -0.032), ("camera_right", 0.032))
        }
        (root / "calibration").mkdir()
        (root / "calibration/stereo.json").write_text(
            json.dumps({"baseline_m": 0.064, "cameras": cams})
        )


def _write_holos_annotations(root: Path) -> None:
    """Transcript, procedure steps, VLM outputs, thumbnail and operator notes."""
    (root / "transcript.json").write_text(
        json.dumps(
            {
                "segments": [
                    {
                        "start_s": 0.1,
                        "end_s": 0.9,
                        "text": "pick it up",
                        "is_final": True,
                        "tokens": [
                            {"start_s": 0.1, "end_s": 0.3, "text": "pick"},
                            {"start_s": 0.3, "end_s": 0.9, "text": "it up"},
                        ],
                    }
                ]
            }
        )
    )
    (root / "events").mkdir()
    (root / "events/procedure_steps.json").write_text(
        json.dumps(
            {
                "procedure": {"id": "p1", "title": "Pour", "version": "1"},
                "steps": [
                    {"index": 0, "step_id": "s1", "title": "grasp", "t_start": 0.0, "t_end": 1.5}
                ],
            }
        )
    )
    (root / "vlm").mkdir()
    (root / "vlm/outputs.json").write_text(
        json.dumps(
            [
                {
                    "t_mono": 5125.75,
                    "t_wall": "2026-11-02T10:15:02.5Z",
                    "prompt": "?",
                    "output": "a cup",
                }
            ]
        )
    )
    (root / "thumbnail.jpg").write_bytes(b"\xff\xd8\xff\xd9")
    (root / "notes.txt").write_text("operator notes\n")


@pytest.fixture(scope="module")
def visionpro(tmp_path_factory: pytest.TempPathFactory):
    root = write_holos(tmp_path_factory.mktemp("vp") / "vp-1")
    return read_capture("vp-1", root)


@pytest.fixture(scope="module")
def iphone(tmp_path_factory: pytest.TempPathFactory):
    root = write_holos(tmp_path_factory.mktemp("ip") / "ip-1", "iphone")
    return read_capture("ip-1", root)


def expected_ns(t_mono_s: float) -> int:
    return ORIGIN_NS + round(t_mono_s * 1e6) * 1000


def test_visionpro_local_joints_and_flags_are_the_csv_values(visionpro):
    hand = visionpro.stream("hand_right_local")
    j = ARKIT27.index("thumbTip")
    assert hand.kind == "hand_joints"
    assert dict(hand.attrs) == {
        "joint_set": "arkit27",
        "hand": "right",
        "frame": "wrist",
        "nominal_rate_hz": 90.0,
        "source_file": "hands/right.csv",
    }
    assert hand.fields["position"].shape == (4, 27, 3)
    assert hand.fields["position"][2, j].tolist() == [
        hand_value(2, j, k, "right") for k in (0, 1, 2)
    ]
    assert hand.fields["rotation"][3, 26].tolist() == [
        hand_value(3, 26, k, "right") for k in range(3, 7)
    ]
    assert hand.fields["position"][0, SIMPLE_JOINT].tolist() == [0.1, 0.0, 0.0]
    assert hand.fields["joint_valid"][1].tolist() == [
        bool(joint_tracked(1, jj)) for jj in range(27)
    ]
    assert hand.fields["hand_valid"].tolist() == [True, True, False, True]
    left = visionpro.stream("hand_left_local")
    assert left.fields["position"][0, 0, 0] == hand_value(0, 0, 0, "left") == 0.5


def test_visionpro_world_joint_is_the_anchor_pose_applied_to_the_local_pose(visionpro):
    world = visionpro.stream("hand_right_world")
    assert world.attrs["frame"] == "world" and world.attrs["source_file"] == "hands/right.csv"
    # anchor: 90 deg about +y at (1, 2, 3); local (0.1, 0, 0) is along the anchor's x,
    # which the rotation turns into world -z.
    assert world.fields["position"][0, SIMPLE_JOINT] == pytest.approx([1.0, 2.0, 2.9], abs=1e-12)
    # rotation: (90 deg about y) then (90 deg about x) = (0.5, 0.5, -0.5, 0.5); the local
    # quaternion's 6-decimal norm (1 + 3e-7) is kept, the anchor's is normalized away.
    assert world.fields["rotation"][0, SIMPLE_JOINT] == pytest.approx(
        [0.5, 0.5, -0.5, 0.5], abs=1e-6
    )
    # row 3, thumbTip: local (x, y, z) -> world (1.03 + z, 2 + y, 3 - x)
    x, y, z = (hand_value(3, ARKIT27.index("thumbTip"), k, "right") for k in (0, 1, 2))
    assert world.fields["position"][3, ARKIT27.index("thumbTip")] == pytest.approx(
        [1.03 + z, 2.0 + y, 3.0 - x], abs=1e-12
    )
    left = visionpro.stream("hand_left_world")  # unrotated anchor: a pure translation
    assert left.fields["position"][1, 5].tolist() == pytest.approx(
        [
            hand_value(1, 5, 0, "left") - 0.2,
            hand_value(1, 5, 1, "left") + 1.4,
            hand_value(1, 5, 2, "left") - 0.39,
        ],
        abs=1e-12,
    )
    assert np.array_equal(
        world.fields["joint_valid"], visionpro.stream("hand_right_local").fields["joint_valid"]
    )
    assert world.fields["hand_valid"].tolist() == [True, True, False, True]


def test_visionpro_world_joints_agree_with_scipy_rotation_composition(visionpro):
    world = visionpro.stream("hand_right_world").fields
    local = visionpro.stream("hand_right_local").fields
    anchor = visionpro.stream("hand_right_anchor").fields
    j = local["position"].shape[1]
    rot = Rotation.from_quat(np.repeat(anchor["rotation"], j, axis=0))
    expected_p = rot.apply(local["position"].reshape(-1, 3)) + np.repeat(anchor["position"], j, 0)
    assert world["position"].reshape(-1, 3) == pytest.approx(expected_p, abs=1e-12)
    # scipy normalizes both factors; compare directions of the quaternions
    expected_q = (rot * Rotation.from_quat(local["rotation"].reshape(-1, 4))).as_quat()
    got_q = world["rotation"].reshape(-1, 4)
    got_q = got_q / np.linalg.norm(got_q, axis=1, keepdims=True)
    sign = np.sign(np.sum(got_q * expected_q, axis=1, keepdims=True))
    assert got_q == pytest.approx(expected_q * sign, abs=1e-12)


def test_visionpro_hand_anchor_stream_is_the_anchor_pose_valid_when_the_hand_is_tracked(
    visionpro,
):
    anchor = visionpro.stream("hand_right_anchor")
    assert anchor.kind == "pose"
    assert dict(anchor.attrs) == {
        "hand": "right",
        "frame": "world",
        "nominal_rate_hz": 90.0,
        "source_file": "hands/right.csv",
    }
    assert anchor.fields["position"][2].tolist() == [1.02, 2.0, 3.0]
    assert anchor.fields["rotation"][1].tolist() == list(Y90)
    assert anchor.fields["valid"].tolist() == [True, True, False, True]
    assert anchor.timestamp_ns.tolist() == [expected_ns(t) for t in HAND_T]
    assert visionpro.stream("hand_left_anchor").fields["position"][3].tolist() == [
        -0.2,
        1.4,
        -0.37,
    ]


def test_timestamp_ns_is_origin_plus_rounded_microseconds_and_time_is_capture_relative(visionpro):
    hand = visionpro.stream("hand_left_world")
    assert visionpro.info.start_ns == ORIGIN_NS + 5_123_250_000_000
    assert hand.timestamp_ns.tolist() == [expected_ns(t) for t in HAND_T]
    assert hand.timestamp_ns[1] == ORIGIN_NS + 5_123_311_111_000
    assert hand.time[0] == pytest.approx(0.05, abs=1e-12)
    assert visionpro.info.clock == "epoch"


def test_visionpro_device_pose_valid_is_finiteness_and_nan_is_kept_and_flagged(visionpro):
    pose = visionpro.stream("device_pose")
    assert pose.fields["valid"].tolist() == [True, False, True]
    assert np.isnan(pose.fields["position"][1, 0])
    assert pose.fields["position"][2].tolist() == [0.2, 1.5, -0.2]
    assert pose.flags.tolist() == [0, SampleFlag.NON_FINITE, 0]
    assert pose.attrs["nominal_rate_hz"] == 60.0 and pose.attrs["frame"] == "world"


def test_iphone_tracking_state_sets_device_pose_validity(iphone):
    pose = iphone.stream("device_pose")
    assert pose.fields["tracking_state"].tolist() == ["normal", "notAvailable", "limited"]
    assert pose.fields["valid"].tolist() == [True, False, True]


def test_iphone_landmarks_give_3d_joints_and_2d_uv_with_confidences(iphone):
    lm3 = iphone.stream("hand_right_landmarks_3d")
    lm2 = iphone.stream("hand_right_landmarks_2d")
    j = VISION21.index("thumbTip")
    assert lm3.attrs["joint_set"] == "vision21" and lm3.attrs["frame"] == "world"
    assert lm3.fields["position"][2, j].tolist() == [
        landmark_value(2, j, k, "right") for k in (0, 1, 2)
    ]
    assert lm3.fields["hand_confidence"].tolist() == [0.9, 0.0, 0.75]
    assert lm3.fields["hand_valid"].tolist() == [True, False, True]
    assert lm3.fields["joint_confidence"][0, 20] == 1.0
    assert lm2.kind == "hand_landmarks_2d" and lm2.attrs["image_origin"] == "lower-left"
    assert lm2.fields["uv"][1, j].tolist() == [landmark_value(1, j, k, "right") for k in (3, 4)]
    assert lm2.fields["hand_valid"].tolist() == [True, False, True]
    assert not iphone.has_stream("hand_right_world")


def test_imu_acceleration_is_converted_from_g_to_metres_per_second_squared(iphone):
    imu = iphone.stream("imu")
    assert imu.fields["accel"][0].tolist() == pytest.approx([4.903325, -2.4516625, 0.980665])
    assert imu.fields["gravity"][0].tolist() == pytest.approx([0.0, -9.80665, 0.0])
    assert imu.fields["gyro"][0].tolist() == [0.01, 0.02, 0.03]
    assert imu.attrs["frame"] == "device"


def test_camera_frames_world_to_camera_is_the_inverse_of_the_camera_pose(visionpro):
    frames = visionpro.stream("camera_left_frames")
    w2c = frames.fields["world_to_camera"][0]
    # camera rotated +90 deg about y at (1, 2, 3): world point (1, 2, 2) is 1 m along
    # world -z from the camera, which is camera +x after the rotation is undone.
    assert w2c @ np.array([1.0, 2.0, 2.0, 1.0]) == pytest.approx([1.0, 0.0, 0.0, 1.0], abs=1e-6)
    assert w2c @ np.array([*CAM_T, 1.0]) == pytest.approx([0, 0, 0, 1], abs=1e-6)
    assert frames.fields["frame_index"].tolist() == [0, 1, 2]
    assert frames.fields["intrinsics"][1].tolist() == [500.0, 501.0, 32.0, 24.0]
    assert frames.attrs["media"] == "camera_left"


def test_object_anchors_are_read_in_long_format(visionpro):
    objects = visionpro.stream("object_pose")
    assert objects.fields["anchor_id"].tolist() == ["a1", "a2"]
    assert objects.fields["anchor_name"].tolist() == ["cup", "jug"]
    assert objects.fields["valid"].tolist() == [True, False]
    assert objects.fields["position"][0].tolist() == [0.3, 0.9, -0.4]
    # same timestamp twice: long format, flagged as a duplicate time like any stream
    assert objects.flags.tolist() == [0, SampleFlag.DUPLICATE_TIMESTAMP]


def test_info_cameras_and_media_references(visionpro, iphone):
    info = visionpro.info
    assert info.source_kind == "holos-visionpro" and iphone.info.source_kind == "holos-iphone"
    assert info.capture_id == "vp-1" and info.source_capture_id == "cap-test"
    assert info.organization_id == "org-1"
    assert info.device == "Apple Vision Pro (26.1)" and info.app == "Holos 3.2.0"
    assert info.world_frame == "arkit_world" and info.modality == "visionpro"
    left = info.cameras[0]
    assert (left.camera, left.width, left.fx, left.distortion[0]) == ("camera_left", 64, 500.0, 0.1)
    assert left.camera_from_device[3] == -0.032
    video = visionpro.media_ref("camera_left")
    assert (video.mime, video.codec, video.width, video.height) == (
        "video/quicktime",
        "h264",
        64,
        48,
    )
    assert video.frame_count == 3 and video.fps == 30.0
    assert video.frames_stream == "camera_left_frames" and video.start_ns == expected_ns(POSE_T[0])
    audio = visionpro.media_ref("audio")
    assert (audio.mime, audio.sample_rate_hz, audio.channels) == ("audio/wav", 16000, 1)
    assert audio.duration_s == 0.5
    back = iphone.info.cameras[0]
    assert (back.camera, back.width, back.height, back.fy, back.cx) == (
        "camera_back",
        64,
        48,
        501.0,
        32.0,
    )


def test_annotations_files_and_extras(visionpro):
    ann = visionpro.annotations
    assert ann.instructions == ("pick up the jug", "pour")
    assert ann.language == "pour water into the cup"
    assert ann.procedure_steps[0].step_id == "s1" and ann.procedure_steps[0].t_end == 1.5
    assert ann.transcript_text == "pick it up"
    assert [(t.segment, t.text) for t in ann.transcript_tokens] == [(0, "pick"), (0, "it up")]
    assert ann.vlm[0].time == 2.5 and ann.vlm[0].output == "a cup"
    roles = {f.path: f.role for f in visionpro.files}
    assert roles == {
        "metadata.json": "session_metadata",
        "calibration/stereo.json": "stereo_calibration",
        "thumbnail.jpg": "thumbnail",
        "events/procedure_steps.json": "procedure_steps",
        "transcript.json": "transcript",
        "vlm/outputs.json": "vlm",
    }
    assert visionpro.extra_files == ("notes.txt",)


def test_trajectory_round_trips_through_the_store(visionpro, tmp_path):
    back = read_trajectory(write_trajectory(visionpro, tmp_path / "episode"))
    hand = back.stream("hand_right_world")
    assert np.array_equal(
        hand.fields["position"], visionpro.stream("hand_right_world").fields["position"]
    )
    assert back.info == visionpro.info


def test_duplicate_and_backwards_times_are_kept_in_file_order(tmp_path):
    root = write_holos(tmp_path / "cap")
    rows = _hand_rows("left")
    rows[2][0] = rows[1][0]
    rows[3][0] = 5123.2
    _write_csv(root / "hands/left.csv", HAND_COLUMNS, rows)
    hand = read_capture("cap", root).stream("hand_left_world")
    assert hand.timestamp_ns.tolist() == [
        expected_ns(t) for t in (HAND_T[0], HAND_T[1], HAND_T[1], 5123.2)
    ]
    assert hand.flags.tolist() == [
        0,
        0,
        SampleFlag.DUPLICATE_TIMESTAMP,
        SampleFlag.BACKWARDS_TIMESTAMP,
    ]


def _replace_line(rel: str, line_no: int, edit: Callable[[str], str]) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        lines = (root / rel).read_text().splitlines()
        lines[line_no] = edit(lines[line_no])
        (root / rel).write_text("\n".join(lines) + "\n")

    return apply


def _drop_joint(root: Path) -> None:
    header = [c for c in HAND_COLUMNS if not c.startswith("forearmArm_")]
    rows = [row[: len(header)] for row in _hand_rows("right")]
    _write_csv(root / "hands/right.csv", header, rows)


def _edit_meta(key: str, value: object) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        meta = json.loads((root / "metadata.json").read_text())
        meta[key] = value
        (root / "metadata.json").write_text(json.dumps(meta))

    return apply


BAD_INPUTS = {
    "missing file": (
        lambda root: (root / "hands/left.csv").unlink(),
        "hands/left.csv",
        None,
        None,
        "missing",
    ),
    "empty file": (
        lambda root: (root / "device_pose.csv").write_text(""),
        "device_pose.csv",
        None,
        None,
        "empty",
    ),
    "short row": (
        _replace_line("hands/left.csv", 3, lambda line: line.rsplit(",", 1)[0]),
        "hands/left.csv",
        None,
        3,
        "malformed CSV",
    ),
    "long row": (
        _replace_line("imu.csv", 2, lambda line: line + ",7"),
        "imu.csv",
        None,
        2,
        "malformed CSV",
    ),
    "missing column": (
        _replace_line("device_pose.csv", 0, lambda line: line.replace(",qw", ",w")),
        "device_pose.csv",
        "qw",
        0,
        "missing column",
    ),
    "text in a float column": (
        set_csv("hands/right.csv", 2, "thumbTip_py", "abc"),
        "hands/right.csv",
        "thumbTip_py",
        2,
        "malformed CSV",
    ),
    "tracked flag not 0/1": (
        set_csv("hands/right.csv", 4, "wrist_tracked", "2"),
        "hands/right.csv",
        "wrist_tracked",
        4,
        "0 or 1",
    ),
    "hand flag not an integer": (
        set_csv("hands/left.csv", 1, "hand_tracked", "yes"),
        "hands/left.csv",
        "hand_tracked",
        1,
        "malformed CSV",
    ),
    "text in an anchor column": (
        set_csv("hands/left.csv", 3, "anchor_qw", "x"),
        "hands/left.csv",
        "anchor_qw",
        3,
        "malformed CSV",
    ),
    "no anchor columns": (
        _replace_line("hands/right.csv", 0, lambda line: line.replace(",anchor_px", ",px")),
        "hands/right.csv",
        "anchor_px",
        0,
        "missing column",
    ),
    "26 joints": (_drop_joint, "hands/right.csv", "forearmArm_px", 0, "missing column"),
    "unknown schema_version": (
        _edit_meta("schema_version", 2),
        "metadata.json",
        "schema_version",
        None,
        "unknown",
    ),
    "malformed JSON": (
        lambda root: (root / "metadata.json").write_text('{"schema": "holos-capture",\n'),
        "metadata.json",
        None,
        2,
        "malformed JSON",
    ),
    "malformed transcript item": (
        lambda root: (root / "transcript.json").write_text(
            json.dumps({"segments": [{"start_s": 0, "end_s": 1, "text": 3, "is_final": True}]})
        ),
        "transcript.json",
        "text",
        1,
        "expected str",
    ),
    "non-finite time": (
        set_csv("objects/anchors.csv", 2, "t_mono_s", "nan"),
        "objects/anchors.csv",
        "t_mono_s",
        2,
        "not finite",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_an_error_naming_file_field_and_row(tmp_path, case):
    break_it, file, field, row, reason = BAD_INPUTS[case]
    root = write_holos(tmp_path / "bad")
    break_it(root)
    with pytest.raises(CaptureFormatError) as info:
        read_capture("bad", root)
    err = info.value
    assert (err.capture, err.file, err.field, err.row) == ("bad", file, field, row)
    assert reason in str(err)
    assert f"file {file!r}" in str(err)
    if field is not None:
        assert f"field {field!r}" in str(err)
    if row is not None:
        assert f"row {row}" in str(err)


def test_iphone_tracking_state_outside_the_enum_is_an_error(tmp_path):
    root = write_holos(tmp_path / "cap", "iphone")
    set_csv("device_pose.csv", 3, "tracking_state", "lost")(root)
    with pytest.raises(CaptureFormatError, match="field 'tracking_state', row 3"):
        read_capture("cap", root)


def _synthesize():
    try:
        module = importlib.import_module("ego_assets.synth")
    except ImportError:
        return None
    return getattr(module, "synthesize", None)


@pytest.mark.parametrize("kind", ["holos-visionpro", "holos-iphone"])
def test_synthetic_holos_capture_reads(tmp_path, kind):
    synthesize = _synthesize()
    if synthesize is None:
        pytest.skip("ego_assets.synth.synthesize is not available yet")
    folder = Path(synthesize(kind, tmp_path / "syn", seconds=2.0, seed=3))
    trajectory = read_capture(folder.name, folder)
    assert trajectory.info.source_kind == kind
    pose = trajectory.stream("device_pose")
    assert 100 <= len(pose) <= 140  # ~60 Hz over 2 s
    assert np.all(np.diff(pose.timestamp_ns) > 0)
    hand_name = "hand_right_world" if kind == "holos-visionpro" else "hand_right_landmarks_3d"
    assert np.isfinite(trajectory.stream(hand_name).fields["position"]).all()
    assert not any(s.flags.any() for s in trajectory.streams)  # no faults injected
    for video in (m for m in trajectory.media if m.kind == "video"):
        assert video.frame_count == len(trajectory.stream(video.frames_stream))
    if kind == "holos-iphone":
        gravity = np.linalg.norm(trajectory.stream("imu").fields["gravity"], axis=1)
        assert gravity == pytest.approx(np.full(len(gravity), 9.80665), abs=1e-4)
