"""Pinhole projection, frame rendering and deterministic H.264 encoding.

Frames show a plain background with each hand drawn as bone lines and joint dots at the
pinhole (+ radtan5) projection of its joints; the wrist is a larger disc in a colour of
its own (`WRIST_RGB`) so a test can find it in a decoded frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image, ImageDraw
from scipy.spatial.transform import Rotation

from ego_assets.progress import report
from ego_assets.trajectory.joints import bones

BACKGROUND_RGB = (70, 80, 90)
WRIST_RGB = {"left": (0, 90, 255), "right": (255, 40, 0)}
BONE_RGB = {"left": (150, 200, 255), "right": (255, 200, 150)}
JOINT_RGB = (245, 245, 245)
WRIST_RADIUS_PX = 4
JOINT_RADIUS_PX = 1
_WEBXR_BONES = bones("webxr25")
DRAW_TASK = "drawing video frames"
ENCODE_TASK = "encoding video frames"


@dataclass(frozen=True)
class Pinhole:
    """Camera intrinsics in pixels; ``distortion`` is OpenCV radtan5 (k1, k2, p1, p2, k3)."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: tuple[float, float, float, float, float] = field(default=(0.0,) * 5)

    def calibration_doc(self) -> dict[str, object]:
        """The pinhole-radtan5 fields of a calibration JSON document."""
        return {
            "model": "pinhole-radtan5",
            "width": self.width,
            "height": self.height,
            "fx": self.fx,
            "fy": self.fy,
            "cx": self.cx,
            "cy": self.cy,
            "distortion": list(self.distortion),
        }


def world_to_opencv(points: np.ndarray, cam_pos: np.ndarray, cam_rot: Rotation) -> np.ndarray:
    """World points into the OpenCV camera frame (x right, y down, z forward).

    Args:
        points: (T, N, 3) world positions, metres.
        cam_pos: (T, 3) camera position, metres, world.
        cam_rot: (T,) camera-to-world rotation of an ARKit-style camera (x right, y up,
            looking along -Z).

    Returns:
        (T, N, 3) float64 positions, metres, OpenCV camera frame.
    """
    inv = cam_rot.inv().as_matrix()
    local = np.einsum("tij,tnj->tni", inv, points - cam_pos[:, None, :])
    return local * np.array([1.0, -1.0, -1.0])


def project(points_cv: np.ndarray, cam: Pinhole) -> np.ndarray:
    """(…, N, 3) OpenCV-camera points -> (…, N, 2) pixels (u right, v down), radtan5."""
    z = points_cv[..., 2]
    safe = np.where(z > 1e-6, z, np.nan)
    x = points_cv[..., 0] / safe
    y = points_cv[..., 1] / safe
    k1, k2, p1, p2, k3 = cam.distortion
    r2 = x * x + y * y
    radial = 1 + k1 * r2 + k2 * r2 * r2 + k3 * r2 * r2 * r2
    xd = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    yd = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    return np.stack([cam.fx * xd + cam.cx, cam.fy * yd + cam.cy], axis=-1)


def render_frames(cam: Pinhole, hands: Sequence[tuple[str, np.ndarray]]) -> np.ndarray:
    """Draw hands on a plain background.

    Args:
        cam: output size.
        hands: (side, (T, 25, 2) pixel positions; NaN = not drawn) per hand.

    Returns:
        (T, H, W, 3) uint8 RGB frames.
    """
    n = hands[0][1].shape[0] if hands else 0
    frames = np.empty((n, cam.height, cam.width, 3), dtype=np.uint8)
    for i in range(n):
        img = Image.new("RGB", (cam.width, cam.height), BACKGROUND_RGB)
        draw = ImageDraw.Draw(img)
        for side, px in hands:
            pts = px[i]
            for a, b in _WEBXR_BONES:
                if np.isfinite(pts[[a, b]]).all():
                    draw.line([tuple(pts[a]), tuple(pts[b])], fill=BONE_RGB[side], width=1)
            for j in range(1, 25):
                if np.isfinite(pts[j]).all():
                    _disc(draw, pts[j], JOINT_RADIUS_PX, JOINT_RGB)
        for side, px in hands:  # wrists last: never covered
            if np.isfinite(px[i, 0]).all():
                _disc(draw, px[i, 0], WRIST_RADIUS_PX, WRIST_RGB[side])
        frames[i] = np.asarray(img)
        report(DRAW_TASK, i + 1, n)
    return frames


def _disc(draw: ImageDraw.ImageDraw, centre: np.ndarray, r: int, rgb: tuple[int, int, int]) -> None:
    # Pixel (i, j) has its centre at continuous (u, v) = (i, j) (OpenCV convention).
    u, v = round(float(centre[0])), round(float(centre[1]))
    draw.ellipse([u - r, v - r, u + r, v + r], fill=rgb)


def encode_h264(
    path: Path, frames: np.ndarray, fps: int, frame_numbers: np.ndarray, container: str
) -> None:
    """Encode RGB frames to H.264 byte-deterministically (bitexact, one thread).

    Args:
        path: output file (``.mov`` or ``.mp4``).
        frames: (T, H, W, 3) uint8 RGB.
        fps: nominal frame rate; frame ``i`` has pts ``frame_numbers[i]`` in units 1/fps,
            so dropped frames leave timing gaps.
        frame_numbers: (T,) int increasing frame numbers.
        container: ``"mov"`` or ``"mp4"``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"fflags": "+bitexact", "movflags": "+faststart"}
    with av.open(str(path), mode="w", format=container, options=options) as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width = frames.shape[2]
        stream.height = frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, fps)
        stream.codec_context.thread_count = 1
        stream.codec_context.flags |= av.codec.context.Flags.bitexact
        stream.options = {"crf": "12", "preset": "veryfast", "threads": "1", "tune": "stillimage"}
        for i, (img, number) in enumerate(zip(frames, frame_numbers, strict=True)):
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = int(number)
            frame.time_base = Fraction(1, fps)
            out.mux(stream.encode(frame))
            report(ENCODE_TASK, i + 1, len(frames))
        out.mux(stream.encode(None))


def decode_frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Decode a video: (T, H, W, 3) uint8 RGB frames and (T,) float64 pts seconds."""
    with av.open(str(path)) as inp:
        images, times = [], []
        for frame in inp.decode(video=0):
            images.append(frame.to_ndarray(format="rgb24"))
            times.append(float((frame.pts or 0) * (frame.time_base or 0)))
    return np.stack(images), np.asarray(times)
