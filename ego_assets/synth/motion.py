"""Seeded, smooth head and hand motion for synthetic captures.

Hands articulate between real recorded Quest poses (the handy.js pose library, WebXR
joint order, wrist-local millimetres): each bone's unit direction in the wrist frame is
slerped between key poses and the joints are rebuilt from the wrist with fixed per-bone
lengths (the median over the library), so bone lengths stay exactly constant.

World frame: ARKit / WebXR style, +Y up, metres, the subject faces -Z, head ~1.6 m.
Head and wrist frames: x right, y up, looking (fingers pointing) along -Z.
Every function of time is analytic, so any stream can be sampled at its own rate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from ego_assets.fixtures import real_fixture
from ego_assets.trajectory.joints import PARENTS

POSE_LIBRARY = "handy_js"
SIDES = ("left", "right")
_PARENTS = np.asarray(PARENTS["webxr25"])
_CHILD_OF = {p: c for c, p in enumerate(PARENTS["webxr25"]) if p > 0}  # one child per joint
_TIPS = (4, 9, 14, 19, 24)
_THUMB = (1, 2, 3, 4)
HEAD_HEIGHT_M = 1.6
POSE_PERIOD_S = 1.25
FOREARM_WRIST_M = 0.04
FOREARM_ARM_M = 0.25
# Joint radii (m), WebXR order: wrist, thumb 4, then 5 per finger (Quest-like values).
JOINT_RADII_M = np.array(
    [0.021, 0.019, 0.012, 0.010, 0.008]
    + [0.021, 0.011, 0.009, 0.008, 0.007] * 3
    + [0.020, 0.009, 0.008, 0.007, 0.006]
)
_WRIST_BASE_M = {"left": np.array([-0.13, 1.44, -0.40]), "right": np.array([0.13, 1.44, -0.40])}
_WRIST_BASE_ROTVEC = {"left": np.array([0.2, 0.0, -0.45]), "right": np.array([0.2, 0.0, 0.45])}


def load_pose_library(side: str, directory: Path | None = None) -> np.ndarray:
    """The recorded poses of one hand.

    Returns:
        (P, 25, 3) float64 joint positions, metres, wrist-local (WebXR joint order).
    """
    path = (directory or real_fixture(POSE_LIBRARY)) / f"handy_poses_{side}.json"
    records = json.loads(path.read_text(encoding="utf-8"))
    return np.asarray([r["jointPositions"] for r in records], dtype=np.float64) / 1000.0


def library_bone_lengths(poses: np.ndarray) -> np.ndarray:
    """(24,) float64 bone length per WebXR bone (child 1..24), metres: median over poses."""
    diff = poses[:, 1:, :] - poses[:, _PARENTS[1:], :]
    return np.asarray(np.median(np.linalg.norm(diff, axis=-1), axis=0))


def _unit(v: np.ndarray) -> np.ndarray:
    """``v`` (..., 3) scaled to length 1; NaN where it has length 0 (without a warning:
    callers pick between candidate axes with `np.where`, so a degenerate one is dropped)."""
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.divide(v, norm, out=np.full_like(v, np.nan, dtype=np.float64), where=norm > 0)


def _slerp_unit(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Slerp unit vectors ``a`` -> ``b`` (..., 3) with weights ``w`` broadcast to (..., 1)."""
    dot = np.clip(np.sum(a * b, axis=-1, keepdims=True), -1.0, 1.0)
    omega = np.arccos(dot)
    sin_o = np.sin(omega)
    small = sin_o < 1e-9
    safe = np.where(small, 1.0, sin_o)
    wa = np.where(small, 1.0 - w, np.sin((1.0 - w) * omega) / safe)
    wb = np.where(small, w, np.sin(w * omega) / safe)
    return _unit(wa * a + wb * b)


def _sinusoids(
    rng: np.random.Generator, n: int, amp: float, fmin: float, fmax: float
) -> np.ndarray:
    """(3, n, 3) amplitude, frequency (Hz), phase (rad) for 3 components x n terms."""
    return np.stack(
        [
            rng.uniform(0.3, 1.0, (3, n)) * amp,
            rng.uniform(fmin, fmax, (3, n)),
            rng.uniform(0.0, 2 * np.pi, (3, n)),
        ],
        axis=-1,
    )


def _eval_sinusoids(params: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(T, 3) sum of sinusoids at times ``t`` (T,) seconds."""
    amp, freq, phase = params[..., 0], params[..., 1], params[..., 2]
    arg = 2 * np.pi * freq[None] * t[:, None, None] + phase[None]
    return np.sum(amp[None] * np.sin(arg), axis=-1)


@dataclass(frozen=True)
class HandMotion:
    """One hand: key poses over time and the wrist path.

    Attributes:
        side: ``"left"`` or ``"right"``.
        directions: (P, 24, 3) unit bone directions of the library poses, wrist frame.
        lengths: (24,) bone lengths, metres.
        sequence: (K,) library pose index at each key time ``k * POSE_PERIOD_S``.
        position_terms: (3, n, 3) sinusoid parameters of the wrist position offset.
        rotation_terms: (3, n, 3) sinusoid parameters of the wrist rotation vector.
    """

    side: str
    directions: np.ndarray
    lengths: np.ndarray
    sequence: np.ndarray
    position_terms: np.ndarray
    rotation_terms: np.ndarray

    def local_joints(self, t: np.ndarray) -> np.ndarray:
        """(T, 25, 3) float64 joint positions, metres, wrist frame, at times ``t`` (s)."""
        phase = np.clip(t, 0.0, None) / POSE_PERIOD_S
        k = np.minimum(np.floor(phase).astype(np.int64), len(self.sequence) - 2)
        frac = np.clip((phase - k - 0.35) / 0.65, 0.0, 1.0)  # hold, then ease
        w = (frac * frac * (3.0 - 2.0 * frac))[:, None, None]
        d = _slerp_unit(self.directions[self.sequence[k]], self.directions[self.sequence[k + 1]], w)
        joints = np.zeros((len(t), 25, 3))
        for child in range(1, 25):
            joints[:, child] = (
                joints[:, _PARENTS[child]] + self.lengths[child - 1] * d[:, child - 1]
            )
        return joints

    def wrist(self, t: np.ndarray) -> tuple[np.ndarray, Rotation]:
        """Wrist pose at ``t``: (T, 3) position (m, world) and (T,) wrist-to-world rotation."""
        pos = _WRIST_BASE_M[self.side] + _eval_sinusoids(self.position_terms, t)
        rotvec = _WRIST_BASE_ROTVEC[self.side] + _eval_sinusoids(self.rotation_terms, t)
        return pos, Rotation.from_rotvec(rotvec)


def local_orientations(joints: np.ndarray) -> np.ndarray:
    """Per-joint frames from bone directions and the hand's axes.

    Each joint's -Z runs along its bone toward the fingertip (tips: the last bone), +Y
    is the back of the hand (for fingers: orthogonal to the wrist X axis, the curl
    axis; for the thumb: the wrist +Y made orthogonal), X completes a right-handed frame.

    Args:
        joints: (T, 25, 3) wrist-frame positions, metres.

    Returns:
        (T, 25, 4) float64 quaternions xyzw, joint-to-wrist rotation (wrist = identity).
    """
    n = joints.shape[0]
    child = np.array([_CHILD_OF.get(j, j) for j in range(25)])
    base = np.array([j if j not in _TIPS else _PARENTS[j] for j in range(25)])
    tip_end = np.where(np.isin(np.arange(25), _TIPS), np.arange(25), child)
    z = -_unit(joints[:, tip_end[1:]] - joints[:, base[1:]])  # (T, 24, 3)
    ex = np.array([1.0, 0.0, 0.0])
    ey = np.array([0.0, 1.0, 0.0])
    x_fing = ex - np.sum(ex * z, axis=-1, keepdims=True) * z
    y_thumb = ey - np.sum(ey * z, axis=-1, keepdims=True) * z
    thumb = np.isin(np.arange(1, 25), _THUMB)[None, :, None]
    x_bad = np.linalg.norm(x_fing, axis=-1, keepdims=True) < 0.2
    y_bad = np.linalg.norm(y_thumb, axis=-1, keepdims=True) < 0.2
    use_y = np.where(thumb, ~y_bad, x_bad)
    y_from_x = np.cross(z, _unit(x_fing))
    y = np.where(use_y, _unit(y_thumb), y_from_x)
    x = np.cross(y, z)
    mats = np.stack([x, y, z], axis=-1).reshape(-1, 3, 3)
    quats = np.zeros((n, 25, 4))
    quats[:, 0, 3] = 1.0
    quats[:, 1:] = Rotation.from_matrix(mats).as_quat().reshape(n, 24, 4)
    return quats


@dataclass(frozen=True)
class HeadMotion:
    """Head (or handheld device) pose: small smooth translation and rotation.

    Attributes:
        position_terms: (3, n, 3) sinusoid parameters, metres.
        rotation_terms: (3, n, 3) sinusoid parameters, radians (rotation vector).
    """

    position_terms: np.ndarray
    rotation_terms: np.ndarray

    def pose(self, t: np.ndarray) -> tuple[np.ndarray, Rotation]:
        """(T, 3) position (m, world) and (T,) head-to-world rotation at ``t`` (s)."""
        pos = np.array([0.0, HEAD_HEIGHT_M, 0.0]) + _eval_sinusoids(self.position_terms, t)
        rotvec = np.array([-0.22, 0.0, 0.0]) + _eval_sinusoids(self.rotation_terms, t)
        return pos, Rotation.from_rotvec(rotvec)


@dataclass(frozen=True)
class Scene:
    """Head plus both hands of one synthetic capture."""

    head: HeadMotion
    hands: dict[str, HandMotion]

    def hand_world(self, side: str, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World joints of one hand at ``t``.

        Returns:
            (T, 25, 3) positions (m, world) and (T, 25, 4) quaternions xyzw joint-to-world.
        """
        hand = self.hands[side]
        local = hand.local_joints(t)
        pos, rot = hand.wrist(t)
        world = np.einsum("tij,tkj->tki", rot.as_matrix(), local) + pos[:, None, :]
        q_local = local_orientations(local)
        n = len(t)
        rot_rep = Rotation.from_quat(np.repeat(rot.as_quat(), 25, axis=0))
        q_world = (rot_rep * Rotation.from_quat(q_local.reshape(-1, 4))).as_quat()
        return world, q_world.reshape(n, 25, 4)


def make_scene(seed: int, seconds: float, library_dir: Path | None = None) -> Scene:
    """A seeded `Scene` long enough for ``seconds`` of capture."""
    rng = np.random.default_rng([seed, 0x5C3E])
    head = HeadMotion(
        position_terms=_sinusoids(rng, 2, 0.012, 0.08, 0.35),
        rotation_terms=_sinusoids(rng, 2, 0.05, 0.05, 0.3),
    )
    hands = {}
    n_keys = int(np.ceil(seconds / POSE_PERIOD_S)) + 2
    for side in SIDES:
        poses = load_pose_library(side, library_dir)
        dirs = _unit(poses[:, 1:, :] - poses[:, _PARENTS[1:], :])
        hands[side] = HandMotion(
            side=side,
            directions=dirs,
            lengths=library_bone_lengths(poses),
            sequence=rng.integers(0, len(poses), n_keys),
            position_terms=_sinusoids(rng, 3, 0.035, 0.1, 0.6),
            rotation_terms=_sinusoids(rng, 2, 0.2, 0.1, 0.5),
        )
    return Scene(head=head, hands=hands)


def arkit_local(local: np.ndarray, q_local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """WebXR 25 wrist-frame joints -> ARKit 27 (adds forearmWrist, forearmArm along +Z).

    Returns:
        (T, 27, 3) positions (m, wrist frame), (T, 27, 4) quaternions xyzw.
    """
    n = local.shape[0]
    pos = np.zeros((n, 27, 3))
    pos[:, :25] = local
    pos[:, 25, 2] = FOREARM_WRIST_M
    pos[:, 26, 2] = FOREARM_WRIST_M + FOREARM_ARM_M
    quat = np.zeros((n, 27, 4))
    quat[:, :25] = q_local
    quat[:, 25:, 3] = 1.0
    return pos, quat


def angular_velocity_body(
    rot_fn: Callable[[np.ndarray], Rotation], t: np.ndarray, h: float = 1e-4
) -> np.ndarray:
    """(T, 3) angular velocity (rad/s) in the body frame of a rotation function of time."""
    r0 = rot_fn(t - h)
    r1 = rot_fn(t + h)
    return np.asarray((r0.inv() * r1).as_rotvec() / (2 * h))


def acceleration(
    pos_fn: Callable[[np.ndarray], np.ndarray], t: np.ndarray, h: float = 1e-3
) -> np.ndarray:
    """(T, 3) second derivative (m/s2) of a position function of time (central difference)."""
    return np.asarray((pos_fn(t + h) - 2.0 * pos_fn(t) + pos_fn(t - h)) / (h * h))
