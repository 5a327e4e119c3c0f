"""Landing-zone sensor: registers complete captures as partitions and requests their runs.

Each capture goes to its capture set (`ego_assets.defs.partitions`): registered in that
set's partitions definition and run by that set's ``capture_job`` (``capture_job_s001``
...), so one tick costs one insert per set it touches, whatever the number registered.

Packed runs: the captures one tick registers are contiguous in their set's partitions
(dynamic keys keep insertion order), so they go in ranged runs of up to
``EGO_CAPTURES_PER_RUN`` captures (default 16), one per set and chunk; a tick with one
capture still gets a single-capture run. Each run is a process (default launcher) or a
pod (`K8sRunLauncher`) that loads the code location, so packing shares that fixed cost.
Every capture's partitions are still materialized one by one, and the run coordinator
queues packed runs like any other.

A capture that fails in a packed run: the failing step records the good captures and
fails naming the bad ones (`ego_assets.defs.episodes`); the steps after it do not run in
that run. The next ticks then request the good captures again (`follow_up_requests`), in
runs of their own without the bad ones, which reuse what is done and export the rest.
The bad captures stay failed, with the error naming capture and file on the failed run.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import dagster as dg

from ego_assets.capture_sets import PER_CAPTURE_ASSETS
from ego_assets.defs.episodes import FAILED_CAPTURES
from ego_assets.defs.landing_inline import (
    DEFAULT_INLINE_MAX_S,
    InlineEvent,
    inline_capture_events,
    materialized_assets,
)
from ego_assets.defs.partitions import (
    CAPTURE_JOB,
    DEFAULT_CAPTURES_PER_RUN,
    PACKED_TAG,
    SET0,
    CaptureSet,
    all_sets,
    asset_name,
    packed_run_request,
    partition_for_capture,
    register_captures_packed,
    resolve_sets,
    run_captures,
)
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry
from ego_assets.landing import scan_landing

# Captures registered per tick: keeps each tick far below the 60 s sensor timeout.
MAX_CAPTURES_PER_TICK = 200
# Seconds between ticks; deployments (and the end-to-end test) set EGO_SENSOR_INTERVAL_S,
# read when the definitions load. The daemon's sensor loop itself wakes every ~5 s.
SENSOR_INTERVAL_ENV = "EGO_SENSOR_INTERVAL_S"
DEFAULT_SENSOR_INTERVAL_S = 30
# The daemon evaluates sensors on a 5 s loop and skips a sensor whose last tick began less
# than its minimum interval ago. Its wake-ups drift by milliseconds, so an interval of a
# whole number of loops (5, 30 s) skipped the wake-up it was due on about half the time
# (measured: ticks a median 9.8 s apart for 5 s). The sensor asks for one second less, so
# a tick comes at the first wake-up once the interval has passed.
DAEMON_LOOP_SLACK_S = 1
SENSOR_NAME = "landing_sensor"
SENSOR_NAME_TAG = "dagster/sensor_name"
FOLLOW_UP_TAG = "ego/follow_up_of"  # on a run finishing a failed packed run's good captures
# Failed packed runs looked at per tick: those updated in the last hour (one query); the
# daemon skips a follow-up whose run key already ran, so asking again costs nothing.
FOLLOW_UP_WINDOW_S = 3600.0
FOLLOW_UP_MAX_RUNS = 100


@functools.cache  # one definition per set and executor (the module-level one is set 0's)
def build_capture_job(
    cs: CaptureSet, executor_def: dg.ExecutorDefinition | None = None
) -> dg.UnresolvedAssetJobDefinition:
    """Set ``cs``'s ``capture_job``: everything per capture for one of its captures, on
    ``executor_def`` (None: the code location's)."""
    return dg.define_asset_job(
        cs.job_name(CAPTURE_JOB),
        selection=dg.AssetSelection.assets(*(cs.key(name) for name in PER_CAPTURE_ASSETS)),
        description="Everything per capture, from the raw copy to the checked outputs and exports.",
        executor_def=executor_def,
    )


capture_job = build_capture_job(SET0)


def sensor_interval_s(environ: Mapping[str, str]) -> int:
    """Tick interval from ``EGO_SENSOR_INTERVAL_S`` (whole seconds >= 1), default 30."""
    text = environ.get(SENSOR_INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_SENSOR_INTERVAL_S
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{SENSOR_INTERVAL_ENV} must be a whole number of seconds >= 1: {text!r}")
    return int(text)


def build_landing_sensor(
    interval_s: int = DEFAULT_SENSOR_INTERVAL_S,
    sets: int | None = None,
    jobs: list[dg.UnresolvedAssetJobDefinition] | None = None,
    per_run: int = DEFAULT_CAPTURES_PER_RUN,
    inline_s: float = DEFAULT_INLINE_MAX_S,
) -> dg.SensorDefinition:
    """`landing_sensor` ticking every ``interval_s`` seconds over ``sets`` capture sets
    (default ``EGO_CAPTURE_SETS``), requesting runs of each set's ``capture_job``
    (``jobs``: those jobs, default built here) of up to ``per_run`` captures each; a
    capture alone in its tick and at most ``inline_s`` seconds long is taken through
    every asset by the tick itself (`ego_assets.defs.landing_inline`; 0: never)."""
    n = resolve_sets(sets)
    targets = jobs if jobs is not None else [build_capture_job(cs) for cs in all_sets(n)]
    return dg.sensor(
        name=SENSOR_NAME,
        jobs=targets,
        minimum_interval_seconds=max(1, interval_s - DAEMON_LOOP_SLACK_S),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Ticks every {interval_s} s (EGO_SENSOR_INTERVAL_S). "
            "Watches the landing zone: every complete capture (marker written) becomes a "
            "partition of its capture set (`captures`, `captures_s001`, ...; registered by "
            "the sensor in one bulk insert per set). The captures of one tick run in packed "
            f"runs of their set's capture_job, up to {per_run} captures each "
            "(EGO_CAPTURES_PER_RUN; run key first...last), each capture's partitions "
            "materialized on their own; a capture registered before (e.g. by `make demo`) "
            "gets a run of its own with run key = capture key, so it is never run again. "
            "When a capture fails in a packed run, the next ticks run its good neighbours "
            "again without it (tag ego/follow_up_of). A capture alone in its tick and at "
            f"most {inline_s:g} s long (EGO_SENSOR_INLINE_MAX_S) is taken through every "
            "asset by the tick itself, without a run (materializations tagged "
            "ego/materialized_by or ego/exported_by = landing_sensor); a blocked or "
            "failing one still gets its run."
        ),
    )(_landing_sensor_over(n, per_run, inline_s))


def _landing_sensor_over(
    sets: int, per_run: int, inline_s: float
) -> Callable[..., dg.SensorResult | dg.SkipReason]:
    def landing_sensor(
        context: dg.SensorEvaluationContext, storage: StorageResource
    ) -> dg.SensorResult | dg.SkipReason:
        return _landing_sensor(context, storage, sets, per_run, inline_s)

    return landing_sensor


def _landing_sensor(
    context: dg.SensorEvaluationContext,
    storage: StorageResource,
    sets: int,
    per_run: int,
    inline_s: float,
) -> dg.SensorResult | dg.SkipReason:
    """New complete captures in the landing zone -> partitions + packed run requests, and
    the follow-ups of failed packed runs.

    The daemon then drops requests whose run key already ran (one query over the keys).
    """
    scan = scan_landing(storage.get_storage(), context.cursor, MAX_CAPTURES_PER_TICK)
    for name in scan.rejected:
        context.log.warning(f"landing folder {name!r} is not a valid capture key; skipped")
    for key in scan.quarantined:
        context.log.warning(f"capture {key!r} is quarantined (consent withdrawn); skipped")
    follow_ups = follow_up_requests(context.instance, sets, per_run, time.time())
    if not scan.keys and not follow_ups:
        if scan.cursor != context.cursor:
            context.update_cursor(scan.cursor)
        return dg.SkipReason("no new complete captures")
    # O(new captures) in instance queries, whatever the number registered: one bulk insert
    # per set here, two queries to pack, and run requests that need no per-key existence
    # check (see `register_captures_packed`).
    requests = register_captures_packed(context.instance, scan.keys, sets, per_run)
    if len(scan.keys) == 1 and len(requests) == 1 and inline_s > 0:
        (key,) = scan.keys
        events = _inline(context, storage, key, sets, inline_s)
        if events:
            message = (
                f"capture {key}: {', '.join(materialized_assets(events))} written in this tick"
            )
            context.log.info(f"{message} (no run: one capture of at most {inline_s:g} s)")
            return dg.SensorResult(
                run_requests=follow_ups,
                asset_events=events,
                cursor=scan.cursor,
                skip_reason=None if follow_ups else f"{message}; no run needed",
            )
    if scan.keys:
        context.log.info(
            f"registered {len(scan.keys)} captures in {len(requests)} runs; "
            f"{scan.pending} left for the next tick"
        )
    return dg.SensorResult(run_requests=[*requests, *follow_ups], cursor=scan.cursor)


def _inline(
    context: dg.SensorEvaluationContext,
    storage: StorageResource,
    key: str,
    sets: int,
    max_s: float,
) -> list[InlineEvent]:
    """`inline_capture_events` for a lone capture; [] (with the reason in the tick's log)
    when its run must take it."""
    cs = partition_for_capture(key, sets).capture_set
    try:
        events, why = inline_capture_events(cs, storage.get_storage(), key, max_s)
    except Exception as exc:  # its run fails with the same error, in the run's logs
        context.log.warning(f"capture {key}: {type(exc).__name__}: {exc}; a run takes it")
        return []
    if not events:
        context.log.info(f"capture {key}: {why}; a run takes it")
    return events


def failed_captures(instance: dg.DagsterInstance, run_id: str) -> tuple[dict[str, str], bool]:
    """The captures a failed run names (capture key -> error, from its failed steps'
    ``failed_captures``) and whether a step *before* the exports failed (then the good
    captures' later steps did not run). Empty when no step named captures (a crash)."""
    failed: dict[str, str] = {}
    upstream = False
    exporters = set(registry.names())
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        event = entry.dagster_event
        data = event.step_failure_data if event is not None else None
        user = data.user_failure_data if data is not None else None
        value = user.metadata.get(FAILED_CAPTURES) if user is not None else None
        if value is None or not isinstance(value.value, dict):
            continue
        failed.update({str(k): str(v) for k, v in value.value.items()})
        step = str(event.step_key if event is not None else "")
        upstream = upstream or asset_name(dg.AssetKey(step.split("__"))) not in exporters
    return failed, upstream


def follow_up_requests(
    instance: dg.DagsterInstance, sets: int, per_run: int, now: float
) -> list[dg.RunRequest]:
    """Runs for the good captures of this sensor's packed runs that failed in the last
    `FOLLOW_UP_WINDOW_S` on a step before the exports: the captures between the bad ones,
    packed again (contiguous, so ranged runs still hold), each run tagged `FOLLOW_UP_TAG`.
    One query for the runs, one per failed run for its step failures."""
    records = instance.get_run_records(
        dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.FAILURE],
            tags={SENSOR_NAME_TAG: SENSOR_NAME},
            updated_after=_utc(now - FOLLOW_UP_WINDOW_S),
        ),
        limit=FOLLOW_UP_MAX_RUNS,
    )
    requests: list[dg.RunRequest] = []
    for record in records:
        run = record.dagster_run
        keys = run_captures(run.tags)
        if PACKED_TAG not in run.tags or len(keys) < 2:
            continue
        failed, upstream = failed_captures(instance, run.run_id)
        if not failed or not upstream:
            continue  # a crash (run retries handle it), or only exports failed
        cs = partition_for_capture(keys[0], sets).capture_set
        for group in _between(keys, failed):
            for start in range(0, len(group), per_run):
                chunk = group[start : start + per_run]
                requests.append(packed_run_request(cs, chunk, tags={FOLLOW_UP_TAG: run.run_id}))
    return requests


def _between(keys: Sequence[str], bad: Mapping[str, str]) -> list[list[str]]:
    """The runs of consecutive ``keys`` that are not in ``bad``."""
    groups: list[list[str]] = [[]]
    for key in keys:
        if key in bad:
            groups.append([])
        else:
            groups[-1].append(key)
    return [g for g in groups if g]


def _utc(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)


landing_sensor = build_landing_sensor(sets=1)
