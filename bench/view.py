"""Benchmark: build the Rerun recording of a 10-minute Vision Pro capture.

``python -m bench view [--json FILE] [--seconds 600] [--repeats 3] [--capture DIR]``
(a smoke run: ``--seconds 2 --repeats 1``)

Synthesizes a Vision Pro capture (or takes ``--capture``: an existing raw capture folder),
normalizes it into a trajectory folder, then times, in one process, `read_trajectory`
(the reference) and `build_recording` (the recording with both camera videos, given the
quality report as the quality step gives it) over several repeats. Prints a table and
writes ``{"ratio_vs_read": build / read (medians), "size_ratio": .rrd bytes / (trajectory
folder bytes + raw video bytes), ...}``. Targets: ratio_vs_read <= 2, size_ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import name_value_table, report
from ego_assets.capture import read_capture
from ego_assets.quality.report import compute_report
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import read_trajectory, write_trajectory
from ego_assets.viewer.recording import build_recording

TARGET_RATIO_VS_READ = 2.0
TARGET_SIZE_RATIO = 1.5


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def run(capture: Path, work: Path, repeats: int) -> dict[str, Any]:
    """Normalize ``capture`` into ``work``, time reading and building; JSON-ready figures."""
    folder = work / "trajectory"
    write_trajectory(read_capture("bench-view", capture), folder)
    read_s, build_s = [], []
    out = work / "episode.rrd"
    trajectory = read_trajectory(folder)  # warm-up (imports, page cache)
    quality = compute_report(trajectory)
    for _ in range(repeats):
        start = time.perf_counter()
        trajectory = read_trajectory(folder)
        read_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        summary = build_recording(trajectory, out, media_dir=capture, report=quality)
        build_s.append(time.perf_counter() - start)
    videos = [m for m in trajectory.media if m.kind == "video"]
    video_bytes = sum((capture / m.path).stat().st_size for m in videos)
    trajectory_bytes = _folder_bytes(folder)
    rrd_bytes = out.stat().st_size
    read_med, build_med = statistics.median(read_s), statistics.median(build_s)
    return {
        "seconds": round(trajectory.duration_s, 1),
        "samples": sum(len(s) for s in trajectory.streams),
        "videos": len(summary.videos),
        "repeats": repeats,
        "read_s": round(read_med, 3),
        "build_s": round(build_med, 3),
        "ratio_vs_read": round(build_med / read_med, 2),
        "target_ratio_vs_read": TARGET_RATIO_VS_READ,
        "rrd_bytes": rrd_bytes,
        "trajectory_bytes": trajectory_bytes,
        "video_bytes": video_bytes,
        "size_ratio": round(rrd_bytes / (trajectory_bytes + video_bytes), 3),
        "target_size_ratio": TARGET_SIZE_RATIO,
    }


def _table(r: dict[str, Any]) -> str:
    mb = 1e6
    rows = [
        ("episode", f"{r['seconds']:.0f} s, {r['samples']} samples, {r['videos']} videos"),
        ("read_trajectory (median)", f"{r['read_s']:.3f} s"),
        ("build_recording (median)", f"{r['build_s']:.3f} s"),
        ("ratio vs read", f"{r['ratio_vs_read']:.2f} (target <= {TARGET_RATIO_VS_READ:g})"),
        (".rrd", f"{r['rrd_bytes'] / mb:.1f} MB"),
        ("trajectory folder + raw video", f"{r['trajectory_bytes'] / mb:.1f} + "
         f"{r['video_bytes'] / mb:.1f} MB"),
        ("size ratio", f"{r['size_ratio']:.2f} (target <= {TARGET_SIZE_RATIO:g})"),
    ]  # fmt: skip
    return name_value_table(rows)


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = ("--seconds", "2", "--repeats", "1")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench view", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--seconds", type=float, default=600.0, help="capture length, s")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs")
    parser.add_argument("--capture", type=Path, help="use this raw capture folder instead")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeats < 1:
        parser.error("--seconds must be > 0 and --repeats >= 1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="bench-view-") as tmp:
        work = Path(tmp)
        capture = args.capture or synthesize(
            "holos-visionpro", work / "capture", seconds=args.seconds, seed=0
        )
        result = run(capture, work, args.repeats)
    report(_table(result), result, args.json)
    return 0
