"""Benchmark: CERES LeRobot v3 shard export against lerobot's own writer and bare PyAV.

``python -m bench ceres [--json FILE] [--seconds 300] [--width 640 --height 480]
[--lerobot-python PATH] [--repeat 3]``

Setup (not timed): a synthetic WebXR capture of ``seconds`` at 30 Hz whose outward
camera is re-encoded at ``width x height`` H.264. Two versions of its trajectory: as
recorded (video aligned with the rows: the export copies it, **remux**) and with one
segment marked ``retry`` (its rows and footage cut: the export **re-encodes**). Timed in
one run: ours and bare PyAV interleaved ``repeat`` times (best of each), then lerobot
once (minutes per run):

* **ours, remux** and **ours, re-encode**: `write_shard` (rows, stats, parquet, video,
  metadata, receipt).
* **bare encode**: PyAV alone decoding every source frame up to the last row's in one
  loop (FFmpeg's decoder threads) and encoding the re-encode path's frames with the same
  encoder settings (`add_encoder_stream` with x264's own frame threads), writing
  nothing else: the plain way to do it with PyAV.
* **lerobot**: ``LeRobotDataset.create`` + ``add_frame`` per frame + ``save_episode`` +
  ``finalize`` with lerobot's defaults, writing the same rows and frames as the remux
  path (run in the lerobot venv, `make lerobot-env`; skipped when it is missing).

Figures: ``speedup_vs_lerobot`` (frames per second of ours re-encoding / lerobot's,
target >= 20), ``remux_speedup_vs_lerobot`` (ours remuxing / lerobot, target >= 200)
and ``ratio_vs_bare_encode`` (ours re-encoding / bare encode time, target <= 1.1).
The machine's other work slows each side differently, so the CPU seconds of every path
(all threads; lerobot's from inside its process) and frames per CPU second against
lerobot's (``cpu_speedup_vs_lerobot``) are reported beside the wall-clock figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import av
import numpy as np

from bench import name_value_table, report
from bench.egosmith import _upscaled_video
from ego_assets.capture import read_capture
from ego_assets.formats.ceres_episode import build_rows
from ego_assets.formats.ceres_lerobot import write_shard
from ego_assets.formats.lerobot_video import add_encoder_stream, encode_frame
from ego_assets.synth import synthesize
from ego_assets.trajectory.model import Trajectory

REPO = Path(__file__).resolve().parents[1]
LEROBOT_PYTHON = REPO / ".venv-lerobot" / "bin" / "python"
TARGETS = {"speedup_vs_lerobot": 20, "remux_speedup_vs_lerobot": 200, "ratio_vs_bare_encode": 1.1}


def _with_retry(trajectory: Trajectory) -> Trajectory:
    """The trajectory with its second segment marked ``retry`` (cut from rows and video)."""
    segments = list(trajectory.annotations.segments)
    segments[1] = dataclasses.replace(segments[1], outcome="retry")
    annotations = dataclasses.replace(trajectory.annotations, segments=tuple(segments))
    return dataclasses.replace(trajectory, annotations=annotations)


def bare_encode(video: Path, out: Path, frame_for_row: np.ndarray, fps: int) -> int:
    """Decode ``video`` and encode the rows' frames with `ENCODER`: PyAV and nothing else."""
    count = 0
    with av.open(str(video)) as inp, av.open(str(out), "w", format="mp4") as outp:
        ctx = inp.streams.video[0].codec_context
        inp.streams.video[0].thread_type = "AUTO"
        stream = add_encoder_stream(outp, fps, ctx.width, ctx.height)
        frames = inp.decode(video=0)
        current, position = None, -1
        for wanted in frame_for_row.tolist():
            while position < wanted:
                current, position = next(frames), position + 1
            assert current is not None
            encode_frame(outp, stream, current, count, fps)
            count += 1
        outp.mux(stream.encode(None))
    return count


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _timed(function, *args) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds, value) of one call."""
    start, cpu = time.perf_counter(), _cpu_seconds()
    value = function(*args)
    return time.perf_counter() - start, _cpu_seconds() - cpu, value


def run_lerobot(python: Path, video: Path, trajectory: Trajectory, tmp: Path) -> dict[str, Any]:
    """lerobot writing the remux path's rows and frames; its own timing."""
    rows = build_rows(trajectory)
    np.savez(tmp / "arrays.npz", state=rows.state, action=rows.action)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf-home")}
    script = Path(__file__).with_name("_lerobot_writer.py")
    args = [str(python), str(script), str(video), str(tmp / "arrays.npz")]
    run = subprocess.run(
        [*args, str(tmp / "lerobot"), str(tmp / "lerobot.json")],
        env=env,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        raise RuntimeError(f"lerobot writer failed: {run.stderr[-2000:]}")
    return json.loads((tmp / "lerobot.json").read_text())


def run(
    seconds: float, width: int, height: int, lerobot_python: Path | None, repeat: int = 3
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-ceres-") as tmp_name:
        tmp = Path(tmp_name)
        capture = synthesize("webxr", tmp / "capture", seconds=seconds, seed=0)
        video = capture / "camera" / "outward.mp4"
        scaled = tmp / "scaled.mp4"
        _upscaled_video(video, scaled, width, height)
        scaled.replace(video)
        clean = read_capture("bench", capture)
        retry = _with_retry(clean)
        retry_rows = build_rows(retry)
        assert retry_rows.frame_for_row is not None
        # ours (copy, re-encode) and bare PyAV, interleaved `repeat` times: best of each
        times: dict[str, list[tuple[float, float]]] = {"remux": [], "reencode": [], "bare": []}
        for attempt in range(repeat):
            folders = {name: tmp / f"{name}-{attempt}" for name in ("remux", "reencode")}
            for folder in folders.values():
                folder.mkdir()
            wall, cpu, remux = _timed(write_shard, clean, capture, 0, folders["remux"])
            times["remux"].append((wall, cpu))
            wall, cpu, reencode = _timed(write_shard, retry, capture, 1, folders["reencode"])
            times["reencode"].append((wall, cpu))
            wall, cpu, bare_frames = _timed(
                bare_encode, video, tmp / "bare.mp4", retry_rows.frame_for_row, retry_rows.fps
            )
            times["bare"].append((wall, cpu))
            if (remux.video, reencode.video) != ("remux", "re-encode"):
                raise RuntimeError(f"unexpected video paths {remux.video}, {reencode.video}")
            for folder in folders.values():
                shutil.rmtree(folder)
        lerobot = None
        if lerobot_python is not None and lerobot_python.exists():
            lerobot = run_lerobot(lerobot_python, video, clean, tmp)
    best = {name: min(t[0] for t in runs) for name, runs in times.items()}
    cpu = {name: min(t[1] for t in runs) for name, runs in times.items()}
    result: dict[str, Any] = {
        "seconds_of_capture": seconds,
        "width": width,
        "height": height,
        "repeat": repeat,
        "frames": {"remux": remux.frames, "reencode": reencode.frames, "bare": bare_frames},
        "seconds": {
            "ours_remux": round(best["remux"], 3),
            "ours_reencode": round(best["reencode"], 3),
            "bare_encode": round(best["bare"], 3),
        },
        "all_seconds": {k: [round(t[0], 3) for t in v] for k, v in times.items()},
        "cpu_seconds": {
            "ours_remux": round(cpu["remux"], 3),
            "ours_reencode": round(cpu["reencode"], 3),
            "bare_encode": round(cpu["bare"], 3),
        },
        "ratio_vs_bare_encode": round(best["reencode"] / best["bare"], 3),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "targets": TARGETS,
    }
    if lerobot is not None:
        lerobot_fps = lerobot["frames"] / lerobot["seconds"]
        result["seconds"]["lerobot"] = round(lerobot["seconds"], 3)
        result["frames"]["lerobot"] = lerobot["frames"]
        result["speedup_vs_lerobot"] = round(reencode.frames / best["reencode"] / lerobot_fps, 1)
        result["remux_speedup_vs_lerobot"] = round(remux.frames / best["remux"] / lerobot_fps, 1)
        if "cpu_seconds" in lerobot:
            # frames per CPU second, ours / lerobot: what the figures are once nothing else runs
            lerobot_per_cpu = lerobot["frames"] / lerobot["cpu_seconds"]
            result["cpu_seconds"]["lerobot"] = round(lerobot["cpu_seconds"], 3)
            result["cpu_speedup_vs_lerobot"] = {
                "reencode": round(reencode.frames / cpu["reencode"] / lerobot_per_cpu, 1),
                "remux": round(remux.frames / cpu["remux"] / lerobot_per_cpu, 1),
            }
    return result


def _table(result: dict[str, Any]) -> str:
    s, f = result["seconds"], result["frames"]
    rows = [
        ("capture", f"{result['seconds_of_capture']:.0f} s, {result['width']}x{result['height']}"),
        ("ours, remux", f"{s['ours_remux']:.2f} s ({f['remux']} frames)"),
        ("ours, re-encode", f"{s['ours_reencode']:.2f} s ({f['reencode']} frames)"),
        ("bare PyAV encode", f"{s['bare_encode']:.2f} s ({f['bare']} frames)"),
        ("ratio vs bare encode", f"{result['ratio_vs_bare_encode']:.3f} (target <= 1.1)"),
    ]
    if "lerobot" in s:
        rows += [
            ("lerobot create/add_frame/save", f"{s['lerobot']:.1f} s ({f['lerobot']} frames)"),
            ("speedup vs lerobot", f"{result['speedup_vs_lerobot']:.1f} (target >= 20)"),
            ("remux speedup vs lerobot", f"{result['remux_speedup_vs_lerobot']:.1f} (>= 200)"),
        ]
    else:
        rows.append(("lerobot", "skipped: no lerobot venv (make lerobot-env)"))
    c = result["cpu_seconds"]
    rows.append(
        (
            "CPU s: remux / re-encode / bare",
            f"{c['ours_remux']:.2f} / {c['ours_reencode']:.2f} / {c['bare_encode']:.2f}",
        )
    )
    if "cpu_speedup_vs_lerobot" in result:
        cs = result["cpu_speedup_vs_lerobot"]
        rows.append(("lerobot CPU s", f"{c['lerobot']:.1f}"))
        rows.append(
            ("per CPU s vs lerobot", f"re-encode {cs['reencode']:.1f}, remux {cs['remux']:.1f}")
        )
    rows.append(
        (
            f"best of {result['repeat']} (lerobot once)",
            f"machine load (1 min) {result['load_average_1min']:.1f}",
        )
    )
    return name_value_table(rows)


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = ("--seconds", "1", "--width", "64", "--height", "48", "--repeat", "1")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ceres", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--seconds", type=float, default=300.0, help="capture length, s")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--lerobot-python", type=Path, default=LEROBOT_PYTHON)
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of ours and bare PyAV (best of); lerobot once"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run(args.seconds, args.width, args.height, args.lerobot_python, args.repeat)
    report(_table(result), result, args.json)
    return 0
