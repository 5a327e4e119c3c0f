"""Benchmark: every capture kind through the whole per-capture chain, beside each step's floor.

``python -m bench chain [--json FILE] [--n 2] [--seconds 10] [--kinds K,...]
[--head-size 1920x1080] [--baseline-tree DIR] [--profile DIR]``

For each source kind the demo makes (``holos-visionpro``, ``holos-iphone``, ``webxr``,
``mano-video`` with its head camera re-encoded at ``--head-size``, ``aria``: the real
Aria MPS sample the demo lands, ``egodex``: an EgoDex-layout episode imported), ``--n``
captures of ``--seconds`` s are synthesized (``ego_assets.synth``, not timed) and taken,
in this process pinned to one core, through the library functions the Dagster steps
call (no Dagster): ``land`` (EgoDex only: `land_episode`, the import), ``raw``
(`pipeline.ingest_raw`), ``trajectory`` (`pipeline.normalize`), ``quality``
(`pipeline.assess_quality`: report, timeline PNG, GX checks, gate; the Rerun recording is
built on demand by ``ego-assets view``, not by the step) and
the three exports (`run_export`: ``holos``, ``egosmith``, ``ceres``). One short capture
of every kind goes through first, untimed (lazy imports, the GX context), after the GX
context is built and what is loaded frozen, as a warm run parent does before it forks a
run's worker.

Right after each step, on the same bytes, its floor (the least work its output needs,
with the plain libraries; inputs read into memory untimed):

* ``land`` / ``raw``: ``shutil.copyfile`` of every file (in-kernel, as ``cp``) + one
  SHA-256 of its bytes;
* ``trajectory``: parsing the source files with pyarrow / h5py / numpy alone (CSV with
  ``pyarrow.csv``, JSON lines as one ``json.loads`` (their
  values change type, which ``pyarrow.json`` refuses), ``.npz`` with numpy, HDF5 every
  dataset with h5py's low-level open and read, JSON with ``json``, a video's container
  header with PyAV) + writing
  the stored trajectory's arrays once, as one Parquet file (one list column per array)
  with the store's compression and encodings;
* ``quality``: the metrics' numpy reductions alone (per stream: intervals, gaps,
  duplicates, non-finite values, quaternion norms, validity; per hand: wrist speed and
  bone-length spread), no report objects, GX, PNG or recording;
* ``holos``: plain h5py writing every numeric and opaque dataset of the exported file
  with the same chunks and filters (`bench.holos`);
* ``egosmith``: decoding the video up to the last sampled frame, JPEG-encoding the
  sampled frames (simplejpeg, YUV planes, the export's quality) + writing the tar of
  the exported members with ``tarfile``;
* ``ceres``: a packet copy of the camera video into mp4 (when the export remuxed) or a
  bare decode + encode with the export's encoder settings (when it re-encoded;
  `bench.ceres.bare_encode`) + one Parquet write of the shard's data table.

Figures are process CPU time (``time.process_time``: every thread of this process; the
steps start no child processes), wall time beside them. Per kind and step: CPU ms per
capture, floor ms, ratio; per kind: the chain's real-time factor per core (seconds of
capture per CPU second of all its steps) and ``ratio_vs_floors`` (chain CPU / the sum of
its floors). ``--baseline-tree DIR`` runs the same bench in child processes (same core)
for this tree and for ``DIR`` (another checkout's ``ego_assets``), kind by kind in turn,
and reports both. ``--profile DIR`` runs the chain once more under cProfile per kind and
writes its top entries to ``DIR/chain-profile-<kind>.txt``.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import logging
import os
import pstats
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench import name_value_table, report

REPO = Path(__file__).resolve().parents[1]
KINDS = ("holos-visionpro", "holos-iphone", "webxr", "mano-video", "aria", "egodex")
SYNTH_KINDS = ("holos-visionpro", "holos-iphone", "webxr", "mano-video")
STEPS = ("land", "raw", "trajectory", "quality", "holos", "egosmith", "ceres")
EXPORT_STEPS = ("holos", "egosmith", "ceres")
WARM_SECONDS = 2.0
EGODEX_SIZE = (640, 360)
ARIA_SAMPLE = "aria_mps_hand_tracking"  # ego_assets/recordings/, the demo's Aria capture
EGODEX_TASK = "train/bench_task"
TARGETS = {
    "realtime_factor": {"holos-visionpro": 20, "holos-iphone": 20, "webxr": 20, "mano-video": 5},
    "ratio_vs_floors": 1.5,
    "step_ratio": 2.0,
    "import_ratio_vs_floor": 2.0,
}
PROFILE_TOP = 40
SMOKE_ARGS = ("--n", "1", "--seconds", "2", "--head-size", "64x48")

log = logging.getLogger("bench")


@contextmanager
def _timed(into: dict[str, float]) -> Iterator[None]:
    """Add this block's process CPU and wall seconds to ``into['cpu']`` / ``into['wall']``."""
    cpu, wall = time.process_time(), time.perf_counter()
    yield
    into["cpu"] = into.get("cpu", 0.0) + time.process_time() - cpu
    into["wall"] = into.get("wall", 0.0) + time.perf_counter() - wall


# ---------------------------------------------------------------------------------------
# staging (not timed)


def _head_video(folder: Path, size: tuple[int, int]) -> None:
    """Re-encode a mano-video capture's ``video.mp4`` at ``size``; write its marker again."""
    from bench.egosmith import _upscaled_video
    from ego_assets.capture.manifest import write_marker

    video = folder / "video.mp4"
    scaled = folder.parent / f".{folder.name}.mp4"
    _upscaled_video(video, scaled, *size)
    scaled.replace(video)
    (folder / "ego_capture.json").unlink()
    write_marker(folder, "mano_video")


def _stage_capture(
    kind: str, landing: Path, key: str, seconds: float, seed: int, head_size: tuple[int, int]
) -> None:
    """One capture of ``kind`` at ``landing/key`` (synthetic, or the Aria sample)."""
    from ego_assets.capture.manifest import write_marker
    from ego_assets.fixtures import real_fixture

    staging = landing / f".{key}.staging"
    if kind == "aria":
        shutil.copytree(real_fixture(ARIA_SAMPLE), staging)
        write_marker(staging, "aria_mps")
    else:
        from ego_assets.synth import synthesize

        synthesize(kind, staging, seconds=seconds, seed=seed, capture_id=key)
        if kind == "mano-video":
            _head_video(staging, head_size)
    staging.rename(landing / key)


def _stage_egodex(source: Path, i: int, seconds: float, prefix: str) -> str:
    """One EgoDex-layout episode ``<task>/<i>.hdf5`` (+ mp4) below ``source``; its rel path."""
    from ego_assets.synth.egodex import write_egodex_episode

    task = source / EGODEX_TASK
    task.mkdir(parents=True, exist_ok=True)
    made = write_egodex_episode(
        source / "made", i, frames=max(1, round(seconds * 30)), seed=i, size=EGODEX_SIZE
    )
    for path in made:
        path.replace(task / f"{prefix}-{i}{path.suffix}")
    return f"{EGODEX_TASK}/{prefix}-{i}.hdf5"


# ---------------------------------------------------------------------------------------
# floors


def copy_floor(files: list[Path], out: Path) -> None:
    """``cp`` of every file into ``out`` + one SHA-256 of its bytes."""
    out.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(files):
        shutil.copyfile(path, out / f"{i}{path.suffix}")
        with path.open("rb") as f:
            hashlib.file_digest(f, "sha256")


def _parse_file(path: Path) -> None:
    """Parse one source file with the plain library for its type."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        import pyarrow.csv as pacsv

        pacsv.read_csv(path)
    elif suffix == ".jsonl":  # mixed types per key (pyarrow.json refuses): one json.loads
        json.loads(b"[" + b",".join(path.read_bytes().split()) + b"]")
    elif suffix == ".json":
        json.loads(path.read_bytes())
    elif suffix == ".npz":
        with np.load(path) as z:
            for name in z.files:
                z[name]
    elif suffix in (".hdf5", ".h5"):
        import h5py

        with h5py.File(path, "r") as f:
            h5py.h5o.visit(f.id, lambda name, info: _read_dataset(f, name, info), info=True)
    elif suffix in (".mp4", ".mov"):
        import av

        with av.open(str(path)) as container:
            container.streams.video[0].frames  # noqa: B018 (the header's frame count)


def _read_dataset(f: Any, name: bytes, info: Any) -> None:
    """Read the object ``name`` of the open h5py file ``f`` when it is a dataset: numbers
    with h5py's low-level open and read (a high-level ``Dataset`` costs about twice as
    much), anything else with ``f[name][()]``. Returns None (`h5py.h5o.visit` stops at
    the first callback that returns something else)."""
    import h5py

    if info.type != h5py.h5o.TYPE_DATASET:
        return
    dataset = h5py.h5d.open(f.id, name)
    if dataset.dtype.kind in "biuf":
        dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, np.empty(dataset.shape, dataset.dtype))
    else:
        f[name][()]


def uncached_trajectory(folder: Path) -> Any:
    """The stored trajectory in ``folder``, read without filling (or using) the store's
    read cache, which would hand the next step a read the floors' setup paid for."""
    from ego_assets.trajectory import store

    return getattr(store, "_read_trajectory", store.read_trajectory)(folder)


def trajectory_arrays(folder: Path) -> list[tuple[str, np.ndarray]]:
    """Every array of the stored trajectory in ``folder`` (timestamps, times, flags,
    fields), named ``<stream>/<array>``."""
    out = []
    for stream in uncached_trajectory(folder).streams:
        out += [
            (f"{stream.name}/timestamp_ns", stream.timestamp_ns),
            (f"{stream.name}/time", stream.time),
            (f"{stream.name}/flags", stream.flags),
        ]
        out += [(f"{stream.name}/{name}", values) for name, values in stream.fields.items()]
    return out


def parquet_floor(arrays: list[tuple[str, np.ndarray]], path: Path) -> None:
    """The arrays once, as one Parquet file: one row, one list column per array, with the
    store's compression, no statistics and byte-stream-split floats."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ego_assets.trajectory.store import PARQUET_OPTIONS

    columns, floats = [], []
    for name, values in arrays:
        if values.dtype == object:
            flat: pa.Array = pa.array(values.astype(str).tolist(), type=pa.string())
        else:
            flat = pa.array(np.ascontiguousarray(values).reshape(-1))
        columns.append(pa.ListArray.from_arrays(pa.array([0, len(flat)], pa.int32()), flat))
        if pa.types.is_floating(flat.type):
            floats.append(f"{name}.list.element")
    table = pa.Table.from_arrays(columns, names=[name for name, _ in arrays])
    pq.write_table(
        table, path, write_statistics=False, use_byte_stream_split=floats, **PARQUET_OPTIONS
    )


def trajectory_floor(files: list[Path], arrays: list[tuple[str, np.ndarray]], out: Path) -> None:
    """Parse the source ``files``; write ``arrays`` once as one Parquet file."""
    for path in files:
        _parse_file(path)
    parquet_floor(arrays, out / "trajectory.parquet")


def quality_floor(streams: tuple[Any, ...]) -> float:
    """The quality metrics' numpy reductions over ``streams`` (a sum, so nothing is skipped)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices of untracked joints
        return _reductions(streams)


def _reductions(streams: tuple[Any, ...]) -> float:
    total = 0.0
    for s in streams:
        dt = np.diff(s.timestamp_ns) / 1e9
        positive = dt[dt > 0]
        if positive.size:
            median = float(np.median(positive))
            total += median + float(positive.std() / positive.mean())
            total += int((dt > 3 * median).sum()) + int((dt == 0).sum())
        total += float(s.flags.mean()) if len(s) else 0.0
        for name, values in s.fields.items():
            if values.dtype.kind == "f":
                total += int((~np.isfinite(values)).sum())
                if name in ("rotation", "wrist_rotation"):
                    total += float(np.abs(np.linalg.norm(values, axis=-1) - 1.0).max(initial=0))
            elif values.dtype == np.bool_:
                total += float(values.mean()) if values.size else 0.0
        position = s.fields.get("position")
        if position is not None and position.ndim == 3 and len(position) > 1:
            speed = np.linalg.norm(np.diff(position[:, 0], axis=0), axis=-1) / np.maximum(dt, 1e-9)
            bones = np.linalg.norm(position[:, 1:] - position[:, :-1], axis=-1)
            total += float(np.nanmax(speed)) + float(
                np.nanmean(np.nanstd(bones, 0) / np.nanmean(bones, 0))
            )
    return total


def holos_floor(arrays: list[tuple[str, np.ndarray, dict[str, Any]]], out: Path) -> None:
    """Plain h5py: the same datasets, chunks and filters."""
    from bench.holos import _plain_write

    _plain_write(arrays, out / "plain.h5")


def egosmith_floor(
    video: Path, frames: set[int], quality: int, members: list[tuple[str, bytes]], out: Path
) -> int:
    """Decode ``video`` up to the last of ``frames``, JPEG-encode those frames (YUV
    planes), write ``members`` (the exported tar's, images replaced) with tarfile."""
    import av
    import simplejpeg

    images = []
    last = max(frames, default=-1)
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for i, frame in enumerate(container.decode(stream)):
            if i > last:
                break
            if i in frames:
                yuv = frame.to_ndarray(format="yuv420p")
                h, w = frame.height, frame.width
                u = yuv[h : h + h // 4].reshape(h // 2, w // 2)
                v = yuv[h + h // 4 :].reshape(h // 2, w // 2)
                images.append(simplejpeg.encode_jpeg_yuv_planes(yuv[:h], u, v, quality=quality))
    jpegs = iter(images)
    with tarfile.open(out / "floor.tar", "w") as tar:
        for name, data in members:
            if name.endswith(".jpg"):
                data = bytes(next(jpegs, data))
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return len(images)


def remux_floor(src: Path, dst: Path) -> None:
    """Copy the video packets of ``src`` into the mp4 ``dst`` (no decode)."""
    import av

    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4") as outp:
        istream = inp.streams.video[0]
        ostream = outp.add_stream_from_template(istream)
        for packet in inp.demux(istream):
            if packet.dts is None:
                continue
            packet.stream = ostream
            outp.mux(packet)


def ceres_floor(
    src: Path, mode: str, frame_for_row: np.ndarray | None, fps: int, table: Any, out: Path
) -> None:
    """The shard's video (packet copy or bare encode) + one Parquet write of its rows."""
    import pyarrow.parquet as pq

    from bench.ceres import bare_encode

    if mode == "remux":
        remux_floor(src, out / "floor.mp4")
    elif mode == "re-encode" and frame_for_row is not None:
        bare_encode(src, out / "floor.mp4", frame_for_row, fps)
    pq.write_table(table, out / "floor.parquet", compression="snappy", use_dictionary=False)


# ---------------------------------------------------------------------------------------
# the chain


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


class Chain:
    """The per-capture steps and their floors over one data root (`Storage`)."""

    def __init__(self, root: Path) -> None:
        from ego_assets.exports.registry import formats
        from ego_assets.storage import Storage

        self.root = root
        self.storage = Storage(str(root / "data"))
        self.exporters = {f.name: f.exporter_class()() for f in formats()}
        self.work = root / "floors"

    def _scratch(self) -> Path:
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        return self.work

    def stage(
        self, kind: str, n: int, seconds: float, head_size: tuple[int, int], prefix: str
    ) -> list[str]:
        """``n`` captures of ``kind`` staged (landing zone; EgoDex: the import source)."""
        landing = Path(self.storage.landing.path)
        landing.mkdir(parents=True, exist_ok=True)
        keys = []
        for i in range(n):
            if kind == "egodex":
                keys.append(_stage_egodex(self.root / f"{prefix}-egodex", i, seconds, prefix))
            else:
                key = f"{prefix}-{kind}-{i}"
                _stage_capture(kind, landing, key, seconds, i, head_size)
                keys.append(key)
        return keys

    def run(self, kind: str, item: str, prefix: str, floors: bool = True) -> dict[str, Any]:
        """One capture through every step (and each step's floor); figures per step."""
        from ego_assets import pipeline

        steps: dict[str, dict[str, float]] = {}
        floor: dict[str, dict[str, float]] = {}
        if kind == "egodex":
            key, files = self._land(item, prefix, steps)
            if floors:
                with _timed(floor.setdefault("land", {})):
                    copy_floor(files, self._scratch())
        else:
            key = item
        landing = Path(self.storage.landing_path(key).path)
        files = _files(landing)
        with _timed(steps.setdefault("raw", {})):
            pipeline.ingest_raw(self.storage, key)
        if floors:
            with _timed(floor.setdefault("raw", {})):
                copy_floor(files, self._scratch())
        with _timed(steps.setdefault("trajectory", {})):
            duration = float(pipeline.normalize(self.storage, key).figures["duration_s"])
        traj_dir = Path(self.storage.stage_path("trajectory", key).path)
        if floors:
            arrays = trajectory_arrays(traj_dir)
            with _timed(floor.setdefault("trajectory", {})):
                trajectory_floor(files, arrays, self._scratch())
        if kind == "aria":
            self._waive(key)
        with _timed(steps.setdefault("quality", {})):
            gate = pipeline.assess_quality(self.storage, key).figures["gate"]
        if floors:
            streams = uncached_trajectory(traj_dir).streams
            with _timed(floor.setdefault("quality", {})):
                quality_floor(streams)
        exported = self._exports(key, steps, floor if floors else None)
        return {
            "key": key,
            "capture_s": duration,
            "gate": gate,
            "steps": steps,
            "floors": floor,
            "exported": exported,
        }

    def _land(
        self, rel: str, prefix: str, steps: dict[str, dict[str, float]]
    ) -> tuple[str, list[Path]]:
        from ego_assets.importers import get_importer
        from ego_assets.importers.core import land_episode, open_source

        importer = get_importer("egodex")
        source_dir = self.root / f"{prefix}-egodex"
        source = open_source(str(source_dir), importer)
        with _timed(steps.setdefault("land", {})):
            landed = land_episode(self.storage, importer, source, importer.episode(source, rel))
        if landed.status != "landed":
            raise RuntimeError(f"{rel}: {landed.status}")
        files = [source_dir / rel, source_dir / rel.replace(".hdf5", ".mp4")]
        return landed.key, files

    def _waive(self, key: str) -> None:
        """The waiver the demo grants the Aria sample (its two recordings' known gap)."""
        from ego_assets.quality.waivers import add_waiver

        add_waiver(self.storage, key, "longest_gap_s", "two recordings joined", "bench chain")

    def _exports(
        self,
        key: str,
        steps: dict[str, dict[str, float]],
        floor: dict[str, dict[str, float]] | None,
    ) -> dict[str, str]:
        """The three exports of ``key`` and their floors; per export: written, skipped
        (the format wrote no data) or blocked (the gate)."""
        from ego_assets.exports.run import run_export
        from ego_assets.quality.gate import ExportBlockedError

        done = {}
        for name, step in zip(
            ("holos_hdf5", "egosmith_shards", "ceres_episode"), EXPORT_STEPS, strict=True
        ):
            exporter = self.exporters[name]
            timing: dict[str, float] = {}
            try:
                with _timed(timing):
                    run_export(self.storage, key, exporter, force=True)
            except ExportBlockedError:
                done[step] = "blocked"
                continue
            folder = Path(exporter.target(self.storage, key).path)
            if exporter.skipped(exporter.stored(self.storage, key)):
                done[step] = "skipped"
                continue
            steps[step] = timing
            done[step] = "written"
            if floor is not None:
                prepare = getattr(self, f"_{step}_floor")
                work = prepare(key, folder)
                with _timed(floor.setdefault(step, {})):
                    work()
        return done

    def _holos_floor(self, key: str, folder: Path) -> Callable[[], None]:
        from bench.holos import _arrays

        arrays = _arrays(next(folder.glob("*.h5")))
        out = self._scratch()
        return lambda: holos_floor(arrays, out)

    def _egosmith_floor(self, key: str, folder: Path) -> Callable[[], None]:
        from ego_assets.formats.egosmith_lowdim import episode_arrays, head_camera
        from ego_assets.storage import raw_capture_dir

        trajectory = uncached_trajectory(Path(self.storage.stage_path("trajectory", key).path))
        raw = Path(raw_capture_dir(self.storage.stage_path("raw", key)).path)
        video = raw / head_camera(trajectory).media.path
        frames = {int(i) for i in episode_arrays(trajectory).frame_index}
        members = []
        for tar_path in sorted(folder.rglob("*.tar")):
            with tarfile.open(tar_path) as tar:
                for m in tar.getmembers():
                    data = tar.extractfile(m)
                    members.append((m.name, data.read() if data else b""))
        quality = self.exporters["egosmith_shards"].options.jpeg_quality
        out = self._scratch()
        return lambda: egosmith_floor(video, frames, quality, members, out) and None

    def _ceres_floor(self, key: str, folder: Path) -> Callable[[], None]:
        import pyarrow.parquet as pq

        from ego_assets.formats.ceres_episode import build_rows
        from ego_assets.storage import raw_capture_dir

        lineage = json.loads((folder / "lineage.json").read_text())
        trajectory = uncached_trajectory(Path(self.storage.stage_path("trajectory", key).path))
        rows = build_rows(trajectory)
        raw = Path(raw_capture_dir(self.storage.stage_path("raw", key)).path)
        src = raw / rows.camera.path if rows.camera is not None else raw
        table = pq.read_table(next((folder / lineage["shard"]).rglob("data/**/*.parquet")))
        out = self._scratch()
        mode, fps = lineage["video"], int(lineage["fps"])
        return lambda: ceres_floor(src, mode, rows.frame_for_row, fps, table, out)


# ---------------------------------------------------------------------------------------
# the run


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per kind and step: CPU / wall ms per capture, floor ms, ratio; real-time factors."""
    steps: dict[str, Any] = {}
    rtf, vs_floors, chain_ms, floors_ms = {}, {}, {}, {}
    for kind, captures in runs.items():
        n = len(captures)
        per: dict[str, Any] = {}
        for step in STEPS:
            have = [c for c in captures if step in c["steps"]]
            if not have:
                continue
            cpu = sum(c["steps"][step]["cpu"] for c in have) / len(have)
            wall = sum(c["steps"][step]["wall"] for c in have) / len(have)
            floor = sum(c["floors"][step]["cpu"] for c in have) / len(have)
            per[step] = {
                "cpu_ms": round(1e3 * cpu, 2),
                "cpu_ms_each": [round(1e3 * c["steps"][step]["cpu"], 2) for c in have],
                "wall_ms": round(1e3 * wall, 2),
                "floor_ms": round(1e3 * floor, 2),
                "ratio": round(cpu / floor, 3) if floor > 0 else None,
            }
        steps[kind] = per
        chain = sum(s["cpu_ms"] for s in per.values())
        floors = sum(s["floor_ms"] for s in per.values())
        capture_s = sum(c["capture_s"] for c in captures) / n
        chain_ms[kind], floors_ms[kind] = round(chain, 2), round(floors, 2)
        rtf[kind] = round(capture_s / (chain / 1e3), 3)
        vs_floors[kind] = round(chain / floors, 3)
    result: dict[str, Any] = {
        "realtime_factor": rtf,
        "ratio_vs_floors": vs_floors,
        "steps": steps,
        "chain_cpu_ms": chain_ms,
        "floors_cpu_ms": floors_ms,
        "captures": {k: len(v) for k, v in runs.items()},
        "capture_s": {
            k: round(sum(c["capture_s"] for c in v) / len(v), 3) for k, v in runs.items()
        },
        "exported": {k: v[0]["exported"] for k, v in runs.items()},
    }
    if "egodex" in steps:
        part = [steps["egodex"][s] for s in ("land", "raw", "trajectory")]
        result["import_ratio_vs_floor"] = round(
            sum(p["cpu_ms"] for p in part) / sum(p["floor_ms"] for p in part), 3
        )
    return result


def _profile(chain: Chain, kind: str, items: list[str], out: Path) -> None:
    """The chain (no floors) over ``items`` under cProfile; the top entries to ``out``."""
    profiler = cProfile.Profile()
    profiler.enable()
    for item in items:
        chain.run(kind, item, "prof", floors=False)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("cumulative")
    stats.print_stats(PROFILE_TOP)
    stats.sort_stats("tottime").print_stats(PROFILE_TOP)
    out.mkdir(parents=True, exist_ok=True)
    lines = [line.rstrip() for line in text.getvalue().splitlines()]
    (out / f"chain-profile-{kind}.txt").write_text("\n".join(lines).strip() + "\n")


def run(
    kinds: tuple[str, ...],
    n: int,
    seconds: float,
    head_size: tuple[int, int],
    profile: Path | None = None,
) -> dict[str, Any]:
    """Pin to one core, warm up, then ``n`` captures of each kind (see the docstring)."""
    from ego_assets.quality.expectations import warm_up

    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-chain-") as tmp:
        chain = Chain(Path(tmp))
        warm_up()
        _freeze_loaded()
        for kind in kinds:
            for item in chain.stage(kind, 1, WARM_SECONDS, head_size, "warm"):
                chain.run(kind, item, "warm")
        for kind in kinds:
            items = chain.stage(kind, n, seconds, head_size, "bench")
            runs[kind] = [chain.run(kind, item, "bench") for item in items]
            if profile is not None:
                prof_items = chain.stage(kind, n, seconds, head_size, "prof")
                _profile(chain, kind, prof_items, profile)
    return {
        **_summary(runs),
        "n": n,
        "seconds": seconds,
        "head_size": f"{head_size[0]}x{head_size[1]}",
        "pinned_core": core,
        "cpu_count": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "targets": TARGETS,
    }


def _freeze_loaded() -> None:
    """What a warm run parent does once its step libraries and GX are loaded, before it
    forks a run's worker (`ego_assets.exports.preload.freeze_loaded`; a tree without it:
    nothing)."""
    from ego_assets.exports import preload

    freeze = getattr(preload, "freeze_loaded", None)
    if freeze is not None:
        freeze()


def _child(tree: Path, argv: list[str], out: Path) -> dict[str, Any]:
    """This bench in a child process with ``tree``'s ``ego_assets`` (this ``bench``)."""
    with tempfile.TemporaryDirectory(prefix="bench-chain-tree-") as cwd:
        (Path(cwd) / "bench").symlink_to(REPO / "bench")
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = [sys.executable, "-m", "bench", "chain", *argv, "--json", str(out)]
        subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def side_by_side(args: argparse.Namespace, kinds: tuple[str, ...]) -> dict[str, Any]:
    """Both trees (this one and ``--baseline-tree``), kind by kind in turn."""
    common = ["--n", str(args.n), "--seconds", str(args.seconds), "--head-size", args.head_size]
    trees = {"current": REPO, "baseline": args.baseline_tree.resolve()}
    merged: dict[str, dict[str, Any]] = {name: {} for name in trees}
    with tempfile.TemporaryDirectory(prefix="bench-chain-side-") as tmp:
        for kind in kinds:
            for name, tree in trees.items():
                part = _child(tree, [*common, "--kinds", kind], Path(tmp) / f"{name}-{kind}.json")
                for field, value in part.items():
                    if isinstance(value, dict) and kind in value:
                        merged[name].setdefault(field, {})[kind] = value[kind]
                    elif field != "import_ratio_vs_floor":
                        merged[name][field] = value
                if "import_ratio_vs_floor" in part:
                    merged[name]["import_ratio_vs_floor"] = part["import_ratio_vs_floor"]
    return {
        **merged["current"],
        "baseline": merged["baseline"],
        "baseline_tree": str(trees["baseline"]),
    }


def _table(result: dict[str, Any]) -> str:
    rows = []
    base = result.get("baseline", {}).get("steps", {})
    for kind, steps in result["steps"].items():
        rows.append(
            (
                kind,
                f"rtf {result['realtime_factor'][kind]:.1f}, "
                f"chain {result['chain_cpu_ms'][kind]:.0f} ms vs floors "
                f"{result['floors_cpu_ms'][kind]:.0f} ms "
                f"(x{result['ratio_vs_floors'][kind]:.2f})",
            )
        )
        for step, s in steps.items():
            before = base.get(kind, {}).get(step)
            was = f"  (baseline {before['cpu_ms']:.1f} ms)" if before else ""
            ratio = "-" if s["ratio"] is None else f"{s['ratio']:.2f}"
            rows.append(
                (
                    f"  {step}",
                    f"{s['cpu_ms']:8.1f} ms  floor {s['floor_ms']:7.1f} ms  ratio {ratio}{was}",
                )
            )
    if "import_ratio_vs_floor" in result:
        rows.append(("egodex import + trajectory vs floor", f"{result['import_ratio_vs_floor']}"))
    rows.append(
        (
            "load average before / after",
            f"{result['load_average_before']} / {result['load_average_after']}",
        )
    )
    return name_value_table(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench chain", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--n", type=int, default=2, help="captures per kind")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per capture")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument("--head-size", default="1920x1080", help="mano-video's video, WxH")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout, side by side")
    parser.add_argument("--profile", type=Path, help="write cProfile top entries here")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    width, _, height = args.head_size.partition("x")
    if args.n < 1 or args.seconds <= 0:
        parser.error("--n >= 1 and --seconds > 0")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    if args.baseline_tree is not None:
        result = side_by_side(args, kinds)
    else:
        result = run(kinds, args.n, args.seconds, (int(width), int(height)), args.profile)
    report(_table(result), result, args.json)
    return 0
