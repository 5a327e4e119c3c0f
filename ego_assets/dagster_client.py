"""The export API's and the CLI's one door to Dagster.

``ego_assets.api`` and ``ego_assets.cli`` import neither ``dagster`` nor ``ego_assets.defs``;
everything they need from the orchestrator is here:

* the instance: `instance_from_env` (``$DAGSTER_HOME``; one clear line when it is unset,
  `InstanceMissingError`), the `DagsterInstance` type for annotations;
* launching: `GraphQLLauncher` (through the webserver, so the run coordinator queues the
  run and the UI lists it), `launch_backfills` (asset backfills added to the instance,
  run by the backfill daemon), `where` (a capture's set, assets and job);
* runs by tag: `latest_run`, `runs_updated_since`, `run_failure` (`RunInfo`: id, status,
  tags, creation and update times in epoch seconds);
* partition status: `has_capture`, `capture_page`, `has_materialization`;
* `report_export`: record in Dagster an export written outside a run (the export API's
  inline exports), as the exporter asset's step would have;
* `instance_lock`: a lock held across hosts that share a Postgres instance;
* where an export lives in Dagster (`ExportTarget`, `export_target`) and the run tags the
  exporters write (`EXPORT_TAG`, `PROGRESS_TAG`, `PHASE_TAG`, `PARTITION_TAG`).

Private Dagster names stay in `ego_assets.dagster_compat`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from ego_assets.dagster_compat import postgres_run_storage_connection
from ego_assets.defs.exports import (
    EXPORT_TAG,
    PARTITION_TAG,
    PHASE_TAG,
    PROGRESS_TAG,
    ExportTarget,
    export_target,
    exporter_code_versions,
)
from ego_assets.defs.partitions import all_sets, page_captures, partition_for_capture

__all__ = [
    "EXPORT_TAG",
    "PARTITION_TAG",
    "PHASE_TAG",
    "PROGRESS_TAG",
    "DagsterInstance",
    "ExportTarget",
    "GraphQLLauncher",
    "InstanceMissingError",
    "RunInfo",
    "backfill",
    "capture_page",
    "check_instance_env",
    "export_target",
    "exporter_code_versions",
    "has_capture",
    "has_materialization",
    "instance_from_env",
    "instance_lock",
    "latest_run",
    "migrate",
    "report_export",
    "run_demo",
    "run_failure",
    "runs_updated_since",
    "unregistered",
    "where",
]

DagsterInstance = dg.DagsterInstance
DAGSTER_HOME_ENV = "DAGSTER_HOME"


class InstanceMissingError(Exception):
    """The command needs a Dagster instance and none is configured (one line)."""


def check_instance_env(environ: Mapping[str, str] = os.environ) -> None:
    """`InstanceMissingError` naming what to set when ``$DAGSTER_HOME`` is unset, relative
    or not a folder (what `DagsterInstance.get` would raise as a long traceback)."""
    home = (environ.get(DAGSTER_HOME_ENV) or "").strip()
    if not home:
        raise InstanceMissingError(
            f"no Dagster instance: set {DAGSTER_HOME_ENV} to the instance folder "
            "(`make dev` and `make demo` use ./.dagster_home)"
        )
    if not Path(home).is_absolute() or not Path(home).is_dir():
        raise InstanceMissingError(
            f"no Dagster instance: {DAGSTER_HOME_ENV}={home} is not an absolute path to a folder"
        )


def instance_from_env() -> dg.DagsterInstance:
    """The instance of ``$DAGSTER_HOME`` (`check_instance_env` first)."""
    check_instance_env()
    return dg.DagsterInstance.get()


# -- runs by tag ----------------------------------------------------------------------

QUEUED = frozenset(
    {dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING}
)
RUNNING = frozenset(
    {dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.MANAGED}
)
FAILED = frozenset({dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED})


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run as the API sees it: times are epoch seconds."""

    run_id: str
    status: str  # Dagster's status name: QUEUED, STARTED, SUCCESS, FAILURE, CANCELED, ...
    tags: Mapping[str, str]
    created: float
    updated: float

    @property
    def queued(self) -> bool:
        """Waiting in the queue or starting."""
        return dg.DagsterRunStatus(self.status) in QUEUED

    @property
    def running(self) -> bool:
        return dg.DagsterRunStatus(self.status) in RUNNING

    @property
    def failed(self) -> bool:
        """Failed or cancelled."""
        return dg.DagsterRunStatus(self.status) in FAILED

    @property
    def canceled(self) -> bool:
        return self.status == dg.DagsterRunStatus.CANCELED.value


def _run_info(record: dg.RunRecord) -> RunInfo:
    run = record.dagster_run
    return RunInfo(
        run_id=run.run_id,
        status=run.status.value,
        tags=dict(run.tags),
        created=record.create_timestamp.timestamp(),
        updated=record.update_timestamp.timestamp(),
    )


def latest_run(instance: dg.DagsterInstance, tags: Mapping[str, str]) -> RunInfo | None:
    """The newest run carrying every tag in ``tags`` (one indexed query)."""
    records = instance.get_run_records(filters=dg.RunsFilter(tags=dict(tags)), limit=1)
    return _run_info(records[0]) if records else None


def runs_updated_since(instance: dg.DagsterInstance, since: float) -> list[RunInfo]:
    """Runs updated after epoch second ``since``, oldest update first."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(updated_after=dt.datetime.fromtimestamp(since, dt.UTC)),
        order_by="update_timestamp",
        ascending=True,
    )
    return [_run_info(r) for r in records]


def run_failure(instance: dg.DagsterInstance, run_id: str) -> str:
    """Why a run failed: ``step <key>: <error>`` of its first failed step (a `dg.Failure`'s
    own description, such as a blocked export's reasons, rather than its class name),
    else the run failure's message; "" when its log says nothing."""
    message = ""
    records = instance.all_logs(
        run_id, of_type={dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE}
    )
    for entry in records:
        event = entry.dagster_event
        if event is None:
            continue
        data = event.event_specific_data
        error = getattr(data, "error", None)
        described = getattr(getattr(data, "user_failure_data", None), "description", None)
        text = described or getattr(error, "message", None)
        if text:
            step = f"step {event.step_key}: " if event.step_key else ""
            return step + str(text).strip()
        if not message and event.message:
            message = event.message
    return message


# -- partition status -------------------------------------------------------------------


def has_materialization(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str) -> bool:
    """Whether partition ``partition`` of asset ``key`` was ever materialized (one query)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
    ).records
    return bool(records)


def report_export(
    instance: dg.DagsterInstance,
    target: ExportTarget,
    exporter: Any,
    storage: Any,
    result: Any,
    by: str,
) -> None:
    """Record ``target``'s export, written outside a run by ``by`` (``exporter``'s
    `StepResult` ``result`` over ``storage``), as a materialization of its asset's
    partition with the step's metadata, data version and code version (no run)."""
    from ego_assets.defs.export_assets import export_materialization

    event = export_materialization(
        target.asset_key, exporter, storage, target.partition_key, result, by
    )
    instance.report_runless_asset_event(event)


def has_capture(instance: dg.DagsterInstance, capture_id: str, sets: int | None = None) -> bool:
    """Whether the capture is registered: a partition of its set among ``sets`` capture
    sets (default ``EGO_CAPTURE_SETS``). Raises `CaptureKeyError` for an id that breaks the
    key rule."""
    where = partition_for_capture(capture_id, sets)
    return instance.has_dynamic_partition(where.partitions_name, where.partition_key)


def capture_page(
    instance: dg.DagsterInstance, after: str | None, limit: int
) -> tuple[list[str], str | None]:
    """One page of registered captures after cursor ``after`` and the next cursor.

    The captures of every partition set, set after set (a page holds one set's:
    `page_captures`); the cursor is ``<set index>:<the set's cursor>``. Raises
    ValueError for a cursor that is not one.
    """
    sets = all_sets()
    index, inner = 0, None
    if after:
        head, sep, rest = after.partition(":")
        if not (sep and head.isdigit() and int(head) < len(sets)):
            raise ValueError(f"not a captures page cursor: {after!r}")
        index, inner = int(head), rest or None
    keys, next_inner = page_captures(instance, inner, limit, sets[index])
    if next_inner is not None:
        return keys, f"{index}:{next_inner}"
    return keys, f"{index + 1}:" if index + 1 < len(sets) else None


@contextlib.contextmanager
def instance_lock(instance: dg.DagsterInstance, name: str) -> Iterator[None]:
    """A Postgres advisory lock named ``name`` held in the block, on its own connection to
    the instance's run storage (released with it, also when this process dies); nothing
    on an instance that is not on Postgres."""
    connection = postgres_run_storage_connection(instance)
    if connection is None:
        yield
        return
    from sqlalchemy import text

    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    lock_id = int.from_bytes(digest, "big", signed=True)
    with connection as conn:
        conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": lock_id})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": lock_id})


# -- launching --------------------------------------------------------------------------


class GraphQLLauncher:
    """Launches export runs through the Dagster webserver's GraphQL API (the run
    coordinator queues them, the UI lists them)."""

    def __init__(self, url: str) -> None:
        from urllib.parse import urlparse

        from dagster_graphql import DagsterGraphQLClient

        parsed = urlparse(url if "://" in url else f"http://{url}")
        self._client = DagsterGraphQLClient(
            parsed.hostname or "127.0.0.1",
            port_number=parsed.port,
            use_https=parsed.scheme == "https",
            path_prefix=parsed.path.rstrip("/").removesuffix("/graphql"),
            timeout=60,
        )

    def launch(
        self, target: ExportTarget, run_config: dict[str, Any], upstream: bool = True
    ) -> str:
        """Submit ``target``'s export job for its partition (without ``upstream``: the
        exporter asset alone); returns the run id."""
        return self._client.submit_job_execution(
            target.job_name,
            run_config=run_config,
            tags={PARTITION_TAG: target.partition_key, EXPORT_TAG: target.format},
            asset_selection=None if upstream else [target.asset_key],
        )


def where(capture_key: str, sets: int | None = None) -> dict[str, object]:
    """Where a capture is in Dagster: set, partitions definition, group, asset keys, job."""
    from ego_assets.defs.capture_ops import where as where_in_sets

    return where_in_sets(capture_key, sets)


def unregistered(
    instance: dg.DagsterInstance, capture_keys: Sequence[str], sets: int | None = None
) -> list[str]:
    """Those of ``capture_keys`` that are not registered captures among ``sets`` sets (one
    indexed query per key)."""
    return [key for key in capture_keys if not has_capture(instance, key, sets)]


def backfill(
    instance: dg.DagsterInstance,
    capture_keys: Sequence[str] | None,
    assets: Sequence[str],
    sets: int | None,
    out: Callable[[str], None],
) -> int:
    """``ego-assets backfill``: one asset backfill per capture set (all captures when
    ``capture_keys`` is None); prints each backfill id."""
    from ego_assets.defs.capture_ops import backfill_command

    return backfill_command(instance, capture_keys, assets, sets, out)


def migrate(
    instance: dg.DagsterInstance,
    sets: int,
    current_sets: int | None,
    apply: bool,
    out: Callable[[str], None],
) -> int:
    """``ego-assets partitions migrate`` on ``instance``."""
    from ego_assets.defs.capture_ops import migrate_command

    return migrate_command(instance, sets, current_sets, apply, out)


def run_demo(data_dir: Path, seconds: float) -> int:
    """``ego-assets demo``: the platform on local files and a local instance."""
    from ego_assets.defs.demo import run_demo as demo

    return demo(data_dir, seconds=seconds)
