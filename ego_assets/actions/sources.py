"""Where a trajectory keeps each hand's wrist pose and fingertips, and its head pose.

Every joint set and stream kind is read into one `HandSource` per side, on the stream's
own clock and in the stream's own frame, saying for each component whether the source
gives it exactly, by approximation, or not at all (`HandSource.components`):

* a skeleton with joint orientations (``hand_joints`` with ``rotation``: WebXR 25,
  ARKit 27, EgoDex): wrist position and rotation = the wrist joint's pose, exact;
* MANO (``mano``): rotation = ``global_orient`` (the MANO root, exact); position = MANO
  joint 0 and fingertips = the MANO-21 tips when the estimator gave ``joints``, else the
  root translation ``transl`` (approximate: MANO's root, not its wrist joint) and no tips;
* landmarks (``hand_joints`` without rotation: Vision 21, MediaPipe 21, Aria 21):
  positions exact; the rotation is the wrist pose of a ``wrist_palm`` stream of the same
  file and clock when there is one (Aria ``hand_tracking_results``, EgoSmith), else it
  is derived from the landmarks (`knuckle_frame`: palm plane of wrist, index and
  little-finger bases, forward towards the middle-finger base; WebXR's wrist axes);
* a ``wrist_palm`` stream alone (Aria ``wrist_and_palm_poses``): wrist position exact,
  its ``wrist_rotation`` when present, else one derived from the wrist normal and the
  palm position when the file has normals (`normals_frame`), no fingertips.

A joint the source marks untracked (``joint_valid`` False, ``joint_confidence`` 0) is
NaN, never a stale or zero value.

What this module gives is also stored beside each trajectory (`stored`): a change to the
values it computes must bump `stored.SOURCES_VERSION`, or releases keep reading the old
values from the files written before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from ego_assets.actions.space import ActionSpaceError
from ego_assets.formats.egosmith_lowdim import NoHeadCameraError, head_camera, knuckle_frame
from ego_assets.trajectory.joints import FINGERTIPS, WRIST, joint_map
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.streams import HAND_CENTRED_FRAMES, Stream

EXACT, APPROXIMATE, ABSENT = "exact", "approximate", "absent"
COMPONENTS = ("wrist_position", "wrist_rotation", "fingertips", "grasp_aperture")
# The head frame's one convention, whatever the head pose's source (ARKit / WebXR axes).
HEAD_AXES = "x right, y up, looking along -z (the ARKit / WebXR camera and viewer axes)"
# C = diag(1, -1, -1): OpenCV camera axes (x right, y down, looking along +z) -> HEAD_AXES.
OPENCV_TO_HEAD = np.diag([1.0, -1.0, -1.0])
# world_to_camera axes (the frames stream's ``camera_axes``) -> (camera -> head axes, note).
CAMERA_TO_HEAD = {
    "opencv": (
        OPENCV_TO_HEAD,
        "world_to_camera in OpenCV axes (x right, y down, looking along +z), turned into "
        "the head axes by C = diag(1, -1, -1): p = C R^T (p_w - t), R = C R^T R_wrist",
    ),
    "arkit": (np.eye(3), "world_to_camera in ARKit camera axes: the head axes, unchanged"),
}
POSE_NOTE = "the ARKit / WebXR device or viewer pose: the head axes, unchanged"
DEVICE_AXES = (
    "the Project Aria MPS device frame the hand streams are stored in, unchanged (its "
    "axes are not stated by the MPS hand-tracking files; it is not turned into the head axes)"
)
HEAD_POSE_STREAMS = ("device_pose", "head")


@dataclass(frozen=True, slots=True)
class HandSource:
    """One hand on its stream's clock, in its stream's frame (metres, wrist -> frame).

    Attributes:
        side: ``left`` or ``right``.
        streams: the stream names read.
        joint_set: the joint set (``mano``, ``wrist_palm`` for those kinds).
        frame: the stream's ``frame`` attr (``world``, ``device``, or hand-centred).
        timestamp_ns: (N,) int64 source clock.
        tracked: (N,) bool, the hand flag as the source gave it.
        wrist: (N, 3) wrist position, NaN where the wrist joint is untracked.
        rotation: (N, 3, 3) wrist -> frame rotation (NaN rows where degenerate), or None.
        tips: (N, 5, 3) thumb, index, middle, ring, pinky tips (NaN untracked), or None.
        components: component -> ``"exact: ..."``, ``"approximate: ..."`` or ``"absent: ..."``.
    """

    side: str
    streams: tuple[str, ...]
    joint_set: str
    frame: str
    timestamp_ns: np.ndarray
    tracked: np.ndarray
    wrist: np.ndarray
    rotation: np.ndarray | None
    tips: np.ndarray | None
    components: Mapping[str, str]

    @property
    def hand_centred(self) -> bool:
        return self.frame in HAND_CENTRED_FRAMES


@dataclass(frozen=True, slots=True)
class HeadSource:
    """The head/device pose on its own clock: (N, 3) position (m, world), (N, 3, 3)
    head -> world rotation with the head in `HEAD_AXES` (a camera in OpenCV axes is
    turned into them), (N,) valid, the stream it came from and how its axes were read."""

    stream: str
    timestamp_ns: np.ndarray
    position: np.ndarray
    rotation: np.ndarray
    valid: np.ndarray
    conversion: str


def _matrices(quat_xyzw: np.ndarray) -> np.ndarray:
    """(N, 3, 3) rotation matrices of (N, 4) xyzw quaternions; NaN rows where not finite
    or zero (scipy would refuse them)."""
    out = np.full((len(quat_xyzw), 3, 3), np.nan)
    ok = np.isfinite(quat_xyzw).all(axis=1) & (np.linalg.norm(quat_xyzw, axis=1) > 1e-9)
    if ok.any():
        out[ok] = Rotation.from_quat(quat_xyzw[ok]).as_matrix()
    return out


def _joint_ok(stream: Stream, joints: list[int]) -> np.ndarray:
    """(N, len(joints)) bool: the source tracked each joint (flag and confidence)."""
    f = stream.fields
    ok = np.ones((len(stream), len(joints)), bool)
    if "joint_valid" in f:
        ok &= f["joint_valid"][:, joints]
    if "joint_confidence" in f:
        ok &= f["joint_confidence"][:, joints] > 0
    return ok


def _masked(values: np.ndarray, ok: np.ndarray) -> np.ndarray:
    return np.where(ok[..., None], values, np.nan)


def _paired_wrist(trajectory: Trajectory, stream: Stream) -> Stream | None:
    """A ``wrist_palm`` stream with a wrist rotation from the same file on the same clock."""
    for other in trajectory.streams_of_kind("wrist_palm"):
        if (
            other.attrs.get("hand") == stream.attrs.get("hand")
            and other.attrs.get("source_file") == stream.attrs.get("source_file")
            and "wrist_rotation" in other.fields
            and np.array_equal(other.timestamp_ns, stream.timestamp_ns)
        ):
            return other
    return None


def _skeleton(stream: Stream) -> HandSource:
    joint_set = str(stream.attrs["joint_set"])
    w, tips = WRIST[joint_set], list(FINGERTIPS[joint_set])
    f = stream.fields
    wrist_ok = _joint_ok(stream, [w])[:, 0]
    wrist_name = f"joint {w} of {joint_set}"
    return HandSource(
        side=str(stream.attrs["hand"]),
        streams=(stream.name,),
        joint_set=joint_set,
        frame=str(stream.attrs["frame"]),
        timestamp_ns=stream.timestamp_ns,
        tracked=f["hand_valid"].astype(bool),
        wrist=_masked(f["position"][:, w], wrist_ok),
        rotation=_masked(_matrices(f["rotation"][:, w]), wrist_ok[:, None]),
        tips=_masked(f["position"][:, tips], _joint_ok(stream, tips)),
        components={
            "wrist_position": f"{EXACT}: {wrist_name} position",
            "wrist_rotation": f"{EXACT}: {wrist_name} orientation (the source's wrist axes)",
            "fingertips": f"{EXACT}: {joint_set} tip joints {tips}",
            "grasp_aperture": f"{EXACT}: thumb tip {tips[0]} to index tip {tips[1]}",
        },
    )


def _landmarks(trajectory: Trajectory, stream: Stream) -> HandSource:
    joint_set = str(stream.attrs["joint_set"])
    positions = stream.fields["position"]
    mapping = joint_map(joint_set, "mediapipe21")
    mp21, _ = mapping.apply(positions, axis=-2)
    ok, _ = mapping.apply(_joint_ok(stream, list(range(positions.shape[1]))), axis=-1)
    mp21 = _masked(mp21, ok.astype(bool))
    side = str(stream.attrs["hand"])
    w, tips = WRIST[joint_set], list(FINGERTIPS["mediapipe21"])
    wrist = mp21[:, 0]
    paired = _paired_wrist(trajectory, stream)
    names: tuple[str, ...] = (stream.name,)
    if paired is not None:
        names = (stream.name, paired.name)
        wrist = paired.fields["wrist_position"]
        rotation = _matrices(paired.fields["wrist_rotation"])
        where = f"{EXACT}: the wrist pose of {paired.name}"
        position_text, rotation_text = f"{where} (translation)", f"{where} (rotation)"
    else:
        rotation = knuckle_frame(mp21, side, trajectory.info.handedness == "right")
        position_text = f"{EXACT}: landmark {w} of {joint_set}"
        rotation_text = (
            f"{APPROXIMATE}: derived from landmarks (the source has no wrist orientation): "
            "back-of-hand normal of the plane wrist, index base, little-finger base; forward "
            "from the wrist towards the middle-finger base (WebXR wrist axes)"
        )
    source_tips = list(FINGERTIPS[joint_set])
    return HandSource(
        side=side,
        streams=names,
        joint_set=joint_set,
        frame=str(stream.attrs["frame"]),
        timestamp_ns=stream.timestamp_ns,
        tracked=stream.fields["hand_valid"].astype(bool),
        wrist=wrist,
        rotation=rotation,
        tips=mp21[:, tips],
        components={
            "wrist_position": position_text,
            "wrist_rotation": rotation_text,
            "fingertips": f"{EXACT}: {joint_set} tip landmarks {source_tips}",
            "grasp_aperture": f"{EXACT}: thumb tip {source_tips[0]} to index tip {source_tips[1]}",
        },
    )


def _mano(stream: Stream) -> HandSource:
    f = stream.fields
    joints = f.get("joints")
    tips = list(FINGERTIPS["mano21"])
    rotation = Rotation.from_rotvec(f["global_orient"]).as_matrix()
    components = {
        "wrist_rotation": f"{EXACT}: MANO global_orient (the MANO root axes)",
        "wrist_position": f"{EXACT}: MANO-21 joint 0",
        "fingertips": f"{EXACT}: MANO-21 tip joints {tips}",
        "grasp_aperture": f"{EXACT}: MANO-21 thumb tip to index tip",
    }
    if joints is None:
        components.update(
            wrist_position=f"{APPROXIMATE}: MANO transl (the root translation; the wrist "
            "joint sits at a shape-dependent offset from it)",
            fingertips=f"{ABSENT}: the estimator gave no joints and no MANO model is shipped",
            grasp_aperture=f"{ABSENT}: no fingertips",
        )
    return HandSource(
        side=str(stream.attrs["hand"]),
        streams=(stream.name,),
        joint_set="mano21" if joints is not None else "mano",
        frame=str(stream.attrs["frame"]),
        timestamp_ns=stream.timestamp_ns,
        tracked=f["valid_detected"].astype(bool),
        wrist=joints[:, 0] if joints is not None else f["transl"],
        rotation=rotation,
        tips=joints[:, tips] if joints is not None else None,
        components=components,
    )


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return v / np.where(norm > 1e-9, norm, np.nan)


def normals_frame(
    wrist: np.ndarray, palm: np.ndarray, wrist_normal: np.ndarray, side: str
) -> np.ndarray:
    """(N, 3, 3) wrist -> frame rotation in the Project Aria MPS wrist axes from a wrist
    and palm position and the wrist normal: y = -wrist normal, x = the wrist -> palm
    direction (palm -> wrist for a right hand) made orthogonal to y, z = x × y.

    On the MPS sample's tracked rows that carry both, the wrist normal is the wrist
    pose's -y and the palm lies along its x axis (left; -x right) within a few degrees.
    """
    y = -_unit(wrist_normal)
    toward = (palm - wrist) * (-1.0 if side == "right" else 1.0)
    x = _unit(toward - np.sum(toward * y, axis=-1, keepdims=True) * y)
    return np.stack([x, y, np.cross(x, y)], axis=-1)


def _wrist_palm(stream: Stream) -> HandSource:
    f = stream.fields
    side = str(stream.attrs["hand"])
    rotation: np.ndarray | None = None
    if "wrist_rotation" in f:
        rotation = _matrices(f["wrist_rotation"])
        rotation_text = f"{EXACT}: wrist_rotation"
    elif {"wrist_normal", "palm_position"} <= set(f):
        rotation = normals_frame(f["wrist_position"], f["palm_position"], f["wrist_normal"], side)
        rotation_text = (
            f"{APPROXIMATE}: derived from the wrist normal and the wrist -> palm direction "
            "(MPS wrist axes, within a few degrees of the MPS wrist pose)"
        )
    else:
        rotation_text = f"{ABSENT}: the file gives wrist and palm positions only"
    return HandSource(
        side=side,
        streams=(stream.name,),
        joint_set="wrist_palm",
        frame=str(stream.attrs["frame"]),
        timestamp_ns=stream.timestamp_ns,
        tracked=f["hand_valid"].astype(bool),
        wrist=f["wrist_position"],
        rotation=rotation,
        tips=None,
        components={
            "wrist_position": f"{EXACT}: wrist_position",
            "wrist_rotation": rotation_text,
            "fingertips": f"{ABSENT}: a wrist/palm stream has no fingertips",
            "grasp_aperture": f"{ABSENT}: no fingertips",
        },
    )


def _rank(stream: Stream) -> int:
    """Which stream of a hand is read (lowest first): the one giving the most exactly."""
    centred = stream.attrs.get("frame") in HAND_CENTRED_FRAMES
    if stream.kind == "hand_joints":
        if centred:
            return 5
        return 0 if "rotation" in stream.fields else 2
    if stream.kind == "mano":
        return 1 if "joints" in stream.fields else 3
    return 4  # wrist_palm


def _tracked_count(stream: Stream) -> int:
    for key in ("hand_valid", "valid_detected"):
        if key in stream.fields:
            return int(np.count_nonzero(stream.fields[key]))
    return 0


def hand_source(trajectory: Trajectory, side: str) -> HandSource | None:
    """The `HandSource` of one hand: the best-ranked stream of that side (`_rank`), then
    the one tracked in most samples, then the most joints, then the name; None: none."""
    kinds = ("hand_joints", "mano", "wrist_palm")
    candidates = [
        s for s in trajectory.streams if s.kind in kinds and s.attrs.get("hand") == side and len(s)
    ]
    if not candidates:
        return None
    best = min(
        candidates,
        key=lambda s: (_rank(s), -_tracked_count(s), -s.dims().get("J", 0), s.name),
    )
    if best.kind == "mano":
        return _mano(best)
    if best.kind == "wrist_palm":
        return _wrist_palm(best)
    if "rotation" in best.fields:
        return _skeleton(best)
    return _landmarks(trajectory, best)


def head_source(trajectory: Trajectory) -> HeadSource | None:
    """The head pose: a ``pose`` stream ``device_pose`` / ``head``, else the head camera's
    per-frame ``world_to_camera`` (inverted, its axes turned into `HEAD_AXES`); None when
    the capture has neither.

    Raises:
        ActionSpaceError: the head camera's ``camera_axes`` attr is missing or unknown.
    """
    for name in HEAD_POSE_STREAMS:
        if trajectory.has_stream(name) and trajectory.stream(name).kind == "pose":
            s = trajectory.stream(name)
            if not len(s):
                continue
            rotation = _matrices(s.fields["rotation"])
            valid = (
                s.fields["valid"].astype(bool)
                & np.isfinite(s.fields["position"]).all(axis=1)
                & np.isfinite(rotation).all(axis=(1, 2))
            )
            return HeadSource(
                name, s.timestamp_ns, s.fields["position"], rotation, valid, POSE_NOTE
            )
    try:
        frames = head_camera(trajectory).frames
    except NoHeadCameraError:
        return None
    axes = str(frames.attrs.get("camera_axes", ""))
    if axes not in CAMERA_TO_HEAD:
        raise ActionSpaceError(
            "frame",
            f"stream {frames.name!r}: attr camera_axes is {axes!r}, expected one of "
            f"{', '.join(sorted(CAMERA_TO_HEAD))}: the head frame's axes are unknown",
        )
    to_head, note = CAMERA_TO_HEAD[axes]
    w2c = frames.fields["world_to_camera"]
    camera = np.swapaxes(w2c[:, :3, :3], 1, 2)  # camera -> world
    position = -(camera @ w2c[:, :3, 3:])[:, :, 0]
    rotation = camera @ to_head.T  # head -> world, so R^T = C R_camera^T
    valid = np.isfinite(w2c).all(axis=(1, 2))
    return HeadSource(frames.name, frames.timestamp_ns, position, rotation, valid, note)


@dataclass(frozen=True, slots=True)
class ActionSources:
    """What a derivation reads of one trajectory, on no clock yet: each hand's
    `HandSource` (None: no stream of that side), the head pose, and the few capture facts
    the state and its description use. `derive.derive_from_sources` puts it on a clock.

    Attributes:
        capture_id, start_ns, world_frame: from `CaptureInfo`.
        dominant: (characteristic name, ``left``/``right``) when the capture says which
            hand is dominant, else None.
        hands: ``left``/``right`` -> `HandSource` or None.
        head: the head pose, or None (no pose stream, no head camera; or ``head_error``).
        head_error: why the head camera's axes are unknown (`head_source` refused it), or
            None; raised as ``frame`` only by a space that needs the head.
        recorder_slots: (slot_index, timestamp_ns) int64 of a ``recorder_slots`` stream
            (a CERES row's slot -> source clock), or None.
    """

    capture_id: str
    start_ns: int
    world_frame: str
    dominant: tuple[str, str] | None
    hands: Mapping[str, HandSource | None]
    head: HeadSource | None
    head_error: str | None = None
    recorder_slots: tuple[np.ndarray, np.ndarray] | None = None

    def head_for_frames(self) -> HeadSource | None:
        """The head pose for a space that needs it (ActionSpaceError when its axes are
        unknown)."""
        if self.head_error is not None:
            raise ActionSpaceError("frame", self.head_error)
        return self.head


DOMINANT_CHARACTERISTICS = ("dominant_hand", "handedness_of_demonstrator")


def action_sources(trajectory: Trajectory) -> ActionSources:
    """The `ActionSources` of ``trajectory`` (every hand and head stream read once)."""
    dominant = next(
        (
            (c.name, str(c.value))
            for c in trajectory.info.characteristics
            if c.status == "known"
            and c.value in ("left", "right")
            and c.name in DOMINANT_CHARACTERISTICS
        ),
        None,
    )
    head_error = None
    try:
        head = head_source(trajectory)
    except ActionSpaceError as exc:
        head, head_error = None, exc.message
    slots = None
    if trajectory.has_stream("recorder_slots"):
        stream = trajectory.stream("recorder_slots")
        slots = (
            np.asarray(stream.fields["slot_index"], dtype=np.int64),
            np.asarray(stream.timestamp_ns, dtype=np.int64),
        )
    return ActionSources(
        capture_id=trajectory.info.capture_id,
        start_ns=int(trajectory.info.start_ns),
        world_frame=trajectory.info.world_frame,
        dominant=dominant,
        hands={side: hand_source(trajectory, side) for side in ("left", "right")},
        head=head,
        head_error=head_error,
        recorder_slots=slots,
    )
