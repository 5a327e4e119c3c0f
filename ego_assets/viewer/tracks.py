"""The tracked things of an episode in the recording: poses, hands, objects, signals.

* ``world``: view coordinates from the capture's handedness and up axis; metres.
* ``world/device``: the device/head pose (the first ``pose`` stream without a ``hand``
  attr); streams in the ``device`` frame hang below it.
* ``world/wrist_<hand>``: a hand's anchor/wrist pose stream; streams in the ``wrist``
  frame of that hand hang below it.
* ``<parent>/<s>``: hand skeletons (``hand_joints``; MANO ``joints``) as line strips
  with the bones of their joint set, blue for left, red for right, nothing drawn while
  untracked; MANO without joints, Aria wrist/palm: points. ``world/objects/<anchor>``:
  object anchors (transform + labelled box, box only while tracked).
* ``signals/...``: hand tracked (0/1), confidences, wrist speed (m/s), pinch distances
  (m), IMU (m s-2, rad s-1) and recorder gap slots (0/1), each in the plot of its unit.
"""

from __future__ import annotations

import numpy as np
import rerun as rr

from ego_assets.quality.hands import wrist_steps
from ego_assets.quality.streams import validity
from ego_assets.trajectory.joints import PARENTS
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.streams import Stream
from ego_assets.viewer.rerun_log import (
    ACCELERATION,
    ANGULAR_RATE,
    CONFIDENCE,
    DISTANCE,
    FLAGS,
    SPEED,
    ArrowBatch,
    RecordingLog,
    entity,
)
from ego_assets.viewer.skeleton import skeleton_strips

HAND_RGB = {"left": (40, 110, 255), "right": (235, 60, 40)}
OTHER_RGB = (200, 200, 200)
STRIP_RADIUS_M = 0.002
POINT_RADIUS_M = 0.006
AXES_LENGTH_M = 0.05
OBJECT_HALF_SIZE_M = 0.05
# IMU field -> plot of its unit (device frame)
IMU_PLOTS = {"accel": ACCELERATION, "gyro": ANGULAR_RATE, "gravity": ACCELERATION}


def view_coordinates(handedness: str, up_axis: str) -> rr.ViewCoordinates:
    """Rerun view coordinates for a world frame (``"right"``, ``"Y"`` -> RIGHT_HAND_Y_UP)."""
    direction = "DOWN" if up_axis.startswith("-") else "UP"
    return getattr(rr.ViewCoordinates, f"{handedness.upper()}_HAND_{up_axis[-1]}_{direction}")


def device_pose(trajectory: Trajectory) -> Stream | None:
    """The device/head pose: the first ``pose`` stream without a ``hand`` attr."""
    return next((s for s in trajectory.streams_of_kind("pose") if "hand" not in s.attrs), None)


class Placement:
    """Where a stream goes in the 3D world, by its ``frame`` attr and the poses present."""

    def __init__(self, trajectory: Trajectory, log: RecordingLog) -> None:
        self.log = log
        self.device = device_pose(trajectory)
        poses = trajectory.streams_of_kind("pose")
        self.wrists = {str(s.attrs["hand"]): s for s in poses if "hand" in s.attrs}

    def pose_path(self, stream: Stream) -> str:
        """Entity of a ``pose`` stream: the device, a wrist, or ``world/<name>``."""
        if stream is self.device:
            return "world/device"
        if "hand" in stream.attrs:
            return f"world/wrist_{stream.attrs['hand']}"
        return entity("world", stream.name)

    def path(self, stream: Stream) -> str:
        """Entity of a stream in frame ``attrs['frame']``; ``frames/<name>`` (with a note)
        when that frame has no pose in the trajectory."""
        frame = stream.attrs.get("frame", "world")
        hand = str(stream.attrs.get("hand"))
        if frame == "world":
            return entity("world", stream.name)
        if frame == "device":
            return entity("world/device", stream.name)
        if frame == "wrist" and hand in self.wrists:
            return entity(f"world/wrist_{hand}", stream.name)
        self.log.summary.notes.append(
            f"stream {stream.name!r}: frame {frame!r} has no pose in the trajectory; "
            "shown in its own space"
        )
        return entity("frames", stream.name)


def log_world(log: RecordingLog, trajectory: Trajectory) -> None:
    """The world's view coordinates (handedness, up axis)."""
    info = trajectory.info
    log.static("world", view_coordinates(info.handedness, info.up_axis))


def log_poses(log: RecordingLog, trajectory: Trajectory, placement: Placement) -> None:
    """Every ``pose`` stream as a transform with small axes (valid, finite rows only)."""
    for stream in trajectory.streams_of_kind("pose"):
        path = placement.pose_path(stream)
        position, rotation = stream.fields["position"], stream.fields["rotation"]
        ok = validity(stream) & np.isfinite(position).all(axis=1)
        ok &= np.isfinite(rotation).all(axis=1)
        log.static(path, rr.TransformAxes3D(AXES_LENGTH_M))
        log.send(
            path,
            stream.time[ok],
            rr.Transform3D.columns(translation=position[ok], quaternion=rotation[ok]),
        )


def log_hands(log: RecordingLog, trajectory: Trajectory, placement: Placement) -> None:
    """Hand skeletons (or points) and their signals, for every hand stream."""
    for stream in trajectory.streams:
        if stream.kind == "hand_joints":
            _skeleton(log, placement, stream, stream.fields["position"])
        elif stream.kind == "mano" and "joints" in stream.fields:
            _skeleton(log, placement, stream, stream.fields["joints"], "mano21")
        elif stream.kind == "mano":
            _points(log, placement.path(stream), stream, stream.fields["transl"][:, None, :])
        elif stream.kind == "wrist_palm":
            parts = [stream.fields["wrist_position"]]
            if "palm_position" in stream.fields:
                parts.append(stream.fields["palm_position"])
            _points(log, placement.path(stream), stream, np.stack(parts, axis=1))
        else:
            continue
        _hand_signals(log, stream)


def _colour(stream: Stream) -> tuple[int, int, int]:
    return HAND_RGB.get(str(stream.attrs.get("hand")), OTHER_RGB)


def _skeleton(
    log: RecordingLog,
    placement: Placement,
    stream: Stream,
    positions: np.ndarray,
    joint_set: str | None = None,
) -> None:
    """(T, J, 3) joints as line strips of their bones (points for an unknown joint set)."""
    joint_set = joint_set or str(stream.attrs["joint_set"])
    path = placement.path(stream)
    tracked = validity(stream)[:, None] & np.isfinite(positions).all(axis=2)
    if "joint_valid" in stream.fields:
        tracked &= stream.fields["joint_valid"]
    if joint_set not in PARENTS:
        _points(log, path, stream, positions, tracked)
        return
    strips = skeleton_strips(positions, tracked, joint_set)
    log.static(path, rr.LineStrips3D.from_fields(colors=[_colour(stream)], radii=[STRIP_RADIUS_M]))
    column = rr.ComponentColumn(
        rr.LineStrips3D.descriptor_strips(), ArrowBatch(strips.strips), offsets=strips.offsets
    )
    log.send(path, stream.time, [column])


def _points(
    log: RecordingLog,
    path: str,
    stream: Stream,
    points: np.ndarray,
    tracked: np.ndarray | None = None,
) -> None:
    """(T, K, 3) points per sample, the untracked ones left out."""
    ok = np.isfinite(points).all(axis=2) & validity(stream)[:, None]
    if tracked is not None:
        ok &= tracked
    log.static(path, rr.Points3D.from_fields(colors=[_colour(stream)], radii=[POINT_RADIUS_M]))
    flat = points.reshape(-1, 3)[ok.ravel()].astype(np.float32)
    log.send(path, stream.time, rr.Points3D.columns(positions=flat).partition(ok.sum(axis=1)))


def _hand_signals(log: RecordingLog, stream: Stream) -> None:
    """Tracked (0/1), hand and mean joint confidence, wrist speed (m/s) of a hand stream."""
    base = entity("signals", stream.name)
    tracked = validity(stream).astype(np.float64)
    log.scalars(f"{base}/tracked", stream.time, tracked, "tracked", FLAGS)
    if "hand_confidence" in stream.fields:
        confidence = stream.fields["hand_confidence"]
        log.scalars(
            f"{base}/hand_confidence", stream.time, confidence, "hand confidence", CONFIDENCE
        )
    if "joint_confidence" in stream.fields:
        conf = stream.fields["joint_confidence"]
        mean = np.full(len(stream), np.nan)
        has = np.isfinite(conf).any(axis=1)
        mean[has] = np.nanmean(conf[has], axis=1)
        name = "mean joint confidence"
        log.scalars(f"{base}/joint_confidence", stream.time, mean, name, CONFIDENCE)
    steps = wrist_steps(stream)
    if steps is not None and steps[0].any() and stream.attrs.get("frame") != "wrist":
        pair, step_m, dt_s = steps
        speed = step_m / dt_s
        log.scalars(f"{base}/wrist_speed", stream.time[1:][pair], speed, "wrist speed m/s", SPEED)


def log_objects(log: RecordingLog, trajectory: Trajectory) -> None:
    """Object anchors: a transform per update, a labelled box while tracked."""
    for stream in trajectory.streams_of_kind("object_pose"):
        ids = stream.fields["anchor_id"].astype(str)
        for anchor in sorted(set(ids)):
            rows = ids == anchor
            name = str(stream.fields["anchor_name"][rows][0])
            path = entity("world/objects", anchor)
            box = rr.Boxes3D.from_fields(
                half_sizes=[[OBJECT_HALF_SIZE_M] * 3], labels=[name], show_labels=True
            )
            log.static(path, box)
            valid = stream.fields["valid"][rows]
            transforms = rr.Transform3D.columns(
                translation=stream.fields["position"][rows],
                quaternion=stream.fields["rotation"][rows],
            )
            centres = rr.Boxes3D.columns(centers=np.zeros((int(valid.sum()), 3)))
            log.send(
                path, stream.time[rows], [*transforms, *centres.partition(valid.astype(np.int64))]
            )


def log_device_signals(log: RecordingLog, trajectory: Trajectory) -> None:
    """Pinch distances (m), IMU (device frame) and recorder gap slots (0/1)."""
    for stream in trajectory.streams_of_kind("pinch"):
        for hand in ("left", "right"):
            path = entity("signals", stream.name, hand)
            log.scalars(path, stream.time, stream.fields[hand], f"pinch {hand} m", DISTANCE)
    for stream in trajectory.streams_of_kind("imu"):
        for name, plot in IMU_PLOTS.items():
            if name in stream.fields:
                path = entity("signals", stream.name, name)
                log.scalars(path, stream.time, stream.fields[name], name, plot)
    for stream in trajectory.streams_of_kind("recorder_slots"):
        gap = stream.fields["gap"].astype(np.float64)
        log.scalars(entity("signals", stream.name, "gap"), stream.time, gap, "gap slot", FLAGS)
