"""Benchmark: captures on the production path beside the library loop over the same captures.

``python -m bench stream [--json FILE] [--captures 6] [--seconds 10] [--interval 5]
[--load-repeats 5]``

The production path as deployed on one box: a fresh database on the machine's PostgreSQL
(127.0.0.1:5432), the run coordinator, run limits, run launcher and run monitoring of
``infra/dagster.yaml``, the capture location in a code server of its own (``dagster
code-server start``, as ``infra/docker-compose.yaml`` runs it) and the real
``dagster-daemon run`` over it with its landing sensor (``EGO_SENSOR_INTERVAL_S`` =
``--interval``; ``EGO_SENSOR_INLINE_MAX_S`` from the environment, as deployed: a lone
capture of at most 30 s is taken by the sensor's tick, without a run). Untimed short
captures go through it first, as the library loop is warmed: two at once (a packed run:
the warm launcher starts its warm parent on its first run), then one alone (the tick:
the code server's step libraries). Then ``--captures`` captures of ``--seconds`` s
(kinds in turn: Holos iPhone, Holos Vision Pro, WebXR) land at once (the burst), then
one more alone (``single_path``: ``tick`` or ``run``).

Beside it, in this process, the library loop over the same captures (ingest, trajectory,
quality, the three exports; one short capture of each kind through it before, untimed, so
the lazily imported libraries and the GX context are loaded), and the code location's
load (``import ego_assets.definitions`` + ``defs()``) next to ``import dagster``, each in
a fresh interpreter, ``--load-repeats`` times alternating (medians reported). Per capture
kind, the library loop's real-time factor: seconds of capture per CPU second of this
process (all threads, and children it waited for) over all its assets.

Then the export API on the same deployment: one more capture (``--seconds``, Holos iPhone)
lands and the sensor's run takes it through every step and export, as every capture is
taken; ``dagster-webserver`` and ``ego-assets serve`` start (timed once the webserver has
loaded its code locations and each export of the warm-up capture was asked once,
untimed), and each export is asked for again in turn through the API (``POST
/captures/<key>/export-<format>`` with ``force``,
what a user gets when an export is not there or not current: the API writes it inside
the POST, its inputs being current and the capture short (``inline`` 1; with
``EGO_API_INLINE_MAX_S=0`` in the environment, a run of the exporter alone, polled until
``ready``, ``inline`` 0 and the run's split); beside it the library loop's time for the
same export of the same capture.

Per capture run, from its events: queue (enqueued -> starting), code-location load (starting
-> the run worker's RUN_START: process start and import), run start (RUN_START -> first
step) and steps (first step -> run end). Writes
``{"burst_overhead_ratio": burst wall / library loop over the burst,
"single_latency_ratio": (marker -> last export of the lone capture - one sensor interval)
/ its library time (target 2),
"api_ready_ratio": worst over the formats of (POST -> ready - one refresher tick) / that
export's library time (target 2), "code_location_load_s": ..., ...}``.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import name_value_table, postgres_home, report
from ego_assets.exports import registry

REPO = Path(__file__).resolve().parents[1]
KINDS = ("holos-iphone", "holos-visionpro", "webxr")
API_KIND = "holos-iphone"  # the API's capture: every export applies to it
# the daemon path's untimed warm-up: two captures at once (a packed run: the warm launcher
# starts its warm parent) then one alone (the sensor's tick: the code server's libraries)
WARM_PACKED = ("st-warm-a", "st-warm-b")
WARM_LONE = "st-warm-c"
# instance settings taken from the deployment's dagster.yaml (storage and logs are the bench's)
INSTANCE_KEYS = (
    "run_coordinator",
    "run_launcher",
    "run_monitoring",
    "concurrency",
    "sensors",
    "backfills",
)
EXPORTS = registry.names()
CEILING_S = 3600.0
WARM_SECONDS = 2.0  # the warm-up captures' length (the policy minimum)
SMOKE_ARGS = [
    *("--captures", "1", "--seconds", "2", "--interval", "1"),  # 2 s: the policy minimum
    *("--load-repeats", "1"),
]


def _stage(
    seconds: float, keys: list[str], out: Path, kinds: tuple[str, ...] = KINDS
) -> dict[str, str]:
    """One capture folder per key under ``out`` (``kinds`` in turn), marker included;
    returns each key's synthetic kind."""
    from ego_assets.synth import synthesize

    staged = {key: kinds[i % len(kinds)] for i, key in enumerate(keys)}
    for i, (key, kind) in enumerate(staged.items()):
        synthesize(kind, out / key, seconds=seconds, seed=i, capture_id=key)
    return staged


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process's threads and of its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _library(storage: Any, kinds: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The library loop (every per-capture asset's work) over the captures ``kinds``
    names (key -> synthetic kind), already in the landing zone of ``storage``; per
    capture: its kind, seconds of capture, wall and CPU seconds of all its assets, and
    wall seconds of each export."""
    from ego_assets import pipeline
    from ego_assets.exports.run import run_export

    exporters = {fmt.name: fmt.exporter_class()() for fmt in registry.run_order()}
    out: dict[str, dict[str, Any]] = {}
    for key, kind in kinds.items():
        start, cpu = time.perf_counter(), _cpu_s()
        pipeline.ingest_raw(storage, key)
        duration = pipeline.normalize(storage, key).figures["duration_s"]
        pipeline.assess_quality(storage, key)
        exports = {}
        for name, exporter in exporters.items():
            began = time.perf_counter()
            run_export(storage, key, exporter)
            exports[name] = time.perf_counter() - began
        out[key] = {
            "kind": kind,
            "capture_s": float(duration),
            "wall_s": time.perf_counter() - start,
            "cpu_s": _cpu_s() - cpu,
            "exports_s": exports,
        }
    return out


def _library_loop(tmp: Path, staged: Path, kinds: dict[str, str]) -> dict[str, dict[str, Any]]:
    """`_library` over copies of the staged captures ``kinds`` names, after one untimed
    short capture of each kind (the imports a step makes on first use, the GX context)."""
    from ego_assets.quality.expectations import warm_up
    from ego_assets.storage import Storage

    warm = _stage(WARM_SECONDS, [f"warm-{i}" for i in range(len(KINDS))], tmp / "warm" / "landing")
    warm_up()
    _library(Storage(str(tmp / "warm")), warm)
    for key in kinds:
        shutil.copytree(staged / key, tmp / "library" / "landing" / key)
    return _library(Storage(str(tmp / "library")), kinds)


def _by_kind(library: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per capture kind: captures, seconds of capture, CPU and wall seconds of all assets,
    and the real-time factor (seconds of capture per CPU second)."""
    kinds: dict[str, dict[str, float]] = {}
    for row in library.values():
        total = kinds.setdefault(row["kind"], dict.fromkeys(("captures", "capture_s"), 0.0))
        total["captures"] += 1
        for part in ("capture_s", "cpu_s", "wall_s"):
            total[part] = total.get(part, 0.0) + row[part]
    return {
        kind: {
            "captures": int(t["captures"]),
            "capture_s": round(t["capture_s"], 3),
            "cpu_s": round(t["cpu_s"], 3),
            "wall_s": round(t["wall_s"], 3),
            "realtime_factor": round(t["capture_s"] / t["cpu_s"], 3),
        }
        for kind, t in sorted(kinds.items())
    }


def _timed_python(code: str) -> float:
    """Wall seconds of ``python -c code`` in a fresh interpreter (this repo first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "EGO_DATA_DIR": tempfile.gettempdir()}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def _load_times(repeats: int) -> dict[str, list[float]]:
    """``import dagster`` and the capture code location's load, ``repeats`` times each,
    alternating (so a change in the machine's load reaches both alike)."""
    times: dict[str, list[float]] = {"dagster": [], "location": []}
    for _ in range(repeats):
        times["dagster"].append(_timed_python("import dagster"))
        times["location"].append(_timed_python("import ego_assets.definitions as d; d.defs()"))
    return times


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


def _taken(instance: Any, keys: list[str]) -> list[str]:
    """The ``keys`` done: their run finished, or every export of theirs is materialized
    (by the sensor's tick). One query per export format and one for the runs, whatever
    the number of keys: the probe must not load the machine it measures."""
    import dagster as dg

    runs = _finished_runs(instance, keys)
    exported = set(keys)
    for name in EXPORTS:
        exported &= instance.get_materialized_partitions(dg.AssetKey(name))
    return [k for k in keys if k in runs or k in exported]


def _land(staged: Path, landing: Path, key: str) -> None:
    """Move a complete capture into the landing zone; its marker is written fresh."""
    os.replace(staged / key, landing / key)
    os.utime(landing / key / "ego_capture.json")


def _api_exports(
    instance: Any, env: dict[str, str], tmp: Path, key: str
) -> dict[str, dict[str, float]]:
    """Each export of ``key`` (landed and exported by the sensor's run) asked again through
    the export API (``dagster-webserver`` and ``ego-assets serve`` on this deployment,
    ``force``) in turn; per format: POST -> ``ready`` seconds and its run's split."""
    from bench.api import _post, start_api
    from ego_assets_tests.processes import free_port, start, stop, wait_http_ok, webserver_args

    web_port = free_port()
    web_url = f"http://127.0.0.1:{web_port}"
    services = [start("dagster-webserver", webserver_args(web_port), env, tmp)]
    try:
        server, url = start_api(tmp, env, "st-*", 1, web_url)
        services.append(server)
        wait_http_ok(f"{web_url}/server_info", services[0], CEILING_S)
        # the webserver answers before its code servers have loaded (the catalog's imports
        # dbt): the exports are timed once it is idle, as a deployment's webserver is
        _wait("the webserver's code locations", lambda: _locations_loaded(web_url))
        # the API worker warmed as the library loop is: each export of the lone warm-up
        # capture asked once, untimed (its first instance queries, first writes)
        for fmt in registry.formats():
            path = f"/captures/{WARM_LONE}/{fmt.route}"
            status, body = _post(url, path, {"force": True})
            state = body if status == 200 else _settled(url, path)
            if status not in (200, 202) or state.get("status") != "ready":
                raise RuntimeError(f"warm-up POST {path}: {status} {state}")
        out = {}
        for fmt in registry.run_order():
            path = f"/captures/{key}/{fmt.route}"
            asked = time.monotonic()
            status, body = _post(url, path, {"force": True})
            if status not in (200, 202):
                raise RuntimeError(f"POST {path}: {status} {body}")
            state = body if status == 200 else _settled(url, path)  # 200: written inline
            ready_s = time.monotonic() - asked
            if state["status"] != "ready":
                raise RuntimeError(f"{path}: {state}")
            out[fmt.name] = {"ready_s": ready_s, "inline": float(status == 200)}
            if status == 202:
                split = _split(instance, body["runId"])
                out[fmt.name].update({k: v for k, v in split.items() if k != "end"})
        return out
    finally:
        stop(services)


def _locations_loaded(web_url: str) -> bool:
    """Whether the webserver at ``web_url`` has loaded every code location of its
    workspace."""
    import json
    import urllib.request

    query = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
    request = urllib.request.Request(
        f"{web_url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        entries = json.loads(response.read())["data"]["workspaceOrError"]["locationEntries"]
    return bool(entries) and all(entry["loadStatus"] == "LOADED" for entry in entries)


def _settled(url: str, path: str, poll_s: float = 0.05) -> dict[str, Any]:
    """The API's answer for the export at ``path`` once it is ``ready``, ``failed`` or
    ``blocked``."""
    from bench.api import get_json

    start = time.monotonic()
    while True:
        state = get_json(url, path)
        if state["status"] in ("ready", "failed", "blocked"):
            return state
        if time.monotonic() - start > CEILING_S:
            raise TimeoutError(f"waited {CEILING_S:.0f} s for {path}: {state}")
        time.sleep(poll_s)


def _spawn(args: list[str], env: dict[str, str], log: Any) -> subprocess.Popen:
    """``args`` (a console script of this environment first) in its own session."""
    command = [str(Path(sys.executable).with_name(args[0])), *args[1:]]
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _write_workspace(home: Path, port: int) -> Path:
    """``home/workspace.yaml`` as deployed on one box (infra/docker-compose.yaml): the
    capture location in a code server of its own on ``port``, which the daemon reaches
    over gRPC, and the catalog location from its module. (A daemon that starts the code
    servers itself, from workspace.yaml, replaces them every 60 s, and the first capture
    a new one's sensor takes pays the step libraries' imports again.)"""
    workspace = home / "workspace.yaml"
    workspace.write_text(
        yaml.safe_dump(
            {
                "load_from": [
                    {
                        "grpc_server": {
                            "host": "127.0.0.1",
                            "port": port,
                            "location_name": "ego_assets",
                        }
                    },
                    {
                        "python_module": {
                            "module_name": "ego_assets.catalog_definitions",
                            "location_name": "ego_assets_catalog",
                            "working_directory": str(REPO),
                        }
                    },
                ]
            }
        )
    )
    return workspace


def _stop(services: list[subprocess.Popen]) -> None:
    """Stop each service's process group, the last started first (SIGTERM, then SIGKILL
    after 120 s)."""
    for service in reversed(services):
        os.killpg(service.pid, signal.SIGTERM)
        try:
            service.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait()


def _daemon_path(
    data: Path,
    home: Path,
    staged: Path,
    burst: list[str],
    lone: str,
    interval: int,
    api_key: str,
) -> dict[str, Any]:
    import dagster as dg

    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "EGO_DATA_DIR": str(data),
        "EGO_SENSOR_INTERVAL_S": str(interval),
        "PYTHONPATH": str(REPO),
    }
    port = _free_port()
    workspace = _write_workspace(home, port)
    log = (home / "daemon.log").open("wb")
    services = [
        _spawn(
            [
                *("dagster", "code-server", "start", "-m", "ego_assets.definitions"),
                *("-h", "127.0.0.1", "-p", str(port)),
            ],
            env,
            log,
        )
    ]
    landing = data / "landing"
    landing.mkdir(parents=True)
    try:
        _wait("the capture code server", lambda: _listening(port))
        services.append(_spawn(["dagster-daemon", "run", "-w", str(workspace)], env, log))
        with dg.DagsterInstance.from_config(str(home)) as instance:
            _wait(
                "the daemon's first landing-sensor tick",
                lambda: bool(_sensor_ticks(instance)),
            )
            # the deployment warmed as the library loop is, untimed: a packed run (a
            # launcher that keeps warm processes starts them on its first run), then a
            # capture alone (the sensor's tick takes it: the code server's step libraries)
            for key in WARM_PACKED:
                _land(staged, landing, key)
            _wait("the warm-up run", lambda: len(_taken(instance, list(WARM_PACKED))) == 2)
            _land(staged, landing, WARM_LONE)
            _wait("the lone warm-up capture", lambda: bool(_taken(instance, [WARM_LONE])))
            start = time.time()
            for key in burst:
                _land(staged, landing, key)
            _wait(
                f"{len(burst)} burst captures",
                lambda: len(_taken(instance, burst)) == len(burst),
            )
            runs = _finished_runs(instance, burst)
            burst_s = max(_last_export(instance, k) for k in burst) - start
            failed = sorted(k for k, r in runs.items() if r.status != dg.DagsterRunStatus.SUCCESS)
            splits = {k: _split(instance, r.run_id) for k, r in runs.items()}
            _land(staged, landing, lone)
            marker = (landing / lone / "ego_capture.json").stat().st_mtime
            _wait("the lone capture", lambda: bool(_taken(instance, [lone])))
            lone_run = _finished_runs(instance, [lone]).get(lone)
            if lone_run is not None and lone_run.status != dg.DagsterRunStatus.SUCCESS:
                failed.append(lone)
            single_s = _last_export(instance, lone) - marker
            tick_start, tick_spacing = _tick_after(instance, marker)
            if lone_run is not None:
                splits[lone] = _split(instance, lone_run.run_id)
            _land(staged, landing, api_key)
            _wait("the API capture", lambda: bool(_taken(instance, [api_key])))
            api_run = _finished_runs(instance, [api_key]).get(api_key)
            if api_run is not None and api_run.status != dg.DagsterRunStatus.SUCCESS:
                failed.append(api_key)
            if failed:
                raise RuntimeError(f"capture runs failed: {failed} (log: {home / 'daemon.log'})")
            api = _api_exports(instance, env, home, api_key)
    finally:
        _stop(services)
        log.close()
    single_path = "run" if lone_run is not None else "tick"
    return {
        "burst_s": burst_s,
        "single_s": single_s,
        "single_path": single_path,
        "single_sensor_wait_s": tick_start - marker,
        "tick_spacing_s": tick_spacing,
        "splits": splits,
        "api": api,
    }


def _sensor_ticks(instance: Any, limit: int | None = 1) -> list[Any]:
    """The landing sensor's newest ticks (``limit``; None: all), newest first."""
    from dagster._core.scheduler.instigation import InstigatorType

    states = instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
    ticks = []
    for state in states:
        if state.instigator_name == "landing_sensor":
            ticks += instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=limit)
    return sorted(ticks, key=lambda tick: tick.timestamp, reverse=True)


def _tick_after(instance: Any, when: float) -> tuple[float, float]:
    """The start of the landing sensor's first tick after epoch ``when``, and the median
    spacing of its ticks: how long a capture landing at ``when`` waited for the sensor,
    and how often the daemon really evaluated it."""
    starts = sorted(tick.timestamp for tick in _sensor_ticks(instance, None))
    after = [t for t in starts if t >= when]
    if not after:
        raise RuntimeError(f"no landing-sensor tick after {when}")
    spacing = statistics.median(b - a for a, b in itertools.pairwise(starts))
    return after[0], spacing


def run(captures: int, seconds: float, interval: int, load_repeats: int = 5) -> dict[str, Any]:
    from ego_assets.api.snapshot import TICK_S

    burst = [f"st-{i:04d}" for i in range(captures)]
    lone = f"st-{captures:04d}"
    api_key = "st-api"
    keys = [*burst, lone]
    load = os.getloadavg()
    loads = _load_times(load_repeats)
    dagster_s, location_s = (statistics.median(loads[k]) for k in ("dagster", "location"))
    with tempfile.TemporaryDirectory(prefix="ego-bench-stream-") as tmp_name:
        tmp = Path(tmp_name)
        kinds = _stage(seconds, keys, tmp / "staged")
        kinds.update(_stage(seconds, [api_key], tmp / "staged", (API_KIND,)))
        _stage(WARM_SECONDS, [*WARM_PACKED, WARM_LONE], tmp / "staged")
        library = _library_loop(tmp, tmp / "staged", kinds)
        with postgres_home(tmp / "home", "ego_stream", _instance_config()) as (home, _):
            path = _daemon_path(tmp / "data", home, tmp / "staged", burst, lone, interval, api_key)
    splits = path["splits"]
    wall = {k: row["wall_s"] for k, row in library.items()}
    library_burst = sum(wall[k] for k in burst)
    per_run = {  # over the capture runs (none when the sensor's tick took every capture)
        part: round(statistics.median(s[part] for s in splits.values()), 3)
        for part in ("queue_s", "code_location_load_s", "run_start_s", "steps_s")
        if splits
    }
    api = {
        name: {
            "library_s": round(library[api_key]["exports_s"][name], 3),
            **{k: round(v, 3) for k, v in times.items()},
            "ratio": round((times["ready_s"] - TICK_S) / library[api_key]["exports_s"][name], 3),
        }
        for name, times in path["api"].items()
    }
    timed = [library[k] for k in keys]
    return {
        "captures": captures,
        "capture_seconds": seconds,
        "sensor_interval_s": interval,
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "import_dagster_s": round(dagster_s, 3),
        "code_location_load_s": round(location_s, 3),
        "code_location_to_dagster_ratio": round(location_s / dagster_s, 3),
        "load_runs_s": {k: [round(v, 3) for v in vs] for k, vs in loads.items()},
        "library_burst_s": round(library_burst, 3),
        "library_single_s": round(wall[lone], 3),
        "library_median_capture_s": round(statistics.median(wall[k] for k in keys), 3),
        "library_realtime_factor": round(seconds * len(keys) / sum(wall[k] for k in keys), 3),
        "library_realtime_factor_cpu": round(
            sum(r["capture_s"] for r in timed) / sum(r["cpu_s"] for r in timed), 3
        ),
        "realtime_factor_by_kind": _by_kind({k: library[k] for k in keys}),
        "burst_s": round(path["burst_s"], 3),
        "single_latency_s": round(path["single_s"], 3),
        "single_path": path["single_path"],
        "single_sensor_wait_s": round(path["single_sensor_wait_s"], 3),
        "sensor_tick_spacing_median_s": round(path["tick_spacing_s"], 3),
        # after the tick that took it: (latency - the capture's own wait) / library
        "single_after_tick_ratio": round(
            (path["single_s"] - path["single_sensor_wait_s"]) / wall[lone], 3
        ),
        "run_split_median": per_run,
        "burst_overhead_ratio": round(path["burst_s"] / library_burst, 3),
        "single_latency_ratio": round((path["single_s"] - interval) / wall[lone], 3),
        "refresher_tick_s": TICK_S,
        "api_exports": api,
        "api_ready_ratio": max(row["ratio"] for row in api.values()),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench stream", description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--captures", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", type=int, default=5)
    parser.add_argument(
        "--load-repeats", type=int, default=5, help="alternating runs of each load timing"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("bench").setLevel(logging.INFO)  # the table, not every library's log
    if args.captures < 1 or args.seconds <= 0 or args.interval < 1 or args.load_repeats < 1:
        parser.error("--captures >= 1, --seconds > 0, --interval >= 1, --load-repeats >= 1")
    result = run(args.captures, args.seconds, args.interval, args.load_repeats)
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
        ("lone capture taken by", result["single_path"]),
        ("lone capture's wait for a tick", f"{result['single_sensor_wait_s']:.2f} s"),
        ("landing-sensor ticks, median spacing", f"{result['sensor_tick_spacing_median_s']:.2f} s"),
        ("single_after_tick_ratio", f"{result['single_after_tick_ratio']:.2f}"),
        *((f"per run (median) {k}", f"{v:.2f} s") for k, v in split.items()),
        ("library real-time factor (wall)", f"{result['library_realtime_factor']:.2f}x"),
        ("library real-time factor (CPU)", f"{result['library_realtime_factor_cpu']:.2f}x"),
        *(
            (f"  {kind} ({row['captures']}, CPU)", f"{row['realtime_factor']:.2f}x")
            for kind, row in result["realtime_factor_by_kind"].items()
        ),
        *(
            (
                f"API {name}: POST -> ready / library",
                f"{row['ready_s']:.2f} / {row['library_s']:.2f} s",
            )
            for name, row in result["api_exports"].items()
        ),
        ("api_ready_ratio (worst)", f"{result['api_ready_ratio']:.2f}"),
    ]
    report(name_value_table(rows), result, args.json)
    return 0
