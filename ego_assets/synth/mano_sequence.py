"""TACO-style MANO sequences written from the published layout (for import tests and bench).

One sequence folder, as TACO publishes its hand poses (``Hand_Poses/<(action, tool,
target)>/<date_NNN>/``), with the egocentric video put beside them:

* ``left_hand.pkl`` / ``right_hand.pkl``: a dict per frame id (``"00000"``...) of
  ``{"hand_pose": (48,) float32 axis-angle (global orient + 15 joints),
  "hand_trans": (3,) float32 metres}``;
* ``left_hand_shape.pkl`` / ``right_hand_shape.pkl``: (10,) float32 betas;
* ``egocentric_intrinsic.txt``: the 3x3 camera matrix, text;
* ``egocentric_frame_extrinsic.npy``: (T, 4, 4) float32 world -> camera (OpenCV axes);
* ``egocentric_rgb.mp4``: the head camera, H.264, 30 fps.

``pca`` writes ``hand_pose`` as 3 + ``pca`` values and a ``mano_sequence.json`` declaring
the count. Values are stand-ins with the right shapes: ``hand_trans`` is the synthetic
wrist, the first three pose values its rotation vector, the rest smooth sinusoids.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np

from ego_assets.synth.mano_video import CAMERA, FPS, _world_to_camera
from ego_assets.synth.motion import SIDES, make_scene
from ego_assets.synth.video import encode_h264, project, render_frames, world_to_opencv


def write_mano_sequence(
    folder: Path, *, frames: int = 45, seed: int = 0, pca: int | None = None
) -> Path:
    """Write one TACO-style sequence folder; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(frames) / FPS
    scene = make_scene(seed, max(frames / FPS, 1.0))
    head_pos, head_rot = scene.head.pose(t)
    rng = np.random.default_rng([seed, 48])
    n_pose = 45 if pca is None else pca
    drawn = []
    for i, side in enumerate(SIDES):
        pos, rot = scene.hands[side].wrist(t)
        phase = rng.uniform(0, 2 * np.pi, n_pose)
        pose = 0.3 * np.sin(2 * np.pi * 0.4 * t[:, None] + phase[None])
        full = np.concatenate([rot.as_rotvec(), pose], axis=1).astype(np.float32)
        per_frame = {
            f"{k:05d}": {"hand_pose": full[k], "hand_trans": pos[k].astype(np.float32)}
            for k in range(frames)
        }
        (folder / f"{side}_hand.pkl").write_bytes(pickle.dumps(per_frame, protocol=4))
        betas = rng.normal(0, 0.5, 10).astype(np.float32) + i * 0.1
        (folder / f"{side}_hand_shape.pkl").write_bytes(pickle.dumps(betas, protocol=4))
        world, _ = scene.hand_world(side, t)
        drawn.append((side, project(world_to_opencv(world, head_pos, head_rot), CAMERA)))
    k = np.array([[CAMERA.fx, 0, CAMERA.cx], [0, CAMERA.fy, CAMERA.cy], [0, 0, 1]])
    np.savetxt(folder / "egocentric_intrinsic.txt", k, fmt="%.6f")
    extrinsic = _world_to_camera(head_pos, head_rot.as_matrix()).astype(np.float32)
    np.save(folder / "egocentric_frame_extrinsic.npy", extrinsic)
    if pca is not None:
        doc = {"schema": "mano-sequence", "schema_version": 1, "pose_space": "pca", "n_pca": pca,
               "flat_hand_mean": False}  # fmt: skip
        (folder / "mano_sequence.json").write_text(json.dumps(doc, indent=1) + "\n")
    frames_rgb = render_frames(CAMERA, drawn)
    encode_h264(folder / "egocentric_rgb.mp4", frames_rgb, FPS, np.arange(frames), "mp4")
    return folder
