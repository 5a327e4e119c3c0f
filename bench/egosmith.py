"""Benchmark: EgoSmith WebDataset export throughput (frames per second), side by side.

``python -m bench egosmith [--json FILE] [--seconds 20] [--width 1280 --height 720]
[--repeats 3]``

Setup: a synthetic mano-video capture (trajectory, MANO hands, camera) whose video is
re-encoded at ``width x height`` H.264 (a head-camera size; the synthetic clip itself is
320x240). Three ways to turn the same video into per-frame samples, each run in turn per
repeat (same process, same decoded frames, same decoder threads):

* **egosmith**: `write_episode` as the exporter runs it: PyAV decode; two worker threads
  each turn a frame into its finished tar bytes (4:2:0 planes read in place and
  range-stretched into reused buffers, libjpeg-turbo via simplejpeg, lowdim / mano /
  meta, tar headers); the calling thread appends them to the shard and hashes (SHA-256).
* **baseline**: PyAV decode to RGB, PIL JPEG encode per frame, ``webdataset.TarWriter``
  writing the same four members (same arrays, same quality).
* **codec floor**: PyAV decode + the same JPEG encode, writing nothing.

Writes ``speedup_vs_baseline`` (baseline s / egosmith s, target >= 2) and
``ratio_vs_codec_floor`` (egosmith s / floor s, target <= 1.3), medians of wall time over
the repeats, plus the same ratios in CPU time (all threads) and the machine's load
average: on a shared machine wall-time ratios move with other processes' load, CPU
time shows the work each way does per frame.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import webdataset as wds
from PIL import Image

from bench import name_value_table, report
from ego_assets.capture import read_capture
from ego_assets.formats.egosmith_lowdim import episode_arrays, head_camera
from ego_assets.formats.egosmith_webdataset import (
    EgoSmithOptions,
    encode_jpeg,
    episode_meta,
    sample_key,
    write_episode,
)
from ego_assets.synth import synthesize
from ego_assets.trajectory.model import Trajectory

SPEEDUP_TARGET = 2.0
FLOOR_RATIO_TARGET = 1.3


def _upscaled_video(source: Path, out: Path, width: int, height: int) -> int:
    """Re-encode ``source`` at ``width x height`` (H.264, yuv420p); return the frame count."""
    count = 0
    with av.open(str(source)) as inp, av.open(str(out), "w") as outp:
        stream = outp.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "20", "preset": "veryfast"}
        for frame in inp.decode(video=0):
            img = frame.reformat(width=width, height=height, format="yuv420p")
            img.pts = count
            img.time_base = Fraction(1, 30)
            outp.mux(stream.encode(img))
            count += 1
        outp.mux(stream.encode(None))
    return count


def _decode(video: Path) -> Any:
    container = av.open(str(video))
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    return container, container.decode(stream)


def run_egosmith(trajectory: Trajectory, video: Path, out: Path, options: EgoSmithOptions) -> int:
    summary = write_episode(
        trajectory,
        head_camera(trajectory),
        video,
        out,
        episode_index=1,
        data_version="bench",
        options=options,
    )
    return summary.samples


def run_baseline(trajectory: Trajectory, video: Path, out: Path, options: EgoSmithOptions) -> int:
    arrays = episode_arrays(trajectory)
    base = episode_meta(trajectory, "bench", 1, "", arrays)
    container, frames = _decode(video)
    n = 0
    with container, wds.TarWriter(str(out / "baseline.tar")) as sink:
        for i, frame in enumerate(frames):
            buf = io.BytesIO()
            Image.fromarray(frame.to_ndarray(format="rgb24")).save(
                buf, format="JPEG", quality=options.jpeg_quality
            )
            sink.write(
                {
                    "__key__": sample_key("bench", 1, int(arrays.frame_index[i])),
                    "image.jpg": buf.getvalue(),
                    "lowdim.npy": arrays.lowdim[i],
                    "mano.npy": arrays.mano[i],
                    "meta.json": {**base, "presence": int(arrays.presence[i])},
                }
            )
            n += 1
    return n


def run_floor(trajectory: Trajectory, video: Path, out: Path, options: EgoSmithOptions) -> int:
    container, frames = _decode(video)
    with container:
        return sum(1 for frame in frames if encode_jpeg(frame, options.jpeg_quality))


RUNNERS = {"egosmith": run_egosmith, "baseline": run_baseline, "codec_floor": run_floor}


def run(seconds: float, width: int, height: int, repeats: int) -> dict[str, Any]:
    """Set up once, then time every runner ``repeats`` times in turn."""
    options = EgoSmithOptions()
    with tempfile.TemporaryDirectory(prefix="bench-egosmith-") as tmp_name:
        tmp = Path(tmp_name)
        capture = synthesize("mano-video", tmp / "capture", seconds=seconds, seed=0)
        trajectory = read_capture("bench", capture)
        video = tmp / "video.mp4"
        frames = _upscaled_video(capture / "video.mp4", video, width, height)
        times: dict[str, list[float]] = {name: [] for name in RUNNERS}
        cpu: dict[str, list[float]] = {name: [] for name in RUNNERS}
        for repeat in range(repeats):
            for name, runner in RUNNERS.items():
                out = tmp / f"{name}-{repeat}"
                out.mkdir()
                start, start_cpu = time.perf_counter(), time.process_time()
                count = runner(trajectory, video, out, options)
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
                if count != frames:
                    raise RuntimeError(f"{name} wrote {count} of {frames} frames")
        sizes = {
            name: sum(p.stat().st_size for p in (tmp / f"{name}-0").glob("*.tar"))
            for name in ("egosmith", "baseline")
        }
    median = {name: statistics.median(t) for name, t in times.items()}
    cpu_ms = {name: 1e3 * statistics.median(t) / frames for name, t in cpu.items()}
    return {
        "frames": frames,
        "width": width,
        "height": height,
        "repeats": repeats,
        "jpeg_quality": options.jpeg_quality,
        "frames_per_s": {name: round(frames / s, 1) for name, s in median.items()},
        "seconds": {name: [round(x, 3) for x in t] for name, t in times.items()},
        "cpu_ms_per_frame": {name: round(ms, 2) for name, ms in cpu_ms.items()},
        "cpu_speedup_vs_baseline": round(cpu_ms["baseline"] / cpu_ms["egosmith"], 2),
        "cpu_ratio_vs_codec_floor": round(cpu_ms["egosmith"] / cpu_ms["codec_floor"], 3),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "tar_bytes": sizes,
        "speedup_vs_baseline": round(median["baseline"] / median["egosmith"], 2),
        "ratio_vs_codec_floor": round(median["egosmith"] / median["codec_floor"], 3),
        "targets": {
            "speedup_vs_baseline": SPEEDUP_TARGET,
            "ratio_vs_codec_floor": FLOOR_RATIO_TARGET,
        },
    }


def _table(result: dict[str, Any]) -> str:
    fps = result["frames_per_s"]
    cpu = result["cpu_ms_per_frame"].values()
    rows = [
        ("video", f"{result['frames']} frames, {result['width']}x{result['height']}"),
        ("egosmith writer", f"{fps['egosmith']:.0f} frames/s"),
        ("baseline (TarWriter + PIL)", f"{fps['baseline']:.0f} frames/s"),
        ("codec floor (decode + JPEG)", f"{fps['codec_floor']:.0f} frames/s"),
        ("speedup vs baseline", f"{result['speedup_vs_baseline']:.2f} (target >= 2)"),
        ("ratio vs codec floor", f"{result['ratio_vs_codec_floor']:.3f} (target <= 1.3)"),
        ("CPU ms per frame (egosmith, baseline, floor)", " / ".join(f"{v:.2f}" for v in cpu)),
        ("CPU speedup vs baseline", f"{result['cpu_speedup_vs_baseline']:.2f}"),
        ("CPU ratio vs codec floor", f"{result['cpu_ratio_vs_codec_floor']:.3f}"),
        ("machine load (1 min)", f"{result['load_average_1min']:.1f} on {os.cpu_count()} cores"),
    ]
    return name_value_table(rows)


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = ("--seconds", "1", "--width", "64", "--height", "48", "--repeats", "1")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench egosmith", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--seconds", type=float, default=20.0, help="clip length, s")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run(args.seconds, args.width, args.height, args.repeats)
    report(_table(result), result, args.json)
    return 0
