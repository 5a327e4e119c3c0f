"""Action spaces on each source's streams: what comes exactly, derived, or not at all,
with values recomputed here from the streams or the source files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ego_assets.actions import ActionSpace, derive_actions
from ego_assets.capture import read_capture, read_checked_capture
from ego_assets.capture.egosmith_webdataset import rot6d_matrix as rot6d_to_matrix
from ego_assets.formats.egosmith_lowdim import head_camera
from ego_assets.formats.egosmith_webdataset import EgoSmithOptions, write_episode
from ego_assets.importers import get_importer
from ego_assets.importers.core import import_source, open_source
from ego_assets.releases.derived import SourceNotes
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets.synth.egodex import write_egodex_episode
from ego_assets.trajectory.joints import FINGERTIPS
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.streams import make_stream

EEF = ActionSpace(space="eef_pose_gripper", frame="head")


def _column(table, name: str) -> np.ndarray:
    return table.state[:, table.state_names.index(name)].astype(np.float64)


def _position(table, side: str) -> np.ndarray:
    return np.stack([_column(table, f"{side}.eef.{a}") for a in "xyz"], axis=1)


def _held(source_ns: np.ndarray, sample_ns: np.ndarray) -> np.ndarray:
    return np.searchsorted(source_ns, sample_ns, side="right") - 1


class Synthetic:
    """Synthetic captures of each kind, made and read once per module."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.read_so_far: dict[str, Trajectory] = {}

    def folder(self, kind: str) -> Path:
        return self.root / kind

    def __call__(self, kind: str) -> Trajectory:
        if kind not in self.read_so_far:
            synthesize(kind, self.folder(kind), seconds=2.0, seed=4)
            self.read_so_far[kind] = read_capture(kind, self.folder(kind))
        return self.read_so_far[kind]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Synthetic:
    return Synthetic(tmp_path_factory.mktemp("synth"))


def test_egodex_head_frame_wrist_is_the_inverse_camera_times_the_hand(tmp_path):
    hdf5, _ = write_egodex_episode(tmp_path / "src/train/add_remove_lid", 3, frames=45, seed=1)
    importer = get_importer("egodex")
    summary = import_source(
        Storage(tmp_path / "data"), importer, open_source(str(tmp_path / "src"), importer)
    )
    key = summary.landed[0]
    trajectory = read_checked_capture(key, tmp_path / "data" / "landing" / key)[0]
    table = derive_actions(trajectory, EEF)
    with h5py.File(hdf5) as f:
        camera = f["transforms/camera"][()].astype(np.float64)
        for side in ("left", "right"):
            hand = f[f"transforms/{side}Hand"][()].astype(np.float64)
            relative = np.linalg.inv(camera) @ hand  # the hand in the camera frame
            assert np.abs(_position(table, side) - relative[:, :3, 3]).max() < 1e-6
            six = np.stack([_column(table, f"{side}.eef.rot6d_{k}") for k in range(6)], axis=1)
            delta = Rotation.from_matrix(rot6d_to_matrix(six)).inv() * Rotation.from_matrix(
                relative[:, :3, :3]
            )
            assert np.degrees(delta.magnitude()).max() < 0.01
    assert table.info["hands"]["left"]["joint_set"] == "arkit27"
    assert set(table.info["hands"]["left"]["components"].values()) == {
        v for v in table.info["hands"]["left"]["components"].values() if v.startswith("exact")
    }


# OpenCV camera axes (x right, y down, looking along +z) -> the head frame's ARKit axes.
OPENCV_TO_ARKIT = np.diag([1.0, -1.0, -1.0])


def test_mano_video_head_frame_is_world_to_camera_turned_into_arkit_axes(synthetic):
    trajectory = synthetic("mano-video")
    table = derive_actions(trajectory, EEF)
    assert table.info["head_stream"] == "video_frames"
    assert table.info["frame_axes"].startswith("x right, y up, looking along -z")
    assert table.info["head_axes_from"].startswith("video_frames: world_to_camera in OpenCV")
    assert "C = diag(1, -1, -1)" in table.info["head_axes_from"]
    frames = trajectory.stream("video_frames")
    assert frames.attrs["camera_axes"] == "opencv"
    w2c = frames.fields["world_to_camera"][_held(frames.timestamp_ns, table.sample_ns)]
    for side in ("left", "right"):
        mano = trajectory.stream(f"mano_{side}")
        rows = _held(mano.timestamp_ns, table.sample_ns)
        wrist = mano.fields["joints"][rows, 0]
        in_camera = np.einsum("nij,nj->ni", w2c[:, :3, :3], wrist) + w2c[:, :3, 3]
        expected = in_camera @ OPENCV_TO_ARKIT.T  # C p for every row
        ok = table.valid[side]
        assert ok.mean() > 0.9
        assert np.abs(_position(table, side)[ok] - expected[ok]).max() < 1e-6
        # the wrist rotation: C R_cam R_wrist (R_cam = world -> OpenCV camera)
        wrist_rotation = Rotation.from_rotvec(mano.fields["global_orient"][rows]).as_matrix()
        rotation = OPENCV_TO_ARKIT @ w2c[:, :3, :3] @ wrist_rotation
        six = np.stack([_column(table, f"{side}.eef.rot6d_{k}") for k in range(6)], axis=1)
        delta = Rotation.from_matrix(rot6d_to_matrix(six[ok])).inv() * Rotation.from_matrix(
            rotation[ok]
        )
        assert np.degrees(delta.magnitude()).max() < 0.01
        tips = mano.fields["joints"][rows][:, list(FINGERTIPS["mano21"])]
        aperture = np.linalg.norm(tips[:, 0] - tips[:, 1], axis=1)
        assert np.abs(_column(table, f"{side}.grasp_aperture")[ok] - aperture[ok]).max() < 1e-6
        assert table.info["hands"][side]["components"]["wrist_rotation"].startswith(
            "exact: MANO global_orient"
        )


def test_a_release_mixing_video_and_pose_heads_declares_one_head_frame(synthetic):
    notes = SourceNotes()
    for kind in ("mano-video", "holos-visionpro"):
        notes.add(kind, derive_actions(synthetic(kind), EEF).info)
    sources = notes.to_json()
    assert sources["frame_axes"] == [
        "x right, y up, looking along -z (the ARKit / WebXR camera and viewer axes)"
    ]
    assert len(sources["head_axes_from"]) == 2
    assert any("C = diag(1, -1, -1)" in how for how in sources["head_axes_from"])


def _look_at(centre: np.ndarray, target: np.ndarray, up: np.ndarray) -> np.ndarray:
    """(N, 3, 3) ARKit camera -> world rotations at ``centre`` looking at ``target``:
    -z towards the target, x = forward × up (right), y = z × x (up)."""
    forward = target - centre
    forward /= np.linalg.norm(forward, axis=1, keepdims=True)
    x = np.cross(forward, up)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    z = -forward
    return np.stack([x, np.cross(z, x), z], axis=-1)


def test_opencv_video_and_arkit_pose_heads_looking_at_a_point_agree_on_z(synthetic):
    """A mano-video head (OpenCV world_to_camera) and an ARKit-style head pose stream, both
    at the video camera's centre and looking at the same world point (the right wrist's
    mean), put the wrist in front of the head at z < 0 in both."""
    video = synthetic("mano-video")
    frames = video.stream("video_frames")
    w2c = frames.fields["world_to_camera"]
    centre = -np.einsum("nji,nj->ni", w2c[:, :3, :3], w2c[:, :3, 3])  # -R^T t
    right = video.stream("mano_right")
    tracked = right.fields["valid_detected"].astype(bool)
    target = right.fields["joints"][tracked, 0].mean(axis=0)
    up = np.eye(3)["XYZ".index(video.info.up_axis[-1])] * (-1 if "-" in video.info.up_axis else 1)
    r_arkit = _look_at(centre, np.broadcast_to(target, centre.shape), up)
    # the OpenCV camera looking at the same point: +z forward, y down (C turns ARKit into it)
    looking = np.concatenate([r_arkit @ OPENCV_TO_ARKIT, centre[:, :, None]], axis=2)
    opencv_w2c = np.tile(np.eye(4), (len(w2c), 1, 1))
    opencv_w2c[:, :3, :3] = np.swapaxes(looking[:, :, :3], 1, 2)
    opencv_w2c[:, :3, 3] = -np.einsum("nij,nj->ni", opencv_w2c[:, :3, :3], centre)
    start = video.info.start_ns
    opencv_frames = make_stream(
        frames.name,
        frames.kind,
        frames.timestamp_ns,
        start,
        {**frames.fields, "world_to_camera": opencv_w2c},
        frames.attrs,
    )
    pose = {
        "position": centre,
        "rotation": Rotation.from_matrix(r_arkit).as_quat(),
        "valid": np.ones(len(centre), bool),
    }
    head = make_stream("head", "pose", frames.timestamp_ns, start, pose, {"frame": "world"})
    others = tuple(s for s in video.streams if s.name != frames.name)
    with_video = dataclasses.replace(video, streams=(*others, opencv_frames))
    with_pose = dataclasses.replace(video, streams=(*others, head), media=())
    a = derive_actions(with_video, EEF, frames.timestamp_ns)
    b = derive_actions(with_pose, EEF, frames.timestamp_ns)
    assert a.info["head_stream"] == "video_frames" and b.info["head_stream"] == "head"
    assert a.info["frame_axes"] == b.info["frame_axes"]
    ok = a.valid["right"] & b.valid["right"]
    assert ok.mean() > 0.9
    z_video, z_pose = _column(a, "right.eef.z")[ok], _column(b, "right.eef.z")[ok]
    assert (z_video < 0).all() and (z_pose < 0).all()
    assert np.abs(_position(a, "right")[ok] - _position(b, "right")[ok]).max() < 1e-6


def test_vision_landmarks_get_a_derived_rotation_and_say_so(synthetic):
    trajectory = synthetic("holos-iphone")
    table = derive_actions(trajectory, ActionSpace(space="eef_pose_gripper", frame="world"))
    components = table.info["hands"]["right"]["components"]
    assert table.info["hands"]["right"]["joint_set"] == "vision21"
    assert components["wrist_position"] == "exact: landmark 0 of vision21"
    assert components["wrist_rotation"].startswith("approximate: derived from landmarks")
    landmarks = trajectory.stream("hand_right_landmarks_3d")
    rows = _held(landmarks.timestamp_ns, table.sample_ns)
    points = landmarks.fields["position"][rows]
    ok = table.valid["right"]
    six = np.stack([_column(table, f"right.eef.rot6d_{k}") for k in range(6)], axis=1)[ok]
    matrix = rot6d_to_matrix(six)
    # the derived frame: y is the normal of the plane wrist, index base, little base ...
    normal = np.cross(points[ok, 5] - points[ok, 0], points[ok, 17] - points[ok, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    assert np.abs(np.abs(np.sum(matrix[:, :, 1] * normal, axis=1)) - 1).max() < 1e-5
    # ... and -z points from the wrist towards the middle-finger base
    forward = points[ok, 9] - points[ok, 0]
    assert (np.sum(matrix[:, :, 2] * forward, axis=1) < 0).all()
    assert np.abs(_position(table, "right")[ok] - points[ok, 0]).max() < 1e-6


@pytest.mark.parametrize("kind", ["holos-visionpro", "webxr"])
def test_skeletons_with_orientations_give_every_component_exactly(synthetic, kind):
    trajectory = synthetic(kind)
    table = derive_actions(trajectory, EEF)
    for side in ("left", "right"):
        components = table.info["hands"][side]["components"]
        assert all(v.startswith("exact") for v in components.values()), components
        assert table.valid[side].mean() > 0.9
        tips = derive_actions(trajectory, ActionSpace(space="fingertips"))
        distances = np.linalg.norm(tips.state.reshape(len(tips.state), 10, 3), axis=2)
        finite = distances[np.isfinite(distances)]
        assert finite.min() > 0.05 and finite.max() < 0.25


def test_mano_without_joints_has_no_fingertips_and_says_so(synthetic):
    trajectory = synthetic("mano-video")
    streams = []
    for s in trajectory.streams:
        if s.kind == "mano":
            fields = {k: v for k, v in s.fields.items() if k != "joints"}
            s = make_stream(
                s.name, s.kind, s.timestamp_ns, trajectory.info.start_ns, fields, s.attrs
            )
        streams.append(s)
    bare = Trajectory(trajectory.info, tuple(streams), media=trajectory.media)
    table = derive_actions(bare, EEF)
    # no skeleton, landmarks or device pose for the Holos rule: the right hand's clock
    assert table.sample_ns.tolist() == bare.stream("mano_right").timestamp_ns.tolist()
    assert table.info["clock"].startswith("mano_right (right hand, the first tracked")
    components = table.info["hands"]["left"]["components"]
    assert components["fingertips"].startswith("absent")
    assert components["wrist_position"].startswith("approximate: MANO transl")
    assert np.isnan(_column(table, "left.grasp_aperture")).all()
    assert np.isnan(_column(table, "left.gripper_closed")).all()
    assert np.isfinite(_column(table, "left.eef.x")[table.valid["left"]]).all()


def test_egosmith_round_trip_keeps_the_wrist_and_aperture(synthetic, tmp_path):
    original = synthetic("webxr")
    camera = head_camera(original)
    episode = tmp_path / "episode"
    episode.mkdir()
    write_episode(
        original,
        camera,
        synthetic.folder("webxr") / camera.media.path,
        episode,
        episode_index=7,
        data_version="t",
        options=EgoSmithOptions(),
    )
    storage = Storage(tmp_path / "data")
    importer = get_importer("egosmith-webdataset")
    key = import_source(storage, importer, open_source(str(episode), importer)).landed[0]
    folder = Path(storage.landing_path(key).path)
    imported = read_capture(folder.name, folder)
    world = ActionSpace(space="eef_pose_gripper", frame="world")
    table = derive_actions(imported, world)
    assert table.info["hands"]["left"]["streams"] == ["hand_left", "wrist_left"]
    assert table.info["hands"]["left"]["components"]["wrist_rotation"] == (
        "exact: the wrist pose of wrist_left (rotation)"
    )
    before = derive_actions(original, world, sample_ns=table.sample_ns)
    ok = table.valid["left"] & before.valid["left"]
    assert ok.mean() > 0.9
    for name in ("left.eef.x", "left.eef.y", "left.eef.z", "left.grasp_aperture"):
        assert np.abs(_column(table, name)[ok] - _column(before, name)[ok]).max() < 1e-6
