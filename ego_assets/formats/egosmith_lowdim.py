"""Per-frame arrays of an EgoSmith episode, from the canonical `Trajectory` only.

Every sample is one frame of the head camera. For each frame this module gives the
116-d ``lowdim`` vector, the ``presence`` bitmask and the ``mano`` parameters, all
vectorized over the episode (no per-frame Python loop). Offsets and names are in
`ego_assets.formats.egosmith_constants`.

How each hand becomes wrist pose + fingertips (world frame, metres):

* **MANO streams** (mano-video): wrist translation = MANO joint 0 (``joints[:, 0]``,
  or ``transl`` when the estimator gave no joints); rotation = ``global_orient`` as
  given (the MANO root frame); fingertips = the five MANO-21 tip joints (zeros and
  ``fingertips = "unavailable"`` without joints: no MANO model is shipped to pose them).
* **Skeleton streams** (ARKit 27, WebXR 25, Vision / MediaPipe 21, Aria 21; world frame
  only): joints are mapped to MediaPipe-21 with `joint_map`, so every set names the same
  points. Wrist translation = the wrist joint (what stands for MANO joint 0); fingertips
  = the five tip joints. The wrist rotation is built from positions, the same way for
  every set and both hands (joint orientations differ between sources): ``+Y`` is the
  back-of-hand normal of the plane (wrist, index knuckle, little-finger knuckle),
  ``-Z`` points from the wrist towards the middle-finger knuckle (made orthogonal to
  ``+Y``), ``+X = Y x Z``. These are the axes WebXR gives its wrist joint, for both hands.

A hand's sample is taken from the source sample nearest in time to the frame; it counts
as present when the source marked it valid (``hand_valid``; MANO ``valid_detected``),
the nearest sample is within one sample period (of the slower of video and hand
stream), and every derived value is finite. Values of an absent hand are zeros.
``wrist_action`` / ``hand_action`` are the next frame's state; the last frame of the
episode has no next frame and repeats its own state (a "hold" action).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ego_assets.formats import egosmith_constants
from ego_assets.trajectory.joints import FINGERTIPS, joint_map
from ego_assets.trajectory.model import MediaRef, Trajectory
from ego_assets.trajectory.streams import Stream

# MediaPipe-21 indices used to build the wrist frame and the fingertips.
_MP_WRIST, _MP_INDEX_MCP, _MP_MIDDLE_MCP, _MP_PINKY_MCP = 0, 5, 9, 17
_MP_TIPS = FINGERTIPS["mediapipe21"]
_MP_USED = (_MP_WRIST, _MP_INDEX_MCP, _MP_MIDDLE_MCP, _MP_PINKY_MCP, *_MP_TIPS)

# Media roles tried, in order, as the head camera (first with per-frame pose + intrinsics).
HEAD_CAMERA_ROLES = ("video", "camera_outward", "camera_back", "camera_left", "camera_right")
# world_to_camera axes a media_frames stream may declare (attr ``camera_axes``) -> OpenCV.
_TO_OPENCV = {
    "opencv": np.eye(4),
    "arkit": np.diag([1.0, -1.0, -1.0, 1.0]),  # x right, y up, looking along -z
}
_DEGENERATE = 1e-9


class NoHeadCameraError(ValueError):
    """The capture has no head-camera video with per-frame pose and intrinsics."""


@dataclass(frozen=True, slots=True)
class HeadCamera:
    """The camera whose frames become samples.

    Attributes:
        media: its video `MediaRef` (path relative to the raw capture).
        frames: its ``media_frames`` stream (one row per decoded frame, in file order).
    """

    media: MediaRef
    frames: Stream


@dataclass(frozen=True, slots=True)
class HandSeries:
    """One hand at the video frames (N frames).

    Attributes:
        wrist: (N, 3) wrist position (MANO joint 0), metres, world.
        rotation: (N, 3, 3) wrist -> world rotation matrices.
        tips: (N, 5, 3) fingertips thumb..pinky, metres, world.
        present: (N,) bool.
        stream: source stream name ("" when the capture has no such hand).
        rotation_source: ``mano_global_orient``, ``skeleton_knuckles`` or ``none``.
        fingertips: ``mano_joints``, ``skeleton`` or ``unavailable``.
    """

    wrist: np.ndarray
    rotation: np.ndarray
    tips: np.ndarray
    present: np.ndarray
    stream: str
    rotation_source: str
    fingertips: str


@dataclass(frozen=True, slots=True)
class EpisodeArrays:
    """Everything per frame except pixels.

    Attributes:
        frame_index: (N,) int64 video frame numbers (the ``f`` of the sample key).
        timestamp_ns: (N,) int64 frame timestamps (the capture's clock).
        lowdim: (N, 116) float32, see `egosmith_constants`.
        presence: (N,) uint8 bitmask (1 left, 2 right).
        mano: (N, 2, 6 + P + B) float32, rows left/right (zeros without MANO).
        extrinsic_valid: (N,) bool: the frame had a finite camera pose.
        hands: the two `HandSeries` (left, right).
        mano_schema: description of ``mano.npy`` for meta.json.
    """

    frame_index: np.ndarray
    timestamp_ns: np.ndarray
    lowdim: np.ndarray
    presence: np.ndarray
    mano: np.ndarray
    extrinsic_valid: np.ndarray
    hands: tuple[HandSeries, HandSeries]
    mano_schema: dict[str, object]


def head_camera(trajectory: Trajectory) -> HeadCamera:
    """The head camera of ``trajectory``.

    Raises:
        NoHeadCameraError: no video with a ``media_frames`` stream carrying
            ``world_to_camera`` and ``intrinsics`` (e.g. Project Aria MPS hand tracking).
    """
    videos = {m.role: m for m in trajectory.media if m.kind == "video" and m.frames_stream}
    for role in (*HEAD_CAMERA_ROLES, *sorted(set(videos) - set(HEAD_CAMERA_ROLES))):
        media = videos.get(role)
        if media is None or media.frames_stream is None:
            continue
        frames = trajectory.stream(media.frames_stream)
        if {"world_to_camera", "intrinsics"} <= set(frames.fields) and len(frames):
            return HeadCamera(media, frames)
    have = sorted(m.role for m in trajectory.media) or ["none"]
    raise NoHeadCameraError(
        f"capture {trajectory.info.capture_id!r}: no head-camera video with per-frame "
        f"camera pose and intrinsics (media: {', '.join(have)})"
    )


def world_to_camera_opencv(frames: Stream) -> np.ndarray:
    """(N, 4, 4) float64 world -> OpenCV camera (x right, y down, z forward) per frame."""
    axes = str(frames.attrs.get("camera_axes", ""))
    if axes not in _TO_OPENCV:
        raise ValueError(
            f"stream {frames.name!r}: attr camera_axes is {axes!r}, expected one of "
            f"{sorted(_TO_OPENCV)} (re-normalize trajectories written before it existed)"
        )
    return _TO_OPENCV[axes] @ frames.fields["world_to_camera"]


def nearest_rows(
    source_time: np.ndarray, target_time: np.ndarray, tolerance_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Row of ``source_time`` nearest to each ``target_time`` and whether it is close enough.

    Source times need not be sorted (faulty timestamps stay as read). Returns (M,) int64
    rows (0 when the source is empty) and (M,) bool ``|dt| <= tolerance_s``.
    """
    if len(source_time) == 0:
        return np.zeros(len(target_time), np.int64), np.zeros(len(target_time), bool)
    order = np.argsort(source_time, kind="stable")
    ordered = source_time[order]
    hi = np.clip(np.searchsorted(ordered, target_time), 0, len(ordered) - 1)
    lo = np.clip(hi - 1, 0, len(ordered) - 1)
    pick = np.where(np.abs(ordered[lo] - target_time) <= np.abs(ordered[hi] - target_time), lo, hi)
    close = np.abs(ordered[pick] - target_time) <= tolerance_s
    return order[pick], close


def _period(time: np.ndarray) -> float:
    steps = np.diff(np.sort(time))
    steps = steps[steps > 0]
    return float(np.median(steps)) if len(steps) else 0.0


def hand_stream(trajectory: Trajectory, side: str) -> Stream | None:
    """The stream a hand is exported from: its MANO stream, else a world-frame skeleton.

    Among skeletons, the one with most joints wins (ARKit 27 over a 21-point set).
    """
    for kind in ("mano", "hand_joints"):
        found = [
            s
            for s in trajectory.streams_of_kind(kind)
            if s.attrs.get("hand") == side and s.attrs.get("frame") == "world" and len(s)
        ]
        if found:
            return max(found, key=lambda s: (s.dims().get("J", 0), s.name))
    return None


def knuckle_frame(mp21: np.ndarray, side: str, right_handed_world: bool = True) -> np.ndarray:
    """(N, 3, 3) wrist -> world rotation from MediaPipe-21 positions (see module docstring).

    Rows whose wrist and knuckles are degenerate (coincident or collinear) come out NaN.
    """
    wrist = mp21[:, _MP_WRIST]
    normal = np.cross(mp21[:, _MP_INDEX_MCP] - wrist, mp21[:, _MP_PINKY_MCP] - wrist)
    # index x pinky points out of the palm for a right hand, out of the back for a left one
    back = -normal if (side == "right") == right_handed_world else normal
    y = _unit(back)
    forward = mp21[:, _MP_MIDDLE_MCP] - wrist
    forward = forward - np.sum(forward * y, axis=1, keepdims=True) * y
    z = -_unit(forward)
    x = np.cross(y, z)
    return np.stack([x, y, z], axis=-1)


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(norm > _DEGENERATE, norm, np.nan)


def _absent(n: int, name: str = "") -> HandSeries:
    return HandSeries(
        wrist=np.zeros((n, 3)),
        rotation=np.zeros((n, 3, 3)),
        tips=np.zeros((n, 5, 3)),
        present=np.zeros(n, bool),
        stream=name,
        rotation_source="none",
        fingertips="unavailable",
    )


def hand_at_frames(
    trajectory: Trajectory, side: str, frame_time: np.ndarray, video_period_s: float
) -> HandSeries:
    """Wrist, rotation and fingertips of one hand at each video frame time (seconds)."""
    from scipy.spatial.transform import Rotation

    n = len(frame_time)
    stream = hand_stream(trajectory, side)
    if stream is None:
        return _absent(n)
    tolerance = max(video_period_s, _period(stream.time)) + 1e-6
    rows, close = nearest_rows(stream.time, frame_time, tolerance)
    f = stream.fields
    if stream.kind == "mano":
        joints = f.get("joints")
        wrist = joints[rows, 0] if joints is not None else f["transl"][rows]
        rotation = Rotation.from_rotvec(f["global_orient"][rows]).as_matrix()
        if joints is not None:
            tips = joints[rows][:, list(FINGERTIPS["mano21"])]
        else:
            tips = np.zeros((n, 5, 3))
        valid = f["valid_detected"][rows]
        rotation_source = "mano_global_orient"
        fingertips = "mano_joints" if joints is not None else "unavailable"
    else:
        mapping = joint_map(str(stream.attrs["joint_set"]), "mediapipe21")
        mp21, _ = mapping.apply(f["position"][rows], axis=-2)
        wrist = mp21[:, _MP_WRIST]
        rotation = knuckle_frame(mp21, side, trajectory.info.handedness == "right")
        tips = mp21[:, list(_MP_TIPS)]
        valid = f["hand_valid"][rows]
        rotation_source, fingertips = "skeleton_knuckles", "skeleton"
    finite = (
        np.isfinite(wrist).all(axis=1)
        & np.isfinite(rotation).all(axis=(1, 2))
        & np.isfinite(tips).all(axis=(1, 2))
    )
    present = valid & close & finite
    keep = present[:, None]
    return HandSeries(
        wrist=np.where(keep, wrist, 0.0),
        rotation=np.where(keep[:, :, None], rotation, 0.0),
        tips=np.where(keep[:, :, None], tips, 0.0),
        present=present,
        stream=stream.name,
        rotation_source=rotation_source,
        fingertips=fingertips,
    )


def rot6d(rotation: np.ndarray) -> np.ndarray:
    """(N, 6): first column then second column of each (N, 3, 3) rotation matrix."""
    return np.concatenate([rotation[:, :, 0], rotation[:, :, 1]], axis=1)


def _mano_params(
    trajectory: Trajectory, frame_time: np.ndarray, video_period_s: float
) -> tuple[np.ndarray, dict[str, object]]:
    """(N, 2, 6 + P + B) float32 MANO parameters per frame, and their description."""
    n = len(frame_time)
    streams = {
        side: s
        for side in egosmith_constants.HANDS
        if (s := hand_stream(trajectory, side)) is not None and s.kind == "mano"
    }
    if not streams:
        width = (
            egosmith_constants.MANO_POSE_START
            + egosmith_constants.DEFAULT_MANO_PCA
            + egosmith_constants.DEFAULT_MANO_BETAS
        )
        schema: dict[str, object] = {
            "source": "none",
            "layout": "zeros: this source has no MANO parameters",
            "shape": [2, width],
        }
        return np.zeros((n, 2, width), np.float32), schema
    first = next(iter(streams.values()))
    dims = first.dims()
    p, b = dims["P"], dims["B"]
    out = np.zeros((n, 2, egosmith_constants.MANO_POSE_START + p + b), np.float32)
    for h, side in enumerate(egosmith_constants.HANDS):
        s = streams.get(side)
        if s is None or s.dims() != dims:
            continue
        tolerance = max(video_period_s, _period(s.time)) + 1e-6
        rows, close = nearest_rows(s.time, frame_time, tolerance)
        f = s.fields
        row = np.concatenate(
            [f["transl"][rows], f["global_orient"][rows], f["hand_pose"][rows], f["betas"][rows]],
            axis=1,
        )
        ok = close & np.isfinite(row).all(axis=1)
        out[:, h] = np.where(ok[:, None], row, 0.0)
    schema = {
        "source": "mano",
        "layout": "rows left, right: transl(3, m, world), global_orient(3, rad axis-angle), "
        f"hand_pose({p}), betas({b})",
        "shape": [2, egosmith_constants.MANO_POSE_START + p + b],
        "pose_space": first.attrs["mano_pose_space"],
        "n_pose": p,
        "n_betas": b,
        "flat_hand_mean": first.attrs["flat_hand_mean"],
    }
    return out, schema


def episode_arrays(trajectory: Trajectory, camera: HeadCamera | None = None) -> EpisodeArrays:
    """The per-frame arrays of one episode (see the module docstring)."""
    camera = camera or head_camera(trajectory)
    frames = camera.frames
    n = len(frames)
    frame_time = frames.time
    video_period = _period(frame_time) or (1.0 / camera.media.fps if camera.media.fps else 0.0)
    left, right = (
        hand_at_frames(trajectory, side, frame_time, video_period)
        for side in egosmith_constants.HANDS
    )
    w2c = world_to_camera_opencv(frames)
    intrinsics = frames.fields["intrinsics"]
    extrinsic_valid = np.isfinite(w2c).all(axis=(1, 2)) & np.isfinite(intrinsics).all(axis=1)
    w2c = np.where(extrinsic_valid[:, None, None], w2c, 0.0)
    intrinsics = np.where(extrinsic_valid[:, None], intrinsics, 0.0)

    wrist_state = np.concatenate(
        [left.wrist, right.wrist, rot6d(left.rotation), rot6d(right.rotation)], axis=1
    )
    hand_state = np.concatenate([left.tips.reshape(n, 15), right.tips.reshape(n, 15)], axis=1)
    following = np.minimum(np.arange(n) + 1, n - 1)
    lowdim = np.concatenate(
        [
            wrist_state,
            hand_state,
            wrist_state[following],
            hand_state[following],
            w2c.reshape(n, 16),
            intrinsics,
        ],
        axis=1,
    ).astype(np.float32)
    presence = (
        left.present.astype(np.uint8) * egosmith_constants.PRESENCE_LEFT
        + right.present.astype(np.uint8) * egosmith_constants.PRESENCE_RIGHT
    )
    mano, mano_schema = _mano_params(trajectory, frame_time, video_period)
    return EpisodeArrays(
        frame_index=frames.fields["frame_index"],
        timestamp_ns=frames.timestamp_ns,
        lowdim=lowdim,
        presence=presence,
        mano=mano,
        extrinsic_valid=extrinsic_valid,
        hands=(left, right),
        mano_schema=mano_schema,
    )
