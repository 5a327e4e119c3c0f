"""Synthetic ``mano_video`` clips: head video with per-frame MANO hands (schema_version 1).

Layout: docs/capture-formats.md, section ``mano_video``. World frame ``slam_world``
(+Y up, metres). ``camera.npz`` ``world_to_camera`` maps world points into the OpenCV
camera frame (x right, y down, looking along +z), the camera being the head.

MANO parameters are stand-ins with the right shapes and smoothness: ``trans`` is the
wrist position, ``root_orient`` the wrist rotation (axis-angle), ``hand_pose`` 15
smooth PCA coefficients, ``betas`` constant per hand. ``joints`` are the hand's WebXR
joints mapped to MANO-21 (`joint_map("webxr25", "mano21")` has no gaps). A hand that is
never seen (``hand_never_seen``) carries zeros and False validity. With
``dropped_video_frames`` the dropped frames are missing from every per-frame array.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ego_assets.synth.faults import FaultPlan
from ego_assets.synth.motion import SIDES, Scene
from ego_assets.synth.scenario import INSTRUCTIONS
from ego_assets.synth.video import Pinhole, encode_h264, project, render_frames, world_to_opencv
from ego_assets.synth.writers import write_csv, write_json, write_npz
from ego_assets.trajectory.joints import joint_map

FPS = 30
CAMERA = Pinhole(320, 240, 210.0, 210.0, 159.5, 119.5)
CLIP_START_EPOCH_NS = 1_793_000_000_000_000_000
N_PCA = 15
DEPTH_SCALE = 4  # depth map = video size / 4 (80 x 60)
DEPTH_BACKGROUND_M = 1.5
_MANO_FROM_WEBXR = np.asarray(joint_map("webxr25", "mano21").index)
_CV_AXES = np.diag([1.0, -1.0, -1.0])


def _world_to_camera(pos: np.ndarray, rot_mats: np.ndarray) -> np.ndarray:
    """(T, 4, 4) world -> OpenCV camera for a head at ``pos`` (T, 3) with rotation (T, 3, 3)."""
    r = _CV_AXES[None] @ np.transpose(rot_mats, (0, 2, 1))
    m = np.zeros((len(pos), 4, 4))
    m[:, :3, :3] = r
    m[:, :3, 3] = -np.einsum("tij,tj->ti", r, pos)
    m[:, 3, 3] = 1.0
    return m


def _depth(cv_points: list[np.ndarray]) -> np.ndarray:
    """(T, H/4, W/4) float32 metres: background plane plus a 3x3 block at each joint."""
    h, w = CAMERA.height // DEPTH_SCALE, CAMERA.width // DEPTH_SCALE
    n = cv_points[0].shape[0] if cv_points else 0
    depth = np.full((n, h, w), DEPTH_BACKGROUND_M, dtype=np.float32)
    for pts in cv_points:
        px = np.round(project(pts, CAMERA) / DEPTH_SCALE)
        z = pts[..., 2]
        ok = np.isfinite(px).all(axis=-1) & (z > 0)
        frame = np.broadcast_to(np.arange(n)[:, None], z.shape)
        for du in (-1, 0, 1):
            for dv in (-1, 0, 1):
                u = px[..., 0] + du
                v = px[..., 1] + dv
                sel = ok & (u >= 0) & (u < w) & (v >= 0) & (v < h)
                fi, ui, vi = frame[sel], u[sel].astype(int), v[sel].astype(int)
                depth[fi, vi, ui] = np.minimum(depth[fi, vi, ui], z[sel].astype(np.float32))
    return depth


def write_mano_video(
    out: Path, seconds: float, scene: Scene, plan: FaultPlan, clip_id: str, depth: bool
) -> None:
    """Write every mano_video file except the marker."""
    t_all = np.arange(round(seconds * FPS)) / FPS
    keep = plan.kept_frames("video", len(t_all))
    index = np.flatnonzero(keep)
    t = t_all[keep]
    n = len(t)
    head_pos, head_rot = scene.head.pose(t)
    rng = plan.rng("mano-params")
    arrays = {
        "trans": np.zeros((2, n, 3)),
        "root_orient": np.zeros((2, n, 3)),
        "hand_pose": np.zeros((2, n, N_PCA)),
        "betas": np.zeros((2, n, 10)),
        "valid_detected": np.zeros((2, n), dtype=bool),
        "valid_infilled": np.zeros((2, n), dtype=bool),
        "joints": np.zeros((2, n, 21, 3)),
    }
    drawn, cv_points = [], []
    for h, side in enumerate(SIDES):
        amp = rng.uniform(0.3, 1.2, N_PCA)
        freq = rng.uniform(0.1, 0.6, N_PCA)
        phase = rng.uniform(0, 2 * np.pi, N_PCA)
        betas = rng.normal(0.0, 0.6, 10)
        if not plan.hand_present(side):
            continue
        world, _ = scene.hand_world(side, t)
        _, wrist_rot = scene.hands[side].wrist(t)
        noisy = plan.jitter(f"mano-{side}", world)
        arrays["trans"][h] = noisy[:, 0]
        arrays["root_orient"][h] = wrist_rot.as_rotvec()
        arrays["hand_pose"][h] = amp * np.sin(2 * np.pi * freq * t[:, None] + phase)
        arrays["betas"][h] = betas
        arrays["valid_detected"][h] = plan.tracked(side, t)
        arrays["valid_infilled"][h] = True
        arrays["joints"][h] = noisy[:, _MANO_FROM_WEBXR]
        cv = world_to_opencv(world, head_pos, head_rot)
        cv_points.append(cv)
        drawn.append((side, project(cv, CAMERA)))
    frames = render_frames(CAMERA, drawn)
    encode_h264(out / "video.mp4", frames, FPS, index, "mp4")
    stamps = plan.stamp_times("frames", t, 1 / FPS)
    timestamp_ns = CLIP_START_EPOCH_NS + np.round(stamps * 1e9).astype(np.int64)
    write_csv(
        out / "frames.csv", [("frame_index", index, "%d"), ("timestamp_ns", timestamp_ns, "%d")]
    )
    write_npz(out / "mano.npz", arrays)
    intr = np.tile([CAMERA.fx, CAMERA.fy, CAMERA.cx, CAMERA.cy], (n, 1))
    w2c = _world_to_camera(head_pos, head_rot.as_matrix())
    write_npz(out / "camera.npz", {"world_to_camera": w2c, "intrinsics": intr})
    if depth:
        write_npz(out / "depth.npz", {"depth": _depth(cv_points)})
    write_json(
        out / "meta.json",
        {
            "schema": "mano-video",
            "schema_version": 1,
            "clip_id": clip_id,
            "dataset_name": "ego-assets-synthetic",
            "split": "train",
            "fps": FPS,
            "width": CAMERA.width,
            "height": CAMERA.height,
            "world_frame": "slam_world",
            "handedness": "right",
            "up_axis": "Y",
            "mano": {"pose_space": "pca", "n_pca": N_PCA, "flat_hand_mean": False},
            "instructions": INSTRUCTIONS,
            "language": "en",
            "depth": {"path": "depth.npz", "unit": "m"} if depth else None,
            "estimator": "synthetic (ego_assets.synth)",
        },
    )
