"""Staleness-driven re-runs: when a per-capture step's code changes, redo what it made.

Convention (every per-capture asset, exporters included):

* ``code_version`` comes from one constant in the module that implements the step
  (``raw-1`` in ingest, `ego_assets.pipeline.TRAJECTORY_CODE_VERSION`, the quality report +
  thresholds version; an exporter uses ``f"{EXPORTER}-{FORMAT_SPEC_VERSION}"`` from its
  own module). Bump it exactly when the step's output for unchanged input changes.
* data versions are content hashes (raw manifest SHA-256 -> ``normalize-N:<sha>`` ->
  ``<quality version>:<trajectory version>``), so unchanged inputs are not recomputed:
  the pipeline compares them with the stored lineage and reuses the stored output.

`stale_code_sensor` re-runs a capture's partition of an asset (below raw_capture) when
the asset's code version changed and the partition was materialized before the change
was seen and not since; missing partitions are not stale (they are new work for the
landing sensor), nor are partitions whose upstream partition is missing.

Why a plain sensor and not Dagster's declarative automation: an automation-condition
sensor evaluates every partition of every targeted asset on each tick, and in Dagster
1.13 storing one tick's evaluation lists the whole dynamic partitions definition about
a hundred times (``python -m bench scale``: 19 s per tick at 11,000 captures, growing
linearly). This sensor costs a constant number of queries per tick when no code changed
(it compares code versions held in its cursor) and, after a change, one page of
`PAGE_SIZE` captures per changed asset per tick: three bounded queries per page, and at
most one asset backfill per tick covering that page's stale partitions, which the
daemon splits into ranged runs of `BACKFILL_CHUNK` captures. A re-run after a bump at a
million captures is therefore 100 ticks of <= 10,000 captures each, never one request
for everything. Its first tick only records the current versions, so turning it on
never re-runs anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import dagster as dg

from ego_assets.dagster_compat import asset_partitions_run_request
from ego_assets.defs.partitions import (
    SET0,
    CaptureSet,
    all_sets,
    page_captures,
    set_of_partitions_def,
)

STALE_CODE_INTERVAL_S = 60
# Pages of `PAGE_SIZE` captures walked per tick, over every (set, asset) with pending
# work: with one set that is one page per changed asset (five per-capture assets below
# the raw copy); with many sets the walk takes more ticks, never a bigger one.
STALE_PAGES_PER_TICK = 5


def stale_target(sets: Sequence[CaptureSet] = (SET0,)) -> dg.AssetSelection:
    """Every per-capture asset fed by the raw copy (trajectory, quality_report, exporters)
    in each of ``sets``."""
    return dg.AssetSelection.assets(*(cs.key("raw_capture") for cs in sets)).downstream(
        include_self=False
    )


STALE_TARGET = stale_target()


def stale_partitions(
    instance: dg.DagsterInstance,
    asset_graph: Any,
    asset_key: dg.AssetKey,
    keys: Sequence[str],
    seen_before: int,
) -> list[str]:
    """Which of ``keys`` (one page) need ``asset_key`` re-run after its code changed.

    Stale: latest materialization at or before event-log id ``seen_before`` (the last id
    the sensor saw under the old code version) and every per-capture parent materialized.
    One query for the asset and one per parent, each over the page's keys only.
    """
    if not keys:
        return []
    storage = instance.event_log_storage
    latest = storage.get_latest_storage_id_by_partition(
        asset_key, dg.DagsterEventType.ASSET_MATERIALIZATION, partitions=set(keys)
    )
    stale = {k for k, storage_id in latest.items() if storage_id <= seen_before}
    for parent in asset_graph.get(asset_key).parent_keys:
        if not stale or asset_graph.get(parent).partitions_def is None:
            continue
        present = storage.get_latest_storage_id_by_partition(
            parent, dg.DagsterEventType.ASSET_MATERIALIZATION, partitions=stale
        )
        stale &= set(present)
    return [k for k in keys if k in stale]


def _cursor(versions: dict[str, str], mark: int, pending: dict[str, Any]) -> str:
    return json.dumps({"versions": versions, "mark": mark, "pending": pending}, sort_keys=True)


def _parse_cursor(cursor: str | None) -> dict[str, Any] | None:
    """This sensor's cursor, or None for no cursor or another format (the automation-
    condition sensor of the same name before this one kept its state there): a first
    tick, which only records the code versions."""
    try:
        state = json.loads(cursor or "")
    except ValueError:
        return None
    if not isinstance(state, dict) or not {"versions", "mark", "pending"} <= state.keys():
        return None
    return state


def _capture_set_of(graph: Any, key: dg.AssetKey) -> CaptureSet | None:
    partitions_def = graph.get(key).partitions_def
    name = getattr(partitions_def, "name", None)
    return set_of_partitions_def(name) if name else None


def _stale_code_sensor(
    context: dg.SensorEvaluationContext, selection: dg.AssetSelection = STALE_TARGET
) -> dg.SensorResult:
    """Compare code versions with the cursor's; page through changed assets' captures.

    State per (set, asset): the asset key names both (``s001/trajectory``); each pending
    entry pages through its own set's partitions, at most `STALE_PAGES_PER_TICK` pages
    per tick in all.
    """
    instance = context.instance
    graph = context.repository_def.asset_graph  # type: ignore[union-attr]
    selected = selection.resolve(graph)
    targets = [
        k
        for k in graph.toposorted_asset_keys
        if k in selected and _capture_set_of(graph, k) is not None
    ]
    versions = {k.to_user_string(): graph.get(k).code_version or "" for k in targets}
    mark = instance.event_log_storage.get_maximum_record_id() or 0
    state = _parse_cursor(context.cursor)
    if state is None:
        return dg.SensorResult(
            skip_reason="first tick: recorded the current code versions",
            cursor=_cursor(versions, mark, {}),
        )
    pending: dict[str, Any] = {k: v for k, v in state["pending"].items() if k in versions}
    for asset, version in versions.items():
        if asset in state["versions"] and state["versions"][asset] != version:
            # pages restart from the first capture if the same asset is bumped again
            pending[asset] = {"seen_before": state["mark"], "after": None}
            context.log.info(f"{asset}: code version {state['versions'][asset]} -> {version}")
    requested: set[tuple[dg.AssetKey, str]] = set()
    for asset in list(pending)[:STALE_PAGES_PER_TICK]:
        page = pending[asset]
        key = dg.AssetKey.from_user_string(asset)
        capture_set = _capture_set_of(graph, key)
        assert capture_set is not None  # targets are per-capture assets only
        keys, after = page_captures(instance, page["after"], capture_set=capture_set)
        stale = stale_partitions(instance, graph, key, keys, page["seen_before"])
        requested.update((key, k) for k in stale)
        context.log.info(f"{asset}: {len(stale)} of {len(keys)} captures in this page stale")
        if after is None:
            del pending[asset]
        else:
            page["after"] = after
    cursor = _cursor(versions, mark, pending)
    if not requested:
        return dg.SensorResult(skip_reason="no stale captures", cursor=cursor)
    return dg.SensorResult(
        run_requests=[asset_partitions_run_request(graph, requested, tags={})], cursor=cursor
    )


def build_stale_code_sensor(sets: int | None = None) -> dg.SensorDefinition:
    """`stale_code_sensor` over the per-capture assets of ``sets`` capture sets (default
    ``EGO_CAPTURE_SETS``)."""
    selection = stale_target(all_sets(sets))

    def stale_code_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        return _stale_code_sensor(context, selection)

    return dg.sensor(
        name="stale_code_sensor",
        asset_selection=selection,
        minimum_interval_seconds=STALE_CODE_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Re-runs captures whose step's code version changed, as chunked asset backfills "
            "of at most a few pages of captures per tick (per capture set and asset)."
        ),
    )(stale_code_sensor)


stale_code_sensor = build_stale_code_sensor(1)
