"""Run a per-capture step over every partition of a (possibly ranged) run.

Assets call `run_each` with a plain function ``step(key) -> StepResult``. A failing
capture is logged with its error and the others still complete (their outputs are
written straight through the storage resource); the step then fails naming every bad
capture (``failed_captures`` metadata: key -> error), so the good captures are reused,
not recomputed, when they run again.

In a ranged run (a backfill chunk, or a landing tick's packed run) the good captures of a
failing step are recorded before it fails: one ``AssetMaterialization`` per good capture,
with its own metadata and content hash, and none for the bad ones. Dagster 1.13 cannot
do this with the step's output: a yielded output (``MaterializeResult``) records *every*
partition of the range, and a step that yields no output skips everything downstream of
it in the run. So the step yields no output and fails; the steps downstream of it do not
run in this run, the bad captures' partitions are failed (planned in a failed run, never
materialized), and the landing sensor requests the good ones again in a follow-up run
(`ego_assets.defs.sensors`), where the steps already done are reused.

A capture that an exporter's gate blocks (`ExportBlockedError`, the export policy said
no) is left unwritten and never materialized: Dagster 1.13 has no "blocked" partition
status (materialized, failed, in progress or missing only), and "materialized" would
claim an export that does not exist. Once every other capture of the run is recorded,
the step fails with `blocked_failure`: a `dg.Failure` whose description is the gate's
message (the reasons) and whose metadata says ``gate: blocked`` with
``blocking_reasons``, raised without a stack trace (`failure_without_trace`: the step's
log shows ``ExportBlockedError: <the gate's message>`` and the metadata, nothing of
Dagster's or this code's frames, since nothing went wrong). The partition then reads
*Failed* ("Run ... failed, and did not materialize this asset", its step log naming the
reasons), the run reads *Failure* beside its ``ego/gate=blocked`` tag, and the run is
tagged not to be retried for a step failure (`NO_RETRY_TAGS`): a retry would be blocked
again. See docs/quality.md.

`materialize_result` yields what Dagster records per partition:

* single-capture run: one `MaterializeResult` carrying the capture's metadata and its
  content-derived data version (``dagster/data_version``).
* ranged (backfill) run: one `MaterializeResult` for the chunk; Dagster writes one
  materialization per partition from it, each carrying that capture's own metadata
  (figures, ``data_version`` = the content hash, ``reused``). Dagster 1.13 gives every
  partition of a ranged output the *same* ``dagster/data_version`` tag (`MaterializeResult`
  has no partition field), so in ranged runs that tag is Dagster's logical version (code
  version + inputs) and the capture's content hash is the ``data_version`` metadata entry.
  Recording exact per-capture tags would take one more event per capture and asset, which
  roughly tripled Dagster's per-capture cost in a backfill on Postgres (``python -m bench
  orchestration``). What is recomputed is decided by the pipeline's lineage files (content
  hashes), never by Dagster's tag, so a re-run over unchanged captures reuses every one.
* a ranged run with a blocked capture (exporters): as with a failing capture above, the
  others are recorded one `AssetMaterialization` each and the step fails, naming the
  blocked ones (``blocking_reasons`` by capture key). Their partitions read *Failed*
  where the run was created with one "planned" event per partition: the daemon and the
  webserver, and the demo (`planned_per_partition`). Where
  ``DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS`` is set (`RUN_WORKER_ENV`, in the
  process creating the run) they read *Missing*; the run's failure and the quality
  report's ``export_gate`` check still name them. A blocked failure names no
  ``failed_captures``, so the landing sensor's follow-ups never request it again.
"""

import os
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg

from ego_assets.dagster_compat import add_partition_metadata, failure_without_trace
from ego_assets.defs.partitions import CaptureSet
from ego_assets.pipeline import StepResult
from ego_assets.quality.gate import ExportBlockedError

# Contiguous captures per run in a backfill. Each run has a fixed cost: in-process, about
# 0.5-0.75 s (run creation, reading the dynamic partition keys, step events, input data
# versions); in a deployment also a worker process or pod that imports the code location
# (3-12 s). Per capture what remains is one materialization per asset (batched on
# Postgres, see RUN_WORKER_ENV). `python -m bench orchestration` (100 x 30 s captures,
# Postgres, best of 3): overhead 0.145 of the library loop at 25 per run, 0.063 at 50
# (+21 ms per capture). A run of 50 ten-minute captures takes ~4 min today (~5 s of
# ingest, normalize and quality each), more once exports land: short enough to retry;
# captures already finished in a failed chunk are reused on retry.
BACKFILL_CHUNK = 50
backfill_policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=BACKFILL_CHUNK)


def per_capture_asset(
    cs: CaptureSet, name: str, **asset_args: Any
) -> Callable[..., dg.AssetsDefinition]:
    """The ``dg.asset`` decorator of capture set ``cs``'s per-capture asset ``name``: its key
    and partitions in that set, backfills in ranged runs of `BACKFILL_CHUNK` captures;
    ``asset_args`` are the rest of ``dg.asset``'s arguments (group, kinds, versions...)."""
    return dg.asset(
        key=cs.key(name),
        partitions_def=cs.partitions_def,
        backfill_policy=backfill_policy,
        **asset_args,
    )


# Event-writing switches for every process that executes runs: loading the code location
# (`ego_assets.definitions`) sets them unless the environment already does, so run
# workers, run pods and celery workers all have them; `python -m bench orchestration`
# measures with them. Both are Dagster's own switches, off by default:
# * DAGSTER_EVENT_BATCH_SIZE: the per-partition materializations of a ranged output are
#   written as one batch (one INSERT on Postgres; SQLite still writes them one by one).
# * DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS: a ranged run records one "planned"
#   event per asset holding the partition range, not one per partition. Cost: when a
#   chunk fails, its partitions show as missing rather than failed in the asset's
#   partition bar; the backfill (which reads the run's range tags) and the step's
#   `failed_captures` metadata still name the failed captures.
RUN_WORKER_ENV = {
    "DAGSTER_EVENT_BATCH_SIZE": str(BACKFILL_CHUNK),
    "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "1",
}


def apply_run_worker_env(environ: MutableMapping[str, str]) -> None:
    """Set each `RUN_WORKER_ENV` variable that ``environ`` does not set already."""
    for name, value in RUN_WORKER_ENV.items():
        environ.setdefault(name, value)


PLANNED_SUBSET_ENV = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"


@contextmanager
def planned_per_partition() -> Iterator[None]:
    """Runs created in this process inside the block record one "planned" event per
    partition (`PLANNED_SUBSET_ENV` off), so a failed run marks its partition *Failed*.

    Dagster reads the switch where a run is created (the daemon, the webserver, or the
    process calling ``execute_in_process``). For single-capture runs it saves nothing
    (one partition, one event either way) and would leave a blocked or failed capture's
    partition *Missing*: `ego_assets.defs.demo` creates its runs inside this block."""
    before = os.environ.get(PLANNED_SUBSET_ENV)
    os.environ[PLANNED_SUBSET_ENV] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PLANNED_SUBSET_ENV, None)
        else:
            os.environ[PLANNED_SUBSET_ENV] = before


DATA_VERSION_TAG = "dagster/data_version"
CODE_VERSION_TAG = "dagster/code_version"
BLOCKED = "blocked"
# Metadata keys, one per fact, shared by quality_report, its export_gate check and the
# exporters' blocked failures: the verdict ("allowed" / "blocked") and its reasons.
GATE_KEY = "gate"
REASONS_KEY = "blocking_reasons"
# A run with a blocked capture is not retried for a step failure (a retry is blocked
# again); crashes are still retried. Dagster's own run tag, read by the retry daemon.
NO_RETRY_TAGS = {"dagster/retry_on_asset_or_op_failure": "false"}

AssetEvent = dg.MaterializeResult | dg.AssetMaterialization


@dataclass(frozen=True, slots=True)
class BlockedResult(StepResult):
    """A capture the export policy blocked: nothing written (`run_each`).

    Attributes:
        message: the gate's message (names the capture, policy version and reasons).
        reasons: one text per blocking finding.
    """

    message: str = ""
    reasons: tuple[str, ...] = ()


def blocked_failure(blocked: Mapping[str, BlockedResult], by_capture: bool) -> dg.Failure:
    """The step failure of a run whose ``blocked`` captures were not exported: the gate's
    messages as its description, ``gate: blocked`` and the reasons as its metadata (a
    list; ``by_capture``, for a ranged run: a list per capture key)."""
    reasons: Any = (
        {key: r.reasons for key, r in blocked.items()}
        if by_capture
        else next(iter(blocked.values())).reasons
    )
    failure = dg.Failure(
        description="\n".join(r.message for r in blocked.values()),
        metadata={GATE_KEY: BLOCKED, REASONS_KEY: dg.MetadataValue.json(reasons)},
        allow_retries=False,
    )
    # an expected outcome of the policy, not a fault: the step's log shows the reasons
    # and no stack trace (`failure_without_trace`)
    return failure_without_trace(failure, ExportBlockedError.__name__)


def is_blocked_failure(failure: Any) -> bool:
    """Whether a step failure's data (`dg.Failure` metadata) is `blocked_failure`'s."""
    user = getattr(failure, "user_failure_data", None)
    value = (getattr(user, "metadata", None) or {}).get(GATE_KEY)
    return getattr(value, "value", None) == BLOCKED


def step_metadata(result: StepResult) -> dict[str, Any]:
    md: dict[str, Any] = dict(result.figures)
    md["data_version"] = result.data_version
    md["reused"] = result.reused
    return md


FAILED_CAPTURES = "failed_captures"  # step failure metadata: capture key -> error


class StepResults(dict[str, StepResult]):
    """The good captures' results of one step, by key; ``failures`` holds the bad ones'
    errors (ranged runs only: `materialize_result` records the good ones, then fails)."""

    failures: dict[str, str]

    def __init__(self, results: dict[str, StepResult], failures: dict[str, str]) -> None:
        super().__init__(results)
        self.failures = failures


def _failure(
    failures: dict[str, str], total: int, blocked: Mapping[str, "BlockedResult"] | None = None
) -> dg.Failure:
    """The step failure naming the bad captures (``failed_captures``: key -> error) and
    the blocked ones (`blocked_failure`'s description and metadata)."""
    if not failures:
        return blocked_failure(blocked or {}, by_capture=total > 1)
    listed = "; ".join(f"{k}: {v}" for k, v in failures.items())
    description = f"{len(failures)} of {total} captures failed: {listed}"
    metadata: dict[str, Any] = {FAILED_CAPTURES: dg.MetadataValue.json(failures)}
    if blocked:
        extra = blocked_failure(blocked, by_capture=True)
        description += "\n" + (extra.description or "")
        metadata[REASONS_KEY] = extra.metadata[REASONS_KEY]
    return dg.Failure(description=description, metadata=metadata)


def run_each(context: dg.AssetExecutionContext, step: Callable[[str], StepResult]) -> StepResults:
    """Apply ``step`` to every partition key of the run; see the module docstring.

    Single-capture run: a failing capture fails the step here. Ranged run: the failures
    are returned with the good results (`StepResults.failures`) for `materialize_result`.
    """
    keys = list(context.partition_keys)
    results: dict[str, StepResult] = {}
    failures: dict[str, str] = {}
    for key in keys:
        try:
            results[key] = step(key)
        except ExportBlockedError as exc:
            context.log.info(f"capture {key}: not exported (blocked by its gate)")
            results[key] = BlockedResult(
                key, BLOCKED, False, {GATE_KEY: BLOCKED}, str(exc), exc.reasons
            )
        except Exception as exc:
            context.log.error(f"capture {key}: {exc}")
            failures[key] = f"{type(exc).__name__}: {exc}"
    if failures:
        for key, result in results.items():
            context.log.info(f"capture {key}: done ({result.data_version})")
        if not context.has_partition_key_range:
            raise _failure(failures, len(keys))
    return StepResults(results, failures)


def materialize_result(
    context: dg.AssetExecutionContext,
    results: dict[str, StepResult],
    extra: Callable[[str], dict[str, Any]] | None = None,
    check_results: Sequence[dg.AssetCheckResult] = (),
) -> Iterator[AssetEvent]:
    """Per-partition metadata (``extra(key)`` first, then the step's figures), data versions
    and check results; a blocked capture fails the step once the others are recorded."""
    blocked = {k: r for k, r in results.items() if isinstance(r, BlockedResult)}
    metadata = {
        key: {**(extra(key) if extra else {}), **step_metadata(r)}
        for key, r in results.items()
        if key not in blocked
    }
    failures = getattr(results, "failures", None) or {}
    if failures or blocked:
        good = {k: r for k, r in results.items() if k not in blocked}
        assert not check_results, "a step that blocks or fails captures has no check results"
        yield from _record_good_captures(context, good, metadata)
        if blocked:
            _tag_no_retry(context)
        raise _failure(failures, len(results) + len(failures), blocked)
    if len(results) == 1 and not context.has_partition_key_range:
        ((key, result),) = results.items()
        yield dg.MaterializeResult(
            metadata=metadata[key],
            data_version=dg.DataVersion(result.data_version),
            check_results=list(check_results),
        )
        return
    for key, md in metadata.items():
        add_partition_metadata(context, key, md)
    yield dg.MaterializeResult(check_results=list(check_results))


def _record_good_captures(
    context: dg.AssetExecutionContext,
    results: dict[str, StepResult],
    metadata: dict[str, dict[str, Any]],
) -> Iterator[dg.AssetMaterialization]:
    """One materialization per good capture of a ranged step that fails (no output: see
    the module docstring), tagged with its content hash and the asset's code version."""
    code_version = context.assets_def.code_versions_by_key.get(context.asset_key)
    for key, result in results.items():
        yield partition_materialization(
            context.asset_key, key, metadata[key], result.data_version, code_version
        )


def partition_materialization(
    asset_key: dg.AssetKey,
    key: str,
    metadata: Mapping[str, Any],
    data_version: str,
    code_version: str | None,
    tags: Mapping[str, str] | None = None,
) -> dg.AssetMaterialization:
    """Capture ``key``'s materialization of ``asset_key`` as the asset's own step records
    it: ``metadata``, tagged with its data version and the asset's code version."""
    all_tags = {DATA_VERSION_TAG: data_version, **(tags or {})}
    if code_version:
        all_tags[CODE_VERSION_TAG] = code_version
    return dg.AssetMaterialization(
        asset_key=asset_key, partition=key, metadata=dict(metadata), tags=all_tags
    )


def _tag_no_retry(context: dg.AssetExecutionContext) -> None:
    try:
        context.instance.add_run_tags(context.run_id, NO_RETRY_TAGS)
    except Exception as exc:  # advisory: the failure itself must still be raised
        context.log.warning(f"run tags {NO_RETRY_TAGS} not recorded: {exc}")


def materialize_each(
    context: dg.AssetExecutionContext, step: Callable[[str], StepResult]
) -> Iterator[AssetEvent]:
    """`run_each` then `materialize_result`: the whole body of a simple per-capture asset."""
    yield from materialize_result(context, run_each(context, step))
