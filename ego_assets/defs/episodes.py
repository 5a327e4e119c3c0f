"""Run a per-capture step over every partition of a (possibly ranged) run.

Assets call `run_each` with a plain function ``step(key) -> StepResult``. A failing
capture is logged with its error and the others still complete (their outputs are
written); the step then fails naming every bad capture, so the chunk is retried and the
good captures are reused, not recomputed. `materialize_result` turns the results into
per-partition metadata (and a data version for single-capture runs).
"""

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from ego_assets.pipeline import StepResult

# Contiguous captures per run in a backfill: a 25-capture chunk of 10-minute episodes
# runs in minutes, and a failed chunk is cheap to retry because finished work is reused.
BACKFILL_CHUNK = 25
backfill_policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=BACKFILL_CHUNK)


def step_metadata(result: StepResult) -> dict[str, Any]:
    md: dict[str, Any] = dict(result.figures)
    md["data_version"] = result.data_version
    md["reused"] = result.reused
    return md


def run_each(
    context: dg.AssetExecutionContext, step: Callable[[str], StepResult]
) -> dict[str, StepResult]:
    """Apply ``step`` to every partition key of the run; see the module docstring."""
    keys = list(context.partition_keys)
    results: dict[str, StepResult] = {}
    failures: dict[str, str] = {}
    for key in keys:
        try:
            results[key] = step(key)
        except Exception as exc:
            context.log.error(f"capture {key}: {exc}")
            failures[key] = f"{type(exc).__name__}: {exc}"
    if failures:
        for key, result in results.items():
            context.log.info(f"capture {key}: done ({result.data_version})")
        listed = "; ".join(f"{k}: {v}" for k, v in failures.items())
        raise dg.Failure(
            description=f"{len(failures)} of {len(keys)} captures failed: {listed}",
            metadata={"failed_captures": dg.MetadataValue.json(failures)},
        )
    return results


def materialize_result(
    context: dg.AssetExecutionContext,
    results: dict[str, StepResult],
    extra: Callable[[str], dict[str, Any]] | None = None,
    check_results: Sequence[dg.AssetCheckResult] = (),
) -> dg.MaterializeResult:
    """Metadata per partition (``extra(key)`` adds to it) and the check results."""
    metadata = {
        key: {**step_metadata(r), **(extra(key) if extra else {})} for key, r in results.items()
    }
    if len(results) == 1:
        ((key, result),) = results.items()
        return dg.MaterializeResult(
            metadata=metadata[key],
            data_version=dg.DataVersion(result.data_version),
            check_results=list(check_results),
        )
    for key, md in metadata.items():
        context.add_asset_metadata(md, partition_key=key)
    return dg.MaterializeResult(check_results=list(check_results))


def materialize_each(
    context: dg.AssetExecutionContext, step: Callable[[str], StepResult]
) -> dg.MaterializeResult:
    """`run_each` then `materialize_result`: the whole body of a simple per-capture asset."""
    return materialize_result(context, run_each(context, step))
