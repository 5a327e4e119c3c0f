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
no) is not a failure: it is logged, left unwritten and recorded as blocked, see below.

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
* blocked capture: in a single-capture run of an asset declared with
  ``output_required=False`` (every exporter should be) nothing is yielded, so the
  partition stays missing, the run succeeds and nothing downstream of it runs; otherwise,
  and in ranged runs (Dagster records every partition of the range), the partition's
  metadata says ``export: blocked`` with the reasons and no file was written.
"""

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any

import dagster as dg

from ego_assets.dagster_compat import add_partition_metadata
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


DATA_VERSION_TAG = "dagster/data_version"
CODE_VERSION_TAG = "dagster/code_version"
BLOCKED = "blocked"

AssetEvent = dg.MaterializeResult | dg.AssetMaterialization


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


def _failure(failures: dict[str, str], total: int) -> dg.Failure:
    listed = "; ".join(f"{k}: {v}" for k, v in failures.items())
    return dg.Failure(
        description=f"{len(failures)} of {total} captures failed: {listed}",
        metadata={FAILED_CAPTURES: dg.MetadataValue.json(failures)},
    )


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
            context.log.info(f"capture {key}: not exported: {exc}")
            results[key] = StepResult(key, BLOCKED, False, {"export": BLOCKED, "reasons": str(exc)})
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
    and check results."""
    metadata = {
        key: {**(extra(key) if extra and r.data_version != BLOCKED else {}), **step_metadata(r)}
        for key, r in results.items()
    }
    failures = getattr(results, "failures", None)
    if failures:
        yield from _record_good_captures(context, results, metadata)
        raise _failure(failures, len(results) + len(failures))
    if len(results) == 1 and not context.has_partition_key_range:
        ((key, result),) = results.items()
        if result.data_version == BLOCKED and _output_optional(context):
            return
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
        tags = {DATA_VERSION_TAG: result.data_version}
        if code_version:
            tags[CODE_VERSION_TAG] = code_version
        yield dg.AssetMaterialization(
            asset_key=context.asset_key, partition=key, metadata=metadata[key], tags=tags
        )


def _output_optional(context: dg.AssetExecutionContext) -> bool:
    """Whether the asset was declared with ``output_required=False``."""
    name = context.assets_def.get_output_name_for_asset_key(context.asset_key)
    return not context.op_def.output_def_named(name).is_required


def materialize_each(
    context: dg.AssetExecutionContext, step: Callable[[str], StepResult]
) -> Iterator[AssetEvent]:
    """`run_each` then `materialize_result`: the whole body of a simple per-capture asset."""
    yield from materialize_result(context, run_each(context, step))
