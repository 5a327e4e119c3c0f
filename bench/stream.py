"""Benchmark: captures on the production path beside the library loop over the same captures.

``python -m bench stream [--json FILE] [--captures 6] [--seconds 10] [--interval 5]``

The production path as deployed on one box: a fresh database on the machine's PostgreSQL
(127.0.0.1:5432), the run coordinator and run limits of ``infra/dagster.yaml``, the real
``dagster-daemon run -w workspace.yaml`` with its landing sensor (``EGO_SENSOR_INTERVAL_S``
= ``--interval``) and the default run launcher (a process per run, which loads the code
location). ``--captures`` captures of ``--seconds`` s (kinds in turn: Holos iPhone, Holos
Vision Pro, WebXR) land at once (the burst), then one more alone.

Beside it, in this process, the library loop over the same captures (ingest, trajectory,
quality, the three exports; the GX warm-up paid before), and the code location's load
(``import ego_assets.definitions`` + ``defs()``) next to ``import dagster``, each in a
fresh interpreter.

Per capture run, from its events: queue (enqueued -> starting), code-location load (starting
-> the run worker's RUN_START: process start and import), run start (RUN_START -> first
step) and steps (first step -> run end). Writes
``{"burst_overhead_ratio": burst wall / library loop over the burst,
"single_latency_ratio": marker -> last export of the lone capture / its library time,
"code_location_load_s": ..., ...}``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import name_value_table, postgres_home, report

REPO = Path(__file__).resolve().parents[1]
KINDS = ("holos-iphone", "holos-visionpro", "webxr")
# instance settings taken from the deployment's dagster.yaml (storage and logs are the bench's)
INSTANCE_KEYS = ("run_coordinator", "concurrency", "sensors", "backfills")
EXPORTS = ("holos_hdf5", "egosmith_shards", "ceres_episode")
CEILING_S = 3600.0
SMOKE_ARGS = ["--captures", "1", "--seconds", "2", "--interval", "1"]  # 2 s: the policy minimum


def _stage(seconds: float, keys: list[str], out: Path) -> None:
    """One capture folder per key under ``out`` (kinds in turn), marker included."""
    from ego_assets.synth import synthesize

    for i, key in enumerate(keys):
        synthesize(KINDS[i % len(KINDS)], out / key, seconds=seconds, seed=i, capture_id=key)


def _library(root: Path, staged: Path, keys: list[str]) -> dict[str, float]:
    """Seconds per capture of the library loop (every per-capture asset's work)."""
    from ego_assets import pipeline
    from ego_assets.exports.ceres import CeresExporter
    from ego_assets.exports.egosmith import EgoSmithExporter
    from ego_assets.exports.holos import HolosExporter
    from ego_assets.exports.run import run_export
    from ego_assets.storage import Storage

    for key in keys:
        shutil.copytree(staged / key, root / "landing" / key)
    storage = Storage(str(root))
    exporters = (HolosExporter(), EgoSmithExporter(), CeresExporter())
    times: dict[str, float] = {}
    for key in keys:
        start = time.perf_counter()
        pipeline.ingest_raw(storage, key)
        pipeline.normalize(storage, key)
        pipeline.assess_quality(storage, key)
        for exporter in exporters:
            run_export(storage, key, exporter)
        times[key] = time.perf_counter() - start
    return times


def _timed_python(code: str) -> float:
    """Wall seconds of ``python -c code`` in a fresh interpreter (this repo first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "EGO_DATA_DIR": tempfile.gettempdir()}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def _instance_config() -> dict[str, Any]:
    deployed = yaml.safe_load((REPO / "infra" / "dagster.yaml").read_text())
    return {k: deployed[k] for k in INSTANCE_KEYS if k in deployed}


def _wait(what: str, done: Any, ceiling: float = CEILING_S) -> None:
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > ceiling:
            raise TimeoutError(f"waited {ceiling:.0f} s for {what}")
        time.sleep(1.0)


def _finished_runs(instance: Any, keys: list[str]) -> dict[str, Any]:
    """Finished capture runs of ``keys`` by capture key (a packed run covers several)."""
    import dagster as dg

    from ego_assets.defs.partitions import run_captures

    runs = instance.get_runs(filters=dg.RunsFilter(job_name="capture_job"))
    return {key: r for r in runs if r.is_finished for key in run_captures(r.tags) if key in keys}


def _split(instance: Any, run_id: str) -> dict[str, float]:
    """A run's seconds in the queue, loading the code location, starting and in steps."""
    from dagster import DagsterEventType as T

    stamps: dict[str, float] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        name = event.event_type
        kind = {
            T.RUN_ENQUEUED: "enqueued",
            T.RUN_STARTING: "starting",
            T.RUN_START: "start",
            T.STEP_START: "first_step",
            T.RUN_SUCCESS: "end",
            T.RUN_FAILURE: "end",
        }.get(name)
        if kind and kind not in stamps:
            stamps[kind] = entry.timestamp
    return {
        "queue_s": stamps["starting"] - stamps["enqueued"],
        "code_location_load_s": stamps["start"] - stamps["starting"],
        "run_start_s": stamps["first_step"] - stamps["start"],
        "steps_s": stamps["end"] - stamps["first_step"],
        "end": stamps["end"],
    }


def _last_export(instance: Any, key: str) -> float:
    """Timestamp of the capture's last export materialization."""
    import dagster as dg

    stamps = []
    for name in EXPORTS:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(name), asset_partitions=[key]), limit=1
        ).records
        stamps += [r.timestamp for r in records]
    if len(stamps) != len(EXPORTS):
        raise RuntimeError(f"capture {key}: {len(stamps)} of {len(EXPORTS)} exports materialized")
    return max(stamps)


def _land(staged: Path, landing: Path, key: str) -> None:
    """Move a complete capture into the landing zone; its marker is written fresh."""
    os.replace(staged / key, landing / key)
    os.utime(landing / key / "ego_capture.json")


def _daemon_path(
    data: Path, home: Path, staged: Path, burst: list[str], lone: str, interval: int
) -> dict[str, Any]:
    import dagster as dg

    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "EGO_DATA_DIR": str(data),
        "EGO_SENSOR_INTERVAL_S": str(interval),
        "PYTHONPATH": str(REPO),
    }
    daemon_bin = Path(sys.executable).with_name("dagster-daemon")
    log = (home / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [str(daemon_bin), "run", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    landing = data / "landing"
    landing.mkdir(parents=True)
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            _wait(
                "the daemon's first landing-sensor tick",
                lambda: bool(_sensor_ticks(instance)),
            )
            start = time.time()
            for key in burst:
                _land(staged, landing, key)
            _wait(
                f"{len(burst)} burst runs",
                lambda: len(_finished_runs(instance, burst)) == len(burst),
            )
            runs = _finished_runs(instance, burst)
            burst_s = max(_last_export(instance, k) for k in burst) - start
            failed = sorted(k for k, r in runs.items() if r.status != dg.DagsterRunStatus.SUCCESS)
            splits = {k: _split(instance, r.run_id) for k, r in runs.items()}
            _land(staged, landing, lone)
            marker = (landing / lone / "ego_capture.json").stat().st_mtime
            _wait("the lone capture's run", lambda: lone in _finished_runs(instance, [lone]))
            lone_run = _finished_runs(instance, [lone])[lone]
            if lone_run.status != dg.DagsterRunStatus.SUCCESS:
                failed.append(lone)
            single_s = _last_export(instance, lone) - marker
            splits[lone] = _split(instance, lone_run.run_id)
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        log.close()
    if failed:
        raise RuntimeError(f"capture runs failed: {failed} (daemon log: {home / 'daemon.log'})")
    return {"burst_s": burst_s, "single_s": single_s, "splits": splits}


def _sensor_ticks(instance: Any) -> list[Any]:
    from dagster._core.scheduler.instigation import InstigatorType

    states = instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
    ticks = []
    for state in states:
        if state.instigator_name == "landing_sensor":
            ticks += instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
    return ticks


def run(captures: int, seconds: float, interval: int) -> dict[str, Any]:
    from ego_assets.quality.expectations import warm_up

    burst = [f"st-{i:04d}" for i in range(captures)]
    lone = f"st-{captures:04d}"
    keys = [*burst, lone]
    load = os.getloadavg()
    dagster_s = _timed_python("import dagster")
    location_s = _timed_python("import ego_assets.definitions as d; d.defs()")
    with tempfile.TemporaryDirectory(prefix="ego-bench-stream-") as tmp_name:
        tmp = Path(tmp_name)
        _stage(seconds, keys, tmp / "staged")
        warm_up()
        library = _library(tmp / "library", tmp / "staged", keys)
        with postgres_home(tmp / "home", "ego_stream", _instance_config()) as (home, _):
            path = _daemon_path(tmp / "data", home, tmp / "staged", burst, lone, interval)
    splits = path["splits"]
    library_burst = sum(library[k] for k in burst)
    per_run = {
        part: round(statistics.median(s[part] for s in splits.values()), 3)
        for part in ("queue_s", "code_location_load_s", "run_start_s", "steps_s")
    }
    return {
        "captures": captures,
        "capture_seconds": seconds,
        "sensor_interval_s": interval,
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "import_dagster_s": round(dagster_s, 3),
        "code_location_load_s": round(location_s, 3),
        "code_location_to_dagster_ratio": round(location_s / dagster_s, 3),
        "library_burst_s": round(library_burst, 3),
        "library_single_s": round(library[lone], 3),
        "library_median_capture_s": round(statistics.median(library.values()), 3),
        "library_realtime_factor": round(seconds * len(keys) / sum(library.values()), 3),
        "burst_s": round(path["burst_s"], 3),
        "single_latency_s": round(path["single_s"], 3),
        "run_split_median": per_run,
        "burst_overhead_ratio": round(path["burst_s"] / library_burst, 3),
        "single_latency_ratio": round(path["single_s"] / library[lone], 3),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench stream", description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--captures", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("bench").setLevel(logging.INFO)  # the table, not every library's log
    if args.captures < 1 or args.seconds <= 0 or args.interval < 1:
        parser.error("--captures >= 1, --seconds > 0 and --interval >= 1")
    result = run(args.captures, args.seconds, args.interval)
    split = result["run_split_median"]
    rows = [
        ("load (1/5/15 min) before", " ".join(map(str, result["load_before"]))),
        ("import dagster", f"{result['import_dagster_s']:.2f} s"),
        ("capture code location load", f"{result['code_location_load_s']:.2f} s"),
        ("library loop, burst", f"{result['library_burst_s']:.2f} s"),
        ("daemon path, burst", f"{result['burst_s']:.2f} s"),
        ("burst_overhead_ratio", f"{result['burst_overhead_ratio']:.2f}"),
        ("library loop, lone capture", f"{result['library_single_s']:.2f} s"),
        ("marker -> last export, lone", f"{result['single_latency_s']:.2f} s"),
        ("single_latency_ratio", f"{result['single_latency_ratio']:.2f}"),
        *((f"per run (median) {k}", f"{v:.2f} s") for k, v in split.items()),
        ("library real-time factor", f"{result['library_realtime_factor']:.2f}x"),
    ]
    report(name_value_table(rows), result, args.json)
    return 0
