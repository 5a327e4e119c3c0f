"""Benchmark: import EgoDex-layout episodes (land + canonical trajectory) on one core.

``python -m bench import [--json FILE] [--episodes 1000] [--seconds 10] [--distinct 4]
[--hd-episodes 5]``

Writes ``--distinct`` EgoDex-layout episodes (``ego_assets.synth.egodex``: 68 joints +
camera, confidences, a 640x360 H.264 video at 30 fps; not timed) and links them to
``--episodes`` source episodes. Then, episode by episode and interleaved (so a change in
the machine's load hits both alike), on one pinned core:

* **floor**: read exactly the datasets the importer reads (``transforms/camera`` and the
  68 joints, the 68 ``confidences/*``, by the reader's own name list; ``camera/intrinsic``,
  the root attributes) with the same low-level h5py read the reader uses, as stored
  (float32, no checks), and copy the two files (``shutil.copyfile``, in-kernel);
* **import + trajectory**: what the platform does for an imported episode up to its
  stored canonical trajectory, the three steps one after the other in this process:

  - *land* (`ego_assets.importers.core.land_episode`, the import command or sensor):
    copy and hash the files, write the provenance and the marker, read the episode into
    the canonical trajectory (the EgoDex reader: checks, quaternions, streams, video
    probe), publish it in the landing zone;
  - *raw* (`ego_assets.pipeline.ingest_raw`, the ``raw_capture`` asset): check the files
    against the marker's digests while copying them to ``raw/<key>/capture/``, manifest;
  - *trajectory* (`ego_assets.pipeline.normalize`, the ``trajectory`` asset): read the raw
    copy with the EgoDex reader again and write the store (``trajectory/<key>/``:
    ``streams.parquet``, ``capture.json``, ``lineage.json``).

  Dagster's own cost per run (the asset steps, the event log) is not in it: that is
  the orchestration's, the same for every capture kind (``python -m bench orchestration``).

Outputs are deleted between episodes (not timed). ``ratio_vs_read_floor`` is import +
trajectory / floor in process CPU time (the machine is shared: wall time is reported
beside it); ``land_ratio_vs_read_floor`` is the land step's alone (what this bench
timed before it covered the raw copy and the trajectory);
``episodes_per_core_hour`` follows from the import's CPU time per episode (what a
dedicated core does; ``episodes_per_hour_wall`` is the wall-time rate at the load of
the run). The same is
measured for ``--hd-episodes`` episodes with a 1920x1080 video (the published size).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from bench import name_value_table, report
from ego_assets import pipeline
from ego_assets.capture.egodex import JOINTS
from ego_assets.importers import get_importer
from ego_assets.importers.core import land_episode, open_source
from ego_assets.storage import Storage
from ego_assets.synth.egodex import write_egodex_episode

TARGET_RATIO = 1.3
EGODEX_EPISODES = 338_000
FPS = 30
TASK = "train/bench_task"
FLOAT32 = h5py.h5t.py_create(np.dtype(np.float32))


def _floor(hdf5: Path, video: Path, out: Path) -> None:
    """Read what the importer reads from the HDF5 file, the datasets it names, with the
    same low-level HDF5 read, into float32 arrays as stored (no checks, no conversion);
    copy both files."""
    with h5py.File(hdf5, "r") as f:
        for group, names in (("transforms", ("camera", *JOINTS)), ("confidences", JOINTS)):
            gid = f[group].id
            stack = np.empty(0, np.float32)
            for i, name in enumerate(names):
                dsid = h5py.h5d.open(gid, name.encode())
                if i == 0:
                    stack = np.empty((len(names), *dsid.shape), np.float32)
                dsid.read(h5py.h5s.ALL, h5py.h5s.ALL, stack[i], FLOAT32)
        f["camera"]["intrinsic"][()]
        {k: f.attrs[k] for k in f.attrs}
    shutil.copyfile(hdf5, out / hdf5.name)
    shutil.copyfile(video, out / video.name)


def _run(root: Path, n: int, size: tuple[int, int], frames: int, distinct: int) -> dict[str, Any]:
    """Time floor and import over ``n`` episodes of ``frames`` frames at ``size``."""
    src = root / f"src-{size[1]}p"
    made = [write_egodex_episode(src / "made", i, frames=frames, seed=i, size=size)
            for i in range(distinct)]  # fmt: skip
    for i in range(n):
        hdf5, video = made[i % distinct]
        (src / TASK).mkdir(parents=True, exist_ok=True)
        os.link(hdf5, src / TASK / f"{i}.hdf5")
        os.link(video, src / TASK / f"{i}.mp4")
    importer = get_importer("egodex")
    source = open_source(str(src), importer)
    storage = Storage(root / "data")
    floor_out = root / "floor"
    wall = {"floor": 0.0, "import": 0.0}
    cpu = {"floor": 0.0, "import": 0.0, "land": 0.0, "raw": 0.0, "trajectory": 0.0}
    for i in range(n):
        rel = f"{TASK}/{i}.hdf5"
        floor_out.mkdir(exist_ok=True)
        w0, c0 = time.perf_counter(), time.process_time()
        _floor(src / rel, src / TASK / f"{i}.mp4", floor_out)
        w1, c1 = time.perf_counter(), time.process_time()
        landed = land_episode(storage, importer, source, importer.episode(source, rel))
        c2 = time.process_time()
        raw = pipeline.ingest_raw(storage, landed.key)
        c3 = time.process_time()
        stored = pipeline.normalize(storage, landed.key)
        w4, c4 = time.perf_counter(), time.process_time()
        assert landed.status == "landed" and landed.trajectory is not None
        assert not raw.reused and not stored.reused
        wall["floor"] += w1 - w0
        wall["import"] += w4 - w1
        cpu["floor"] += c1 - c0
        cpu["import"] += c4 - c1
        cpu["land"] += c2 - c1
        cpu["raw"] += c3 - c2
        cpu["trajectory"] += c4 - c3
        shutil.rmtree(floor_out)
        shutil.rmtree(Path(storage.landing_path(landed.key).path))
        for stage in ("raw", "trajectory"):
            shutil.rmtree(storage.stage_path(stage, landed.key))
    bytes_per_episode = sum(p.stat().st_size for p in made[0])
    return {
        "episodes": n,
        "frames_per_episode": frames,
        "video": f"{size[0]}x{size[1]}",
        "bytes_per_episode": bytes_per_episode,
        "floor_wall_s": wall["floor"],
        "import_wall_s": wall["import"],
        "floor_cpu_s": cpu["floor"],
        "import_cpu_s": cpu["import"],
        "floor_ms_per_episode": 1e3 * wall["floor"] / n,
        "import_ms_per_episode": 1e3 * wall["import"] / n,
        "ratio_vs_read_floor": cpu["import"] / cpu["floor"],
        "ratio_vs_read_floor_wall": wall["import"] / wall["floor"],
        "floor_cpu_ms_per_episode": 1e3 * cpu["floor"] / n,
        "import_cpu_ms_per_episode": 1e3 * cpu["import"] / n,
        "land_cpu_ms_per_episode": 1e3 * cpu["land"] / n,
        "raw_cpu_ms_per_episode": 1e3 * cpu["raw"] / n,
        "trajectory_cpu_ms_per_episode": 1e3 * cpu["trajectory"] / n,
        "land_ratio_vs_read_floor": cpu["land"] / cpu["floor"],
    }


def run(episodes: int, seconds: float, distinct: int, hd_episodes: int) -> dict[str, Any]:
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    frames = max(1, round(seconds * FPS))
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        main = _run(Path(tmp) / "sd", episodes, (640, 360), frames, min(distinct, episodes))
        hd = _run(Path(tmp) / "hd", hd_episodes, (1920, 1080), frames, 1) if hd_episodes else None
    cpu_per_episode_s = main["import_cpu_s"] / episodes
    result: dict[str, Any] = {
        **main,
        "episode_seconds": seconds,
        "episodes_per_core_hour": 3600.0 / cpu_per_episode_s,
        "egodex_core_hours": EGODEX_EPISODES * cpu_per_episode_s / 3600.0,
        "episodes_per_hour_wall": 3600.0 * episodes / main["import_wall_s"],
        "target_ratio": TARGET_RATIO,
        "meets_target": main["ratio_vs_read_floor"] <= TARGET_RATIO,
        "pinned_core": core,
        "load_average_1min_before": load_before,
        "load_average_1min_after": os.getloadavg()[0],
    }
    if hd is not None:
        result["hd_1080p"] = {k: hd[k] for k in hd if k not in ("frames_per_episode",)}
    return result


def _table(r: dict[str, Any]) -> str:
    rows = [
        ("episodes", f"{r['episodes']} x {r['episode_seconds']:g} s, video {r['video']}"),
        ("floor: h5py read + copy, ms/episode", f"{r['floor_ms_per_episode']:.1f}"),
        ("import + trajectory, ms/episode", f"{r['import_ms_per_episode']:.1f}"),
        ("CPU ms/episode: floor, import + trajectory",
         f"{r['floor_cpu_ms_per_episode']:.1f}, {r['import_cpu_ms_per_episode']:.1f}"),
        ("CPU ms/episode: land, raw copy, trajectory",
         f"{r['land_cpu_ms_per_episode']:.1f}, {r['raw_cpu_ms_per_episode']:.1f}, "
         f"{r['trajectory_cpu_ms_per_episode']:.1f}"),
        ("land alone vs floor (CPU time)", f"{r['land_ratio_vs_read_floor']:.2f}"),
        ("ratio vs floor (CPU time)", f"{r['ratio_vs_read_floor']:.2f} (target <= {TARGET_RATIO})"),
        ("ratio vs floor (wall time)", f"{r['ratio_vs_read_floor_wall']:.2f}"),
        ("episodes per core-hour (CPU time)", f"{r['episodes_per_core_hour']:.0f}"),
        ("episodes per hour (wall, this load)", f"{r['episodes_per_hour_wall']:.0f}"),
        ("338k EgoDex episodes", f"{r['egodex_core_hours']:.1f} core-hours"),
        ("load average (1 min) before / after",
         f"{r['load_average_1min_before']:.1f} / {r['load_average_1min_after']:.1f}"),
    ]  # fmt: skip
    if "hd_1080p" in r:
        hd = r["hd_1080p"]
        rows.append(
            (
                f"1080p: import / floor ms/episode ({hd['episodes']} episodes)",
                f"{hd['import_ms_per_episode']:.1f} / {hd['floor_ms_per_episode']:.1f} "
                f"(CPU ratio {hd['ratio_vs_read_floor']:.2f})",
            )
        )
    return name_value_table(rows)


SMOKE_ARGS = ("--episodes", "2", "--seconds", "1", "--distinct", "1", "--hd-episodes", "0")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench import", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--episodes", type=int, default=1000, help="episodes imported")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per episode")
    parser.add_argument("--distinct", type=int, default=4, help="distinct episodes written")
    parser.add_argument("--hd-episodes", type=int, default=5, help="1080p episodes (0: none)")
    args = parser.parse_args(argv)
    if min(args.episodes, args.distinct) < 1 or args.seconds <= 0 or args.hd_episodes < 0:
        parser.error("--episodes, --distinct >= 1, --seconds > 0, --hd-episodes >= 0")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run(args.episodes, args.seconds, args.distinct, args.hd_episodes)
    report(_table(result), result, args.json)
    return 0 if result["meets_target"] else 1
