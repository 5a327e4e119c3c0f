"""The warm run launcher on the deployment topology: the real daemon over a Postgres
instance with infra/dagster.yaml's launcher (`WarmRunLauncher`), its landing sensor and a
test location whose run holds until released (`ego_assets_tests.warm_location`).

* a packed landing run is forked from the warm parent and materializes each capture's
  partitions on their own;
* a warm child killed with SIGKILL is dead to `check_run_worker_health`, and run
  monitoring fails its run;
* `terminate` (from another process, as the webserver calls it) ends the run CANCELED.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml

from ego_assets.catalog.receipts import read_receipt
from ego_assets.dagster_compat import WorkerStatus
from ego_assets.defs.partitions import SET0
from ego_assets.defs.runs import WARM_WORKER_TAG, warm_worker
from ego_assets.defs.warm import WarmRunLauncher
from ego_assets.exports import registry
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.processes import (
    REPO,
    daemon_args,
    fresh_database,
    pg_env,
    require_postgres,
    start,
    stop,
    write_dagster_home,
)
from ego_assets_tests.waiting import wait_for
from ego_assets_tests.warm_location import DIR_ENV

KEYS = ["warm-0001", "warm-0002"]
PER_CAPTURE = ("raw_capture", "trajectory", "quality_report", *registry.names())
WORKSPACE = {
    "load_from": [
        {
            "python_module": {
                "module_name": "ego_assets.definitions",
                "location_name": "ego_assets",
                "working_directory": str(REPO),
            }
        },
        {
            "python_module": {
                "module_name": "ego_assets_tests.warm_location",
                "location_name": "warm_test",
                "working_directory": str(REPO),
            }
        },
    ]
}


@dataclass
class Daemon:
    home: Path
    data: Path
    held: Path  # the held runs' folder (EGO_WARM_TEST_DIR)
    instance: dg.DagsterInstance


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    require_postgres()
    tmp = tmp_path_factory.mktemp("warm")
    home = write_dagster_home(tmp / "home")
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    # the deployment's launcher, also forking the test location's runs
    config["run_launcher"]["config"] = {
        "modules": ["ego_assets.definitions", "ego_assets_tests.warm_location"]
    }
    (home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    workspace = tmp / "workspace.yaml"
    workspace.write_text(yaml.safe_dump(WORKSPACE, sort_keys=False))
    data, held = tmp / "data", tmp / "held"
    (data / "landing").mkdir(parents=True)
    held.mkdir()
    with fresh_database("ego_warm") as db_name:
        env = {
            **pg_env(db_name),
            "DAGSTER_HOME": str(home),
            "EGO_DATA_DIR": str(data),
            "EGO_SENSOR_INTERVAL_S": "1",
            DIR_ENV: str(held),
            "PYTHONPATH": str(REPO),
        }
        args = [*daemon_args()[:-1], str(workspace)]
        service = start("dagster-daemon", args, env, tmp)
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with dg.DagsterInstance.from_config(str(home)) as instance:
                yield Daemon(home, data, held, instance)
        finally:
            (held / "release").touch()
            stop([service])
            for name, value in old.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _run(instance: dg.DagsterInstance, tags: dict[str, str]) -> dg.DagsterRun | None:
    runs = instance.get_runs(dg.RunsFilter(tags=tags), limit=1)
    return runs[0] if runs else None


def _finished(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun | None:
    run = instance.get_run_by_id(run_id)
    return run if run is not None and run.is_finished else None


def _held_run(d: Daemon, name: str) -> tuple[dg.DagsterRun, int]:
    """Ask for a held run through the test sensor; the run once its op holds, and its
    warm worker's pid."""
    (d.held / f"{name}.request").touch()
    run = wait_for(
        f"held run {name}", lambda: _run(d.instance, {"dagster/run_key": name}), interval_s=1.0
    )

    def holding() -> bool:
        steps = d.instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
        return bool(steps)

    wait_for(f"run {run.run_id}'s op to start", holding, interval_s=0.5)
    run = d.instance.get_run_by_id(run.run_id)
    assert run is not None and run.status == dg.DagsterRunStatus.STARTED
    found = warm_worker(run.tags)
    assert found is not None, run.tags
    return run, found[0]


def test_a_packed_landing_run_is_forked_warm_and_records_each_capture(daemon: Daemon) -> None:
    staged = daemon.data.parent / "staged"
    for seed, key in enumerate(KEYS):
        synthesize("webxr", staged / key, seconds=2.0, seed=seed, capture_id=key)
    for key in KEYS:  # both in the landing zone before a tick sees the markers
        os.replace(staged / key, daemon.data / "landing" / key)
    packed = {"dagster/run_key": f"{KEYS[0]}...{KEYS[-1]}"}
    run = wait_for("the packed run", lambda: _run(daemon.instance, packed), interval_s=1.0)
    run = wait_for("its end", lambda: _finished(daemon.instance, run.run_id), interval_s=1.0)
    assert run.status == dg.DagsterRunStatus.SUCCESS, run.run_id

    # the run's worker is the forked child: it wrote RUN_START, after its fork
    pid, forked_at = warm_worker(run.tags) or (0, 0.0)
    (start,) = daemon.instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_START)
    assert start.dagster_event is not None and start.dagster_event.pid == pid
    assert start.timestamp >= forked_at - 1.0

    # each capture's partitions, materialized on their own by that run
    for asset in PER_CAPTURE:
        status = daemon.instance.get_status_by_partition(
            dg.AssetKey(asset), KEYS, SET0.partitions_def
        )
        assert {k: s.value for k, s in status.items()} == dict.fromkeys(KEYS, "MATERIALIZED")
        for key in KEYS:
            (record,) = daemon.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]),
                limit=1,
            ).records
            assert record.run_id == run.run_id, (asset, key)
    storage = Storage(daemon.data)
    for key in KEYS:
        for name in registry.names():
            receipt = read_receipt(storage, name, key)
            assert receipt is not None and receipt.capture_key == key, (name, key)


def test_a_killed_warm_child_is_dead_to_the_health_check_and_its_run_fails(
    daemon: Daemon,
) -> None:
    run, pid = _held_run(daemon, "killed")
    launcher = daemon.instance.run_launcher
    assert isinstance(launcher, WarmRunLauncher)
    assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING
    os.kill(pid, signal.SIGKILL)
    wait_for(f"process {pid} to end", lambda: not psutil.pid_exists(pid) or _zombie(pid))
    health = launcher.check_run_worker_health(run)
    assert health.status == WorkerStatus.FAILED and str(pid) in (health.msg or "")
    # the daemon's run monitoring sees the same and fails the run
    failed = wait_for(
        "run monitoring to fail the run", lambda: _finished(daemon.instance, run.run_id)
    )
    assert failed.status == dg.DagsterRunStatus.FAILURE
    assert failed.tags[WARM_WORKER_TAG].startswith(f"{pid}@")


def test_terminate_from_another_process_cancels_a_warm_run(daemon: Daemon) -> None:
    run, pid = _held_run(daemon, "terminated")
    # this test process is not the daemon that forked the run, as the webserver is not
    assert daemon.instance.run_launcher.terminate(run.run_id)
    ended = wait_for("the run to end", lambda: _finished(daemon.instance, run.run_id))
    assert ended.status == dg.DagsterRunStatus.CANCELED
    wait_for(f"process {pid} to end", lambda: not psutil.pid_exists(pid) or _zombie(pid))
    # a finished run is not terminated again
    assert not daemon.instance.run_launcher.terminate(run.run_id)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True
