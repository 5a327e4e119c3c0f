"""Synthetic ``webxr`` captures: a CERES-style browser recorder journal (schema_version 1).

Layout: docs/capture-formats.md, section ``webxr``. Reference space ``local-floor``
(+Y up, metres, the subject faces -Z). The outward camera is an OpenCV camera (x right,
y down, looking along +z) rigidly mounted on the head (`CAMERA_IN_HEAD_M`), with small
radtan5 distortion that the rendered video applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ego_assets.synth.faults import FaultPlan
from ego_assets.synth.motion import JOINT_RADII_M, SIDES, Scene
from ego_assets.synth.scenario import INSTRUCTIONS, TASK, segments, task_specification
from ego_assets.synth.video import Pinhole, encode_h264, project, render_frames, world_to_opencv
from ego_assets.synth.writers import rounded, write_csv, write_json, write_jsonl

RATE_HZ = 30
TIME_ORIGIN_EPOCH_MS = 1_793_000_000_000.0
CAMERA = Pinhole(320, 240, 230.0, 230.0, 161.2, 118.7, (-0.05, 0.01, 0.0005, -0.0003, 0.0))
CAMERA_IN_HEAD_M = np.array([0.0, -0.03, -0.06])
N_GAP_SLOTS = 2
_CV_FROM_HEAD = np.diag([1.0, -1.0, -1.0])


def camera_from_head() -> np.ndarray:
    """(4, 4) float64 transform: head-frame point (m) -> OpenCV camera point (m)."""
    m = np.eye(4)
    m[:3, :3] = _CV_FROM_HEAD
    m[:3, 3] = -_CV_FROM_HEAD @ CAMERA_IN_HEAD_M
    return m


def _session(capture_id: str, seconds: float) -> dict[str, Any]:
    return {
        "schema": "ceres-journal",
        "schema_version": 1,
        "session_id": capture_id,
        "episode_id": f"{capture_id}-ep0",
        "recorder_rate_hz": RATE_HZ,
        "reference_space": "local-floor",
        "time_origin_epoch_ms": TIME_ORIGIN_EPOCH_MS,
        "camera": {"id": "outward", "width": CAMERA.width, "height": CAMERA.height, "fps": 30},
        "capture_characteristics": {
            "frame_rate_hz": {"status": "known", "value": RATE_HZ},
            "hand_tracking": {"status": "known", "value": "webxr-hand-input"},
            "duration_s": {"status": "known", "value": round(seconds, 3)},
            "lighting": {"status": "unknown"},
            "eye_tracking": {"status": "unavailable"},
            "depth_sensing": {"status": "unavailable"},
        },
        "study": {
            "headset_id": "hs-synthetic-01",
            "demonstrator_id": "demo-007",
            "project_id": "proj-synthetic",
            "consent_date": "2026-10-30",
            "consent_document_id": "consent-v3",
            "raw_audio_retained": False,
        },
        "task": TASK,
        "instructions": INSTRUCTIONS,
        "task_specification": {"path": "task-specification.json", "version": "1.0.0"},
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64; Quest 3) OculusBrowser/40.0 Chrome/130",
        "camera_device_id": "b6f0c3e1a9d24f5c8e7a1b2c3d4e5f60",
    }


def _calibration() -> dict[str, Any]:
    return {
        **CAMERA.calibration_doc(),
        "rms_error_px": 0.31,
        "sample_count": 42,
        "captured_at": "2026-10-30T09:12:00.000000Z",
        "camera_from_head": camera_from_head().reshape(-1).tolist(),
    }


def _hand_records(scene: Scene, plan: FaultPlan, t: np.ndarray) -> dict[str, list[Any]]:
    """Per side, per slot: the ``hand`` JSON value (None when untracked) and the pinch."""
    out: dict[str, list[Any]] = {}
    for side in SIDES:
        world, quat = scene.hand_world(side, t)
        world = plan.teleport(f"webxr-{side}", plan.jitter(f"webxr-{side}", world))
        tracked = plan.tracked(side, t)
        pinch = plan.pinch(np.linalg.norm(world[:, 4] - world[:, 9], axis=-1))
        radii = np.broadcast_to(plan.radii(JOINT_RADII_M)[None, :, None], (len(t), 25, 1))
        quat = plan.joint_quaternions(quat)
        joints = rounded(np.concatenate([world, quat, radii], axis=-1), 9)
        hands: list[dict[str, Any] | None] = []
        pinches: list[float | None] = []
        for i in range(len(t)):
            if tracked[i]:
                hands.append({"tracked": True, "joints": [[*j, True] for j in joints[i]]})
                pinches.append(round(float(pinch[i]), 6))
            else:
                hands.append(None)
                pinches.append(None)
        out[plan.written_side(side)] = hands
        out[f"pinch-{plan.written_side(side)}"] = pinches
    return out


def write_webxr(out: Path, seconds: float, scene: Scene, plan: FaultPlan, capture_id: str) -> None:
    """Write every webxr file except the marker."""
    n = round(seconds * RATE_HZ)
    slots = np.arange(n)
    t = slots / RATE_HZ
    t_ms = np.round(plan.stamp_times("slots", t, 1 / RATE_HZ) * 1000.0, 3)
    gap_rng = plan.rng("gap-slots")
    pool = np.arange(2, max(3, n - 2))
    gaps = set(gap_rng.choice(pool, size=min(N_GAP_SLOTS, len(pool)), replace=False).tolist())
    head_pos, head_rot = scene.head.pose(t)
    head_p, head_q = rounded(head_pos, 9), rounded(head_rot.as_quat(), 9)
    hands = _hand_records(scene, plan, t)
    records: list[dict[str, Any]] = []
    for i in range(n):
        rec: dict[str, Any] = {"slot": i, "t_ms": float(t_ms[i]), "gap": i in gaps}
        if i not in gaps:
            rec["head"] = {"tracked": True, "p": head_p[i], "q": head_q[i]}
            rec["left"] = hands["left"][i]
            rec["right"] = hands["right"][i]
            rec["pinch"] = {"left": hands["pinch-left"][i], "right": hands["pinch-right"][i]}
        records.append(rec)
    write_json(out / "session.json", _session(capture_id, seconds))
    write_jsonl(out / "slots.jsonl", records)
    write_json(out / "segments.json", segments(n, plan.has("retried_segment")))
    write_json(out / "calibration.json", _calibration())
    write_json(out / "task-specification.json", task_specification())
    _camera(out, scene, plan, t)


def _camera(out: Path, scene: Scene, plan: FaultPlan, t_all: np.ndarray) -> None:
    keep = plan.kept_frames("outward", len(t_all))
    index = np.flatnonzero(keep)
    t = t_all[keep]
    head_pos, rot = scene.head.pose(t)
    cam_pos = head_pos + rot.apply(CAMERA_IN_HEAD_M)
    hands = []
    for side in SIDES:
        if plan.hand_present(side):
            world, _ = scene.hand_world(side, t)
            hands.append((side, project(world_to_opencv(world, cam_pos, rot), CAMERA)))
    frames = render_frames(CAMERA, hands)
    encode_h264(out / "camera/outward.mp4", frames, 30, index, "mp4")
    cols = [
        ("frame_index", index, "%d"),
        ("t_ms", np.round(t * 1000.0, 3), "%.3f"),
        ("slot", index, "%d"),
    ]
    write_csv(out / "camera/frames.csv", cols)
