"""Holos HDF5: the capture's tracks sorted by role (hands, head, devices) and the joint
picks of the format's skeleton scale.

Part of the writer of `ego_assets.formats.holos_hdf5` (the format: docs/formats/holos-hdf5.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ego_assets.formats.holos_clock import (
    Rows,
    Track,
    same_rows,
)
from ego_assets.formats.holos_writer import ARKIT_OMITTED, SIDES
from ego_assets.trajectory.joints import JOINT_SETS
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.streams import Stream

# --------------------------------------------------------------------- the capture


@dataclass(frozen=True, slots=True)
class CaptureTracks:
    """The canonical streams sorted into the roles the format names."""

    device: Track | None
    skeleton_world: dict[str, Track]
    skeleton_local: dict[str, Track]
    landmarks: dict[str, Track]
    landmarks_2d: dict[str, Track]
    imu: Stream | None
    objects: Stream | None
    joint_set: str | None
    landmark_set: str | None


def _side_tracks(streams: Sequence[Stream], role: str) -> dict[str, Track]:
    out: dict[str, Track] = {}
    for side in SIDES:
        mine = tuple(s for s in streams if s.attrs.get("hand") == side and len(s))
        if mine:
            out[side] = Track(role, side, mine)
    return out


def _one_joint_set(streams: Sequence[Stream], what: str) -> str | None:
    sets = sorted({str(s.attrs["joint_set"]) for s in streams})
    if len(sets) > 1:
        raise ValueError(f"{what} streams use different joint sets {sets}; one file has one scale")
    return sets[0] if sets else None


def sort_tracks(trajectory: Trajectory) -> CaptureTracks:
    """Assign every stream the format knows to its role (the rest is raw-only)."""
    streams = trajectory.streams
    joints = [s for s in streams if s.kind == "hand_joints"]
    world = [s for s in joints if "rotation" in s.fields and s.attrs.get("frame") == "world"]
    local = [s for s in joints if "rotation" in s.fields and s.attrs.get("frame") == "wrist"]
    points = [s for s in joints if "rotation" not in s.fields]
    mano = [s for s in streams if s.kind == "mano" and "joints" in s.fields]
    device = next(
        (
            s
            for name in ("device_pose", "head")
            for s in streams
            if s.name == name and s.kind == "pose"
        ),
        None,
    )
    imus = [s for s in streams if s.kind == "imu"]
    objects = [s for s in streams if s.kind == "object_pose"]
    landmark_set = _one_joint_set(points, "3D landmark")
    if mano and not points:
        landmark_set = "mano21"
    return CaptureTracks(
        device=Track("device", "", (device,)) if device is not None and len(device) else None,
        skeleton_world=_side_tracks(world, "skeleton"),
        skeleton_local=_side_tracks(local, "skeleton_local"),
        landmarks=_side_tracks(points or mano, "landmarks"),
        landmarks_2d=_side_tracks([s for s in streams if s.kind == "hand_landmarks_2d"], "2d"),
        imu=imus[0] if imus else None,
        objects=objects[0] if objects else None,
        joint_set=_one_joint_set(world + local, "hand skeleton"),
        landmark_set=landmark_set,
    )


def joint_names(joint_set: str) -> tuple[str, ...]:
    """Names on the ``joint`` scale: the set's joints, ARKit without `ARKIT_OMITTED`."""
    names = JOINT_SETS[joint_set]
    if joint_set == "arkit27":
        return tuple(n for n in names if n not in ARKIT_OMITTED)
    return names


def joint_keep(joint_set: str) -> np.ndarray:
    names = JOINT_SETS[joint_set]
    kept = set(joint_names(joint_set))
    return np.array([i for i, n in enumerate(names) if n in kept], dtype=np.int64)


def joint_pick(joint_set: str) -> slice | np.ndarray:
    """`joint_keep` as a slice when the kept joints are one run (ARKit: all but the last),
    so selecting them is a view rather than a copy."""
    keep = joint_keep(joint_set)
    if len(keep) and bool((np.diff(keep) == 1).all()):
        return slice(int(keep[0]), int(keep[-1]) + 1)
    return keep


def track_validity(track: Track) -> np.ndarray:
    for key in ("hand_valid", "valid", "valid_detected"):
        if track.has_field(key):
            return track.field(key).astype(bool)
    return np.ones(len(track.timestamp_ns), bool)


def skeleton_rows(
    track: Track, pick: slice | np.ndarray, index: np.ndarray, held: np.ndarray
) -> tuple[Rows, np.ndarray]:
    """(T, J, 7) float64 joint poses of ``track`` held onto the demo clock, NaN where not
    held or not tracked (hand and joint flags), and the (T, J) validity mask."""
    valid = (held & track_validity(track)[index])[:, None]
    if track.has_field("joint_valid"):
        valid = valid & track.field("joint_valid")[index][:, pick].astype(bool)
    parts = (track.field("position"), track.field("rotation"))
    valid = np.broadcast_to(valid, (len(index), parts[0][:0, pick].shape[1]))
    rows = Rows(
        parts,
        np.dtype(np.float64),
        index=same_rows(index),
        pick=pick,
        valid=None if valid.all() else valid,
    )
    return rows, valid


def landmark_points(track: Track) -> tuple[np.ndarray, np.ndarray]:
    """(N, L, 3) landmark positions and (N, L) confidence (0 = not seen)."""
    mano = track.streams[0].kind == "mano"
    points = track.field("joints" if mano else "position")
    hand = track_validity(track)
    if track.has_field("joint_confidence"):
        conf = track.field("joint_confidence")
    elif track.has_field("hand_confidence"):
        conf = np.repeat(track.field("hand_confidence")[:, None], points.shape[1], axis=1)
    else:
        conf = np.repeat(hand.astype(np.float64)[:, None], points.shape[1], axis=1)
    return points, np.where(hand[:, None], conf, 0.0)
