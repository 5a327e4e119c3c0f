"""Benchmark: Dagster's partitions at 10k, 100k and 1M captures on a Postgres instance.

``python -m bench scale [--episodes 10000,100000,1000000] [--sets N] [--json FILE]
[--repeat 3] [--no-browser] [--daemon-s S]``

``--sets N``: the captures are split over N capture sets (``EGO_CAPTURE_SETS``) at every
size; each set's per-capture assets are seeded, and the UI figures, the chunk run and
the asset page are those of set 1's ``raw_capture`` (``s001/raw_capture``; set 0's
``raw_capture`` with one set).

One fresh database (``scale_<hex>`` on 127.0.0.1:5432, dropped at the end) grows through
the sizes in order. At each size the instance holds ``N`` registered captures and one
materialization of every per-capture asset for each (raw_capture, trajectory,
quality_report and the exporters), written through Dagster's own storage API: partitions
with ``instance.add_dynamic_partitions`` in chunks, materializations as the runless
``ASSET_MATERIALIZATION`` events `DagsterInstance.report_runless_asset_event` writes, stored
``SEED_BATCH`` at a time with ``event_log_storage.store_event_batch`` (one INSERT per
batch; the same call a run uses when ``DAGSTER_EVENT_BATCH_SIZE`` is set). Then, per size:

* ``sensor_tick_s``: the landing sensor registering 1,000 new captures (complete capture
  folders in a landing folder), as many ticks as that takes; each tick is the sensor's
  evaluation as the code server runs it (``evaluate_tick``, which also resolves and checks
  the run requests) plus what the daemon does with its result before launching runs: one
  ``has_dynamic_partition`` per key, the bulk insert, the run-key lookup.
* ``ui_*``: the GraphQL documents the UI sends for the asset page (partition health,
  partition stats, the partitions tab) and the materialize dialog, against a running
  ``dagster-webserver``; first call (cold) and best of ``--repeat`` (warm); and the asset's
  partitions page loaded in headless Chromium until the partition count is on screen.
* ``backfill_launch_s``: ``ego-assets backfill`` for 10,000 captures over every
  per-capture asset (`capture_ops.launch_backfills`: one asset backfill per capture set,
  written to the instance; summed over the sets);
  ``backfill_first_iteration_s``: the backfill daemon's first pass over it (planning and
  submitting the first chunk runs to a queue that launches nothing).
* ``chunk_run_start_s``: a ranged run of `BACKFILL_CHUNK` captures, from the call to its
  first step starting (run creation, partition resolution, plan).
* ``stale_code_tick_s``: one steady-state tick of the stale-code automation sensor (no
  code change; the first tick, which records versions, is timed too).
* ``webserver_rss_mb`` / ``daemon_rss_mb``: peak resident memory (VmHWM) of the webserver
  after the UI queries, and of the daemon after a minute of ticks with the backfill.

Prints a table and writes ``{"sizes": {N: {...}}, "targets": {...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import bench
from bench import POSTGRES, log, report
from bench._scale_ui import (
    GraphQL,
    children_rss_mb,
    load_averages,
    rss_mb,
    sensor_tick_times,
    ui_figures,
)

SEED_BATCH = 5000
NEW_CAPTURES = 1000
BACKFILL_EPISODES = 10_000
TARGETS = {
    "sensor_tick_s": 2.0,
    "ui_partition_status_s": 2.0,
    "backfill_launch_s": 30.0,
    "webserver_rss_mb": 2048.0,
}
REPO = Path(__file__).resolve().parents[1]


def capture_key(i: int) -> str:
    """The i-th simulated capture key (sorted order = registration order)."""
    return f"sim-{i:07d}"


# ---------------------------------------------------------------- instance and seeding


@contextlib.contextmanager
def postgres_home(home: Path, prefix: str = "scale") -> Iterator[tuple[Path, str]]:
    """DAGSTER_HOME on a fresh database ``<prefix>_<hex>``, dropped on exit.

    Runs go to a queue that never launches any (``max_concurrent_runs: 0``): the backfill
    daemon plans and submits, nothing executes.
    """
    queue_only = {
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
        },
        "concurrency": {"runs": {"max_concurrent_runs": 0}},
    }
    with bench.postgres_home(home, prefix, queue_only) as (home, name):
        yield home, name


def _materialization(asset_key: Any, partition: str, timestamp: float) -> Any:
    """The event `report_runless_asset_event` stores for one partition's materialization."""
    from dagster._core.definitions.events import AssetMaterialization
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry
    from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
        job_name=RUNLESS_JOB_NAME,
        event_specific_data=StepMaterializationData(
            AssetMaterialization(asset_key=asset_key, partition=partition)
        ),
        message="",
    )
    return EventLogEntry(
        error_info=None,
        level=logging.INFO,
        user_message="",
        run_id=RUNLESS_RUN_ID,
        timestamp=timestamp,
        dagster_event=event,
        job_name=RUNLESS_JOB_NAME,
    )


_COPY_COLUMNS = ("run_id", "event", "dagster_event_type", "timestamp", "step_key", "asset_key")


def _copy_text(value: Any) -> str:
    if value is None:
        return "\\N"
    text = value.isoformat(sep=" ") if hasattr(value, "isoformat") else str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def _copy_materializations(
    instance: Any, db: str, asset_key: Any, keys: Sequence[str], timestamp: float
) -> None:
    """Materializations of ``keys[:-1]`` in one COPY, rows as Dagster writes them; the last
    key through ``store_event_batch`` (which also moves the asset's latest-event pointer).

    Dagster's batch INSERT spends ~1.4 ms per event in Python (SQLAlchemy compiles a
    multi-row VALUES clause; serdes packs each event): 2.3 hours for 6M events on this
    machine. The row of the first key comes from Dagster's own ``_event_to_row``; the
    others differ only in the partition key, substituted in the serialized event (keys
    are fixed-width, so the text is byte-identical to ``serialize_value``'s: checked on a
    sample before writing).
    """
    import io

    import psycopg2
    from dagster_shared.serdes import serialize_value

    storage = instance.event_log_storage
    template_key = keys[0]
    row = storage._event_to_row(_materialization(asset_key, template_key, timestamp))
    for probe in (keys[len(keys) // 2], keys[-1]):
        expected = serialize_value(_materialization(asset_key, probe, timestamp))
        if row["event"].replace(template_key, probe) != expected:
            raise RuntimeError("serialized materialization is not a template of its key")
    event_text = _copy_text(row["event"])
    fixed = [_copy_text(row[c]) for c in _COPY_COLUMNS]
    event_at = _COPY_COLUMNS.index("event")
    conn = psycopg2.connect(dbname=db, **POSTGRES)
    try:
        with conn, conn.cursor() as cur:
            for i in range(0, len(keys) - 1, 100_000):
                buffer = io.StringIO()
                for key in keys[i : min(i + 100_000, len(keys) - 1)]:
                    fixed[event_at] = event_text.replace(template_key, key)
                    buffer.write("\t".join(fixed))
                    buffer.write("\t")
                    buffer.write(key)
                    buffer.write("\n")
                buffer.seek(0)
                columns = ", ".join((*_COPY_COLUMNS, "partition"))
                cur.copy_expert(f"COPY event_logs ({columns}) FROM STDIN", buffer)
    finally:
        conn.close()
    storage.store_event_batch([_materialization(asset_key, keys[-1], timestamp)])


def seed(
    instance: Any, db: str, start: int, stop: int, sets: int, asset_names: Sequence[str]
) -> dict[str, float]:
    """Register captures ``start..stop`` in their capture sets and one materialization per
    per-capture asset (each set's own key) for each."""
    from ego_assets.defs.partitions import group_by_set

    by_set = group_by_set((capture_key(i) for i in range(start, stop)), sets)
    t0 = time.perf_counter()
    for capture_set, keys in by_set.items():
        for i in range(0, len(keys), 50_000):
            instance.add_dynamic_partitions(capture_set.partitions_name, keys[i : i + 50_000])
    partitions_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    now = time.time()
    for capture_set, keys in by_set.items():
        for name in asset_names:
            _copy_materializations(instance, db, capture_set.key(name), keys, now)
    events_s = time.perf_counter() - t0
    return {
        "partitions_s": round(partitions_s, 2),
        "materializations_s": round(events_s, 2),
        "materializations": (stop - start) * len(asset_names),
        "largest_set": max((len(k) for k in by_set.values()), default=0),
    }


# ---------------------------------------------------------------- landing sensor tick


def land(landing: Path, start: int, count: int) -> None:
    """``count`` complete (marker written) capture folders from index ``start``."""
    from ego_assets.capture.manifest import write_marker

    for i in range(start, start + count):
        folder = landing / capture_key(i)
        folder.mkdir(parents=True)
        write_marker(folder, "holos")


def daemon_apply_partition_requests(instance: Any, requests: Sequence[Any]) -> None:
    """What the sensor daemon does with a tick's partition requests (dagster 1.13
    ``_daemon/sensor.py::_handle_dynamic_partitions_requests``): one existence query per
    key, then one bulk insert of the missing ones."""
    for request in requests:
        missing = [
            k
            for k in request.partition_keys
            if not instance.has_dynamic_partition(request.partitions_def_name, k)
        ]
        if missing:
            instance.add_dynamic_partitions(request.partitions_def_name, missing)


def sensor_ticks(
    instance: Any, defs: Any, resources: dict[str, Any], cursor: str | None, new: int
) -> tuple[dict[str, Any], str | None]:
    """Ticks of the landing sensor until ``new`` captures are registered."""
    import dagster as dg
    from dagster._core.storage.dagster_run import RunsFilter
    from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

    from ego_assets.defs.partitions import run_captures

    sensor = defs.get_sensor_def("landing_sensor")
    ticks: list[dict[str, float]] = []
    registered = 0
    start = time.perf_counter()
    while registered < new:
        t0 = time.perf_counter()
        # as the code server builds it: with an instance ref, so the run requests' partition
        # keys are checked against the instance (build_sensor_context skips that)
        context = dg.SensorEvaluationContext(
            instance_ref=instance.get_ref(),
            cursor=cursor,
            instance=instance,
            sensor_name=sensor.name,
            resources=resources,
            definitions=defs,
        )
        data = sensor.evaluate_tick(context)
        t1 = time.perf_counter()
        daemon_apply_partition_requests(instance, data.dynamic_partitions_requests or [])
        run_keys = [r.run_key for r in data.run_requests or [] if r.run_key]
        if run_keys:  # the daemon's duplicate check: runs already launched for these keys
            instance.get_runs(
                filters=RunsFilter(tags={SENSOR_NAME_TAG: sensor.name, RUN_KEY_TAG: run_keys})
            )
        t2 = time.perf_counter()
        cursor = data.cursor
        # captures handled this tick: those its run requests cover (a packed run covers
        # several; the sensor may register them itself instead of returning partition requests)
        added = sum(len(run_captures(r.tags or {})) for r in data.run_requests or [])
        if not added:
            raise RuntimeError("landing sensor registered nothing; landing folder empty?")
        registered += added
        ticks.append(
            {
                "captures": added,
                "run_requests": len(data.run_requests or []),
                "evaluate_s": round(t1 - t0, 3),
                "daemon_s": round(t2 - t1, 3),
            }
        )
    total = time.perf_counter() - start
    return {
        "sensor_tick_s": round(total, 3),
        "sensor_ticks": len(ticks),
        "sensor_runs_requested": sum(t["run_requests"] for t in ticks),
        "sensor_tick_detail": ticks,
    }, cursor


# ---------------------------------------------------------------- runs and automation


def chunk_run_start(instance: Any, defs: Any, capture_set: Any, keys: Sequence[str]) -> float:
    """Seconds from launching a ranged run over ``keys`` (consecutive in ``capture_set``)
    to its first step starting."""
    import dagster as dg

    job = defs.resolve_job_def(capture_set.job_name("capture_job"))
    tags = {
        "dagster/asset_partition_range_start": keys[0],
        "dagster/asset_partition_range_end": keys[-1],
    }
    start = time.time()
    result = job.execute_in_process(
        instance=instance,
        tags=tags,
        raise_on_error=False,
        asset_selection=[capture_set.key("raw_capture")],
    )
    (step_start,) = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.STEP_START)
    return step_start.timestamp - start


def backfill_command(
    instance: Any, defs: Any, keys: Sequence[str], sets: int
) -> tuple[list[str], float, list[dict[str, Any]]]:
    """``ego-assets backfill --captures KEYS`` as the command runs it
    (`capture_ops.launch_backfills`: one asset backfill per set over every per-capture
    asset): the backfill ids, the total seconds and per-set detail."""
    from ego_assets.defs.capture_ops import launch_backfills

    graph = defs.resolve_asset_graph()
    start = time.perf_counter()
    launched = launch_backfills(instance, graph, keys, sets=sets)
    total = time.perf_counter() - start
    detail = [{"set": b.capture_set.index, "captures": b.captures} for b in launched]
    return [b.backfill_id for b in launched], total, detail


def stale_code_ticks(instance: Any, defs: Any, size: int, max_automation: int) -> dict[str, Any]:
    """Two ticks of ``stale_code_sensor`` (the first records the code versions, the second
    is the steady state). An automation-condition sensor is evaluated as its daemon does
    (``evaluate_automation_conditions``), a plain sensor with ``evaluate_tick``; the
    automation evaluation is skipped above ``max_automation`` captures (its cost grows
    with them, see the figures below that size)."""
    import dagster as dg

    from ego_assets.defs.automation import STALE_TARGET

    sensor = defs.get_sensor_def("stale_code_sensor")
    automation = isinstance(sensor, dg.AutomationConditionSensorDefinition)
    if automation and size > max_automation:
        return {"stale_code_tick_s": None, "stale_code_skipped": f"> {max_automation} captures"}
    t0 = time.perf_counter()
    if automation:
        first = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, asset_selection=STALE_TARGET
        )
        t1 = time.perf_counter()
        second = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, asset_selection=STALE_TARGET, cursor=first.cursor
        )
        requested = second.total_requested
    else:
        context = dg.SensorEvaluationContext(
            instance_ref=instance.get_ref(), instance=instance, definitions=defs
        )
        data = sensor.evaluate_tick(context)
        t1 = time.perf_counter()
        context = dg.SensorEvaluationContext(
            instance_ref=instance.get_ref(),
            instance=instance,
            definitions=defs,
            cursor=data.cursor,
        )
        requested = len(sensor.evaluate_tick(context).run_requests or [])
    t2 = time.perf_counter()
    return {
        "stale_code_first_tick_s": round(t1 - t0, 3),
        "stale_code_tick_s": round(t2 - t1, 3),
        "stale_code_requested": requested,
    }


# ---------------------------------------------------------------- one size, all sizes


def _wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as response:
            if response.status == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{url} not up after {timeout_s} s")


class Bench:
    """One growing instance measured at each size."""

    def __init__(
        self,
        tmp: Path,
        home: Path,
        db: str,
        repeat: int,
        browser: bool,
        daemon_s: float,
        max_automation: int,
        sets: int = 1,
    ) -> None:
        import dagster as dg

        from ego_assets.capture_sets import PER_CAPTURE_ASSETS
        from ego_assets.definitions import build_defs
        from ego_assets.defs.partitions import CaptureSet
        from ego_assets.defs.resources import StorageResource

        self.tmp, self.home, self.db, self.repeat = tmp, home, db, repeat
        self.browser, self.daemon_s, self.max_automation = browser, daemon_s, max_automation
        self.data = tmp / "data"
        self.landing = self.data / "landing"
        self.landing.mkdir(parents=True)
        self.storage = StorageResource(root=str(self.data))
        self.sets = sets
        self.defs = build_defs(self.storage, sets=sets)
        self.asset_names = PER_CAPTURE_ASSETS
        # the capture set whose asset page, chunk run and backfill detail are measured
        self.watched = CaptureSet(1 if sets > 1 else 0)
        self.instance = dg.DagsterInstance.from_config(str(home))
        self.registered = 0  # captures registered so far (seeded + landed)
        self.next_index = 0
        self.cursor: str | None = None
        self.root_runs = BACKFILL_EPISODES // 50

    def env(self) -> dict[str, str]:
        return {
            "DAGSTER_HOME": str(self.home),
            "EGO_DATA_DIR": str(self.data),
            "EGO_SENSOR_INTERVAL_S": "5",
            "DAGSTER_DISABLE_TELEMETRY": "1",
            "EGO_CAPTURE_SETS": str(self.sets),
        }

    def measure(self, size: int) -> dict[str, Any]:
        from ego_assets.capture_sets import capture_set
        from ego_assets.defs.episodes import BACKFILL_CHUNK
        from ego_assets.defs.partitions import group_by_set
        from ego_assets_tests.processes import daemon_args, free_port, start, stop, webserver_args

        out: dict[str, Any] = {"episodes": size, "sets": self.sets, "load_before": load_averages()}
        count = max(0, size - self.registered)
        log.info("size %d: seeding %d captures x %d assets", size, count, len(self.asset_names))
        out["seed"] = seed(
            self.instance,
            self.db,
            self.next_index,
            self.next_index + count,
            self.sets,
            self.asset_names,
        )
        seeded_end = self.next_index + count
        self.next_index, self.registered = seeded_end, self.registered + count
        log.info("size %d: seeded %s", size, out["seed"])

        land(self.landing, self.next_index, NEW_CAPTURES)
        ticks, self.cursor = sensor_ticks(
            self.instance, self.defs, {"storage": self.storage}, self.cursor, NEW_CAPTURES
        )
        self.next_index += NEW_CAPTURES
        self.registered += NEW_CAPTURES
        out.update(ticks)
        log.info("size %d: sensor %.2f s", size, out["sensor_tick_s"])

        seeded = group_by_set((capture_key(i) for i in range(seeded_end)), self.sets)
        watched_keys = seeded.get(self.watched, [])
        out["ui_asset_partitions"] = len(watched_keys) + sum(
            1
            for i in range(seeded_end, self.next_index)
            if capture_set(capture_key(i), self.sets) == self.watched.index
        )
        chunk = watched_keys[-BACKFILL_CHUNK:]
        out["chunk_run_start_s"] = round(
            min(
                chunk_run_start(self.instance, self.defs, self.watched, chunk)
                for _ in range(self.repeat)
            ),
            3,
        )
        log.info("size %d: chunk run start %.2f s", size, out["chunk_run_start_s"])
        out.update(stale_code_ticks(self.instance, self.defs, size, self.max_automation))
        log.info("size %d: stale-code tick %s s", size, out["stale_code_tick_s"])

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        gql = GraphQL(url)
        web = start("dagster-webserver", webserver_args(port), self.env(), self.tmp)
        services = [web]
        try:
            _wait_http(f"{url}/server_info", 300)
            out.update(
                ui_figures(
                    url,
                    gql,
                    self.tmp / f"chrome-{size}",
                    size,
                    self.repeat,
                    self.browser,
                    self.watched.key("raw_capture").path,
                )
            )
            log.info("size %d: partition status %s s", size, out.get("ui_partition_status_s"))
            keys = [capture_key(i) for i in range(seeded_end - BACKFILL_EPISODES, seeded_end)]
            backfill_ids, launch_s, detail = backfill_command(
                self.instance, self.defs, keys, self.sets
            )
            out["backfill_launch_s"] = round(launch_s, 3)
            out["backfill_launch_path"] = "ego-assets backfill (capture_ops.launch_backfills)"
            out["backfills"] = len(backfill_ids)
            out["backfill_detail"] = detail
            self.root_runs = sum(-(-d["captures"] // BACKFILL_CHUNK) for d in detail)
            log.info("size %d: backfill launch %.2f s", size, out["backfill_launch_s"])
            web_mem = rss_mb(web.process.pid)
            out["webserver_rss_mb"] = web_mem["VmHWM"]
            out["webserver_code_server_rss_mb"] = children_rss_mb(web.process.pid)
            if self.daemon_s > 0:
                land(self.landing, self.next_index, NEW_CAPTURES)
                last = capture_key(self.next_index + NEW_CAPTURES - 1)
                self.next_index += NEW_CAPTURES
                self.registered += NEW_CAPTURES
                daemon = start("dagster-daemon", daemon_args(), self.env(), self.tmp)
                services.append(daemon)
                out.update(self._daemon_phase(gql, daemon.process.pid, backfill_ids, last))
            for backfill_id in backfill_ids:
                self._cancel_backfill(gql, backfill_id)
            out["load_after"] = load_averages()
        finally:
            stop(services)
        return out

    def _daemon_phase(
        self, gql: GraphQL, pid: int, backfill_ids: Sequence[str], last: str
    ) -> dict[str, Any]:
        """Daemon with the landing sensor, the stale-code sensor and the backfill running."""
        from dagster._core.storage.dagster_run import RunsFilter

        from ego_assets.defs.partitions import partition_for_capture

        last_set = partition_for_capture(last, self.sets).partitions_name

        root_runs = self.root_runs  # ranged runs of BACKFILL_CHUNK per set's backfill
        start = time.monotonic()
        deadline = start + self.daemon_s
        registered_at = first_run_at = all_root_at = None
        while time.monotonic() < deadline:
            now = time.monotonic() - start
            if registered_at is None and self.instance.has_dynamic_partition(last_set, last):
                registered_at = now
            runs = sum(
                self.instance.get_runs_count(RunsFilter(tags={"dagster/backfill": backfill_id}))
                for backfill_id in backfill_ids
            )
            if runs and first_run_at is None:
                first_run_at = now
            if runs >= root_runs and all_root_at is None:
                all_root_at = now
            if registered_at is not None and all_root_at is not None and now > 90:
                break
            time.sleep(2)
        out: dict[str, Any] = {
            "daemon_landing_registered_s": registered_at and round(registered_at, 1),
            "daemon_backfill_first_run_s": first_run_at and round(first_run_at, 1),
            "daemon_backfill_root_runs_s": all_root_at and round(all_root_at, 1),
            "daemon_backfill_root_runs": root_runs,
        }
        out["daemon_landing_ticks"] = sensor_tick_times(gql, "landing_sensor")
        out["daemon_stale_code_ticks"] = sensor_tick_times(gql, "stale_code_sensor")
        out["daemon_rss_mb"] = rss_mb(pid)["VmHWM"]
        out["daemon_code_server_rss_mb"] = children_rss_mb(pid)
        return out

    @staticmethod
    def _cancel_backfill(gql: GraphQL, backfill_id: str) -> None:
        gql(
            "mutation C($id: String!) { cancelPartitionBackfill(backfillId: $id) { __typename } }",
            {"id": backfill_id},
        )

    def close(self) -> None:
        self.instance.dispose()


def run(
    sizes: Sequence[int],
    repeat: int,
    browser: bool,
    daemon_s: float,
    max_automation: int,
    json_path: Path | None = None,
    sets: int = 1,
) -> dict[str, Any]:
    """Every size in turn; the JSON is rewritten after each size (a 1M size runs for an
    hour, the smaller ones are kept if it is stopped)."""
    result: dict[str, Any] = {
        "sizes": {},
        "targets": TARGETS,
        "new_captures": NEW_CAPTURES,
        "capture_sets": sets,
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="ego-bench-scale-") as tmp_name:
        tmp = Path(tmp_name)
        with postgres_home(tmp / "home") as (home, db):
            result["database"] = db
            bench = Bench(tmp, home, db, repeat, browser, daemon_s, max_automation, sets)
            try:
                for size in sorted(sizes):
                    result["sizes"][str(size)] = bench.measure(size)
                    if json_path is not None:
                        json_path.write_text(json.dumps(result, indent=1) + "\n")
                    log.info("%s", json.dumps(result["sizes"][str(size)], default=str)[:2000])
            finally:
                bench.close()
    return result


ROWS = (
    ("sensor_tick_s", "landing sensor, 1,000 new captures (s)"),
    ("ui_partition_status_s", "UI partition status query (s)"),
    ("ui_asset_definition_s", "UI asset definition query (s)"),
    ("ui_materialize_dialog_loader_s", "UI materialize dialog loader (s)"),
    ("ui_asset_page_browser_cold_s", "asset page in Chromium, cold (s)"),
    ("ui_asset_page_browser_s", "asset page in Chromium, warm (s)"),
    ("ui_materialize_dialog_browser_s", "materialize dialog in Chromium (s)"),
    ("backfill_launch_s", "launch 10,000-capture backfill (s)"),
    ("daemon_backfill_root_runs_s", "daemon: backfill's first 200 runs queued (s)"),
    ("chunk_run_start_s", "chunk run: launch to first step (s)"),
    ("stale_code_tick_s", "stale-code sensor tick (s)"),
    ("webserver_rss_mb", "webserver peak RSS (MB)"),
    ("daemon_rss_mb", "daemon peak RSS (MB)"),
)


def table(result: dict[str, Any]) -> str:
    sizes = list(result["sizes"])
    width = max(len(label) for _, label in ROWS)
    lines = [f"{'':<{width}}  " + "  ".join(f"{int(s):>10,}" for s in sizes)]
    for key, label in ROWS:
        cells = []
        for s in sizes:
            value = result["sizes"][s].get(key)
            cells.append(f"{value:>10}" if value is not None else f"{'-':>10}")
        target = TARGETS.get(key)
        lines.append(
            f"{label:<{width}}  " + "  ".join(cells) + (f"  (<= {target})" if target else "")
        )
    return "\n".join(lines)


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = (
    "--episodes",
    "100",
    "--repeat",
    "1",
    "--no-browser",
    "--daemon-s",
    "0",
    "--max-automation-episodes",
    "100",
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--episodes", default="10000,100000,1000000", help="sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="warm repeats (best counts)")
    parser.add_argument("--no-browser", action="store_true", help="skip headless Chromium")
    parser.add_argument(
        "--daemon-s", type=float, default=300, help="daemon phase length cap, s (0: skip it)"
    )
    parser.add_argument(
        "--max-automation-episodes",
        type=int,
        default=100_000,
        help="largest size at which an automation-condition stale-code sensor is evaluated",
    )
    parser.add_argument(
        "--sets", type=int, default=1, help="capture sets (EGO_CAPTURE_SETS) for every size"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("dagster").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    sizes = [int(s.replace("_", "")) for s in args.episodes.split(",") if s.strip()]
    result = run(
        sizes,
        args.repeat,
        not args.no_browser,
        args.daemon_s,
        args.max_automation_episodes,
        args.json,
        args.sets,
    )
    report(table(result), result, args.json)
    return 0
