"""EgoDex-layout episodes (``<task>/<n>.hdf5`` + ``<n>.mp4``) written from the published layout.

Written from the dataset's published facts, independently of our reader (the names are
spelled out here, not taken from `ego_assets.capture.egodex`):

* ``transforms/<name>``: float32 (N, 4, 4) poses in the ARKit origin frame (metres, y
  up), ``camera`` plus 68 joints: body ``hip``, ``spine1``..``spine7``, ``neck1``..``neck4``
  and per side ``left``/``right`` + ``Shoulder``, ``Arm``, ``Forearm``, ``Hand`` (the
  wrist), ``ThumbKnuckle``, ``ThumbIntermediateBase``, ``ThumbIntermediateTip``,
  ``ThumbTip`` and ``<F>FingerMetacarpal``, ``Knuckle``, ``IntermediateBase``,
  ``IntermediateTip``, ``Tip`` for Index, Middle, Ring, Little; no timestamps (30 Hz).
  ``camera`` is camera-to-world (ARKit camera: x right, y up, looking along -z).
* ``confidences/<joint>``: float32 (N,) in [0, 1]; some files lack the group
  (``confidences=False``).
* ``camera/intrinsic``: float32 (3, 3), fx = fy = 736.6339, cx = 960, cy = 540 for
  1920x1080; scaled here to the video written (``size``).
* root attributes ``task``, ``llm_description``, ``llm_description2`` (only when two
  descriptions exist: ``second_description``), ``which_llm_description`` (1 or 2),
  ``llm_type``, ``llm_verbs``, ``llm_objects``, ``environment``, ``object``,
  ``session_name``; str, or (``bytes_attrs``) fixed-length bytes with NUL padding.
* the video: H.264 at 30 fps, ``video_frames`` frames (default N; real files may differ
  by a frame or two).

Motion comes from the synthetic scene (`ego_assets.synth.motion`): the head is the
camera, hands are the 55 recorded poses (wrist = ``<side>Hand``), the arm and body
joints hang rigidly off the head and wrists. ``faults`` write broken files for tests:
``nan_frames`` (frames 3-5 of ``rightIndexFingerTip`` and frame 2 of the camera are NaN),
``no_camera`` (no ``transforms/camera``), ``short_joint`` (``leftHand`` one frame short),
``non_rigid`` (frame 4 of ``rightHand`` scaled by 1.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np
from scipy.spatial.transform import Rotation

from ego_assets.synth.motion import make_scene
from ego_assets.synth.video import Pinhole, encode_h264, project, render_frames, world_to_opencv

FPS = 30
INTRINSIC_1080P = ((736.6339, 0.0, 960.0), (0.0, 736.6339, 540.0), (0.0, 0.0, 1.0))
BODY = ("hip", *(f"spine{i}" for i in range(1, 8)), *(f"neck{i}" for i in range(1, 5)))
ARM = ("Shoulder", "Arm", "Forearm")
HAND = (
    "Hand",
    "ThumbKnuckle",
    "ThumbIntermediateBase",
    "ThumbIntermediateTip",
    "ThumbTip",
    *(
        f"{f}Finger{p}"
        for f in ("Index", "Middle", "Ring", "Little")
        for p in ("Metacarpal", "Knuckle", "IntermediateBase", "IntermediateTip", "Tip")
    ),
)
JOINTS = (*BODY, *(f"{side}{j}" for side in ("left", "right") for j in (*ARM, *HAND)))
FAULTS = ("nan_frames", "no_camera", "short_joint", "non_rigid")
ATTRS = {
    "task": "add_remove_lid",
    "llm_description": "Take the lid off the jar with the right hand and put it down.",
    "llm_description2": "Pick the lid up from the table and screw it onto the jar.",
    "llm_type": "reversible",
    "llm_verbs": "take, put",
    "llm_objects": "lid, jar",
    "environment": "kitchen table",
    "object": "jar",
    "session_name": "session_0042",
}


def _poses(rot: Rotation, pos: np.ndarray) -> np.ndarray:
    """(T, 4, 4) float64 homogeneous poses from rotations and (T, 3) positions."""
    m = np.zeros((len(pos), 4, 4))
    m[:, :3, :3] = rot.as_matrix()
    m[:, :3, 3] = pos
    m[:, 3, 3] = 1.0
    return m


def egodex_transforms(seed: int, frames: int) -> dict[str, np.ndarray]:
    """``camera`` and the 68 joints as (frames, 4, 4) float64 world poses, 30 Hz."""
    t = np.arange(frames) / FPS
    scene = make_scene(seed, max(frames / FPS, 1.0))
    head_pos, head_rot = scene.head.pose(t)
    out = {"camera": _poses(head_rot, head_pos)}
    yaw = Rotation.from_euler("y", head_rot.as_euler("YXZ")[:, :1])
    for i, name in enumerate(BODY):  # hip 0.75 m below the head, neck just under it
        drop = 0.75 - 0.55 * i / (len(BODY) - 1)
        out[name] = _poses(yaw, head_pos - np.array([0.0, drop, 0.0]))
    for side, sign in (("left", -1.0), ("right", 1.0)):
        world, quats = scene.hand_world(side, t)
        rots = Rotation.from_quat(quats.reshape(-1, 4))
        mats = _poses(rots, world.reshape(-1, 3)).reshape(frames, 25, 4, 4)
        for j, name in enumerate(HAND):
            out[f"{side}{name}"] = mats[:, j]
        wrist_rot = Rotation.from_quat(quats[:, 0])
        out[f"{side}Forearm"] = _poses(wrist_rot, world[:, 0] + wrist_rot.apply([0, 0, 0.26]))
        shoulder = head_pos + yaw.apply([sign * 0.08, -0.22, 0.05])
        out[f"{side}Shoulder"] = _poses(yaw, shoulder)
        out[f"{side}Arm"] = _poses(yaw, head_pos + yaw.apply([sign * 0.18, -0.25, 0.05]))
    return out


def write_egodex_episode(
    task_dir: Path,
    n: int,
    *,
    frames: int = 60,
    seed: int = 0,
    size: tuple[int, int] = (320, 180),
    confidences: bool = True,
    bytes_attrs: bool = False,
    second_description: bool = True,
    video_frames: int | None = None,
    faults: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Write ``<task_dir>/<n>.hdf5`` and ``<n>.mp4``; returns both paths."""
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown EgoDex faults {sorted(unknown)}; known: {FAULTS}")
    task_dir.mkdir(parents=True, exist_ok=True)
    poses = egodex_transforms(seed, frames)
    width, height = size
    scale = width / 1920.0
    k = np.array(INTRINSIC_1080P) * np.array([[scale], [scale], [1.0]])
    hdf5 = task_dir / f"{n}.hdf5"
    with h5py.File(hdf5, "w") as f:
        tr = f.create_group("transforms")
        for name, m in poses.items():
            data = m.astype(np.float32)
            if name == "camera" and "no_camera" in faults:
                continue
            if name == "rightIndexFingerTip" and "nan_frames" in faults:
                data[3:6] = np.nan
            if name == "camera" and "nan_frames" in faults:
                data[2] = np.nan
            if name == "leftHand" and "short_joint" in faults:
                data = data[:-1]
            if name == "rightHand" and "non_rigid" in faults:
                data[4, :3, :3] *= 1.5
            tr.create_dataset(name, data=data)
        if confidences:
            rng = np.random.default_rng([seed, 7])
            conf = f.create_group("confidences")
            for name in JOINTS:
                conf.create_dataset(name, data=rng.uniform(0.3, 1.0, frames).astype(np.float32))
        f.create_group("camera").create_dataset("intrinsic", data=k.astype(np.float32))
        attrs = dict(ATTRS)
        if not second_description:
            del attrs["llm_description2"]
        for name, text in attrs.items():
            if bytes_attrs:  # fixed-length bytes, NUL padded to a multiple of 64
                raw = text.encode("utf-8")
                f.attrs.create(name, np.array(raw, dtype=f"S{64 * (len(raw) // 64 + 1)}"))
            else:
                f.attrs[name] = text
        which = 2 if second_description else 1
        f.attrs["which_llm_description"] = np.bytes_(b"%d" % which) if bytes_attrs else which
    video = task_dir / f"{n}.mp4"
    _write_video(
        video,
        poses,
        Pinhole(width, height, k[0, 0], k[1, 1], k[0, 2], k[1, 2]),
        video_frames or frames,
    )
    return hdf5, video


def _write_video(path: Path, poses: dict[str, np.ndarray], cam: Pinhole, count: int) -> None:
    """The head camera's view of both hands, ``count`` frames (poses held past the end)."""
    index = np.minimum(np.arange(count), len(poses["camera"]) - 1)
    camera = poses["camera"][index]
    cam_rot = Rotation.from_matrix(camera[:, :3, :3])
    hands = []
    for side in ("left", "right"):
        pts = np.stack([poses[f"{side}{j}"][index, :3, 3] for j in HAND], axis=1)
        hands.append((side, project(world_to_opencv(pts, camera[:, :3, 3], cam_rot), cam)))
    encode_h264(path, render_frames(cam, hands), FPS, np.arange(count), "mp4")
