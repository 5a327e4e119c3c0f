"""Camera video for LeRobotDataset v3 episodes with PyAV: stream copy when possible.

LeRobot decodes the frame of row ``k`` at ``from_timestamp + k / fps`` and fails when
the closest decoded frame is more than 1e-4 s away, so every mp4 written here is
constant frame rate with frame ``k`` at exactly ``k / fps`` (pts ``k`` in a 1/fps time
base) and exactly one frame per exported row.

* `remux`: the source already holds one frame per row, in order, on a uniform time
  grid: packets are copied unchanged (no decoding, no re-encoding); only their
  timestamps are rescaled so that frame ``k`` sits at ``k / fps``.
* `reencode`: rows drop source frames (retried segments cut out) or repeat them
  (dropped source frames held), or the source is not remuxable (codec, pixel format,
  irregular timestamps): frames are decoded once, in order, and encoded with
  `ENCODER` (H.264, yuv420p).

Both also return per-channel pixel statistics of a sample of frames (values in [0, 1],
LeRobot's convention for camera stats), taken from keyframes on the remux path so no
other frame is decoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

# Codecs and pixel format LeRobot's decoders (PyAV, torchcodec) read from an mp4.
REMUX_CODECS = frozenset({"h264", "hevc", "av1"})
PIX_FMT = "yuv420p"
# Re-encoding: x264 is in every PyAV wheel; GOP 2 as in LeRobot's own writer (random
# access decodes at most one extra frame), CRF 23 (x264's default quality). Preset
# ultrafast (no CABAC, no B-frames): ~2.5x the encode speed of veryfast and cheaper to
# decode for training loaders, at ~2.8x the file size (640x480, 300 frames: 1.15 MB vs
# 0.41 MB); only cut or gappy footage is re-encoded, aligned video is copied.
ENCODER: dict[str, Any] = {
    "codec": "libx264",
    "options": {"preset": "ultrafast", "crf": "23", "g": "2"},
}
# Frames sampled for the camera statistics, and their size (long side, pixels).
STATS_SAMPLES = 100
STATS_LONG_SIDE = 160
# Up to this many frames the remux path decodes them all for the statistics.
SHORT_VIDEO_FRAMES = 3 * STATS_SAMPLES
MUX_OPTIONS = {"fflags": "+bitexact"}


@dataclass(frozen=True, slots=True)
class SourceVideo:
    """What one pass over the packets says about the first video stream of a file.

    Attributes:
        codec: FFmpeg codec name.
        pix_fmt: pixel format of the decoded frames (``None`` when unknown).
        width, height: frame size, pixels.
        frames: number of video packets (= frames).
        uniform: presentation times are ``offset + k * step`` for frame ``k`` (and
            decode times lie on the same grid), so a remux can rescale them exactly.
        keyframes: (K,) int64 presentation index of each keyframe.
        pts_offset, pts_step: first presentation time and frame step, in the stream's
            time base (meaningful when ``uniform``).
    """

    codec: str
    pix_fmt: str | None
    width: int
    height: int
    frames: int
    uniform: bool
    keyframes: np.ndarray
    pts_offset: int = 0
    pts_step: int = 1

    @property
    def remuxable(self) -> bool:
        return self.uniform and self.codec in REMUX_CODECS and self.pix_fmt == PIX_FMT


@dataclass(frozen=True, slots=True)
class PixelStats:
    """Per-channel histogram of sampled RGB pixel values (0..255) and the image count."""

    histogram: np.ndarray  # (3, 256) int64
    images: int

    def stats(self) -> dict[str, np.ndarray]:
        """LeRobot camera stats: every value shaped (3, 1, 1), pixels scaled to [0, 1]."""
        return histogram_stats(self.histogram, self.images)


@dataclass(frozen=True, slots=True)
class VideoResult:
    """What `remux` / `reencode` wrote: frame count, whether packets were copied, pixels."""

    frames: int
    remuxed: bool
    pixels: PixelStats


def _timing(path: Path) -> tuple[SourceVideo, np.ndarray, np.ndarray, Fraction]:
    """Packet pts/dts arrays (presentation order via argsort) without decoding."""
    with av.open(str(path)) as inp:
        stream = inp.streams.video[0]
        ctx = stream.codec_context
        pts, dts, key = [], [], []
        for packet in inp.demux(stream):
            if not packet.size:
                continue
            pts.append(packet.pts if packet.pts is not None else -1)
            dts.append(packet.dts if packet.dts is not None else packet.pts)
            key.append(packet.is_keyframe)
        time_base = Fraction(stream.time_base or Fraction(1, 1))
        pix_fmt = ctx.format.name if ctx.format is not None else None
        codec, width, height = ctx.name, int(ctx.width or 0), int(ctx.height or 0)
    p = np.asarray(pts, dtype=np.int64)
    d = np.asarray([x if x is not None else -1 for x in dts], dtype=np.int64)
    order = np.argsort(p, kind="stable")
    uniform = bool(len(p)) and bool((p >= 0).all())
    if uniform and len(p) > 1:
        steps = np.diff(p[order])
        step = int(steps[0])
        uniform = (
            step > 0 and bool((steps == step).all()) and bool(((d - p.min()) % step == 0).all())
        )
    rank = np.empty(len(p), dtype=np.int64)
    rank[order] = np.arange(len(p))
    keyframes = np.sort(rank[np.asarray(key, dtype=bool)]) if len(p) else np.zeros(0, np.int64)
    offset = int(p.min()) if len(p) else 0
    step = int(np.diff(np.sort(p))[0]) if uniform and len(p) > 1 else 1
    info = SourceVideo(codec, pix_fmt, width, height, len(p), uniform, keyframes, offset, step)
    return info, p, d, time_base


def inspect_video(path: Path) -> SourceVideo:
    """`SourceVideo` of ``path`` (demuxes every packet; decodes nothing)."""
    return _timing(path)[0]


def _sample(n: int, k: int) -> np.ndarray:
    """Up to ``k`` evenly spread indices of ``range(n)``."""
    if n <= k:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, k).round().astype(np.int64))


def _histogram(frame: av.VideoFrame) -> np.ndarray:
    """(3, 256) counts of a frame's RGB values, downscaled to `STATS_LONG_SIDE`."""
    scale = STATS_LONG_SIDE / max(frame.width, frame.height)
    width = max(2, round(frame.width * min(scale, 1.0)))
    height = max(2, round(frame.height * min(scale, 1.0)))
    rgb = frame.reformat(width=width, height=height, format="rgb24").to_ndarray()
    flat = rgb.reshape(-1, 3)
    offsets = flat.astype(np.int64) + np.arange(3) * 256
    return np.bincount(offsets.ravel(), minlength=768).reshape(3, 256)


def histogram_stats(histogram: np.ndarray, images: int) -> dict[str, np.ndarray]:
    """min, max, mean, std, q01..q99 per channel of (3, 256) counts, scaled to [0, 1]."""
    values = np.arange(256, dtype=np.float64) / 255.0
    total = histogram.sum(axis=1).astype(np.float64)
    if not (total > 0).all():
        raise ValueError("no pixels sampled for the camera statistics")
    mean = (histogram * values).sum(axis=1) / total
    var = (histogram * (values[None, :] - mean[:, None]) ** 2).sum(axis=1) / total
    nonzero = histogram > 0
    lo = np.argmax(nonzero, axis=1)
    hi = 255 - np.argmax(nonzero[:, ::-1], axis=1)
    cdf = np.cumsum(histogram, axis=1) / total[:, None]
    out = {
        "min": values[lo],
        "max": values[hi],
        "mean": mean,
        "std": np.sqrt(var),
    }
    for q in QUANTILES:
        # the smallest value whose cumulative share reaches q (inverted CDF)
        out[quantile_name(q)] = values[np.argmax(cdf >= q - 1e-12, axis=1)]
    shaped = {k: v.reshape(3, 1, 1) for k, v in out.items()}
    shaped["count"] = np.array([images], dtype=np.int64)
    return shaped


QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def quantile_name(q: float) -> str:
    """LeRobot's name of a quantile statistic: 0.01 -> ``q01``."""
    return f"q{round(q * 100):02d}"


def remux(src: Path, dst: Path, fps: int, source: SourceVideo | None = None) -> VideoResult:
    """Copy the packets of ``src`` into the mp4 ``dst``; frame ``k`` at ``k / fps``.

    ``source`` is `inspect_video` of ``src`` when the caller has it already.

    Raises:
        ValueError: ``src`` is not remuxable (see `SourceVideo.remuxable`).
    """
    info = source if source is not None else inspect_video(src)
    if not info.remuxable:
        raise ValueError(
            f"{src}: not remuxable ({info.codec}, {info.pix_fmt}, uniform={info.uniform})"
        )
    offset, step = info.pts_offset, info.pts_step
    # Short videos: decode every frame and sample evenly. Long ones: decode only a
    # sample of keyframes (no other frame depends on them), so the copy stays cheap.
    decode_all = info.frames <= SHORT_VIDEO_FRAMES
    if decode_all:
        sampled = set(_sample(info.frames, STATS_SAMPLES).tolist())
    else:
        sampled = set(info.keyframes[_sample(len(info.keyframes), STATS_SAMPLES)].tolist())
    histogram = np.zeros((3, 256), dtype=np.int64)
    images = 0
    decoded = 0
    out_tb = Fraction(1, fps)
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4", options=MUX_OPTIONS) as out:
        ist = inp.streams.video[0]
        if not decode_all:
            ist.codec_context.skip_frame = "NONKEY"
        ost = out.add_stream_from_template(ist)
        ost.time_base = out_tb
        for packet in inp.demux(ist):
            if not packet.size:
                continue
            assert packet.pts is not None
            index = (packet.pts - offset) // step
            if decode_all or (index in sampled and packet.is_keyframe):
                for frame in ist.codec_context.decode(packet):
                    if not decode_all or decoded in sampled:
                        histogram += _histogram(frame)
                        images += 1
                    decoded += 1
            dts = packet.dts if packet.dts is not None else packet.pts
            packet.pts = index
            packet.dts = (dts - offset) // step
            packet.duration = 1
            packet.time_base = out_tb
            packet.stream = ost
            out.mux(packet)
        for frame in ist.codec_context.decode(None):
            if not decode_all or decoded in sampled:
                histogram += _histogram(frame)
                images += 1
            decoded += 1
    return VideoResult(info.frames, True, PixelStats(histogram, images))


def _decoded(inp: av.container.InputContainer) -> Iterator[av.VideoFrame]:
    stream = inp.streams.video[0]
    stream.thread_type = "AUTO"
    yield from inp.decode(stream)


def reencode(src: Path, dst: Path, fps: int, frame_for_row: np.ndarray) -> VideoResult:
    """Write row ``k`` of the mp4 ``dst`` from source frame ``frame_for_row[k]``, re-encoded.

    Args:
        src: source video (any codec PyAV decodes).
        dst: mp4 to write (H.264 yuv420p, `ENCODER`).
        fps: output frame rate; frame ``k`` at ``k / fps``.
        frame_for_row: (N,) int64 presentation index of the source frame of each row,
            non-decreasing (rows repeat or skip source frames, never go back).

    Raises:
        ValueError: ``frame_for_row`` goes back, or names a frame the source lacks.
    """
    rows = np.asarray(frame_for_row, dtype=np.int64)
    if len(rows) and (np.diff(rows) < 0).any():
        raise ValueError(f"{src}: rows must take source frames in order")
    sampled = set(_sample(len(rows), STATS_SAMPLES).tolist())
    histogram = np.zeros((3, 256), dtype=np.int64)
    images = 0
    out_tb = Fraction(1, fps)
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4", options=MUX_OPTIONS) as out:
        ctx = inp.streams.video[0].codec_context
        ost = out.add_stream(ENCODER["codec"], rate=fps)
        ost.width, ost.height = int(ctx.width), int(ctx.height)
        ost.pix_fmt = PIX_FMT
        ost.time_base = out_tb
        ost.options = dict(ENCODER["options"])
        frames = _decoded(inp)
        current: av.VideoFrame | None = None
        position = -1
        for row, wanted in enumerate(rows.tolist()):
            while position < wanted:
                current = next(frames, None)
                if current is None:
                    raise ValueError(f"{src}: has {position + 1} frames, row {row} needs {wanted}")
                position += 1
            assert current is not None
            frame = current if current.format.name == PIX_FMT else current.reformat(format=PIX_FMT)
            if row in sampled:
                histogram += _histogram(frame)
                images += 1
            frame.pts = row
            frame.time_base = out_tb
            frame.pict_type = av.video.frame.PictureType.NONE
            out.mux(ost.encode(frame))
        out.mux(ost.encode(None))
    return VideoResult(len(rows), False, PixelStats(histogram, images))


def encode_rgb(dst: Path, frames: Iterator[np.ndarray], fps: int, width: int, height: int) -> int:
    """Encode RGB frames (H, W, 3 uint8) to ``dst`` with `ENCODER`; the bare-encode baseline."""
    out_tb = Fraction(1, fps)
    count = 0
    with av.open(str(dst), "w", format="mp4", options=MUX_OPTIONS) as out:
        ost = out.add_stream(ENCODER["codec"], rate=fps)
        ost.width, ost.height, ost.pix_fmt, ost.time_base = width, height, PIX_FMT, out_tb
        ost.options = dict(ENCODER["options"])
        for rgb in frames:
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = count
            frame.time_base = out_tb
            out.mux(ost.encode(frame))
            count += 1
        out.mux(ost.encode(None))
    return count


def video_info(path: Path) -> dict[str, Any]:
    """LeRobot's ``features.<camera>.info`` block, read from the written mp4."""
    with av.open(str(path)) as inp:
        stream = inp.streams.video[0]
        ctx = stream.codec_context
        rate = stream.base_rate or stream.average_rate or stream.guessed_rate
        return {
            "video.height": int(ctx.height),
            "video.width": int(ctx.width),
            "video.codec": ctx.codec.canonical_name,
            "video.pix_fmt": ctx.format.name if ctx.format is not None else PIX_FMT,
            "video.fps": round(float(rate)) if rate else 0,
            "video.channels": 3,
            "has_audio": False,
            "is_depth_map": False,
        }


def frame_times(path: Path) -> np.ndarray:
    """(T,) presentation time of every frame, seconds, in presentation order (no decoding)."""
    _, pts, _, time_base = _timing(path)
    return np.sort(pts).astype(np.float64) * float(time_base)
