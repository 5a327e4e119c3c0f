"""Synthetic ``holos`` captures: Apple Vision Pro and iPhone packages (schema_version 1).

Layout and columns: docs/capture-formats.md, section ``holos``. World frame: ARKit world
(+Y up, metres). Cameras: ARKit camera axes (x right, y up, looking along -Z); the
stereo cameras sit ±`STEREO_BASELINE_M`/2 along the head's x axis, the iPhone's
camera_back at the device pose. The iPhone device frame used for ``imu.csv`` is the
frame of ``device_pose.csv``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ego_assets.synth.faults import FaultPlan, forward_fill_index
from ego_assets.synth.motion import (
    SIDES,
    Scene,
    acceleration,
    angular_velocity_body,
    arkit_local,
    local_orientations,
)
from ego_assets.synth.scenario import procedure_steps, transcript, vlm_outputs
from ego_assets.synth.video import Pinhole, encode_h264, project, render_frames, world_to_opencv
from ego_assets.synth.writers import iso_utc, write_csv, write_jpeg, write_json, write_wav
from ego_assets.trajectory.joints import ARKIT27, VISION21, joint_map

VISIONPRO_RATES_HZ = {"device_pose": 60, "hands": 90, "camera": 30}
IPHONE_RATES_HZ = {"device_pose": 60, "landmarks": 15, "imu": 100, "camera": 30}
STEREO_BASELINE_M = 0.064
CAMERA = Pinhole(320, 240, 200.0, 200.0, 159.5, 119.5)
GRAVITY_M_S2 = 9.80665
MONO_ORIGIN_EPOCH_NS = 1_793_000_000_000_000_000
_VISION_FROM_WEBXR = np.asarray(joint_map("webxr25", "vision21").index)
_POSE7 = ("px", "py", "pz", "qx", "qy", "qz", "qw")


def _times(seconds: float, rate_hz: int) -> np.ndarray:
    return np.arange(round(seconds * rate_hz)) / rate_hz


def _pose_columns(pos: np.ndarray, quat: np.ndarray) -> list[tuple[str, np.ndarray, str]]:
    names = ("tx", "ty", "tz", "qx", "qy", "qz", "qw")
    values = np.concatenate([pos, quat], axis=1)
    return [(n, values[:, i], "%.9f") for i, n in enumerate(names)]


class _Holos:
    """Writes one holos capture; state: scene, fault plan, clock, output folder."""

    def __init__(
        self, out: Path, modality: str, seconds: float, scene: Scene, plan: FaultPlan, cid: str
    ) -> None:
        self.out, self.modality, self.seconds = out, modality, seconds
        self.scene, self.plan, self.capture_id = scene, plan, cid
        self.start_mono_s = 5123.25 + (plan.seed % 1000)

    def mono(self, t: np.ndarray) -> np.ndarray:
        return np.round(self.start_mono_s + t, 6)

    def write(self) -> None:
        vp = self.modality == "visionpro"
        self.metadata()
        self.device_pose(with_state=not vp)
        if vp:
            for side in SIDES:
                self.skeleton(side)
            self.anchors()
            write_json(self.out / "calibration/stereo.json", self.stereo())
            first = self.camera("camera_left", -STEREO_BASELINE_M / 2)
            self.camera("camera_right", STEREO_BASELINE_M / 2)
        else:
            for side in SIDES:
                self.landmarks(side)
            self.imu()
            first = self.camera("camera_back", 0.0)
        write_wav(self.out / "media/audio.wav", self.seconds, self.plan.seed)
        write_jpeg(self.out / "thumbnail.jpg", first)
        write_json(self.out / "transcript.json", transcript(self.seconds))
        retry = self.plan.has("retried_segment")
        write_json(self.out / "events/procedure_steps.json", procedure_steps(self.seconds, retry))
        write_json(
            self.out / "vlm/outputs.json", vlm_outputs(self.seconds, self.wall, self.start_mono_s)
        )

    def wall(self, t: float) -> str:
        return iso_utc(MONO_ORIGIN_EPOCH_NS + round((self.start_mono_s + t) * 1e6) * 1000)

    def metadata(self) -> None:
        vp = self.modality == "visionpro"
        write_json(
            self.out / "metadata.json",
            {
                "schema": "holos-capture",
                "schema_version": 1,
                "capture_id": self.capture_id,
                "organization_id": "org-synthetic",
                "modality": self.modality,
                "device": (
                    {"model": "Apple Vision Pro", "os": "visionOS 26.1"}
                    if vp
                    else {"model": "iPhone 16 Pro", "os": "iOS 26.1"}
                ),
                "app": {"name": "Holos", "version": "3.2.0"},
                "title": "Synthetic bench assembly",
                "institution": "Synthetic Lab",
                "capture_start": self.wall(0.0),
                "clock": {
                    "mono_origin_epoch_ns": MONO_ORIGIN_EPOCH_NS,
                    "capture_start_mono_s": self.start_mono_s,
                },
                "world_frame": "arkit_world",
                "handedness": "right",
                "up_axis": "Y",
                "task": "assemble the bracket",
                "instructions": ["Pick up the bracket.", "Fasten the two screws."],
            },
        )

    def device_pose(self, with_state: bool) -> None:
        t = _times(self.seconds, VISIONPRO_RATES_HZ["device_pose"])
        pos, rot = self.scene.head.pose(t)
        stamps = self.plan.stamp_times("device_pose", t, 1 / 60)
        cols = [("t_mono_s", self.mono(stamps), "%.6f"), *_pose_columns(pos, rot.as_quat())]
        if with_state:
            state = np.where(t < 0.2, "limited", "normal").astype(object)
            cols.append(("tracking_state", state, "%s"))
        write_csv(self.out / "device_pose.csv", cols)

    def skeleton(self, side: str) -> None:
        """hands/<side>.csv: the ARKit hand anchor (world) and 27 joints relative to it, 90 Hz.

        The anchor is the wrist (position after any jitter, the wrist's rotation); each
        joint is written as ARKit's ``anchorFromJointTransform``, so anchor ∘ joint gives
        the world joint. Values are rounded to 6 decimals as the device writes them.
        """
        t = _times(self.seconds, VISIONPRO_RATES_HZ["hands"])
        hand = self.scene.hands[side]
        local25 = hand.local_joints(t)
        local, q_local = arkit_local(local25, local_orientations(local25))
        wpos, wrot = hand.wrist(t)
        world = np.einsum("tij,tkj->tki", wrot.as_matrix(), local) + wpos[:, None, :]
        world = self.plan.jitter(f"skeleton-{side}", world)
        local = np.einsum("tji,tkj->tki", wrot.as_matrix(), world - world[:, :1])
        anchor = np.concatenate([world[:, 0], wrot.as_quat()], axis=1)  # (T, 7)
        joints = np.concatenate([local, q_local], axis=2)  # (T, 27, 7)
        tracked = self.plan.tracked(side, t)
        src = forward_fill_index(tracked)  # ARKit keeps the last values while untracked
        seen = src >= 0
        identity = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
        anchor = np.where(seen[:, None], anchor[np.maximum(src, 0)], identity)
        joints = np.where(seen[:, None, None], joints[np.maximum(src, 0)], identity)
        flag = tracked.astype(int)
        stamps = self.mono(self.plan.stamp_times(f"hands-{side}", t, 1 / 90))
        cols = [("t_mono_s", stamps, "%.6f"), ("hand_tracked", flag, "%d")]
        cols += [(f"anchor_{ax}", anchor[:, c], "%.6f") for c, ax in enumerate(_POSE7)]
        for j, name in enumerate(ARKIT27):
            cols += [(f"{name}_{ax}", joints[:, j, c], "%.6f") for c, ax in enumerate(_POSE7)]
            cols.append((f"{name}_tracked", flag, "%d"))
        write_csv(self.out / f"hands/{self.plan.written_side(side)}.csv", cols)

    def landmarks(self, side: str) -> None:
        """hands/<side>_landmarks.csv: Vision 21 landmarks at 15 Hz seen by camera_back."""
        t = _times(self.seconds, IPHONE_RATES_HZ["landmarks"])
        world, _ = self.scene.hand_world(side, t)
        world = self.plan.jitter(f"landmarks-{side}", world)[:, _VISION_FROM_WEBXR]
        world = self.plan.teleport(f"landmarks-{side}", world)
        cam_pos, cam_rot = self.scene.head.pose(t)
        cv = world_to_opencv(world, cam_pos, cam_rot)
        px = project(cv, CAMERA)
        u = px[..., 0] / CAMERA.width
        v = 1.0 - px[..., 1] / CAMERA.height
        inside = (cv[..., 2] > 0) & (u >= 0) & (u <= 1) & (v >= 0) & (v <= 1)
        rng = self.plan.rng(f"confidence-{side}")
        phase = rng.uniform(0, 2 * np.pi, 21)
        conf = 0.78 + 0.18 * np.sin(2 * np.pi * 0.3 * t[:, None] + phase[None])
        detected = self.plan.tracked(side, t) & inside.any(axis=1)
        conf = np.where(inside & detected[:, None], conf, 0.0)
        hand_conf = np.where(detected, 0.86 + 0.1 * np.sin(2 * np.pi * 0.2 * t), 0.0)
        values = np.stack([*np.moveaxis(world, -1, 0), u, v, conf], axis=-1)  # (T, 21, 6)
        values = np.where(detected[:, None, None], values, 0.0)
        cols = [
            ("t_mono_s", self.mono(self.plan.stamp_times(f"landmarks-{side}", t, 1 / 15)), "%.6f"),
            ("hand_confidence", hand_conf, "%.6f"),
        ]
        for j, name in enumerate(VISION21):
            for c, ax in enumerate(("x", "y", "z", "u", "v", "c")):
                cols.append((f"{name}_{ax}", values[:, j, c], "%.9f"))
        write_csv(self.out / f"hands/{self.plan.written_side(side)}_landmarks.csv", cols)

    def imu(self) -> None:
        """imu.csv at 100 Hz, consistent with the device pose (device frame, g and rad/s)."""
        t = _times(self.seconds, IPHONE_RATES_HZ["imu"])
        head = self.scene.head
        _, rot = head.pose(t)
        gyro = angular_velocity_body(lambda x: head.pose(x)[1], t)
        acc_world = acceleration(lambda x: head.pose(x)[0], t)
        user = rot.inv().apply(acc_world) / GRAVITY_M_S2
        gravity = rot.inv().apply(np.array([0.0, -1.0, 0.0]))
        cols = [("t_mono_s", self.mono(self.plan.stamp_times("imu", t, 1 / 100)), "%.6f")]
        for name, arr in (("user_accel", user), ("rotation_rate", gyro), ("gravity", gravity)):
            unit = "" if name == "rotation_rate" else "_g"
            for c, ax in enumerate("xyz"):
                cols.append((f"{name}_{ax}{unit}", arr[:, c], "%.9f"))
        write_csv(self.out / "imu.csv", cols)

    def anchors(self) -> None:
        """objects/anchors.csv: one table anchor updated at 2 Hz."""
        t = _times(self.seconds, 2)
        n = len(t)
        cols = [
            ("t_mono_s", self.mono(t), "%.6f"),
            ("anchor_id", np.full(n, "anchor-0001", dtype=object), "%s"),
            ("name", np.full(n, "table", dtype=object), "%s"),
            *_pose_columns(np.tile([0.0, 0.75, -0.55], (n, 1)), np.tile([0, 0, 0, 1.0], (n, 1))),
            ("is_tracked", np.ones(n, dtype=int), "%d"),
        ]
        write_csv(self.out / "objects/anchors.csv", cols)

    def stereo(self) -> dict[str, object]:
        cams = {}
        for name, dx in (("camera_left", -0.5), ("camera_right", 0.5)):
            m = np.eye(4)
            m[0, 3] = -dx * STEREO_BASELINE_M  # camera_from_device: device point -> camera
            cams[name] = {
                **CAMERA.calibration_doc(),
                "camera_from_device": m.reshape(-1).tolist(),
            }
        return {"baseline_m": STEREO_BASELINE_M, "cameras": cams}

    def camera(self, name: str, dx_m: float) -> np.ndarray:
        """media/<name>.mov + _frames.csv; returns the first frame (H, W, 3) uint8."""
        t_all = _times(self.seconds, VISIONPRO_RATES_HZ["camera"])
        keep = self.plan.kept_frames(name, len(t_all))
        index = np.flatnonzero(keep)
        t = t_all[keep]
        head_pos, rot = self.scene.head.pose(t)
        pos = head_pos + rot.apply(np.array([dx_m, 0.0, 0.0]))
        hands = []
        for side in SIDES:
            if self.plan.hand_present(side):
                world, _ = self.scene.hand_world(side, t)
                hands.append((side, project(world_to_opencv(world, pos, rot), CAMERA)))
        frames = render_frames(CAMERA, hands)
        encode_h264(self.out / f"media/{name}.mov", frames, 30, index, "mov")
        n = len(t)
        cols = [
            ("frame_index", index, "%d"),
            ("t_mono_s", self.mono(t), "%.6f"),
            *[(k, np.full(n, getattr(CAMERA, k)), "%.6f") for k in ("fx", "fy", "cx", "cy")],
            *_pose_columns(pos, rot.as_quat()),
        ]
        write_csv(self.out / f"media/{name}_frames.csv", cols)
        return frames[0]


def write_holos(
    out: Path, modality: str, seconds: float, scene: Scene, plan: FaultPlan, capture_id: str
) -> None:
    """Write every holos file except the marker. ``modality``: visionpro or iphone."""
    _Holos(out, modality, seconds, scene, plan, capture_id).write()
