"""Plausibility figures: wrong-but-well-formed inputs that timing checks cannot see.

Each figure is documented with its limits in ``docs/quality.md`` and has a synthetic
fault option that trips it (`ego_assets.synth.faults`):

* `rotation_axis_error_deg` (``quaternion_wxyz``): on skeletons whose joint set declares
  which joint axis runs along the bone, the median angle between that axis, rotated by
  the joint's quaternion, and the bone actually drawn by the joint positions. Quaternions
  written in the wrong component order or mirrored point the axis elsewhere.
* `chirality_mismatch_ratio` (``swapped_hands``): share of valid samples whose geometry
  says the other hand. The sign of the triple product (index knuckle - wrist) x (little
  knuckle - wrist) . (thumb base - wrist) is + for a right hand and - for a left one in a
  right-handed frame (every one of the 55 + 55 recorded Quest poses agrees); swapped hands
  or a mirrored frame flip it.
* ``out_of_domain_ratio`` (``negative_radius``, a stream figure in ``streams.py``): share
  of valid samples with a confidence outside [0, 1] or a negative joint radius. A WebXR
  ``tracked`` flag other than 0 / 1 is a format error of the reader instead.
* `pinch_distance_error_m` (``pinch_strength``): median |pinch - thumb-tip to index-tip
  distance| over samples where both exist; a 0-1 strength written as metres is far off.
* `teleport_events` (``teleport``, in ``hands.py``): see `teleport_flags`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from ego_assets.quality.streams import joint_mask, validity
from ego_assets.trajectory.joints import FINGERTIPS, PARENTS
from ego_assets.trajectory.streams import Stream

# Joint axis (in the joint's own frame) that points along its bone toward the fingertip,
# per joint set whose convention is declared by its standard: WebXR / OpenXR joints look
# down -Z toward the tip. ARKit's joint axes are not declared here (no public statement
# the platform can test against), so ARKit skeletons are not measured.
BONE_AXIS: Mapping[str, tuple[float, float, float]] = MappingProxyType({"webxr25": (0, 0, -1)})
# (wrist, index knuckle, little knuckle, thumb base) per joint set, for chirality.
CHIRALITY_POINTS: Mapping[str, tuple[int, int, int, int]] = MappingProxyType(
    {
        "webxr25": (0, 6, 21, 2),
        "arkit27": (0, 6, 21, 2),
        "vision21": (0, 5, 17, 2),
        "mediapipe21": (0, 5, 17, 2),
        "aria21": (5, 8, 17, 6),
        "mano21": (0, 1, 7, 13),
    }
)
# Triple products smaller than this share of |a| |b| |c| (a flat, degenerate palm) are
# not counted either way.
MIN_CHIRALITY_SINE = 0.05


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(norm > 0, norm, np.nan)


def rotation_axis_error_deg(stream: Stream) -> float:
    """Median angle (degrees) between each tracked joint's declared bone axis and its
    bone; NaN when the stream has no rotations or its joint set declares no axis."""
    from scipy.spatial.transform import Rotation  # ~1 s to import: only when measured

    joint_set = str(stream.attrs.get("joint_set", ""))
    if (
        stream.kind != "hand_joints"
        or joint_set not in BONE_AXIS
        or "rotation" not in stream.fields
    ):
        return float("nan")
    valid = validity(stream)
    pos = stream.fields["position"][valid]
    quat = stream.fields["rotation"][valid]
    if not len(pos):
        return float("nan")
    parents = np.asarray(PARENTS[joint_set])
    child = {p: c for c, p in enumerate(parents) if p > 0}
    tips = set(FINGERTIPS[joint_set])
    joints = np.arange(1, len(parents))
    start = np.array([parents[j] if j in tips else j for j in joints])
    end = np.array([j if j in tips else child.get(j, j) for j in joints])
    bone = _unit(pos[:, end] - pos[:, start])  # (T, J-1, 3)
    q = quat[:, joints].reshape(-1, 4)
    ok = np.isfinite(q).all(axis=1) & (np.linalg.norm(q, axis=1) > 0.5)
    axis = np.full((len(q), 3), np.nan)
    axis[ok] = Rotation.from_quat(q[ok]).apply(np.asarray(BONE_AXIS[joint_set], float))
    cos = np.sum(axis.reshape(bone.shape) * bone, axis=-1)
    mask = joint_mask(stream)
    tracked = np.ones(cos.shape, bool) if mask is None else mask[valid][:, joints]
    tracked &= mask[valid][:, start] if mask is not None else True
    angles = np.degrees(np.arccos(np.clip(cos[tracked & np.isfinite(cos)], -1.0, 1.0)))
    return float(np.median(angles)) if angles.size else float("nan")


def chirality_mismatch_ratio(stream: Stream, hand: str, left_handed_frame: bool) -> float:
    """Share of valid samples (with a non-degenerate palm) whose geometry is the other
    hand; NaN without 3D joints of a known set."""
    joint_set = str(stream.attrs.get("joint_set", "mano21" if stream.kind == "mano" else ""))
    field = "position" if stream.kind == "hand_joints" else "joints"
    if joint_set not in CHIRALITY_POINTS or field not in stream.fields:
        return float("nan")
    w, i, p, t = CHIRALITY_POINTS[joint_set]
    pos = stream.fields[field][validity(stream)]
    a, b, c = pos[:, i] - pos[:, w], pos[:, p] - pos[:, w], pos[:, t] - pos[:, w]
    triple = np.einsum("ij,ij->i", np.cross(a, b), c)
    scale = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) * np.linalg.norm(c, axis=1)
    sine = np.divide(triple, scale, out=np.zeros_like(triple), where=scale > 0)
    usable = np.isfinite(sine) & (np.abs(sine) >= MIN_CHIRALITY_SINE)
    if not usable.any():
        return float("nan")
    expected = (1.0 if hand == "right" else -1.0) * (-1.0 if left_handed_frame else 1.0)
    return float(np.count_nonzero(np.sign(sine[usable]) != expected) / np.count_nonzero(usable))


def pinch_distance_error_m(hand_stream: Stream, pinch_stream: Stream | None, hand: str) -> float:
    """Median |pinch - thumb-tip/index-tip distance| (m) over samples with both, matched
    on equal timestamps; NaN without a pinch stream or fingertips."""
    joint_set = str(hand_stream.attrs.get("joint_set", ""))
    if (
        pinch_stream is None
        or hand_stream.kind != "hand_joints"
        or joint_set not in FINGERTIPS
        or hand not in pinch_stream.fields
    ):
        return float("nan")
    thumb, index = FINGERTIPS[joint_set][:2]
    _, hi, pi = np.intersect1d(
        hand_stream.timestamp_ns, pinch_stream.timestamp_ns, return_indices=True
    )
    pos = hand_stream.fields["position"][hi]
    distance = np.linalg.norm(pos[:, thumb] - pos[:, index], axis=1)
    pinch = np.asarray(pinch_stream.fields[hand], np.float64)[pi]
    ok = validity(hand_stream)[hi] & np.isfinite(distance) & np.isfinite(pinch)
    return float(np.median(np.abs(pinch[ok] - distance[ok]))) if ok.any() else float("nan")


def teleport_flags(
    points: np.ndarray, dt_s: np.ndarray, pair_ok: np.ndarray, speed_mps: float, residual_m: float
) -> np.ndarray:
    """(T-1,) bool: consecutive pairs that teleport.

    A pair (i-1, i) teleports when the wrist moves faster than ``speed_mps``, or when
    sample i lands more than ``residual_m`` away from where the previous pair's velocity
    puts it (``p[i-1] + v[i-1] * dt``). The residual of smooth motion shrinks with the
    interval (acceleration x dt^2), so the same rule holds at 15 Hz and at 90 Hz: a
    12 cm jump is one at any rate, a 1.5 m/s reach is none.

    Args:
        points: (T, 3) wrist positions, metres.
        dt_s: (T-1,) intervals, seconds.
        pair_ok: (T-1,) both samples valid, interval positive and not a gap.
    """
    step = np.diff(points, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        speed = np.linalg.norm(step, axis=1) / dt_s
        velocity = step / dt_s[:, None]
    predicted = np.full_like(step, np.nan)
    predicted[1:] = velocity[:-1] * dt_s[1:, None]
    residual = np.linalg.norm(step - predicted, axis=1)
    prev_ok = np.concatenate(([False], pair_ok[:-1]))
    jump = prev_ok & (residual > residual_m)
    return pair_ok & ((speed > speed_mps) | jump)
