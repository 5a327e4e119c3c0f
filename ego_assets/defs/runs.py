"""Runs whose worker process died: found, marked failed, and their capture run again.

A run killed with its process (SIGKILL, OOM, a closed laptop lid's power loss) stays
``STARTED`` in the instance forever unless something notices. Two things do:

* **the daemon** (``make dev``, deployments): run monitoring asks the run launcher about
  every started run. Production's `K8sRunLauncher` answers from the pod; one box and the
  local instance use `ego_assets.defs.warm.WarmRunLauncher` (`LOCAL_INSTANCE_YAML`,
  written into the local ``DAGSTER_HOME`` by ``make demo``/``make dev`` when it has no
  ``dagster.yaml``), a `LocalRunLauncher`, which answers from the run worker's process
  id. A dead worker's run is marked failed, and run retries (``max_retries: 1``, crashes
  only, never failures in our code) launch it again, from the failed step on. The
  launcher tags such a run `WORKER_DIED_TAG` too.
* **the demo**, which runs captures in its own process with no daemon: at its start
  `heal_dead_runs` marks failed every unfinished run of its own sensor whose worker is
  gone and tags it `WORKER_DIED_TAG`; `rerun_after_death` then lets the capture's run
  request through again (the landing sensor's run key would otherwise skip it for good).

A worker is the process that wrote the run's RUN_START event (Dagster records each
event's process id), or before that the warm child the launcher tagged
(`WARM_WORKER_TAG`). It is alive when a process with that id exists, is not a zombie and
was created before the run started (a later one is another process reusing the id). This
holds where the daemon sees the run workers' processes: one host (the local instance, a
laptop on PostgreSQL), or docker compose, whose daemon shares the code server's process
namespace (``infra/docker-compose.yaml``). Kubernetes uses `K8sRunLauncher`'s check.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import psutil

from ego_assets.dagster_compat import CheckRunHealthResult, WorkerStatus, launcher_instance

WORKER_DIED_TAG = "ego/worker_died"  # on a run `heal_dead_runs` failed: the dead pid
# "<pid>@<epoch s>" of a run's worker forked by `ego_assets.defs.warm.WarmRunLauncher`
WARM_WORKER_TAG = "ego/warm_worker"
RUN_KEY_TAG = "dagster/run_key"
SENSOR_NAME_TAG = "dagster/sensor_name"
UNFINISHED = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
# A run with no event yet (created, never started) counts as dead after this long.
NO_WORKER_GRACE_S = 120.0

LOCAL_INSTANCE_YAML = """\
# The local Dagster instance of `make demo` and `make dev` (SQLite in this folder).
# Written by ego_assets.defs.runs when the folder had no dagster.yaml; edit freely.
run_coordinator:  # runs wait in a queue the daemon looks at every second
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
run_launcher:  # runs forked from a warm parent (ego_assets.defs.warm), with a health check
  module: ego_assets.defs.warm
  class: WarmRunLauncher
run_monitoring:  # a run whose worker process died is marked failed...
  enabled: true
  start_timeout_seconds: 300
  poll_interval_seconds: 15
run_retries:  # ...and launched again once (crashes only, not failures in our code)
  enabled: true
  max_retries: 1
  retry_on_asset_or_op_failure: false
telemetry:
  enabled: false
"""


def ensure_local_instance(home: Path) -> Path:
    """``home/dagster.yaml``: written with `LOCAL_INSTANCE_YAML` when missing (an existing
    one, e.g. a deployment's, is never touched). Returns ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        staging = home / ".dagster.yaml.tmp"
        staging.write_text(LOCAL_INSTANCE_YAML)
        staging.replace(config)
    return home


def warm_worker(tags: Mapping[str, str]) -> tuple[int, float] | None:
    """(process id, epoch s of its fork) of a run's warm worker from its tags; None when
    no warm parent forked it (`WARM_WORKER_TAG`)."""
    found = tags.get(WARM_WORKER_TAG)
    if not found:
        return None
    pid, _, at = found.partition("@")
    return int(pid), float(at)


def worker(
    instance: dg.DagsterInstance, run_id: str, tags: Mapping[str, str] | None = None
) -> tuple[int, float] | None:
    """(process id, epoch s) of the run's worker: the process that wrote its RUN_START
    event (one indexed query), else the warm worker its ``tags`` name (forked, not yet
    started); None before either."""
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_START):
        event = entry.dagster_event
        if event is not None and event.pid is not None:
            return event.pid, entry.timestamp
    return warm_worker(tags or {})


def process_alive(pid: int, since: float) -> bool:
    """Whether process ``pid`` runs (not a zombie) and was created by epoch s ``since``."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return process.create_time() <= since + 1.0
    except psutil.Error:
        return False


def worker_died(instance: dg.DagsterInstance, run: dg.DagsterRun, now: float) -> int | None:
    """The dead worker's process id (0: none ever recorded and the run is old) if the
    unfinished ``run``'s worker is gone; None while it may still be running."""
    found = worker(instance, run.run_id, run.tags)
    if found is None:
        record = instance.get_run_record_by_id(run.run_id)
        created = record.create_timestamp.timestamp() if record else now
        return 0 if now - created > NO_WORKER_GRACE_S else None
    pid, started = found
    return None if process_alive(pid, started) else pid


def heal_dead_runs(instance: dg.DagsterInstance, tags: Mapping[str, str], now: float) -> list[str]:
    """Mark failed every unfinished run carrying ``tags`` whose worker died (tagged
    `WORKER_DIED_TAG`); returns their run keys (one query, then one per unfinished run)."""
    records = instance.get_run_records(dg.RunsFilter(statuses=UNFINISHED, tags=dict(tags)))
    healed = []
    for record in records:
        run = record.dagster_run
        pid = worker_died(instance, run, now)
        if pid is None:
            continue
        instance.add_run_tags(run.run_id, {WORKER_DIED_TAG: str(pid)})
        instance.report_run_failed(
            run, f"the run's worker process (pid {pid}) died; its capture is run again"
        )
        healed.append(run.tags.get(RUN_KEY_TAG, run.run_id))
    return healed


def rerun_after_death(runs: Iterable[dg.DagsterRun]) -> bool:
    """Whether a run key whose runs are ``runs`` (newest first) is to run again: it has
    none, or its newest one died (`heal_dead_runs`). A run that failed in our code is
    not retried (its error is the capture's answer)."""
    newest = next(iter(runs), None)
    return newest is None or WORKER_DIED_TAG in newest.tags


class LocalRunLauncher(dg.DefaultRunLauncher):
    """The default launcher (a run worker process per run, on this host) with a health
    check, so the daemon's run monitoring notices a worker that died (`worker_died`)."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> Any:
        """RUNNING while the worker may run; FAILED (and the run tagged `WORKER_DIED_TAG`,
        as the demo tags the runs it heals) once it is gone."""
        instance = launcher_instance(self)
        pid = worker_died(instance, run, time.time())
        if pid is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        instance.add_run_tags(run.run_id, {WORKER_DIED_TAG: str(pid)})
        return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {pid} is gone")


if __name__ == "__main__":  # python -m ego_assets.defs.runs HOME: make dev's local instance
    print(ensure_local_instance(Path(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())))
