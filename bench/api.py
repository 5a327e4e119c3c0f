"""Export API under load: ``python -m bench api [--json FILE] [--clients 200] [--seconds 60]``
(``--no-exports``: polls only, no daemon, webserver or export runs; the smoke size).

A deployment on this machine: a fresh Postgres database with infra/dagster.yaml's
instance (queued run coordinator), dagster-daemon, dagster-webserver and
``ego-assets serve`` on loopback, over a local data folder holding ``--captures``
prepared captures (ingested, normalized, judged; not exported). Then, for ``--seconds``:

* ``--clients`` concurrent clients poll ``GET /captures/<id>/export-<format>``
  round-robin over every capture and format, waiting ``--interval`` seconds between
  their requests (a page or a toast polling). They are cheap on purpose, so the figures
  measure the server rather than the client: one asyncio loop (uvloop), one keep-alive
  HTTP/1.1 connection per client, requests pre-encoded, answers read by their
  Content-Length (the status picked from the body without a JSON parse);
* meanwhile exports run: every capture's HDF5, LeRobot and WebDataset export is asked for
  (POST), and each finished one is asked again with ``force`` so runs keep going for the
  whole window (queued by the coordinator, executed by the daemon's run workers).

The window opens once the first export run has started (asked for before it).

Reported: GET latency p50/p90/p99/max (ms, client side, from send to the full body),
the same for ``/healthz`` (every tenth request: the baseline of loop, server and load),
the API's own p50/p99 (its access log: request in to response start), requests, rate,
errors (non-200 answers, failed or closed connections, timeouts), export runs finished,
the CPU seconds the client loop and the API's processes (workers and refresher) used in
the window, and the machine's load average at the start and the end.
Target: p99 <= 50 ms. The client and the servers share the machine's cores, so the
figures include that contention.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import name_value_table, report

log = logging.getLogger("bench.api")
TOKEN = "bench-token"
ROUTES = ("export-hdf5", "export-lerobot", "export-webdataset")
# Every BASELINE_EVERY-th request of a client is GET /healthz (no I/O, no auth): the same
# loop, server and machine load without the export lookup, reported beside it.
BASELINE_EVERY = 10


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _load(
    url: str, paths: list[str], clients: int, seconds: float, interval: float
) -> tuple[list[float], list[float], int, dict[str, int]]:
    from urllib.parse import urlparse

    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    latencies: list[float] = []
    baseline: list[float] = []
    errors = 0
    statuses: dict[str, int] = {}
    stop_at = time.monotonic() + seconds
    encoded = {
        path: (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        ).encode()
        for path in [*paths, "/healthz"]
    }
    length_re = re.compile(rb"\r\ncontent-length: *(\d+)", re.IGNORECASE)
    status_re = re.compile(rb'"status":"(\w+)"')

    async def client(index: int) -> None:
        nonlocal errors
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        await asyncio.sleep(interval * index / clients)  # spread the first requests
        n = index
        while time.monotonic() < stop_at:
            n += 1
            probe = n % BASELINE_EVERY == 0
            path = "/healthz" if probe else paths[n % len(paths)]
            started = time.perf_counter()
            try:
                async with asyncio.timeout(10):
                    if connection is None:
                        connection = await asyncio.open_connection(host, port)
                    reader, writer = connection
                    writer.write(encoded[path])
                    head = await reader.readuntil(b"\r\n\r\n")
                    found = length_re.search(head)
                    if found is None:
                        raise ValueError("answer without Content-Length")
                    body = await reader.readexactly(int(found.group(1)))
                elapsed = (time.perf_counter() - started) * 1000
                if head[9:12] != b"200":
                    errors += 1
                elif probe:
                    baseline.append(elapsed)
                else:
                    latencies.append(elapsed)
                    match = status_re.search(body)
                    status = match.group(1).decode() if match else "?"
                    statuses[status] = statuses.get(status, 0) + 1
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
                errors += 1
                if connection is not None:
                    connection[1].close()
                connection = None
            await asyncio.sleep(interval)
        if connection is not None:
            connection[1].close()

    await asyncio.gather(*(client(i) for i in range(clients)))
    return latencies, baseline, errors, statuses


def _post(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def get_json(url: str, path: str) -> dict[str, Any]:
    """The JSON answer of an authorized GET of ``url + path``."""
    import urllib.request

    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def start_api(
    tmp: Path, env: dict[str, str], captures: str, workers: int, dagster_url: str
) -> tuple[Any, str]:
    """``ego-assets serve`` on a free loopback port for one organization whose token is
    `TOKEN` and whose captures match ``captures`` (a glob), logging to
    ``tmp/ego-assets-serve.log``; returns (its service, its base URL) once it answers."""
    from ego_assets.api.config import hash_token
    from ego_assets_tests.processes import BIN, free_port, start, stop, wait_http_ok

    config = tmp / "api.toml"
    config.write_text(
        f'[organizations.bench]\ncaptures = ["{captures}"]\n'
        f'[organizations.bench.tokens]\nbench = "{hash_token(TOKEN)}"\n'
    )
    port = free_port()
    serve = [str(BIN / "ego-assets"), "serve", "--port", str(port), "--workers", str(workers)]
    serve += ["--config", str(config), "--dagster-url", dagster_url]
    server = start("ego-assets-serve", serve, env, tmp)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(f"{url}/healthz", server, 300)
    except BaseException:
        stop([server])
        raise
    return server, url


def _warm_up(url: str, paths: list[str], timeout_s: float = 600.0) -> dict[str, str]:
    """POST every export, then wait until the daemon runs one (before the window opens)."""
    pending = {path: _post(url, path, {})[1].get("runId") or "" for path in paths}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in paths:
            if get_json(url, path)["status"] in ("in_progress", "ready"):
                return pending
        time.sleep(1.0)
    raise RuntimeError(f"no export run started within {timeout_s} s")


async def _keep_exporting(
    url: str, paths: list[str], stop_at: float, pending: dict[str, str]
) -> int:
    """Re-POST every export with force whenever it is not running; count finished runs."""
    finished = 0
    loop = asyncio.get_running_loop()
    while time.monotonic() < stop_at:
        await asyncio.sleep(2.0)
        for path in paths:
            status, body = await loop.run_in_executor(None, _post, url, path, {"force": True})
            if status == 202:
                finished += 1 if pending.get(path) else 0
                pending[path] = body["runId"]
    return finished


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = (
    "--clients",
    "4",
    "--seconds",
    "5",
    "--interval",
    "0.1",
    "--captures",
    "1",
    "--workers",
    "1",
    "--no-exports",
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench api", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=0.5, help="pause between polls (s)")
    parser.add_argument("--captures", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="API server processes")
    parser.add_argument(
        "--no-exports",
        action="store_true",
        help="polls only: no daemon, webserver or export runs (the suite's smoke size)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run(
        args.clients, args.seconds, args.interval, args.captures, args.workers, not args.no_exports
    )
    table = name_value_table([(k, str(v)) for k, v in result.items()])
    report(table, result, args.json)
    return 0


def run(
    clients: int,
    seconds: float,
    interval: float,
    captures: int,
    workers: int = 1,
    exports: bool = True,
) -> dict[str, Any]:
    import dagster as dg

    from ego_assets import pipeline
    from ego_assets.defs.partitions import CAPTURES_PARTITIONS_NAME
    from ego_assets.storage import Storage
    from ego_assets.synth import synthesize
    from ego_assets_tests.processes import (
        free_port,
        fresh_database,
        pg_env,
        require_postgres,
        start_dagster,
        stop,
        wait_http_ok,
        write_dagster_home,
    )

    require_postgres()
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp_name:
        tmp = Path(tmp_name)
        data = tmp / "data"
        keys = [f"bench-{i:03d}" for i in range(captures)]
        for i, key in enumerate(keys):
            kind = "holos-visionpro" if i % 2 == 0 else "webxr"
            synthesize(kind, data / "landing" / key, seconds=3.0, seed=i, capture_id=key)
            storage = Storage(data)
            pipeline.ingest_raw(storage, key)
            pipeline.normalize(storage, key)
            pipeline.assess_quality(storage, key)
        with fresh_database("ego_bench_api") as db_name:
            home = write_dagster_home(tmp / "dagster_home")
            env = {
                **pg_env(db_name),
                "DAGSTER_HOME": str(home),
                "EGO_DATA_DIR": str(data),
                "EGO_SENSOR_INTERVAL_S": "3600",
                "EGO_EXECUTOR": "in_process",
                # every ask a run, inline exports off: the window measures GETs beside runs
                "EGO_API_INLINE_MAX_S": "0",
            }
            with contextlib.ExitStack() as stack:
                for name, value in env.items():
                    stack.enter_context(_env(name, value))
                instance = dg.DagsterInstance.from_config(str(home))
                instance.add_dynamic_partitions(CAPTURES_PARTITIONS_NAME, keys)
            services = []
            try:
                web_port = free_port()
                if exports:
                    web = start_dagster(services, env, tmp, web_port)
                web_url = f"http://127.0.0.1:{web_port}"
                server, url = start_api(tmp, env, "bench-*", workers, web_url)
                services.append(server)
                if exports:
                    wait_http_ok(f"{web_url}/server_info", web, 300)
                paths = [f"/captures/{k}/{r}" for k in keys for r in ROUTES]
                latencies, baseline, errors, statuses, runs, cpu = _run_loop(
                    _measure(url, paths, clients, seconds, interval, server.process.pid, exports)
                )
                failures = _failed_runs(instance)
            finally:
                stop(services)
                instance.dispose()
            server_ms = _server_times(tmp / "ego-assets-serve.log")
    return {
        "clients": clients,
        "workers": workers,
        "seconds": seconds,
        "interval_s": interval,
        "requests": len(latencies) + errors,
        "rate_per_s": round((len(latencies) + errors) / seconds, 1),
        "p50_ms": round(statistics.median(latencies), 2),
        "p90_ms": round(_percentile(latencies, 0.90), 2),
        "p99_ms": round(_percentile(latencies, 0.99), 2),
        "max_ms": round(max(latencies), 2),
        "errors": errors,
        "healthz_p50_ms": round(statistics.median(baseline), 2),
        "healthz_p99_ms": round(_percentile(baseline, 0.99), 2),
        "server_p50_ms": round(statistics.median(server_ms), 2) if server_ms else None,
        "server_p99_ms": round(_percentile(server_ms, 0.99), 2) if server_ms else None,
        "statuses_seen": statuses,
        "export_runs_finished": runs,
        "export_runs_failed": len(failures),
        "failures": failures,
        **cpu,
    }


def _failed_runs(instance: Any) -> list[dict[str, str]]:
    """Every failed run of the window: its job, partition and the first error message
    (a failed export is a finding of the benchmark, not noise to hide)."""
    import dagster as dg

    failures = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE])):
        records = instance.get_records_for_run(
            run.run_id, of_type={dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE}
        ).records
        messages = [_error_message(r.event_log_entry.dagster_event) for r in records]
        failures.append(
            {
                "job": run.job_name,
                "partition": run.tags.get("dagster/partition", ""),
                "error": next((m for m in messages if m), "")[:2000],
            }
        )
    return failures


def _error_message(event: Any) -> str:
    """The error a failure event carries (its exception's message), else its text."""
    error = getattr(event.event_specific_data, "error", None)
    return error.message.strip() if error is not None else (event.message or "")


def _server_times(log_path: Path) -> list[float]:
    """The API's own time per answered GET of an export (its access log, ms)."""
    times = []
    for line in log_path.read_text(errors="replace").splitlines():
        match = re.search(r" GET /captures/\S+/export-\S+ 200 token=\S+ ([0-9.]+)ms$", line)
        if match:
            times.append(float(match.group(1)))
    return times


def _run_loop(coroutine: Any) -> Any:
    """Run on uvloop when it is installed (the server's loop too), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def _tree_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of ``pid`` and its descendants alive now: the refresher
    process and the rest (uvicorn's server processes)."""
    import psutil

    total = {"servers": 0.0, "refresher": 0.0}
    try:
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                role = "refresher" if "ego_assets.api.refresher" in process.cmdline() else "servers"
                total[role] += times.user + times.system
    except psutil.Error:
        pass
    return total


async def _measure(
    url: str,
    paths: list[str],
    clients: int,
    seconds: float,
    interval: float,
    server_pid: int,
    exports: bool = True,
) -> tuple[list[float], list[float], int, dict[str, int], int, dict[str, Any]]:
    """The window's figures; with ``exports``, export runs go on throughout it."""
    import resource

    pending: dict[str, str] = {}
    if exports:
        pending = await asyncio.get_running_loop().run_in_executor(None, _warm_up, url, paths)
    stop_at = time.monotonic() + seconds
    load_start = os.getloadavg()
    server_start = _tree_cpu_s(server_pid)
    client_start = resource.getrusage(resource.RUSAGE_THREAD)
    exporting = asyncio.create_task(
        _keep_exporting(url, paths, stop_at if exports else 0.0, pending)
    )
    latencies, baseline, errors, statuses = await _load(url, paths, clients, seconds, interval)
    client_end = resource.getrusage(resource.RUSAGE_THREAD)
    server_end = _tree_cpu_s(server_pid)
    load_end = os.getloadavg()
    runs = await exporting
    client_cpu = (client_end.ru_utime + client_end.ru_stime) - (
        client_start.ru_utime + client_start.ru_stime
    )
    cpu = {
        "client_cpu_s": round(client_cpu, 2),
        "api_cpu_s": round(sum(server_end.values()) - sum(server_start.values()), 2),
        "api_servers_cpu_s": round(server_end["servers"] - server_start["servers"], 2),
        "api_refresher_cpu_s": round(server_end["refresher"] - server_start["refresher"], 2),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in load_end],
    }
    return latencies, baseline, errors, statuses, runs, cpu


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
