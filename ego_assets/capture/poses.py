"""Vectorized rigid-pose helpers shared by the capture readers.

Quaternions are ``xyzw``; a pose ``(t, q)`` maps points of its child frame into its
parent frame (``p_parent = R(q) p_child + t``).
"""

from __future__ import annotations

import numpy as np


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices of quaternions.

    Args:
        q: (..., 4) float64 quaternions (x, y, z, w); normalized here, so a quaternion
            that is not exactly unit (6-decimal CSV) still gives an orthonormal matrix.
            NaN propagates.

    Returns:
        (..., 3, 3) float64 rotation matrices.
    """
    q = np.asarray(q, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    out = np.empty((*q.shape[:-1], 3, 3), dtype=np.float64)
    out[..., 0, 0] = 1 - 2 * (y * y + z * z)
    out[..., 0, 1] = 2 * (x * y - z * w)
    out[..., 0, 2] = 2 * (x * z + y * w)
    out[..., 1, 0] = 2 * (x * y + z * w)
    out[..., 1, 1] = 1 - 2 * (x * x + z * z)
    out[..., 1, 2] = 2 * (y * z - x * w)
    out[..., 2, 0] = 2 * (x * z - y * w)
    out[..., 2, 1] = 2 * (y * z + x * w)
    out[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return out


def invert_pose(t: np.ndarray, q: np.ndarray) -> np.ndarray:
    """4x4 inverses of rigid poses: parent-to-child (e.g. camera-to-world -> world-to-camera).

    Args:
        t: (..., 3) float64 translations of the child in the parent frame, metres.
        q: (..., 4) float64 quaternions (x, y, z, w) of the child in the parent frame.

    Returns:
        (..., 4, 4) float64 matrices ``[[R^T, -R^T t], [0, 1]]``.
    """
    rot_t = np.swapaxes(quat_to_matrix(q), -1, -2)
    out = np.zeros((*np.shape(t)[:-1], 4, 4), dtype=np.float64)
    out[..., :3, :3] = rot_t
    out[..., :3, 3] = -np.einsum("...ij,...j->...i", rot_t, np.asarray(t, dtype=np.float64))
    out[..., 3, 3] = 1.0
    return out
