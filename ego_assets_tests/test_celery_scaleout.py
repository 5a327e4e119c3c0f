"""Scale-out on one machine: a chunked backfill whose steps run on two Celery workers.

The run storage is a fresh PostgreSQL database, the broker and result backend a
dedicated Redis database (only that one is flushed), the captures and every output live
in the loopback S3 server. Two ``dagster-celery worker start`` processes (own names, one
task at a time each) load the unchanged code location with ``EGO_EXECUTOR=celery``; two
ranged runs (two chunks of the backfill, one ``dagster job execute`` process each)
execute at once, so both workers take steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from ego_assets.capture_sets import PER_CAPTURE_ASSETS
from ego_assets.synth import synthesize
from ego_assets_tests.processes import (
    REPO,
    Service,
    fresh_database,
    pg_env,
    require_postgres,
    start,
    stop,
    write_dagster_home,
)
from ego_assets_tests.waiting import CEILING_S, wait_for

REDIS_URL = "redis://127.0.0.1:6379/13"  # this test's own Redis database
KEYS = ["s01", "s02", "s03", "s04"]
# one celery task per asset step of the job
CAPTURE_JOB_ASSETS = PER_CAPTURE_ASSETS
CHUNKS = [("s01", "s02"), ("s03", "s04")]
WORKERS = ("ego-w1", "ego-w2")
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
INDEX_FILES = {"raw": "manifest.json", "trajectory": "lineage.json", "quality": "gate.json"}


def _redis():
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    return client


def _wait_for_workers(app, names: set[str], services: list[Service]) -> None:
    def up() -> bool:
        for service in services:
            if service.process.poll() is not None:
                pytest.fail(f"{service.name} exited early:\n{service.tail()}")
        replies = app.control.inspect(timeout=1.0).ping() or {}
        return names <= {name.split("@")[0] for name in replies}

    wait_for(
        f"celery workers {sorted(names)} to answer a ping",
        up,
        state=lambda: "\n".join(s.tail() for s in services),
    )


def _execute_args(first: str, last: str) -> list[str]:
    tags = json.dumps({RANGE_START: first, RANGE_END: last})
    return [
        str(Path(sys.executable).parent / "dagster"),
        *("job", "execute", "-m", "ego_assets.definitions", "-j", "capture_job"),
        *("--tags", tags),
    ]


def _celery_workers_in_event_log(instance) -> set[str]:
    """Worker names the executor recorded ("Celery worker" metadata of engine events)."""
    names = set()
    for run in instance.get_runs():
        for entry in instance.all_logs(run.run_id):
            event = entry.dagster_event
            if event is None or not event.is_engine_event:
                continue
            worker = event.engine_event_data.metadata.get("Celery worker")
            if worker is not None:
                names.add(str(worker.value).split("@")[0])
    return names


def _tasks_per_worker(app) -> dict[str, int]:
    stats = app.control.inspect(timeout=2.0).stats() or {}
    return {name.split("@")[0]: sum(info.get("total", {}).values()) for name, info in stats.items()}


def test_backfill_chunks_run_on_two_celery_workers_with_outputs_in_s3(
    s3_server, tmp_path, monkeypatch
):
    require_postgres()
    broker = _redis()
    broker.flushdb()
    bucket = s3_server.make_bucket()
    root = f"{bucket}/data"
    for seed, key in enumerate(KEYS):
        local = synthesize("holos-iphone", tmp_path / "captures" / key, seconds=1.5, seed=seed)
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            rel = path.relative_to(local).as_posix()
            s3_server.client().upload_file(
                str(path), bucket.removeprefix("s3://"), f"data/landing/{key}/{rel}"
            )

    from celery import Celery

    app = Celery(broker=REDIS_URL, backend=REDIS_URL)
    started = time.monotonic()
    with fresh_database("ego_celery") as db:
        home = write_dagster_home(tmp_path / "dagster_home")
        worker_yaml = tmp_path / "celery.yaml"
        worker_yaml.write_text(
            f"execution:\n  config:\n    broker: {REDIS_URL}\n    backend: {REDIS_URL}\n"
        )
        env = {
            **pg_env(db),
            **s3_server.env,
            "DAGSTER_HOME": str(home),
            "EGO_DATA_DIR": root,
            "EGO_EXECUTOR": "celery",
            "EGO_CELERY_BROKER": REDIS_URL,
            "EGO_CELERY_BACKEND": REDIS_URL,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(REPO),
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        # the schema first: two workers opening an empty database at once race to create it
        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("captures", KEYS)
        workers: list[Service] = []
        try:
            for name in WORKERS:
                args = [
                    str(Path(sys.executable).parent / "dagster-celery"),
                    *("worker", "start", "-A", "dagster_celery.app"),
                    *("-y", str(worker_yaml), "--name", name),
                    *("--", "--concurrency=1", "--without-gossip", "--without-mingle"),
                ]
                workers.append(start(name, args, env, tmp_path))
            _wait_for_workers(app, set(WORKERS), workers)

            # one `dagster job execute` process per chunk (as a run launcher would start
            # them); two runs in threads of one process deadlock in logging.dictConfig
            runs = [
                start(f"run-{first}", _execute_args(first, last), env, tmp_path)
                for first, last in CHUNKS
            ]
            for run in runs:  # a ceiling for a hang: chunks take minutes on loaded cores
                try:
                    code = run.process.wait(timeout=CEILING_S)
                except subprocess.TimeoutExpired:
                    stop(runs)
                    pytest.fail(f"{run.name} did not finish in {CEILING_S:.0f} s:\n{run.tail()}")
                assert code == 0, run.tail()
            with dg.DagsterInstance.get() as instance:
                for key in KEYS:
                    for asset in ("raw_capture", "trajectory", "quality_report"):
                        record = instance.get_latest_data_version_record(
                            dg.AssetKey(asset), partition_key=key
                        )
                        assert record is not None, (asset, key)
                workers_in_log = _celery_workers_in_event_log(instance)
            per_worker = _tasks_per_worker(app)
        finally:
            stop(workers)
            broker.flushdb()
    elapsed = time.monotonic() - started
    print(f"celery scale-out: {elapsed:.1f} s wall, tasks per worker {per_worker}")

    assert workers_in_log == set(WORKERS)
    # both workers executed steps: 2 runs x one step per asset of capture_job
    assert set(per_worker) == set(WORKERS)
    assert all(per_worker[name] >= 1 for name in WORKERS), per_worker
    assert sum(per_worker.values()) == 2 * len(CAPTURE_JOB_ASSETS)
    objects = s3_server.keys(root)
    for key in KEYS:
        for stage, index in INDEX_FILES.items():
            assert f"{stage}/{key}/{index}" in objects
        assert f"quality/{key}/quality.parquet" in objects
        assert f"trajectory/{key}/streams.parquet" in objects
