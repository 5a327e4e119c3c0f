"""Benchmark: quality report and Great Expectations checks for one 10-minute episode.

``python -m bench quality [--json FILE] [--seconds 600] [--repeats 7]``

Builds a Vision Pro-like trajectory in memory (both hands, world and local ARKit
skeletons at 90 Hz, head at 60 Hz, two 30 Hz camera frame streams), imports GX and
builds its context and suite once (warm-up, timed separately), then times
`compute_report` and `run_expectations` per episode over several repeats. Prints a
table and writes ``{"gx_ms_per_episode": ..., "report_ms_per_episode": ...}`` (medians).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import name_value_table, report
from ego_assets.quality.expectations import run_expectations, warm_up
from ego_assets.quality.report import compute_report
from ego_assets.trajectory.joints import ARKIT27
from ego_assets.trajectory.model import CaptureInfo, MediaRef, Trajectory
from ego_assets.trajectory.streams import Stream, make_stream

HAND_RATE_HZ = 90.0
HEAD_RATE_HZ = 60.0
VIDEO_RATE_HZ = 30.0
START_NS = 1_793_000_000_000_000_000
GX_BUDGET_MS = 100.0


def _times_ns(seconds: float, rate_hz: float) -> np.ndarray:
    return START_NS + np.rint(np.arange(int(seconds * rate_hz)) * (1e9 / rate_hz)).astype(np.int64)


def _hand(side: str, frame: str, seconds: float, rng: np.random.Generator) -> Stream:
    ts = _times_ns(seconds, HAND_RATE_HZ)
    t = (ts - START_NS) / 1e9
    rest = rng.uniform(-0.08, 0.08, (len(ARKIT27), 3))
    wrist = np.stack([0.2 * np.sin(0.5 * t), 1.2 + 0.1 * np.sin(0.3 * t), -0.4 + 0 * t], -1)
    pos = rest[None] + (wrist[:, None, :] if frame == "world" else np.zeros((len(t), 1, 3)))
    quat = np.zeros((len(t), len(ARKIT27), 4))
    quat[..., 3] = 1.0
    valid = (t + 7.0 * (side == "left")) % 20.0 >= 0.3  # 0.3 s tracking loss every 20 s
    fields = {"position": pos, "rotation": quat, "hand_valid": valid}
    attrs = {"joint_set": "arkit27", "hand": side, "frame": frame, "nominal_rate_hz": 90.0}
    return make_stream(f"hand_{side}_{frame}", "hand_joints", ts, START_NS, fields, attrs)


def build_trajectory(seconds: float) -> Trajectory:
    """A Vision Pro-like episode of ``seconds`` seconds, built in memory."""
    rng = np.random.default_rng(0)
    streams = [_hand(s, f, seconds, rng) for s in ("left", "right") for f in ("world", "local")]
    head_ts = _times_ns(seconds, HEAD_RATE_HZ)
    n = len(head_ts)
    head = {
        "position": np.zeros((n, 3)),
        "rotation": np.tile([0.0, 0.0, 0.0, 1.0], (n, 1)),
        "valid": np.ones(n, bool),
    }
    streams.append(make_stream("device_pose", "pose", head_ts, START_NS, head, {"frame": "world"}))
    media = []
    for camera in ("camera_left", "camera_right"):
        ts = _times_ns(seconds, VIDEO_RATE_HZ)
        fields = {"frame_index": np.arange(len(ts), dtype=np.int64)}
        name = f"{camera}_frames"
        streams.append(make_stream(name, "media_frames", ts, START_NS, fields, {"media": camera}))
        media.append(
            MediaRef(camera, f"media/{camera}.mov", "video/quicktime", "video", frames_stream=name)
        )
    info = CaptureInfo("bench-quality", "holos-visionpro", "1", START_NS)
    return Trajectory(info, tuple(streams), media=tuple(media))


def _time_ms(fn: Any, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def run(seconds: float, repeats: int) -> dict[str, Any]:
    """Build, warm up, time; the figures as a JSON-ready dict."""
    trajectory = build_trajectory(seconds)
    start = time.perf_counter()
    warm_up()
    warm_up_s = time.perf_counter() - start
    report = compute_report(trajectory)
    run_expectations(report)
    report_ms = _time_ms(lambda: compute_report(trajectory), repeats)
    gx_ms = _time_ms(lambda: run_expectations(report), repeats)
    return {
        "seconds": seconds,
        "samples": sum(len(s) for s in trajectory.streams),
        "repeats": repeats,
        "gx_warm_up_s": round(warm_up_s, 3),
        "gx_ms_per_episode": round(statistics.median(gx_ms), 2),
        "gx_ms_min": round(min(gx_ms), 2),
        "report_ms_per_episode": round(statistics.median(report_ms), 2),
        "report_ms_min": round(min(report_ms), 2),
        "gx_budget_ms": GX_BUDGET_MS,
        "status": report.status,
    }


def _table(result: dict[str, Any]) -> str:
    rows = [
        ("episode", f"{result['seconds']:.0f} s, {result['samples']} samples"),
        ("GX warm-up (import + context + suite)", f"{result['gx_warm_up_s']:.2f} s"),
        ("compute_report per episode (median)", f"{result['report_ms_per_episode']:.1f} ms"),
        ("GX checks per episode (median)", f"{result['gx_ms_per_episode']:.1f} ms"),
        ("GX budget", f"{result['gx_budget_ms']:.0f} ms"),
    ]
    return name_value_table(rows)


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = ("--seconds", "2", "--repeats", "1")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quality", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--seconds", type=float, default=600.0, help="episode length, s")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per step")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    result = run(args.seconds, args.repeats)
    report(_table(result), result, args.json)
    return 0
