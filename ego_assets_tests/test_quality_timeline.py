"""The PNG timeline: tracking bands, gap band and wrist-speed bars at known pixels."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from ego_assets.quality import timeline as tl
from ego_assets.quality.report import compute_report
from ego_assets.trajectory.model import CaptureInfo, Trajectory
from ego_assets.trajectory.streams import Stream, make_stream

START_NS = 1_700_000_000_000_000_000


def _wrist(hand: str, t: np.ndarray, valid: np.ndarray, x_m: np.ndarray) -> Stream:
    pos = np.zeros((len(t), 3))
    pos[:, 0] = x_m
    ts = START_NS + np.rint(t * 1e9).astype(np.int64)
    fields = {"wrist_position": pos, "hand_valid": valid}
    attrs = {"hand": hand, "frame": "device"}
    return make_stream(f"wrist_{hand}", "wrist_palm", ts, START_NS, fields, attrs)


def _episode() -> Trajectory:
    t = np.arange(300) / 30.0  # 10 s at 30 Hz
    left = _wrist("left", t, t < 5.0, 0.5 * t)  # tracked for the first half, 0.5 m/s
    keep = (t < 6.0) | (t >= 8.0)  # the right stream has a 2 s hole
    right = _wrist("right", t[keep], np.ones(keep.sum(), bool), 2.0 * t[keep])  # 2 m/s
    return Trajectory(CaptureInfo("cap-tl", "aria-mps", "1", START_NS), (left, right))


def _pixel(image: Image.Image, fraction: float, y: int) -> tuple[int, int, int]:
    n_bins = tl.WIDTH_PX - tl.MARGIN_PX - 10
    return image.getpixel((tl.MARGIN_PX + int(fraction * n_bins), y))


def test_timeline_bands_and_bars_sit_at_the_expected_pixels() -> None:
    trajectory = _episode()
    png = tl.timeline_png(trajectory, compute_report(trajectory))
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size[0] == tl.WIDTH_PX
    left_band = tl.TITLE_PX + tl.BAND_PX // 2
    right_band = left_band + tl.BAND_PX + tl.ROW_GAP_PX
    gap_band = right_band + tl.BAND_PX + tl.ROW_GAP_PX
    valid, invalid = tuple(tl.VALID.astype(int)), tuple(tl.INVALID.astype(int))
    assert _pixel(image, 0.25, left_band) == valid
    assert _pixel(image, 0.75, left_band) == invalid
    assert _pixel(image, 0.70, right_band) == tl.NO_DATA  # inside the 2 s hole
    assert _pixel(image, 0.70, gap_band) == tl.GAP
    assert _pixel(image, 0.30, gap_band) == tl.BACKGROUND
    # right wrist at 2 m/s of a 3 m/s scale: bar reaches 2/3 of the plot height
    right_speed_top = gap_band - tl.BAND_PX // 2 + tl.BAND_PX + tl.ROW_GAP_PX
    right_speed_top += tl.SPEED_PX + tl.ROW_GAP_PX
    bottom = right_speed_top + tl.SPEED_PX - 2
    bar_top = right_speed_top + tl.SPEED_PX - 1 - round(2 / 3 * (tl.SPEED_PX - 1))
    assert _pixel(image, 0.2, bottom) == tl.SPEED
    assert _pixel(image, 0.2, bar_top) == tl.SPEED
    assert _pixel(image, 0.2, bar_top - 2) == tl.BACKGROUND


def test_timeline_is_byte_identical_for_the_same_episode() -> None:
    trajectory = _episode()
    report = compute_report(trajectory)
    assert tl.timeline_png(trajectory, report) == tl.timeline_png(trajectory, report)
