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


def _left_product_matrix(q: np.ndarray) -> np.ndarray:
    """(..., 4, 4) matrices ``L`` with ``L @ b == q ⊗ b`` (Hamilton product, xyzw)."""
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    rows = (
        (w, -z, y, x),
        (z, w, -x, y),
        (-y, x, w, z),
        (-x, -y, -z, w),
    )
    out = np.empty((*q.shape[:-1], 4, 4), dtype=np.float64)
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            out[..., i, j] = value
    return out


def compose_poses(
    parent_t: np.ndarray, parent_q: np.ndarray, child_t: np.ndarray, child_q: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Poses of K children per parent expressed in the parent's parent frame.

    ``parent ∘ child``: position ``parent_t + R(parent_q) child_t`` and rotation
    ``parent_q ⊗ child_q``. The parent quaternion is normalized first (as in
    `quat_to_matrix`), so a 6-decimal parent rotation neither scales positions nor
    changes the children's quaternion norms. NaN propagates.

    Args:
        parent_t: (N, 3) float64 parent positions, metres.
        parent_q: (N, 4) float64 parent quaternions (x, y, z, w).
        child_t: (N, K, 3) float64 child positions in the parent frame, metres.
        child_q: (N, K, 4) float64 child quaternions (x, y, z, w) in the parent frame.

    Returns:
        (N, K, 3) float64 positions and (N, K, 4) float64 quaternions (x, y, z, w) in
        the parent's parent frame. Computed as two batched matrix products.
    """
    parent_t = np.asarray(parent_t, dtype=np.float64)
    parent_q = np.asarray(parent_q, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        unit_q = parent_q / np.linalg.norm(parent_q, axis=-1, keepdims=True)
    rot_t = np.swapaxes(quat_to_matrix(unit_q), -1, -2)
    position = np.matmul(child_t, rot_t)
    position += parent_t[:, None, :]
    rotation = np.matmul(child_q, np.swapaxes(_left_product_matrix(unit_q), -1, -2))
    return position, rotation
