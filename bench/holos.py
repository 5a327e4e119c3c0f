"""Benchmark: Holos HDF5 export of a 10-minute Vision Pro capture, against plain h5py.

``python -m bench holos [--json FILE] [--seconds 600] [--windows 300]``

Writes the synthetic Vision Pro package of ``bench normalize`` (hands 90 Hz, head 60 Hz,
CSV only: no video), reads it into the canonical model once, then side by side in one
run, the two writers taking turns (best of three each, wall clock; CPU seconds of the
process are reported too, steadier when other work shares the cores):

* **export**: `write_file` from the in-memory trajectory (resampling, scales,
  attributes, raw streams, everything the format writes);
* **plain h5py**: the same arrays (every numeric and opaque dataset of the exported
  file, read back into memory first) written with ``create_dataset`` using the same
  chunks and filters, nothing else. ``ratio_vs_plain_h5py`` = export / plain (target
  at most 1.3).
* **window reads**: random 16-sample windows over every ``obs`` key, in the export and
  in a copy of ``obs`` chunked time-major ``(128, ...)`` with the same filters.
  ``window_read_ratio`` = export / copy, mean seconds per window (target at most 1.0).

MB/s are array bytes (uncompressed) per second.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from bench import name_value_table, report
from bench.normalize import write_visionpro_capture
from ego_assets.capture import read_capture
from ego_assets.formats.holos_hdf5 import read_opaque, write_file
from ego_assets.formats.holos_writer import DEMO

TARGET_RATIO = 1.3
WINDOW = 16
BASELINE_ROWS = 128
REPEATS = 3


def _arrays(path: Path) -> list[tuple[str, np.ndarray, dict[str, Any]]]:
    """(name, values, create_dataset options) of every numeric or opaque dataset."""
    out: list[tuple[str, np.ndarray, dict[str, Any]]] = []

    def visit(name: str, obj: Any) -> None:
        if not isinstance(obj, h5py.Dataset) or obj.is_virtual or obj.dtype.names:
            return
        klass = obj.id.get_type().get_class()
        if klass == h5py.h5t.OPAQUE:
            values = np.frombuffer(read_opaque(obj)[1], dtype=np.uint8)
        elif klass in (h5py.h5t.FLOAT, h5py.h5t.INTEGER) and obj.shape and obj.size:
            values = obj[...]
        else:
            return
        options: dict[str, Any] = {}
        if obj.chunks:
            options = {
                "chunks": obj.chunks,
                "compression": obj.compression,
                "compression_opts": obj.compression_opts,
                "shuffle": obj.shuffle,
                "fletcher32": obj.fletcher32,
            }
        out.append((name, values, options))

    with h5py.File(path) as f:
        f.visititems(visit)
    return out


def _plain_write(arrays: list[tuple[str, np.ndarray, dict[str, Any]]], path: Path) -> None:
    with h5py.File(path, "w") as f:
        for name, values, options in arrays:
            f.create_dataset(name, data=values, **options)


def _timed(write: Any) -> tuple[float, float]:
    """(wall, process CPU) seconds of ``write()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    write()
    return time.perf_counter() - wall, time.process_time() - cpu


def _baseline_obs(path: Path, out: Path) -> None:
    """``obs`` of ``path`` rechunked time-major ``(128, ...)``, same filters."""
    with h5py.File(path) as src, h5py.File(out, "w") as dst:
        for name, ds in src[f"{DEMO}/obs"].items():
            if ds.dtype.kind not in "fi":
                continue
            chunks = (min(BASELINE_ROWS, ds.shape[0]), *ds.shape[1:])
            dst.create_dataset(
                name,
                data=ds[...],
                chunks=chunks,
                compression="gzip",
                compression_opts=ds.compression_opts or 4,
                shuffle=True,
                fletcher32=True,
            )


def _window_seconds(ours: Path, baseline: Path, starts: np.ndarray) -> tuple[float, float]:
    """Seconds to read one 16-sample window of every numeric obs key (sum over keys of the
    mean per key; a median would count only chunk-cache hits), export and copy, key by key."""
    total = [0.0, 0.0]
    with h5py.File(ours) as a, h5py.File(baseline) as b:
        obs = a[f"{DEMO}/obs"]
        for name in b:
            for which, ds in enumerate((obs[name], b[name])):
                times = []
                for start in starts:
                    t0 = time.perf_counter()
                    ds[start : start + WINDOW]
                    times.append(time.perf_counter() - t0)
                total[which] += float(np.mean(times))
    return total[0], total[1]


def run(seconds: float, windows: int, work: Path) -> dict[str, Any]:
    capture = write_visionpro_capture(work / "capture", seconds)
    trajectory = read_capture("bench", capture)
    export = work / "export.h5"
    notes = write_file(trajectory, capture, export)  # warm-up; gives the arrays to copy
    arrays = _arrays(export)
    array_bytes = sum(a.nbytes for _, a, _ in arrays)
    export_runs, plain_runs = [], []
    for _ in range(REPEATS):  # taking turns: both see the same load from other work
        export_runs.append(_timed(lambda: write_file(trajectory, capture, export)))
        plain_runs.append(_timed(lambda: _plain_write(arrays, work / "plain.h5")))
    _baseline_obs(export, work / "obs128.h5")
    rng = np.random.default_rng(0)
    starts = rng.integers(0, max(1, notes.samples - WINDOW), size=windows)
    ours, baseline = _window_seconds(export, work / "obs128.h5", starts)
    best_export, best_plain = min(r[0] for r in export_runs), min(r[0] for r in plain_runs)
    cpu_export, cpu_plain = min(r[1] for r in export_runs), min(r[1] for r in plain_runs)
    return {
        "capture_seconds": seconds,
        "demo_samples": notes.samples,
        "array_mb": round(array_bytes / 1e6, 1),
        "file_mb": round(export.stat().st_size / 1e6, 1),
        "export_s": round(best_export, 3),
        "plain_h5py_s": round(best_plain, 3),
        "ratio_vs_plain_h5py": round(best_export / best_plain, 3),
        "target_ratio_vs_plain_h5py": TARGET_RATIO,
        "export_mb_per_s": round(array_bytes / 1e6 / best_export, 1),
        "plain_h5py_mb_per_s": round(array_bytes / 1e6 / best_plain, 1),
        "export_cpu_s": round(cpu_export, 3),
        "plain_h5py_cpu_s": round(cpu_plain, 3),
        "cpu_ratio_vs_plain_h5py": round(cpu_export / cpu_plain, 3),
        "export_runs_s": [round(r[0], 3) for r in export_runs],
        "plain_h5py_runs_s": [round(r[0], 3) for r in plain_runs],
        "window_read_ms": round(ours * 1e3, 3),
        "window_read_128_chunks_ms": round(baseline * 1e3, 3),
        "window_read_ratio": round(ours / baseline, 3),
        "windows": windows,
    }


def _table(r: dict[str, Any]) -> str:
    return name_value_table(
        [
            ("capture", f"{r['capture_seconds']:.0f} s Vision Pro, {r['demo_samples']} samples"),
            ("arrays / file", f"{r['array_mb']} MB / {r['file_mb']} MB"),
            ("export", f"{r['export_s']} s  ({r['export_mb_per_s']} MB/s)"),
            (
                "plain h5py, same chunks",
                f"{r['plain_h5py_s']} s  ({r['plain_h5py_mb_per_s']} MB/s)",
            ),
            ("ratio_vs_plain_h5py", f"{r['ratio_vs_plain_h5py']}  (target <= {TARGET_RATIO})"),
            (
                "CPU s, export / plain",
                f"{r['export_cpu_s']} / {r['plain_h5py_cpu_s']}  "
                f"(ratio {r['cpu_ratio_vs_plain_h5py']})",
            ),
            ("16-sample obs window", f"{r['window_read_ms']} ms"),
            ("same, (128, ...) chunks", f"{r['window_read_128_chunks_ms']} ms"),
            ("window_read_ratio", f"{r['window_read_ratio']}  (target <= 1.0)"),
        ]
    )


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = ("--seconds", "2", "--windows", "5")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench holos", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--windows", type=int, default=300)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="bench-holos-") as tmp:
        result = run(args.seconds, args.windows, Path(tmp))
    report(_table(result), result, args.json)
    return 0
