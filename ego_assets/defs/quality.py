"""Asset quality_report with its blocking Great Expectations check.

In a single-capture run the check carries the episode's verdict: ERROR severity when a
blocking expectation failed, which makes Dagster skip every downstream asset of that
episode in the run. In a ranged (backfill) run one check result covers the chunk; it is
reported with WARN severity so one bad episode cannot sink the chunk, and the gate is
applied per episode by every exporter (`pipeline.require_export_gate`).
"""

import base64
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets import pipeline
from ego_assets.defs.episodes import AssetEvent, backfill_policy, materialize_result, run_each
from ego_assets.defs.ingest import trajectory
from ego_assets.defs.k8s import QUALITY_TAGS
from ego_assets.defs.partitions import captures_partitions
from ego_assets.defs.resources import StorageResource
from ego_assets.quality.gate import Gate, describe_failures
from ego_assets.quality.report import REPORT_JSON, REPORT_PARQUET
from ego_assets.storage import Storage

GX_CHECK = "gx_expectations"


def _quality_metadata(storage: Storage, key: str) -> dict[str, Any]:
    folder = storage.stage_path("quality", key)
    row = _report_row(storage, key)
    png = (folder / pipeline.TIMELINE_FILE).read_bytes()
    image = base64.b64encode(png).decode("ascii")
    md: dict[str, Any] = {
        name: value
        for name, value in row.items()
        if name not in ("capture_id", "report_version", "thresholds_version")
        and isinstance(value, str | int | float | bool)
        and not (isinstance(value, float) and value != value)
    }
    md["report"] = dg.MetadataValue.path(str(folder / REPORT_JSON))
    md["timeline"] = dg.MetadataValue.md(f"![timeline of {key}](data:image/png;base64,{image})")
    return md


def _report_row(storage: Storage, key: str) -> dict[str, Any]:
    path = storage.stage_path("quality", key) / REPORT_PARQUET
    table = pq.read_table(pa.BufferReader(path.read_bytes()))
    return {name: table.column(name)[0].as_py() for name in table.column_names}


def _check_result(gates: dict[str, Gate], ranged: bool) -> dg.AssetCheckResult:
    failed = {k: describe_failures(g) for k, g in gates.items() if g.errors or g.warnings}
    blocked = sorted(k for k, g in gates.items() if not g.passed)
    if ranged:
        severity = dg.AssetCheckSeverity.WARN
    else:
        severity = dg.AssetCheckSeverity.ERROR if blocked else dg.AssetCheckSeverity.WARN
    return dg.AssetCheckResult(
        check_name=GX_CHECK,
        passed=not failed,
        severity=severity,
        metadata={
            "episodes": len(gates),
            "blocked_episodes": dg.MetadataValue.json(blocked),
            "failed_expectations": dg.MetadataValue.json(failed),
        },
        description=(
            "blocked: " + ", ".join(blocked) if blocked else "no blocking expectation failed"
        ),
    )


@dg.asset(
    partitions_def=captures_partitions,
    backfill_policy=backfill_policy,
    deps=[trajectory],
    group_name="quality",
    kinds={"python", "parquet"},
    code_version=pipeline.quality_version(),
    op_tags=QUALITY_TAGS,
    check_specs=[
        dg.AssetCheckSpec(
            GX_CHECK,
            asset="quality_report",
            blocking=True,
            description=(
                "Great Expectations suite over the quality report: ERROR (blocks exports) "
                "for backwards timestamps and lost hands, WARN for duplicates, NaN, long gaps."
            ),
        )
    ],
    description="Per-episode quality report (JSON + one Parquet row), timeline PNG, export gate.",
)
def quality_report(
    context: dg.AssetExecutionContext, storage: StorageResource
) -> Iterator[AssetEvent]:
    store = storage.get_storage()
    results = run_each(context, lambda key: pipeline.assess_quality(store, key))
    gates = {key: pipeline.stored_gate(store, key) for key in results}
    check = _check_result({k: g for k, g in gates.items() if g is not None}, len(results) > 1)
    yield from materialize_result(
        context, results, extra=lambda key: _quality_metadata(store, key), check_results=[check]
    )
