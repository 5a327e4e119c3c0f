"""A PNG timeline of one episode: per-hand tracking, stream gaps, wrist speed.

Drawn with Pillow (no plotting library). The x axis is seconds since capture start,
one column of pixels per time bin; every figure is binned with numpy. Rows, top to
bottom: a title, per hand a tracking band (green: every sample valid, red: none, a
blend in between, grey: no sample), one band with the gaps of every timed stream (dark
red), and per hand the wrist speed (max per bin, 0 to the teleport speed, which is
drawn as a dashed line). The output is byte-identical for the same input.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ego_assets.quality.hands import wrist_steps
from ego_assets.quality.report import QualityReport
from ego_assets.quality.streams import validity
from ego_assets.quality.thresholds import Thresholds, default_thresholds
from ego_assets.trajectory.model import Trajectory

WIDTH_PX = 1000
MARGIN_PX = 90
BAND_PX = 18
SPEED_PX = 60
ROW_GAP_PX = 8
TITLE_PX = 22
BACKGROUND = (255, 255, 255)
INK = (30, 30, 30)
NO_DATA = (215, 215, 215)
VALID = np.array([46, 160, 67], np.float64)
INVALID = np.array([215, 58, 73], np.float64)
GAP = (120, 20, 30)
SPEED = (33, 102, 172)
TELEPORT_LINE = (215, 58, 73)


def _bins(times_s: np.ndarray, span_s: float, n_bins: int) -> np.ndarray:
    idx = np.floor(times_s / span_s * n_bins).astype(np.int64)
    return np.clip(idx, 0, n_bins - 1)


def _hold(values: np.ndarray, has: np.ndarray, bin_s: float, limit_s: float) -> np.ndarray:
    """Carry each bin's value into the following empty bins up to ``limit_s`` away (not gaps)."""
    last = np.maximum.accumulate(np.where(has, np.arange(len(has)), -1))
    near = (last >= 0) & ((np.arange(len(has)) - last) * bin_s <= limit_s)
    out = np.full_like(values, np.nan)
    out[near] = values[last[near]]
    return out


def _tracking_colours(
    times_s: np.ndarray, valid: np.ndarray, span_s: float, n_bins: int, limit_s: float
) -> np.ndarray:
    """(n_bins, 3) uint8 colours: blend of VALID/INVALID by the valid share, NO_DATA if empty."""
    idx = _bins(times_s, span_s, n_bins)
    total = np.bincount(idx, minlength=n_bins)
    good = np.bincount(idx, weights=valid.astype(np.float64), minlength=n_bins)
    share = np.divide(good, total, out=np.zeros(n_bins), where=total > 0)
    share = _hold(share, total > 0, span_s / n_bins, limit_s)[:, None]
    colours = np.where(
        np.isnan(share), np.asarray(NO_DATA), share * VALID + (1.0 - share) * INVALID
    )
    return np.rint(colours).astype(np.uint8)


def _speed_per_bin(
    trajectory: Trajectory, stream_name: str, span_s: float, n_bins: int, limit_s: float
) -> np.ndarray:
    """(n_bins,) max wrist speed (m/s) per bin over consecutive valid pairs; NaN if none."""
    stream = trajectory.stream(stream_name)
    steps = wrist_steps(stream)
    out = np.full(n_bins, np.nan)
    if steps is None:
        return out
    pair, step_m, dt_s = steps
    speed = step_m / dt_s
    idx = _bins(stream.time[1:][pair], span_s, n_bins)
    top = np.full(n_bins, -np.inf)
    np.maximum.at(top, idx, speed)
    has = np.isfinite(top)
    out[has] = top[has]
    return _hold(out, has, span_s / n_bins, limit_s)


def _speed_bars(speed_mps: np.ndarray, top_mps: float) -> Image.Image:
    """(SPEED_PX, n_bins) bar chart: one bar per bin, full height at ``top_mps`` and above."""
    level = np.clip(speed_mps / top_mps, 0.0, 1.0) * (SPEED_PX - 1)
    height = np.where(np.isfinite(level), np.rint(level), -1.0)
    from_bottom = np.arange(SPEED_PX - 1, -1, -1, dtype=np.float64)[:, None]
    bars = np.full((SPEED_PX, len(speed_mps), 3), BACKGROUND, np.uint8)
    bars[from_bottom <= height[None, :]] = SPEED
    return Image.fromarray(bars)


def timeline_png(
    trajectory: Trajectory,
    report: QualityReport,
    thresholds: Thresholds | None = None,
    width_px: int = WIDTH_PX,
) -> bytes:
    """Render the episode timeline as PNG bytes (see the module docstring for the rows)."""
    limits = thresholds if thresholds is not None else default_thresholds()
    span_s = max(trajectory.duration_s, 1e-3)
    n_bins = width_px - MARGIN_PX - 10
    hands = list(report.hands)
    height = (
        TITLE_PX + (len(hands) + 1) * (BAND_PX + ROW_GAP_PX) + len(hands) * (SPEED_PX + ROW_GAP_PX)
    )
    height += 20
    image = Image.new("RGB", (width_px, height), BACKGROUND)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    title = f"{report.capture_id}  {report.source_kind}  {span_s:.1f} s  status: {report.status}"
    draw.text((4, 4), title, fill=INK, font=font)
    y = TITLE_PX
    for hand in hands:
        draw.text((4, y + 3), f"{hand.hand} tracked", fill=INK, font=font)
        if hand.primary_stream is not None:
            stream = trajectory.stream(hand.primary_stream)
            limit_s = report.stream(stream.name).gap_limit_s
            colours = _tracking_colours(stream.time, validity(stream), span_s, n_bins, limit_s)
        else:
            colours = np.tile(np.asarray(INVALID, np.uint8), (n_bins, 1))
        image.paste(Image.fromarray(np.repeat(colours[None], BAND_PX, axis=0)), (MARGIN_PX, y))
        y += BAND_PX + ROW_GAP_PX
    draw.text((4, y + 3), "gaps", fill=INK, font=font)
    draw.rectangle([MARGIN_PX, y, MARGIN_PX + n_bins - 1, y + BAND_PX - 1], outline=NO_DATA)
    for sq in report.streams:
        for gap in sq.gaps:
            x0 = MARGIN_PX + int(gap.start_s / span_s * n_bins)
            x1 = MARGIN_PX + int((gap.start_s + gap.length_s) / span_s * n_bins)
            draw.rectangle([x0, y, max(x0, min(x1, MARGIN_PX + n_bins - 1)), y + BAND_PX - 1], GAP)
    y += BAND_PX + ROW_GAP_PX
    top_mps = limits.teleport_speed_mps
    for hand in hands:
        draw.text((4, y + 3), f"{hand.hand} wrist", fill=INK, font=font)
        draw.text((4, y + 16), f"0-{top_mps:g} m/s", fill=INK, font=font)
        if hand.primary_stream is not None:
            limit_s = report.stream(hand.primary_stream).gap_limit_s
            speed = _speed_per_bin(trajectory, hand.primary_stream, span_s, n_bins, limit_s)
            image.paste(_speed_bars(speed, top_mps), (MARGIN_PX, y))
        draw.rectangle([MARGIN_PX, y, MARGIN_PX + n_bins - 1, y + SPEED_PX - 1], outline=NO_DATA)
        for x in range(MARGIN_PX, MARGIN_PX + n_bins, 8):
            draw.line([x, y, x + 3, y], fill=TELEPORT_LINE)
        y += SPEED_PX + ROW_GAP_PX
    draw.text((MARGIN_PX, y), "0 s", fill=INK, font=font)
    draw.text((MARGIN_PX + n_bins - 60, y), f"{span_s:.1f} s", fill=INK, font=font)
    sink = io.BytesIO()
    image.save(sink, format="PNG", optimize=False)
    return sink.getvalue()
