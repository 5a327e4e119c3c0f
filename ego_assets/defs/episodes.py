"""Run a per-capture step over every partition of a (possibly ranged) run.

Assets call `run_each` with a plain function ``step(key) -> StepResult``. A failing
capture is logged with its error and the others still complete (their outputs are
written straight through the storage resource); the step then fails naming every bad
capture, so the chunk is retried and the good captures are reused, not recomputed.

`materialize_result` yields what Dagster records per partition:

* single-capture run: one `MaterializeResult` carrying the capture's metadata and its
  content-derived data version (``dagster/data_version``).
* ranged (backfill) run: Dagster 1.13 gives every partition of a ranged output the *same*
  data version (one ``Output`` per step; `MaterializeResult` has no partition field and
  ``DataVersionsByPartition`` exists only for observable source assets). So the asset
  first yields its `MaterializeResult` (the output, which downstream steps of the same run
  wait for, with the check results), then one `AssetMaterialization` per partition with
  the capture's metadata and its own data version and code version tags. That later
  event is the partition's latest materialization, so the UI, the staleness resolver and
  downstream provenance read the per-capture data version. Cost: one extra event per
  partition (measured by ``python -m bench orchestration``).
  Dagster still records the *inputs* of a ranged run as one hash over the range, so
  partition-level "upstream data changed" staleness is only exact for single-capture
  runs; the pipeline's own lineage files (content hashes) decide what is recomputed.
"""

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dagster as dg

from ego_assets.pipeline import StepResult

# Contiguous captures per run in a backfill. Measured with `python -m bench orchestration`
# (2-core machine, SQLite instance, in-process runs, 2 s captures): a run costs ~0.4 s of
# fixed overhead (run creation, step start/stop events), i.e. ~16 ms per capture at 25;
# what remains (~0.6 s per capture on SQLite) is per-partition event-log writes (a
# "planned" and a materialization event per asset, plus the per-capture data-version
# event), which no chunk size removes. In a deployment each run also starts a worker
# process that imports the code location (3-12 s), ~0.1-0.5 s per capture at 25. Larger
# chunks gain little and make a failed chunk slower to retry; finished captures in a
# failed chunk are reused on retry.
BACKFILL_CHUNK = 25
backfill_policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=BACKFILL_CHUNK)

DATA_VERSION_TAG = "dagster/data_version"
DATA_VERSION_IS_USER_PROVIDED_TAG = "dagster/data_version_is_user_provided"
CODE_VERSION_TAG = "dagster/code_version"

AssetEvent = dg.MaterializeResult | dg.AssetMaterialization


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
) -> Iterator[AssetEvent]:
    """Per-partition metadata (``extra(key)`` adds to it), data versions and check results."""
    metadata = {
        key: {**step_metadata(r), **(extra(key) if extra else {})} for key, r in results.items()
    }
    if len(results) == 1 and not context.has_partition_key_range:
        ((key, result),) = results.items()
        yield dg.MaterializeResult(
            metadata=metadata[key],
            data_version=dg.DataVersion(result.data_version),
            check_results=list(check_results),
        )
        return
    yield dg.MaterializeResult(
        metadata={"captures": len(results)}, check_results=list(check_results)
    )
    code_version = context.assets_def.code_versions_by_key.get(context.asset_key)
    for key, result in results.items():
        tags = {DATA_VERSION_TAG: result.data_version, DATA_VERSION_IS_USER_PROVIDED_TAG: "true"}
        if code_version:
            tags[CODE_VERSION_TAG] = code_version
        yield dg.AssetMaterialization(
            asset_key=context.asset_key, partition=key, metadata=metadata[key], tags=tags
        )


def materialize_each(
    context: dg.AssetExecutionContext, step: Callable[[str], StepResult]
) -> Iterator[AssetEvent]:
    """`run_each` then `materialize_result`: the whole body of a simple per-capture asset."""
    yield from materialize_result(context, run_each(context, step))
