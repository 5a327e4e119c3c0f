"""The webxr reader: a hand-built CERES journal read into the canonical model."""

from __future__ import annotations

import hashlib
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ego_assets.capture import read_capture
from ego_assets.errors import CaptureFormatError
from ego_assets.trajectory.model import Characteristic, StudyInfo
from ego_assets_tests.factories import write_h264

ORIGIN_MS = 1793000000000.0
RATE_HZ = 30
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) SecretBrowser/99.1"
DEVICE_ID = "cam-device-7f3a9c1e5b"
HALF = math.sqrt(0.5)
# head pose at slot 1: 90 degrees about +Y, at (1, 2, 3)
HEAD_Q = [0.0, HALF, 0.0, HALF]
HEAD_P = [1.0, 2.0, 3.0]
# OpenCV camera looking along the head's -Z, 5 cm above the head origin
CAMERA_FROM_HEAD = [1, 0, 0, 0, 0, -1, 0, 0.05, 0, 0, -1, 0, 0, 0, 0, 1]


def t_ms(slot: int) -> float:
    return slot * 1000.0 / RATE_HZ


def exact_ns(ms: float) -> int:
    """round((time_origin_epoch_ms + ms) * 1e6) in exact arithmetic (no float64 rounding)."""
    return round((Fraction(ORIGIN_MS) + Fraction(ms)) * 1_000_000)


def slot_ns(slot: int) -> int:
    return exact_ns(t_ms(slot))


def hand_joints(offset: float, n: int = 25) -> list[list[Any]]:
    """Joint j at (offset + j/100, 0.1 * j, -0.5), identity rotation, radius 5 mm + j/10 mm."""
    return [
        [offset + j / 100, 0.1 * j, -0.5, 0.0, 0.0, 0.0, 1.0, 0.005 + j / 10000, j != 7]
        for j in range(n)
    ]


def default_slots() -> list[dict[str, Any]]:
    """Six slots: slot 2 has no right hand, slot 3 is a gap, slot 4's head is untracked."""
    slots = []
    for s in range(6):
        rec: dict[str, Any] = {"slot": s, "t_ms": t_ms(s), "gap": False}
        rec["head"] = {"tracked": s != 4, "p": HEAD_P if s == 1 else [0, 1.6, 0], "q": HEAD_Q}
        rec["left"] = {"tracked": True, "joints": hand_joints(0.1 * s)}
        rec["right"] = None if s == 2 else {"tracked": s != 5, "joints": hand_joints(-0.2)}
        rec["pinch"] = {"left": 0.043 if s == 1 else 0.02, "right": None if s == 2 else 0.05}
        slots.append(rec)
    slots[3] = {"slot": 3, "t_ms": t_ms(3), "gap": True}
    return slots


def write_journal(
    root: Path,
    *,
    slots: list[dict[str, Any]] | None = None,
    session: dict[str, Any] | None = None,
    calibration: bool = True,
) -> Path:
    """A complete webxr capture folder in ``root`` (returns it)."""
    root.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": "ceres-journal",
        "schema_version": 1,
        "session_id": "sess-1",
        "episode_id": "ep-1",
        "recorder_rate_hz": RATE_HZ,
        "reference_space": "local-floor",
        "time_origin_epoch_ms": ORIGIN_MS,
        "camera": {"id": "outward", "width": 32, "height": 24, "fps": RATE_HZ},
        "capture_characteristics": {
            "frame_rate": {"status": "known", "value": 30},
            "exposure": {"status": "unknown"},
            "depth": {"status": "unavailable"},
        },
        "study": {"headset_id": "hs-4", "demonstrator_id": "otter", "raw_audio_retained": False},
        "task": "stack the cups",
        "instructions": ["pick up the red cup", "place it on the blue cup"],
        "task_specification": {"path": "task-specification.json", "version": "1.0.0"},
        "user_agent": USER_AGENT,
        "camera_device_id": DEVICE_ID,
    }
    doc.update(session or {})
    (root / "session.json").write_text(json.dumps(doc))
    lines = [json.dumps(s) for s in (default_slots() if slots is None else slots)]
    (root / "slots.jsonl").write_text("\n".join(lines) + "\n")
    segments = [
        {"segment_id": "s1", "task": "stack", "cycle": 0, "repetition": 0, "take": 0,
         "outcome": "retry", "start_slot": 1, "end_slot": 4, "annotations": {"note": "dropped"}},
        {"segment_id": "s2", "task": "stack", "cycle": 0, "repetition": 0, "take": 1,
         "outcome": "success", "start_slot": 4, "end_slot": 6},
    ]  # fmt: skip
    (root / "segments.json").write_text(json.dumps({"segments": segments}))
    write_h264(root / "camera" / "outward.mp4", frames=4, rate_hz=RATE_HZ)
    frames = "frame_index,t_ms,slot\n" + "".join(
        f"{i},{t_ms(s) + 1.0},{s}\n" for i, s in enumerate((0, 1, 3, 4))
    )
    (root / "camera" / "frames.csv").write_text(frames)
    if calibration:
        calib = {
            "model": "pinhole-radtan5", "width": 32, "height": 24, "fx": 30.0, "fy": 31.0,
            "cx": 16.0, "cy": 12.0, "distortion": [0.1, -0.05, 0.001, 0.002, 0.0],
            "rms_error_px": 0.42, "sample_count": 18, "captured_at": "2026-11-02T10:00:00Z",
            "camera_from_head": CAMERA_FROM_HEAD,
        }  # fmt: skip
        (root / "calibration.json").write_text(json.dumps(calib))
    (root / "task-specification.json").write_text('{"title": "Cup stacking", "steps": []}')
    (root / "notes.txt").write_text("operator notes")
    marker = {"format": "ego-capture-marker", "version": 1, "kind": "webxr"}
    (root / "ego_capture.json").write_text(json.dumps(marker))
    return root


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory: pytest.TempPathFactory):
    root = write_journal(tmp_path_factory.mktemp("webxr") / "cap-webxr")
    return read_capture("cap-webxr", root)


def read_error(root: Path) -> CaptureFormatError:
    with pytest.raises(CaptureFormatError) as info:
        read_capture("cap-bad", root)
    return info.value


def test_slot_streams_have_one_row_per_journal_slot_including_gaps(trajectory):
    for name in ("recorder_slots", "head", "hand_left", "hand_right", "pinch"):
        s = trajectory.stream(name)
        assert len(s) == 6
        assert s.timestamp_ns.tolist() == [slot_ns(i) for i in range(6)]
    slots = trajectory.stream("recorder_slots")
    assert slots.fields["slot_index"].tolist() == [0, 1, 2, 3, 4, 5]
    assert slots.fields["gap"].tolist() == [False, False, False, True, False, False]
    assert slots.attrs["rate_hz"] == 30
    assert slot_ns(1) == 1793000000033333333
    assert trajectory.info.start_ns == slot_ns(0)
    # CERES keeps the recorder's monotonic time as the source timestamp, in seconds.
    assert slots.fields["source_time"].tolist() == [t_ms(i) / 1000.0 for i in range(6)]
    assert trajectory.info.source_capture_id == "ep-1"


def test_hand_joint_position_radius_and_flags_at_a_slot(trajectory):
    left = trajectory.stream("hand_left")
    assert left.attrs["joint_set"] == "webxr25"
    assert left.attrs["frame"] == "world"
    np.testing.assert_allclose(left.fields["position"][2, 10], [0.2 + 0.1, 1.0, -0.5])
    assert left.fields["radius"][2, 10] == pytest.approx(0.006)
    assert left.fields["rotation"][2, 10].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert not left.fields["joint_valid"][2, 7]
    assert left.fields["joint_valid"][2, 8]
    assert left.fields["hand_valid"].tolist() == [True, True, True, False, True, True]


def test_null_hands_and_gap_slots_are_nan_with_false_flags(trajectory):
    right = trajectory.stream("hand_right")
    assert np.isnan(right.fields["position"][2]).all()
    assert np.isnan(right.fields["radius"][3]).all()
    assert not right.fields["joint_valid"][2].any()
    assert not right.fields["joint_valid"][3].any()
    # slot 5: the hand is present but not tracked: values kept, hand flag False
    assert right.fields["hand_valid"].tolist() == [True, True, False, False, True, False]
    np.testing.assert_allclose(right.fields["position"][5, 0], [-0.2, 0.0, -0.5])
    assert right.flags[2] and right.flags[3] and not right.flags[5]


def test_head_pose_valid_is_tracked_and_not_gap(trajectory):
    head = trajectory.stream("head")
    assert head.fields["valid"].tolist() == [True, True, True, False, False, True]
    assert head.fields["position"][1].tolist() == HEAD_P
    assert np.isnan(head.fields["position"][3]).all()
    assert head.attrs["frame"] == "world"


def test_pinch_distance_and_null_pinch(trajectory):
    pinch = trajectory.stream("pinch")
    assert pinch.fields["left"][1] == 0.043
    assert np.isnan(pinch.fields["right"][2])
    assert np.isnan(pinch.fields["left"][3])
    assert pinch.fields["right"][0] == 0.05


def test_camera_frames_world_to_camera_from_head_pose_and_calibration(trajectory):
    frames = trajectory.stream("camera_outward_frames")
    assert frames.fields["frame_index"].tolist() == [0, 1, 2, 3]
    assert frames.timestamp_ns[1] == exact_ns(t_ms(1) + 1.0)
    assert frames.fields["intrinsics"][0].tolist() == [30.0, 31.0, 16.0, 12.0]
    # head_from_world for R_y(90deg) at (1, 2, 3): R^T = [[0,0,-1],[0,1,0],[1,0,0]], -R^T p
    head_from_world = np.array([[0, 0, -1, 3], [0, 1, 0, -2], [1, 0, 0, -1], [0, 0, 0, 1.0]])
    expected = np.array(CAMERA_FROM_HEAD, dtype=float).reshape(4, 4) @ head_from_world
    np.testing.assert_allclose(frames.fields["world_to_camera"][1], expected, atol=1e-12)
    # the head origin (1, 2, 3) is at camera y = +0.05 (camera 5 cm above, y down)
    np.testing.assert_allclose(
        frames.fields["world_to_camera"][1] @ [1, 2, 3, 1], [0, 0.05, 0, 1], atol=1e-12
    )
    # frame 2 sits on the gap slot, frame 3 on the untracked head: NaN
    assert np.isnan(frames.fields["world_to_camera"][2]).all()
    assert np.isnan(frames.fields["world_to_camera"][3]).all()
    assert np.isfinite(frames.fields["world_to_camera"][0]).all()


def test_segments_take_times_from_slots_and_keep_retry(trajectory):
    s1, s2 = trajectory.annotations.segments
    assert (s1.outcome, s1.start_slot, s1.end_slot) == ("retry", 1, 4)
    assert s1.start_ns == slot_ns(1)
    assert s1.end_ns == slot_ns(4)
    assert dict(s1.annotations) == {"note": "dropped"}
    assert (s2.take, s2.outcome) == (1, "success")
    assert s2.end_ns == slot_ns(5) + round(1e9 / RATE_HZ)  # end_slot past the journal


def test_capture_info_conventions_calibration_and_study(trajectory):
    info = trajectory.info
    assert info.source_kind == "webxr"
    assert (info.world_frame, info.handedness, info.up_axis) == ("local-floor", "right", "Y")
    assert info.recorder_rate_hz == 30.0
    (cam,) = info.cameras
    assert (cam.camera, cam.model, cam.width, cam.fx, cam.cy) == (
        "outward",
        "pinhole-radtan5",
        32,
        30.0,
        12.0,
    )
    assert cam.distortion == (0.1, -0.05, 0.001, 0.002, 0.0)
    assert (cam.rms_error_px, cam.sample_count) == (0.42, 18)
    assert cam.camera_from_device == tuple(float(v) for v in CAMERA_FROM_HEAD)
    assert Characteristic("frame_rate", "known", 30) in info.characteristics
    assert Characteristic("exposure", "unknown") in info.characteristics
    assert Characteristic("depth", "unavailable") in info.characteristics
    assert info.study == StudyInfo(
        headset_id="hs-4", demonstrator_id="otter", raw_audio_retained=False
    )
    assert trajectory.annotations.language == "stack the cups"
    assert trajectory.annotations.instructions[1] == "place it on the blue cup"


def test_task_specification_is_hashed_and_kept(trajectory, tmp_path):
    spec = trajectory.info.task_specification
    content = b'{"title": "Cup stacking", "steps": []}'
    assert spec.sha256 == hashlib.sha256(content).hexdigest()
    assert (spec.version, spec.path, spec.title) == (
        "1.0.0",
        "task-specification.json",
        "Cup stacking",
    )


def test_media_files_and_extras(trajectory):
    video = trajectory.media_ref("camera_outward")
    assert (video.path, video.mime, video.codec) == ("camera/outward.mp4", "video/mp4", "h264")
    assert (video.width, video.height, video.frame_count, video.fps) == (32, 24, 4, 30.0)
    assert video.frames_stream == "camera_outward_frames"
    roles = {f.role: f.path for f in trajectory.files}
    assert roles == {
        "camera_calibration": "calibration.json",
        "task_specification": "task-specification.json",
    }
    assert trajectory.extra_files == ("notes.txt",)


def test_user_agent_and_camera_device_id_never_enter_the_trajectory(trajectory):
    text = json.dumps(trajectory.header_to_dict())
    for stream in trajectory.streams:
        text += json.dumps({k: str(v) for k, v in stream.attrs.items()})
        for arr in stream.fields.values():
            if arr.dtype.kind in "OU":
                text += " ".join(map(str, arr.ravel()))
    assert "SecretBrowser" not in text
    assert USER_AGENT not in text
    assert DEVICE_ID not in text
    assert "session.json" not in text


def test_without_calibration_frames_have_no_camera_model(tmp_path):
    traj = read_capture("cap-nocal", write_journal(tmp_path / "c", calibration=False))
    frames = traj.stream("camera_outward_frames")
    assert set(frames.fields) == {"frame_index"}
    assert traj.info.cameras == ()


def test_duplicate_and_backwards_times_are_kept_and_flagged(tmp_path):
    slots = default_slots()
    slots[2]["t_ms"] = slots[1]["t_ms"]
    slots[5]["t_ms"] = 10.0
    traj = read_capture("cap-faults", write_journal(tmp_path / "c", slots=slots))
    rec = traj.stream("recorder_slots")
    assert rec.timestamp_ns[2] == rec.timestamp_ns[1]
    assert rec.flags.tolist() == [0, 0, 1, 0, 0, 2]


# --- malformed input: every error names file, field and row -------------------------


def test_missing_slots_file_is_named(tmp_path):
    root = write_journal(tmp_path / "c")
    (root / "slots.jsonl").unlink()
    err = read_error(root)
    assert (err.file, err.reason) == ("slots.jsonl", "file is missing")
    assert "cap-bad" in str(err)


def test_empty_slots_file_is_named(tmp_path):
    root = write_journal(tmp_path / "c")
    (root / "slots.jsonl").write_text("")
    err = read_error(root)
    assert (err.file, err.reason) == ("slots.jsonl", "file is empty")


def test_malformed_json_line_names_the_line(tmp_path):
    root = write_journal(tmp_path / "c")
    lines = (root / "slots.jsonl").read_text().splitlines()
    lines[2] = lines[2][:40]
    (root / "slots.jsonl").write_text("\n".join(lines) + "\n")
    err = read_error(root)
    assert (err.file, err.row) == ("slots.jsonl", 3)
    assert "malformed JSON line" in err.reason


def test_wrong_joint_count_names_hand_joints_and_line(tmp_path):
    slots = default_slots()
    slots[1]["left"]["joints"] = hand_joints(0.0, n=24)
    err = read_error(write_journal(tmp_path / "c", slots=slots))
    assert (err.file, err.field, err.row) == ("slots.jsonl", "left.joints", 2)
    assert "expected 25 joints, got 24" in err.reason


def test_string_where_a_number_is_names_field_and_line(tmp_path):
    slots = default_slots()
    slots[3]["t_ms"] = "100.0"
    err = read_error(write_journal(tmp_path / "c", slots=slots))
    assert (err.file, err.field, err.row) == ("slots.jsonl", "t_ms", 4)
    assert "expected a number, got str" in err.reason


def test_string_inside_a_joint_names_the_joint(tmp_path):
    slots = default_slots()
    slots[4]["right"]["joints"][6][2] = "x"
    err = read_error(write_journal(tmp_path / "c", slots=slots))
    assert (err.field, err.row) == ("right.joints", 5)
    assert "joint 6: value 2: expected a number, got str" in err.reason


def test_a_tracked_value_that_is_not_0_or_1_is_a_format_error(tmp_path):
    slots = default_slots()
    slots[4]["right"]["joints"][6][8] = 0.5  # must not be read as tracked
    err = read_error(write_journal(tmp_path / "c", slots=slots))
    assert (err.file, err.field, err.row) == ("slots.jsonl", "right.joints", 5)
    assert "joint 6: tracked value 0.5 is not 0 or 1" in err.reason


def test_short_head_position_names_head_p(tmp_path):
    slots = default_slots()
    slots[0]["head"]["p"] = [1.0, 2.0]
    err = read_error(write_journal(tmp_path / "c", slots=slots))
    assert (err.field, err.row) == ("head.p", 1)


def test_unknown_schema_version_is_refused(tmp_path):
    err = read_error(write_journal(tmp_path / "c", session={"schema_version": 2}))
    assert (err.file, err.field) == ("session.json", "schema_version")
    assert "unknown schema_version 2" in err.reason


def test_malformed_frames_csv_row_is_named(tmp_path):
    root = write_journal(tmp_path / "c")
    (root / "camera" / "frames.csv").write_text("frame_index,t_ms,slot\n0,1.0,0\n1,abc,1\n")
    err = read_error(root)
    assert (err.file, err.field, err.row) == ("camera/frames.csv", "t_ms", 2)


def test_bad_segment_outcome_names_segment_row(tmp_path):
    root = write_journal(tmp_path / "c")
    doc = json.loads((root / "segments.json").read_text())
    doc["segments"][1]["outcome"] = "maybe"
    (root / "segments.json").write_text(json.dumps(doc))
    err = read_error(root)
    assert (err.file, err.field, err.row) == ("segments.json", "outcome", 2)


def test_calibration_matrix_needs_16_values(tmp_path):
    root = write_journal(tmp_path / "c")
    doc = json.loads((root / "calibration.json").read_text())
    doc["camera_from_head"] = doc["camera_from_head"][:15]
    (root / "calibration.json").write_text(json.dumps(doc))
    err = read_error(root)
    assert (err.file, err.field) == ("calibration.json", "camera_from_head")


def test_reads_a_synthetic_webxr_capture_end_to_end(tmp_path):
    synth = pytest.importorskip("ego_assets.synth")
    if not hasattr(synth, "synthesize"):
        pytest.skip("ego_assets.synth.synthesize is not there yet")
    root = synth.synthesize("webxr", tmp_path / "s", seconds=2.0, seed=5, faults=("dropout",))
    traj = read_capture("synth-webxr", root)
    slots = traj.stream("recorder_slots")
    n = len(slots)
    assert n == 60
    for name in ("head", "hand_left", "hand_right", "pinch"):
        assert traj.stream(name).timestamp_ns.tolist() == slots.timestamp_ns.tolist()
    assert not traj.stream("head").fields["valid"][slots.fields["gap"]].any()
    # calibration and head poses agree with the synthetic scene: a tracked right wrist
    # projects in front of the camera and inside the 320 x 240 image
    frames = traj.stream("camera_outward_frames")
    hand = traj.stream("hand_right")
    row = int(np.flatnonzero(hand.fields["hand_valid"] & traj.stream("head").fields["valid"])[0])
    frame = int(np.flatnonzero(frames.timestamp_ns >= slots.timestamp_ns[row])[0])
    fx, fy, cx, cy = frames.fields["intrinsics"][frame]
    x, y, z, _ = frames.fields["world_to_camera"][frame] @ [*hand.fields["position"][row, 0], 1]
    assert z > 0
    assert 0 <= fx * x / z + cx < 320
    assert 0 <= fy * y / z + cy < 240
