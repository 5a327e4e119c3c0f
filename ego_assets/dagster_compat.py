"""Every private Dagster name the platform uses, in one place (Dagster 1.13.27).

Private means an underscore name: a ``dagster._core`` module, or an underscore attribute
of a Dagster object. Nothing else in ``ego_assets`` touches one; each use below is listed
in `PRIVATE_NAMES` with what it must accept, and ``ego_assets_tests/test_dagster_compat.py``
checks every entry and exercises every function, so a Dagster upgrade that moves or
changes one fails there, naming the name and the function to update, instead of in a run.

Public Dagster calls stay where they are used (``defs/``, `ego_assets.dagster_client`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.errors import DagsterUserCodeProcessError
from dagster._core.instance.ref import InstanceRef
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
    PARTITION_SET_TAG,
)
from dagster._core.utils import make_new_backfill_id
from dagster._utils.error import SerializableErrorInfo

__all__ = [
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "PARTITION_NAME_TAG",
    "PARTITION_SET_TAG",
    "PRIVATE_NAMES",
    "CheckRunHealthResult",
    "WorkerStatus",
    "add_partition_metadata",
    "asset_partitions_run_request",
    "dynamic_partitions_after",
    "dynamic_partitions_mark",
    "execute_run_here",
    "failure_without_trace",
    "insert_dynamic_partitions_postgres",
    "instance_at",
    "instance_ref_modules",
    "launch_asset_backfill",
    "launcher_instance",
    "load_repository_of_origin",
    "postgres_run_storage_connection",
    "serialized_instance_ref",
]

# (private name, the parameters or attributes the platform relies on, which function here
# uses it). `test_dagster_compat` imports each name and checks those.
PRIVATE_NAMES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "dagster._core.execution.backfill.PartitionBackfill.from_asset_partitions",
        (
            "backfill_id",
            "asset_graph",
            "partition_names",
            "asset_selection",
            "backfill_timestamp",
            "tags",
            "dynamic_partitions_store",
            "all_partitions",
            "title",
            "description",
            "run_config",
        ),
        "launch_asset_backfill",
    ),
    ("dagster._core.utils.make_new_backfill_id", (), "launch_asset_backfill"),
    (
        "dagster._core.definitions.assets.graph.asset_graph_subset.AssetGraphSubset"
        ".from_asset_partition_set",
        ("asset_partitions_set", "asset_graph"),
        "asset_partitions_run_request",
    ),
    (
        "dagster._core.definitions.events.AssetKeyPartitionKey",
        ("asset_key", "partition_key"),
        "asset_partitions_run_request",
    ),
    (
        "dagster.RunRequest.for_asset_graph_subset",
        ("asset_graph_subset", "tags"),
        "asset_partitions_run_request",
    ),
    ("dagster._core.instance.ref.InstanceRef.from_dir", ("base_dir",), "instance_at"),
    (
        "dagster._core.instance.ref.InstanceRef",
        ("run_storage_data", "event_storage_data", "schedule_storage_data"),
        "instance_ref_modules",
    ),
    ("dagster._core.launcher.CheckRunHealthResult", ("status", "msg"), "(re-export)"),
    ("dagster._core.launcher.WorkerStatus", ("RUNNING", "FAILED", "UNKNOWN"), "(re-export)"),
    ("dagster._core.storage.tags.PARTITION_NAME_TAG", (), "(re-export)"),
    ("dagster._core.storage.tags.ASSET_PARTITION_RANGE_START_TAG", (), "(re-export)"),
    ("dagster._core.storage.tags.ASSET_PARTITION_RANGE_END_TAG", (), "(re-export)"),
    ("dagster._core.storage.tags.PARTITION_SET_TAG", (), "(re-export)"),
    (
        "dagster._core.storage.event_log.schema.DynamicPartitionsTable",
        ("c.partitions_def_name", "c.partition"),
        "insert_dynamic_partitions_postgres",
    ),
    (
        "dagster._core.storage.event_log.schema.DynamicPartitionsTable",
        ("c.id", "c.partitions_def_name", "c.partition"),
        "dynamic_partitions_mark, dynamic_partitions_after",
    ),
    (
        "dagster._core.storage.event_log.sql_event_log.SqlEventLogStorage.index_connection",
        (),
        "dynamic_partitions_mark, dynamic_partitions_after",
    ),
    (
        "dagster._core.storage.event_log.sql_event_log.SqlEventLogStorage._check_partitions_table",
        ("self",),
        "dynamic_partitions_mark",
    ),
    (
        "dagster_postgres.event_log.event_log.PostgresEventLogStorage._check_partitions_table",
        ("self",),
        "insert_dynamic_partitions_postgres",
    ),
    (
        "dagster_postgres.run_storage.run_storage.PostgresRunStorage._engine",
        (),
        "postgres_run_storage_connection",
    ),
    (
        "dagster._core.instance.types.MayHaveInstanceWeakref._instance",
        (),
        "launcher_instance",
    ),
    (
        "dagster._cli.api._execute_run_command_body",
        ("run_id", "instance", "write_stream_fn", "set_exit_code_on_failure"),
        "execute_run_here",
    ),
    ("dagster._utils.interrupts.capture_interrupts", (), "execute_run_here"),
    (
        "dagster._utils.hosted_user_process.recon_repository_from_origin",
        ("origin",),
        "load_repository_of_origin",
    ),
    (
        "dagster._core.errors.DagsterUserCodeProcessError.user_code_process_error_infos",
        (),
        "failure_without_trace",
    ),
    (
        "dagster._utils.error.serializable_error_info_from_exc_info",
        ("exc_info", "hoist_user_code_error"),
        "failure_without_trace",
    ),
    (
        "dagster._utils.error.SerializableErrorInfo",
        ("message", "stack", "cls_name"),
        "failure_without_trace",
    ),
    (
        "dagster._core.execution.context.compute.OpExecutionContext._step_execution_context",
        (),
        "add_partition_metadata",
    ),
    (
        "dagster._core.execution.context.system.StepExecutionContext._metadata_accumulator",
        (),
        "add_partition_metadata",
    ),
)


def instance_at(home: str) -> dg.DagsterInstance:
    """The instance whose ``dagster.yaml`` (or none: SQLite defaults) is in folder ``home``
    (what `DagsterInstance.get` opens for ``$DAGSTER_HOME``, for any folder)."""
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(home))


def launch_asset_backfill(
    instance: dg.DagsterInstance,
    asset_graph: Any,
    partition_keys: Sequence[str],
    asset_keys: Sequence[dg.AssetKey],
    tags: Mapping[str, str],
    title: str,
) -> str:
    """Add an asset backfill of ``asset_keys`` x ``partition_keys`` (what the UI's "Launch
    backfill" does; the backfill daemon runs it); returns its id."""
    # the backfill machinery costs ~0.4 s to import: a code location's load does without
    from dagster._core.execution.backfill import PartitionBackfill

    backfill_id = make_new_backfill_id()
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=backfill_id,
        asset_graph=asset_graph,
        partition_names=list(partition_keys),
        asset_selection=list(asset_keys),
        backfill_timestamp=time.time(),
        tags=dict(tags),
        dynamic_partitions_store=instance,
        all_partitions=False,
        title=title,
        description=None,
        run_config=None,
    )
    instance.add_backfill(backfill)
    return backfill_id


def asset_partitions_run_request(
    asset_graph: Any, partitions: Iterable[tuple[dg.AssetKey, str]], tags: Mapping[str, str]
) -> dg.RunRequest:
    """One run request for these (asset, partition) pairs; from a sensor, the daemon turns
    it into an asset backfill split by the assets' backfill policies."""
    requested = {AssetKeyPartitionKey(key, partition) for key, partition in partitions}
    subset = AssetGraphSubset.from_asset_partition_set(requested, asset_graph)
    return dg.RunRequest.for_asset_graph_subset(subset, tags=dict(tags))


def insert_dynamic_partitions_postgres(
    instance: dg.DagsterInstance, rows: Sequence[tuple[str, str]]
) -> bool:
    """Insert (partitions definition name, partition key) rows of any number of dynamic
    partitions definitions in one ``INSERT ... ON CONFLICT DO NOTHING`` on a Postgres
    instance; False (nothing done) on any other storage.

    The statement is the one ``PostgresEventLogStorage.add_dynamic_partitions`` sends for
    one definition, preceded by the same table check.
    """
    try:
        from dagster._core.storage.event_log.schema import DynamicPartitionsTable
        from dagster_postgres.event_log.event_log import PostgresEventLogStorage
        from sqlalchemy.dialects import postgresql
    except ImportError:
        return False
    storage = instance.event_log_storage
    if not isinstance(storage, PostgresEventLogStorage):
        return False
    values = [{"partitions_def_name": name, "partition": key} for name, key in rows]
    storage._check_partitions_table()
    with storage.index_connection() as conn:
        conn.execute(
            postgresql.insert(DynamicPartitionsTable).values(values).on_conflict_do_nothing()
        )
    return True


def dynamic_partitions_mark(instance: dg.DagsterInstance) -> int | None:
    """The newest dynamic partition's row id over every definition (0: none yet); None when
    the event log is not SQL storage (the caller then treats every key as registered
    before). Keys registered after it are `dynamic_partitions_after` this mark."""
    import sqlalchemy  # ~1 s to import: only when partitions are read
    from dagster._core.storage.event_log.schema import DynamicPartitionsTable
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    storage = instance.event_log_storage
    if not isinstance(storage, SqlEventLogStorage):
        return None
    storage._check_partitions_table()
    query = sqlalchemy.select(sqlalchemy.func.max(DynamicPartitionsTable.c.id))
    with storage.index_connection() as conn:
        return int(conn.execute(query).scalar() or 0)


def dynamic_partitions_after(
    instance: dg.DagsterInstance, mark: int, names: Sequence[str]
) -> list[tuple[str, str]]:
    """(definition name, key) of every partition of the definitions ``names`` registered
    after ``mark`` (`dynamic_partitions_mark`), in registration order: one indexed query
    (row id > mark), whatever the number registered before."""
    import sqlalchemy  # ~1 s to import: only when partitions are read
    from dagster._core.storage.event_log.schema import DynamicPartitionsTable
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    storage = instance.event_log_storage
    assert isinstance(storage, SqlEventLogStorage), "dynamic_partitions_mark said SQL storage"
    table = DynamicPartitionsTable.c
    query = (
        sqlalchemy.select(table.partitions_def_name, table.partition)
        .where(table.id > mark, table.partitions_def_name.in_(list(names)))
        .order_by(table.id)
    )
    with storage.index_connection() as conn:
        return [(str(name), str(key)) for name, key in conn.execute(query).fetchall()]


def postgres_run_storage_connection(
    instance: dg.DagsterInstance,
) -> contextlib.AbstractContextManager[Any] | None:
    """A new SQLAlchemy connection to the instance's run storage when it is on Postgres
    (closed with the block, also when the process dies); None on any other storage."""
    storage = instance.run_storage
    engine = getattr(storage, "_engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        return None
    return storage.connect()  # type: ignore[attr-defined]


def add_partition_metadata(
    context: dg.AssetExecutionContext, partition_key: str, metadata: Mapping[str, Any]
) -> None:
    """``context.add_asset_metadata(metadata, partition_key=...)`` without its per-call check.

    The public call re-reads every key of the dynamic partitions definition from the
    instance to check that ``partition_key`` is in the run (a query per call, several ms
    and growing with the number of captures); callers pass keys from
    ``context.partition_keys``, so the check is redundant. This updates the step context's
    metadata accumulator the way the public call does; if an upgrade moves it, the public
    call is used (slower, same result).
    """
    step = getattr(context.op_execution_context, "_step_execution_context", None)
    accumulator = getattr(step, "_metadata_accumulator", None)
    if accumulator is None or not hasattr(accumulator, "with_additional_asset_metadata"):
        context.add_asset_metadata(dict(metadata), partition_key=partition_key)
        return
    step._metadata_accumulator = accumulator.with_additional_asset_metadata(  # type: ignore[union-attr]
        asset_key=context.asset_key, partition_key=partition_key, metadata=dict(metadata)
    )


class _FailureWithoutTrace(dg.Failure, DagsterUserCodeProcessError):
    """A `dg.Failure` that carries its own, already serialized error: no stack trace.

    Dagster turns a raised `dg.Failure` into a step failure whose error is the exception
    with its traceback (the UI prints it under "Stack Trace"), but an exception that is
    a `DagsterUserCodeProcessError` holding one error info is recorded as that info
    (`serializable_error_info_from_exc_info`'s ``hoist_user_code_error``, meant for
    errors already serialized in another process). Being a `dg.Failure` too, it keeps
    the failure's description, metadata and ``allow_retries`` (the step fails, the run
    fails, its partitions read Failed).
    """

    def __init__(self, failure: dg.Failure, error_class: str) -> None:
        Exception.__init__(self, failure.description)
        self.description = failure.description
        self.metadata = failure.metadata
        self.allow_retries = failure.allow_retries
        info = SerializableErrorInfo(
            message=f"{error_class}: {failure.description}\n", stack=[], cls_name=error_class
        )
        self.user_code_process_error_infos = [info]


def failure_without_trace(failure: dg.Failure, error_class: str) -> dg.Failure:
    """``failure`` raised so that its step failure records no stack trace: for an expected
    outcome (an export the policy blocks), not a fault in the code. The step failure's
    error reads ``<error_class>: <description>``; ``user_failure_data`` is the failure's
    (description, metadata) as for any `dg.Failure`."""
    return _FailureWithoutTrace(failure, error_class)


def launcher_instance(launcher: Any) -> dg.DagsterInstance:
    """The instance a run launcher (or any instance-bound Dagster object) belongs to."""
    return launcher._instance


def serialized_instance_ref(instance: dg.DagsterInstance) -> str:
    """``instance``'s reference as text (what a run worker opens the instance from)."""
    return dg.serialize_value(instance.get_ref())


def load_repository_of_origin(serialized_origin: str) -> dg.RepositoryDefinition:
    """Load, in this process, the repository a serialized ``RepositoryPythonOrigin`` (a
    run's ``job_code_origin.repository_origin``) points at: its module imported and its
    definitions built as a run worker of that origin would."""
    from dagster._utils.hosted_user_process import recon_repository_from_origin

    return recon_repository_from_origin(dg.deserialize_value(serialized_origin)).get_definition()  # type: ignore[arg-type]


def instance_ref_modules(serialized_ref: str) -> list[str]:
    """The modules of every configurable class (storages, launcher, coordinator, compute
    logs) a serialized instance reference names: what opening the instance imports."""
    ref = dg.deserialize_value(serialized_ref, InstanceRef)
    modules = []
    for value in ref:
        module = getattr(value, "module_name", None)
        if isinstance(module, str):
            modules.append(module)
    return modules


def execute_run_here(serialized_ref: str, run_id: str) -> int:
    """Execute run ``run_id`` in this process as ``dagster api execute_run`` does (the
    command `DefaultRunLauncher`'s and `K8sRunLauncher`'s run workers run): the instance
    opened from ``serialized_ref``, the job reconstructed from the run's own origin, its
    RUN_START and every event written by this process, SIGINT turned into an interrupt
    that ends the run (cancelled when the run is CANCELING). Returns 0 (as the command
    without ``set_exit_code_on_failure``)."""
    from dagster._cli.api import _execute_run_command_body
    from dagster._utils.interrupts import capture_interrupts

    ref = dg.deserialize_value(serialized_ref, InstanceRef)
    with capture_interrupts(), dg.DagsterInstance.from_ref(ref) as instance:
        return _execute_run_command_body(
            run_id, instance, lambda _event: None, set_exit_code_on_failure=False
        )
