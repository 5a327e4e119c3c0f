"""The mano_video reader: a hand-built clip (frames.csv + npz + mp4) read into the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ego_assets.capture import read_capture
from ego_assets.errors import CaptureFormatError
from ego_assets_tests.factories import write_h264

T = 4
T0_NS = 1793000000000000000
STEP_NS = 33_333_333
N_PCA = 15


def mano_arrays(t: int = T) -> dict[str, np.ndarray]:
    """Known values: left wrist at (0.1 i, 0.2, 0.3); right betas 0.01 * k."""
    trans = np.zeros((2, t, 3), np.float32)
    trans[0, :, 0] = 0.1 * np.arange(t)
    trans[0, :, 1:] = (0.2, 0.3)
    trans[1] = (-0.1, 0.2, 0.3)
    betas = np.zeros((2, t, 10), np.float32)
    betas[1] = 0.01 * np.arange(10)
    valid_detected = np.ones((2, t), bool)
    valid_detected[0, 1] = False  # missed by the detector, filled in afterwards
    valid_infilled = np.ones((2, t), bool)
    valid_infilled[1, 3] = False
    return {
        "trans": trans,
        "root_orient": np.full((2, t, 3), 0.5, np.float32),
        "hand_pose": np.tile(np.linspace(-1, 1, N_PCA, dtype=np.float32), (2, t, 1)),
        "betas": betas,
        "valid_detected": valid_detected,
        "valid_infilled": valid_infilled,
        "joints": np.full((2, t, 21, 3), 0.25, np.float32),
    }


def camera_arrays(t: int = T) -> dict[str, np.ndarray]:
    w2c = np.tile(np.eye(4), (t, 1, 1))
    w2c[:, 2, 3] = 1.5 + 0.01 * np.arange(t)
    return {"world_to_camera": w2c, "intrinsics": np.tile([100.0, 101.0, 16.0, 12.0], (t, 1))}


def write_clip(
    root: Path,
    *,
    mano: dict[str, np.ndarray] | None = None,
    camera: dict[str, np.ndarray] | None = None,
    depth: np.ndarray | None = None,
    meta: dict[str, Any] | None = None,
    frames_csv: str | None = None,
) -> Path:
    """A complete mano_video capture in ``root`` (depth 12x16 float32 unless given)."""
    root.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": "mano-video", "schema_version": 1, "clip_id": "clip-7",
        "dataset_name": "kitchen-hands", "split": "train", "fps": 30, "width": 32, "height": 24,
        "world_frame": "slam_world", "handedness": "right", "up_axis": "Y",
        "mano": {"pose_space": "pca", "n_pca": N_PCA, "flat_hand_mean": False},
        "instructions": ["open the drawer"], "language": "open the top drawer",
        "depth": {"path": "depth.npz", "unit": "m"}, "estimator": "hawor-1.0",
    }  # fmt: skip
    doc.update(meta or {})
    (root / "meta.json").write_text(json.dumps(doc))
    if frames_csv is None:
        frames_csv = "frame_index,timestamp_ns\n" + "".join(
            f"{i},{T0_NS + i * STEP_NS}\n" for i in range(T)
        )
    (root / "frames.csv").write_text(frames_csv)
    np.savez(root / "mano.npz", **(mano_arrays() if mano is None else mano))
    np.savez(root / "camera.npz", **(camera_arrays() if camera is None else camera))
    if doc["depth"] is not None:
        d = np.arange(T * 12 * 16, dtype=np.float32).reshape(T, 12, 16) / 1000
        np.savez_compressed(root / "depth.npz", depth=d if depth is None else depth)
    write_h264(root / "video.mp4", frames=T)
    marker = {"format": "ego-capture-marker", "version": 1, "kind": "mano_video"}
    (root / "ego_capture.json").write_text(json.dumps(marker))
    return root


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory: pytest.TempPathFactory):
    return read_capture("cap-mano", write_clip(tmp_path_factory.mktemp("mano") / "c"))


def read_error(root: Path) -> CaptureFormatError:
    with pytest.raises(CaptureFormatError) as info:
        read_capture("cap-bad", root)
    return info.value


def test_all_streams_run_on_the_video_frame_clock(trajectory):
    expected = [T0_NS + i * STEP_NS for i in range(T)]
    for name in ("mano_left", "mano_right", "video_frames", "depth_frames"):
        assert trajectory.stream(name).timestamp_ns.tolist() == expected
    assert trajectory.info.start_ns == T0_NS
    assert trajectory.stream("mano_left").time[2] == pytest.approx(2 * STEP_NS / 1e9)


def test_mano_parameters_per_hand_in_hawor_order(trajectory):
    left, right = trajectory.stream("mano_left"), trajectory.stream("mano_right")
    np.testing.assert_allclose(left.fields["transl"][2], [0.2, 0.2, 0.3], rtol=1e-6)
    np.testing.assert_allclose(right.fields["transl"][0], [-0.1, 0.2, 0.3], rtol=1e-6)
    np.testing.assert_allclose(right.fields["betas"][3], 0.01 * np.arange(10), rtol=1e-6)
    assert left.fields["betas"][0].tolist() == [0.0] * 10
    assert left.fields["hand_pose"].shape == (T, N_PCA)
    assert left.fields["hand_pose"][0, 0] == -1.0
    assert left.fields["joints"].shape == (T, 21, 3)
    assert left.fields["transl"].dtype == np.float64
    assert dict(left.attrs) == {
        "hand": "left",
        "frame": "world",
        "mano_pose_space": "pca",
        "flat_hand_mean": False,
        "source_file": "mano.npz",
    }


def test_valid_detected_and_valid_infilled_are_kept_separate(trajectory):
    left, right = trajectory.stream("mano_left"), trajectory.stream("mano_right")
    assert left.fields["valid_detected"].tolist() == [True, False, True, True]
    assert left.fields["valid_infilled"].tolist() == [True, True, True, True]
    assert right.fields["valid_detected"].tolist() == [True, True, True, True]
    assert right.fields["valid_infilled"].tolist() == [True, True, True, False]


def test_video_frames_carry_camera_npz(trajectory):
    frames = trajectory.stream("video_frames")
    assert frames.fields["frame_index"].tolist() == [0, 1, 2, 3]
    assert frames.fields["intrinsics"][3].tolist() == [100.0, 101.0, 16.0, 12.0]
    assert frames.fields["world_to_camera"][2, 2, 3] == pytest.approx(1.52)
    assert frames.attrs["media"] == "video"
    assert trajectory.stream("depth_frames").attrs["media"] == "depth"


def test_capture_info_camera_and_annotations(trajectory):
    info = trajectory.info
    assert (info.source_kind, info.dataset_name, info.world_frame) == (
        "mano-video",
        "kitchen-hands",
        "slam_world",
    )
    assert (info.handedness, info.up_axis) == ("right", "Y")
    assert (info.source_capture_id, info.split) == ("clip-7", "train")
    (cam,) = info.cameras
    assert (cam.model, cam.width, cam.height, cam.fx, cam.fy, cam.cx, cam.cy) == (
        "pinhole",
        32,
        24,
        100.0,
        101.0,
        16.0,
        12.0,
    )
    assert trajectory.annotations.instructions == ("open the drawer",)
    assert trajectory.annotations.language == "open the top drawer"


def test_media_and_files(trajectory):
    video = trajectory.media_ref("video")
    assert (video.path, video.mime, video.codec, video.frame_count) == (
        "video.mp4",
        "video/mp4",
        "h264",
        4,
    )
    assert video.frames_stream == "video_frames"
    depth = trajectory.media_ref("depth")
    assert (depth.path, depth.kind, depth.mime, depth.unit) == (
        "depth.npz",
        "depth",
        "application/x-npz",
        "m",
    )
    assert (depth.width, depth.height, depth.frame_count) == (16, 12, 4)
    assert depth.frames_stream == "depth_frames"
    assert [(f.role, f.path) for f in trajectory.files] == [("clip_metadata", "meta.json")]
    assert trajectory.extra_files == ()


def test_clip_without_depth_or_joints(tmp_path):
    mano = mano_arrays()
    del mano["joints"]
    traj = read_capture("cap-nd", write_clip(tmp_path / "c", mano=mano, meta={"depth": None}))
    assert not traj.has_stream("depth_frames")
    assert [m.role for m in traj.media] == ["video"]
    assert "joints" not in traj.stream("mano_left").fields


def test_duplicate_timestamps_and_nan_are_kept_and_flagged(tmp_path):
    mano = mano_arrays()
    mano["trans"][1, 2, 0] = np.nan
    steps = [100, 200, 200, 150]  # a repeat and a backwards step, both plausible times
    csv = "frame_index,timestamp_ns\n" + "".join(f"{i},{T0_NS + s}\n" for i, s in enumerate(steps))
    traj = read_capture("cap-f", write_clip(tmp_path / "c", mano=mano, frames_csv=csv))
    right = traj.stream("mano_right")
    assert (right.timestamp_ns - T0_NS).tolist() == steps
    assert right.flags.tolist() == [0, 0, 1 | 4, 2]
    assert np.isnan(right.fields["transl"][2, 0])


# --- malformed input -------------------------------------------------------------


def test_missing_mano_npz_is_named(tmp_path):
    root = write_clip(tmp_path / "c")
    (root / "mano.npz").unlink()
    err = read_error(root)
    assert (err.file, err.reason) == ("mano.npz", "file is missing")


def test_empty_frames_csv_is_named(tmp_path):
    root = write_clip(tmp_path / "c")
    (root / "frames.csv").write_text("")
    err = read_error(root)
    assert (err.file, err.reason) == ("frames.csv", "file is empty")


def test_array_with_too_few_frames_names_array_and_axis(tmp_path):
    mano = mano_arrays()
    mano["trans"] = mano["trans"][:, :3]
    err = read_error(write_clip(tmp_path / "c", mano=mano))
    assert (err.file, err.field) == ("mano.npz", "trans")
    assert "axis 1 has size 3, expected T = 4 (frames.csv rows)" in err.reason


def test_betas_with_wrong_count_name_the_axis(tmp_path):
    mano = mano_arrays()
    mano["betas"] = mano["betas"][..., :9]
    err = read_error(write_clip(tmp_path / "c", mano=mano))
    assert (err.file, err.field) == ("mano.npz", "betas")
    assert "axis 2 has size 9, expected 10" in err.reason


def test_hand_pose_must_match_n_pca(tmp_path):
    mano = mano_arrays()
    mano["hand_pose"] = mano["hand_pose"][..., :12]
    err = read_error(write_clip(tmp_path / "c", mano=mano))
    assert err.field == "hand_pose"
    assert "expected P = 15" in err.reason


def test_float_validity_array_is_a_dtype_error(tmp_path):
    mano = mano_arrays()
    mano["valid_detected"] = mano["valid_detected"].astype(np.float32)
    err = read_error(write_clip(tmp_path / "c", mano=mano))
    assert (err.file, err.field) == ("mano.npz", "valid_detected")
    assert "float32 is not boolean" in err.reason


def test_missing_required_array_is_named(tmp_path):
    camera = camera_arrays()
    del camera["intrinsics"]
    err = read_error(write_clip(tmp_path / "c", camera=camera))
    assert (err.file, err.field, err.reason) == ("camera.npz", "intrinsics", "array is missing")


def test_pickled_object_array_is_refused(tmp_path):
    mano = mano_arrays()
    mano["betas"] = np.array([{"x": 1}], dtype=object)
    err = read_error(write_clip(tmp_path / "c", mano=mano))
    assert (err.file, err.field) == ("mano.npz", "betas")


def test_garbage_npz_files_are_named(tmp_path):
    root = write_clip(tmp_path / "c")
    (root / "camera.npz").write_bytes(b"not a zip archive at all")
    err = read_error(root)
    assert err.file == "camera.npz"
    assert "not a readable .npz file" in err.reason
    (root / "camera.npz").unlink()
    write_clip(root)
    (root / "depth.npz").write_bytes(b"PK garbage")
    assert read_error(root).file == "depth.npz"


def test_depth_with_wrong_frame_count_is_named(tmp_path):
    depth = np.zeros((T + 1, 12, 16), np.float32)
    err = read_error(write_clip(tmp_path / "c", depth=depth))
    assert (err.file, err.field) == ("depth.npz", "depth")
    assert "expected (T = 4" in err.reason


def test_malformed_frames_csv_row_is_named(tmp_path):
    csv = f"frame_index,timestamp_ns\n0,{T0_NS}\n1,{T0_NS + 1}\n2,abc\n3,{T0_NS + 3}\n"
    err = read_error(write_clip(tmp_path / "c", frames_csv=csv))
    assert (err.file, err.field, err.row) == ("frames.csv", "timestamp_ns", 3)


def test_unknown_schema_version_is_refused(tmp_path):
    err = read_error(write_clip(tmp_path / "c", meta={"schema_version": 3}))
    assert (err.file, err.field) == ("meta.json", "schema_version")
    assert "unknown schema_version 3" in err.reason


def test_string_where_a_number_is_in_meta(tmp_path):
    err = read_error(write_clip(tmp_path / "c", meta={"fps": "30"}))
    assert (err.file, err.field) == ("meta.json", "fps")


def test_reads_a_synthetic_mano_video_capture_end_to_end(tmp_path):
    synth = pytest.importorskip("ego_assets.synth")
    if not hasattr(synth, "synthesize"):
        pytest.skip("ego_assets.synth.synthesize is not there yet")
    root = synth.synthesize(
        "mano-video", tmp_path / "s", seconds=1.0, seed=2, depth=True, faults=("dropout",)
    )
    traj = read_capture("synth-mano", root)
    video = traj.stream("video_frames")
    assert len(video) == traj.media_ref("video").frame_count == 30
    for name in ("mano_left", "mano_right", "depth_frames"):
        assert traj.stream(name).timestamp_ns.tolist() == video.timestamp_ns.tolist()
    left = traj.stream("mano_left")
    assert left.fields["betas"].shape == (30, 10)
    # infilling only ever adds valid frames
    assert (left.fields["valid_infilled"] | ~left.fields["valid_detected"]).all()
    assert traj.media_ref("depth").frame_count == 30
