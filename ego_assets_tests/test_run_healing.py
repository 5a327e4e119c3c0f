"""A run killed with its process (SIGKILL) is noticed, marked failed and its capture is run
again by the next tick, at three points of the run: intake, normalization, an export.

The killed run is the demo's own path (`landing_tick` in a child process on the local
instance the demo uses); the next tick is the same call here. The daemon's path is the
local run launcher's health check, asserted on the same dead run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from ego_assets.catalog.receipts import read_receipt
from ego_assets.dagster_compat import WorkerStatus, instance_at
from ego_assets.defs.runs import (
    LOCAL_INSTANCE_YAML,
    WORKER_DIED_TAG,
    ensure_local_instance,
    process_alive,
)
from ego_assets.exports import registry
from ego_assets.storage import Storage
from ego_assets.synth import synthesize

KEY = "heal-0001"
EXPORT_FORMATS = registry.names()
# Generous: a capture's run imports and starts in a child process on a busy 2-core laptop.
WAIT_S = 900.0

# The demo's tick in a child process. Once the step named in argv[2] has started (its
# STEP_START event is stored), the child holds still inside that step until it is killed,
# so the kill lands in the step whatever the load, never after the step has finished.
TICK = """
import sys
import time
from pathlib import Path
import dagster as dg
from ego_assets.definitions import build_defs
from ego_assets.defs.demo import landing_tick, open_instance
from ego_assets.defs.resources import StorageResource

data, hold_in = Path(sys.argv[1]), sys.argv[2]
store_event = dg.DagsterInstance.handle_new_event


def store_then_hold(self, event, *args, **kwargs):
    store_event(self, event, *args, **kwargs)
    dagster_event = event.dagster_event
    if (
        dagster_event is not None
        and dagster_event.event_type == dg.DagsterEventType.STEP_START
        and event.step_key == hold_in
    ):
        time.sleep(3600)


dg.DagsterInstance.handle_new_event = store_then_hold
storage = StorageResource(root=str(data))
with open_instance(data) as instance:
    landing_tick(build_defs(storage, sensor_inline_s=0), instance, storage)
"""


def _step_started(instance: dg.DagsterInstance, step: str) -> str | None:
    """The run id of a run whose step ``step`` has started (None: none yet)."""
    for run in instance.get_runs():
        for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START):
            if entry.step_key == step:
                return run.run_id
    return None


def _wait_for_step(home: Path, step: str, child: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + WAIT_S
    with instance_at(str(home)) as instance:
        while time.monotonic() < deadline:
            if child.poll() is not None:
                pytest.fail(f"the tick ended (rc {child.returncode}) before step {step} started")
            run_id = _step_started(instance, step)
            if run_id is not None:
                return run_id
            time.sleep(0.2)
    pytest.fail(f"step {step} of {KEY}'s run did not start within {WAIT_S:.0f} s")


def _daemon_monitoring(instance: dg.DagsterInstance) -> None:
    """One iteration of the daemon's run monitoring over ``instance`` (``make dev``)."""
    import logging

    from dagster._daemon.monitoring.run_monitoring import execute_run_monitoring_iteration

    class _Process:  # the daemon's workspace process context; resuming runs needs no code
        def __init__(self, instance: dg.DagsterInstance) -> None:
            self.instance = instance

        def create_request_context(self) -> None:
            return None

    for error in execute_run_monitoring_iteration(_Process(instance), logging.getLogger()):  # type: ignore[arg-type]
        assert error is None, error


# (step the run is killed in, who notices: the demo's next tick or the daemon's run
# monitoring before it)
# The export is the run's first (`registry.run_order`: EgoSmith, whose decode leaves CERES
# its camera sample), so no export is written when the run dies.
FIRST_EXPORT = registry.run_order()[0].name
KILLS = [("raw_capture", "demo"), ("trajectory", "daemon"), (FIRST_EXPORT, "demo")]


@pytest.mark.parametrize(("step", "noticed_by"), KILLS)
def test_a_run_killed_at_a_step_is_failed_and_run_again_by_the_next_tick(
    tmp_path, step, noticed_by
):
    from ego_assets.definitions import build_defs
    from ego_assets.defs.demo import landing_tick, open_instance
    from ego_assets.defs.resources import StorageResource

    data = tmp_path / "data"
    synthesize("webxr", data / "landing" / KEY, seconds=2.0, seed=5, capture_id=KEY)
    home = data / ".dagster_home"
    with instance_at(str(ensure_local_instance(home))):  # its storage made before the child
        pass
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("DAGSTER_HOME", None)
    child = subprocess.Popen(
        [sys.executable, "-c", TICK, str(data), step], env=env, stdout=subprocess.DEVNULL
    )
    try:
        run_id = _wait_for_step(home, step, child)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()

    storage = Storage(data)
    with instance_at(str(home)) as instance:
        dead = instance.get_run_by_id(run_id)
        assert dead is not None and dead.status == dg.DagsterRunStatus.STARTED
        # the daemon's view (make dev): run monitoring asks the local launcher
        health = instance.run_launcher.check_run_worker_health(dead)
        assert health.status == WorkerStatus.FAILED and str(child.pid) in (health.msg or "")
        if noticed_by == "daemon":
            _daemon_monitoring(instance)
            failed = instance.get_run_by_id(run_id)
            assert failed is not None and failed.status == dg.DagsterRunStatus.FAILURE
    assert [read_receipt(storage, f, KEY) for f in EXPORT_FORMATS] == [None] * 3

    resource = StorageResource(root=str(data))
    with open_instance(data) as instance:
        tick = landing_tick(build_defs(resource, sensor_inline_s=0), instance, resource)
        assert [r.run_key for r in tick.requests] == [KEY] and tick.failures == {}
        assert tick.died == ([KEY] if noticed_by == "demo" else [])
        dead = instance.get_run_by_id(run_id)
        assert dead is not None and dead.status == dg.DagsterRunStatus.FAILURE
        assert dead.tags[WORKER_DIED_TAG] == str(child.pid)
        runs = instance.get_runs(dg.RunsFilter(tags={"dagster/run_key": KEY}))
        assert [r.status for r in runs] == [
            dg.DagsterRunStatus.SUCCESS,
            dg.DagsterRunStatus.FAILURE,
        ]
        # once: the tick after that runs nothing
        again = landing_tick(build_defs(resource, sensor_inline_s=0), instance, resource)
        assert again.requests == [] and again.died == []
    receipts = {f: read_receipt(storage, f, KEY) for f in EXPORT_FORMATS}
    assert {f: r is not None and r.capture_key == KEY for f, r in receipts.items()} == {
        f: True for f in EXPORT_FORMATS
    }


def test_the_local_instance_config_turns_on_run_monitoring_and_one_retry(tmp_path):
    home = ensure_local_instance(tmp_path / "home")
    assert (home / "dagster.yaml").read_text() == LOCAL_INSTANCE_YAML
    with instance_at(str(home)) as instance:
        assert type(instance.run_launcher).__name__ == "WarmRunLauncher"
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # type: ignore[attr-defined]
        assert (
            instance.run_monitoring_enabled
            and instance.run_launcher.supports_check_run_worker_health
        )
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 1
        assert not instance.run_retries_retry_on_asset_or_op_failure
    # an instance folder with its own configuration is left alone
    (tmp_path / "prod").mkdir()
    (tmp_path / "prod" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    ensure_local_instance(tmp_path / "prod")
    assert (tmp_path / "prod" / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


def test_a_live_worker_is_alive_and_a_reused_pid_is_not():
    started = time.time()
    assert process_alive(os.getpid(), started)
    assert not process_alive(os.getpid(), 0.0)  # this process was created after epoch 0 + 1 s
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert not process_alive(done.pid, started)
