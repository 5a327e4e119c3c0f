"""The PNG timeline: tracking bands, gap band and wrist-speed bars at known pixels."""

from __future__ import annotations

import io

import numpy as np
import pytest
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


def test_the_legend_names_every_colour_and_is_stored_in_the_png() -> None:
    trajectory = _episode()
    image = Image.open(io.BytesIO(tl.timeline_png(trajectory, compute_report(trajectory))))
    legend = image.text["legend"]
    assert legend == tl.legend_text(3.0)
    for text in ("tracked", "not tracked", "gap", "backwards timestamp", "duplicate timestamp"):
        assert text in legend.split("; ")
    assert image.text["Title"].startswith("cap-tl  aria-mps  10.0 s  status:")
    # the swatches are drawn: the bottom rows hold the legend's colours
    legend_rows = image.convert("RGB").crop(
        (0, image.size[1] - 3 * tl.LEGEND_ROW_PX, tl.WIDTH_PX, image.size[1])
    )
    colours = {c for _, c in legend_rows.getcolors(maxcolors=100000)}
    assert {tl.BACKWARDS, tl.DUPLICATE, tl.GAP, tl.SPEED} <= colours


def _two_recordings() -> Trajectory:
    """Two 2 s recordings at 30 Hz, 60 s apart; the second has a backwards and a
    duplicate timestamp."""
    t = np.concatenate([np.arange(60) / 30.0, 62.0 + np.arange(60) / 30.0])
    t[90] = t[89]  # duplicate
    t[100] = t[99] - 0.01  # backwards
    left = _wrist("left", t, np.ones(len(t), bool), 0.1 * np.sin(t))
    right = _wrist("right", t, np.ones(len(t), bool), 0.1 * np.cos(t))
    return Trajectory(CaptureInfo("cap-two", "aria-mps", "1", START_NS), (left, right))


def test_a_long_empty_stretch_is_compressed_so_the_data_fills_the_axis() -> None:
    trajectory = _two_recordings()
    n_bins = tl.WIDTH_PX - tl.MARGIN_PX - 10
    times = np.concatenate([s.time for s in trajectory.streams])
    axis = tl.TimeAxis.build(times, trajectory.duration_s, n_bins)
    ((start, end),) = axis.breaks
    assert (start, end) == pytest.approx((59 / 30.0, 62.0))
    # 4 s of data share the plot but the break's few pixels: the first recording ends
    # near the middle, not in the first 3 % as on a linear axis
    assert axis.x(59 / 30.0) == pytest.approx((n_bins - tl.BREAK_PX) / 2, rel=0.02)
    assert axis.x(62.0) - axis.x(59 / 30.0) == pytest.approx(tl.BREAK_PX)
    image = Image.open(io.BytesIO(tl.timeline_png(trajectory, compute_report(trajectory))))
    rgb = image.convert("RGB")
    timing_band = tl.TITLE_PX + 2 * (tl.BAND_PX + tl.ROW_GAP_PX) + tl.BAND_PX // 2
    row = [rgb.getpixel((x, timing_band)) for x in range(tl.MARGIN_PX, tl.MARGIN_PX + n_bins)]
    assert tl.DUPLICATE in row and tl.BACKWARDS in row
    assert row.index(tl.BACKWARDS) > row.index(tl.DUPLICATE)  # the duplicate comes first
    left_band = tl.TITLE_PX + tl.BAND_PX // 2
    valid = tuple(tl.VALID.astype(int))
    assert _pixel(rgb, 0.2, left_band) == valid and _pixel(rgb, 0.8, left_band) == valid
