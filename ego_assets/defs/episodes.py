"""Run a per-capture step over every partition of a (possibly ranged) run.

Assets call `materialize_each` with a plain function ``step(key) -> StepResult``. Each
partition's figures become that partition's metadata; a failing capture is logged with
its error and the others still complete; the run then fails naming every bad capture.
"""

from collections.abc import Callable
from typing import Any

import dagster as dg

from ego_assets.pipeline import StepResult

# Chunk size of backfills: contiguous keys per run (see docs/trajectory-model.md).
BACKFILL_CHUNK = 25
backfill_policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=BACKFILL_CHUNK)


def _metadata(result: StepResult) -> dict[str, Any]:
    md: dict[str, Any] = dict(result.figures)
    md["data_version"] = result.data_version
    md["reused"] = result.reused
    return md


def materialize_each(
    context: dg.AssetExecutionContext, step: Callable[[str], StepResult]
) -> dg.MaterializeResult:
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
        listed = "; ".join(f"{k}: {v}" for k, v in failures.items())
        raise dg.Failure(
            description=f"{len(failures)} of {len(keys)} captures failed: {listed}",
            metadata={"failed_captures": dg.MetadataValue.json(failures)},
        )
    if len(keys) == 1:
        result = results[keys[0]]
        return dg.MaterializeResult(
            metadata=_metadata(result), data_version=dg.DataVersion(result.data_version)
        )
    for key, result in results.items():
        context.add_asset_metadata(_metadata(result), partition_key=key)
    return dg.MaterializeResult()
