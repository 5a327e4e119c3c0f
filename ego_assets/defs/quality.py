"""Asset quality_report with its per-episode export gate check.

Mechanism (why a partitioned check): the export gate is an asset check of
quality_report declared on the captures partitions, so Dagster stores one evaluation per
episode and the check's partition view shows every blocked episode as *Failed* (ERROR
severity) beside the allowed ones, without opening a run. A separate gate asset would
have to fail (a red partition with a stack trace) or stay missing to say "blocked", and
tags on materializations are only seen one partition at a time.

The check is not ``blocking``: a blocked episode is an intended outcome, not an error,
so the quality step succeeds (no `DagsterAssetCheckFailedError` trace); the block itself
is enforced per episode by every exporter (``ego_assets.exports.run.run_export``), whichever
run asks. In a ranged (backfill) run each episode's verdict is recorded on its own
partition too.
"""

import base64
import functools
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets import pipeline
from ego_assets.defs.episodes import (
    GATE_KEY,
    REASONS_KEY,
    AssetEvent,
    materialize_result,
    per_capture_asset,
    run_each,
)
from ego_assets.defs.k8s import QUALITY_TAGS
from ego_assets.defs.partitions import SET0, CaptureSet
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry
from ego_assets.quality.gate import Gate
from ego_assets.quality.report import REPORT_JSON, REPORT_PARQUET
from ego_assets.quality.waivers import describe
from ego_assets.storage import Storage

EXPORT_GATE_CHECK = "export_gate"
GATE_TAG = "ego/gate"  # run tag: blocked when a capture of the run is blocked
GX_CHECK = EXPORT_GATE_CHECK  # the gate carries the Great Expectations outcomes too
# Significant digits of float metadata (the raw figures are in quality.json).
METADATA_DIGITS = 4
# Report row columns shown as metadata, with the label they get (unit in the label).
_SHOWN = (
    ("duration_s", "duration (s)"),
    ("n_streams", "streams"),
    ("n_fail", "metrics at fail"),
    ("n_warn", "metrics at warn"),
    ("left_tracking_loss_ratio", "left tracking loss (ratio)"),
    ("right_tracking_loss_ratio", "right tracking loss (ratio)"),
    ("left_wrist_speed_p99_mps", "left wrist speed p99 (m/s)"),
    ("right_wrist_speed_p99_mps", "right wrist speed p99 (m/s)"),
    ("left_jitter_mps3", "left jitter (m/s³)"),
    ("right_jitter_mps3", "right jitter (m/s³)"),
    ("max_longest_gap_s", "longest gap (s)"),
    ("max_missing_sample_ratio", "missing samples (ratio)"),
    ("total_backwards_timestamps", "backwards timestamps"),
    ("total_duplicate_timestamps", "duplicate timestamps"),
    ("video_hand_offset_p99_ms", "video-hand offset p99 (ms)"),
    ("start_misalignment_s", "start misalignment (s)"),
)


def export_gate_description() -> str:
    """The check's description. The UI shows it right under "This is a non-blocking asset
    check", so it says what the check gates and how: non-blocking is Dagster's word for
    "the run goes on", the export steps are what stop a blocked episode."""
    return (
        f"Gates the exports of each episode ({', '.join(registry.names())}) under the "
        "export policy (quality/policy.toml). Non-blocking in Dagster's sense only: "
        "whatever the verdict, the quality step succeeds and the run goes on; each export "
        "step then reads this verdict, and for an episode it blocks (export: blocked) "
        "writes nothing and fails with the reasons, so its export partitions read Failed. "
        "The check fails with ERROR when a metric at fail blocks the exports and no waiver "
        "lets it through; warn-level metrics never block."
    )


def rounded(value: float, digits: int = METADATA_DIGITS) -> float:
    """``value`` rounded to ``digits`` significant digits (0.011112000000000677 -> 0.01111)."""
    return float(f"{value:.{digits}g}")


def _report_row(storage: Storage, key: str) -> dict[str, Any]:
    path = storage.stage_path("quality", key) / REPORT_PARQUET
    table = pq.read_table(pa.BufferReader(path.read_bytes()))
    return {name: table.column(name)[0].as_py() for name in table.column_names}


def quality_metadata(storage: Storage, key: str, gate: Gate | None) -> dict[str, Any]:
    """The gate's verdict and reasons first, the timeline, then rounded, unit-labelled
    figures."""
    folder = storage.stage_path("quality", key)
    png = (folder / pipeline.TIMELINE_FILE).read_bytes()
    image = base64.b64encode(png).decode("ascii")
    md: dict[str, Any] = {}
    if gate is not None:  # the verdict and its reasons first: they mark a blocked capture
        md[GATE_KEY] = gate.verdict
        md[REASONS_KEY] = dg.MetadataValue.json(list(gate.reasons))
    md["timeline"] = dg.MetadataValue.md(f"![timeline of {key}](data:image/png;base64,{image})")
    if gate is not None:
        md["waivers"] = dg.MetadataValue.json([describe(w) for w in gate.waivers])
    row = _report_row(storage, key)
    for column, label in _SHOWN:
        value = row.get(column)
        if isinstance(value, float) and value == value:
            md[label] = dg.MetadataValue.float(rounded(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            md[label] = dg.MetadataValue.int(value)
    md["report"] = dg.MetadataValue.path(str(folder / REPORT_JSON))
    md["open recording"] = dg.MetadataValue.md(
        f"`ego-assets view {key}` (builds the Rerun recording and opens it)"
    )
    return md


def gate_check_result(key: str, gate: Gate | None) -> dg.AssetCheckResult:
    """The export gate of one episode as a check result of ``key``'s partition.

    Failed with ERROR severity when the policy blocks an export, passed (WARN severity,
    so a later warn-level finding reads as a warning) otherwise. The description says what
    failed at which level, or that the episode is allowed and why.
    """
    if gate is None:
        return dg.AssetCheckResult(
            check_name=EXPORT_GATE_CHECK,
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"{key}: no quality gate was written",
        )
    fails = [f.text() for f in gate.findings if f.status == "fail"]
    warns = [f.text() for f in gate.findings if f.status == "warn"]
    return dg.AssetCheckResult(
        check_name=EXPORT_GATE_CHECK,
        passed=gate.passed,
        severity=dg.AssetCheckSeverity.WARN if gate.passed else dg.AssetCheckSeverity.ERROR,
        description=gate.summary(),
        metadata={  # the same keys as quality_report's materialization for the same facts
            GATE_KEY: gate.verdict,
            "quality": gate.status,
            REASONS_KEY: dg.MetadataValue.json(list(gate.reasons)),
            # numbers are what Dagster plots across partitions: the metrics at fail and
            # at warn; the policy version is a label (text), not a series
            "metrics at fail": len(fails),
            "metrics at warn": len(warns),
            "policy_version": dg.MetadataValue.text(str(gate.policy_version)),
            # the exporter assets it blocks, each with its name in the export policy
            "blocked_exports": dg.MetadataValue.json(
                dict(zip(gate.blocked_assets, gate.blocked_exports, strict=True))
            ),
            "fail (blocking unless waived)": dg.MetadataValue.json(fails),
            "warn (never blocks)": dg.MetadataValue.json(warns),
            "waivers": dg.MetadataValue.json([describe(w) for w in gate.waivers]),
        },
    )


def _ranged_check_result(gates: dict[str, Gate | None]) -> dg.AssetCheckResult:
    """One result for a ranged run's chunk: blocked episodes listed, WARN severity."""
    blocked = sorted(k for k, g in gates.items() if g is None or not g.passed)
    return dg.AssetCheckResult(
        check_name=EXPORT_GATE_CHECK,
        passed=not blocked,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{len(blocked)} of {len(gates)} episodes blocked: {', '.join(blocked)}"
            if blocked
            else f"all {len(gates)} episodes allowed"
        ),
        metadata={"episodes": len(gates), "blocked episodes": dg.MetadataValue.json(blocked)},
    )


def gate_check_evaluation(
    asset_key: dg.AssetKey, key: str, gate: Gate | None
) -> dg.AssetCheckEvaluation:
    """`gate_check_result` of capture ``key`` as an evaluation of its own partition of
    ``asset_key``'s check, recorded outside the run's output (ranged runs, the landing
    sensor's inline captures)."""
    result = gate_check_result(key, gate)
    return dg.AssetCheckEvaluation(
        asset_key=asset_key,
        check_name=EXPORT_GATE_CHECK,
        passed=result.passed,
        metadata=result.metadata,
        severity=result.severity,
        description=result.description,
        blocking=False,
        partition=key,
    )


def _report_per_partition(context: dg.AssetExecutionContext, gates: dict[str, Gate | None]) -> None:
    """Record each episode's gate on its own partition of the check (ranged runs only:
    Dagster ties a check result to the run's one partition, if any)."""
    for key, gate in gates.items():
        evaluation = gate_check_evaluation(context.asset_key, key, gate)
        context.instance.report_runless_asset_event(evaluation)


def _tag_blocked_run(context: dg.AssetExecutionContext, gates: dict[str, Gate | None]) -> None:
    """Tag the run ``ego/gate=blocked`` when a capture of it is blocked (``allowed`` when
    none is), so the runs list tells a blocked capture's green run apart."""
    blocked = any(gate is None or not gate.passed for gate in gates.values())
    try:
        context.instance.add_run_tags(
            context.run_id, {GATE_TAG: "blocked" if blocked else "allowed"}
        )
    except Exception as exc:  # a tag is advisory: never fail the quality step for it
        context.log.warning(f"run tag {GATE_TAG} not recorded: {exc}")


@functools.cache  # one definition per set (the module-level one is set 0's)
def build_quality_report(cs: CaptureSet) -> dg.AssetsDefinition:
    """Set ``cs``'s quality_report with its export gate check."""

    @per_capture_asset(
        cs,
        "quality_report",
        deps=[cs.key("trajectory")],
        group_name=cs.group("quality"),
        kinds={"python", "parquet"},
        code_version=pipeline.quality_version(),
        op_tags=QUALITY_TAGS,
        check_specs=[
            dg.AssetCheckSpec(
                EXPORT_GATE_CHECK,
                asset=cs.key("quality_report"),
                partitions_def=cs.partitions_def,
                description=export_gate_description(),
            )
        ],
        description=(
            "Per-episode quality report (JSON + one Parquet row), timeline PNG and the export "
            "gate (policy verdict, reasons, waivers)."
        ),
    )
    def quality_report(
        context: dg.AssetExecutionContext, storage: StorageResource
    ) -> Iterator[AssetEvent]:
        store = storage.get_storage()
        results = run_each(context, lambda key: pipeline.assess_quality(store, key))
        gates = {key: pipeline.stored_gate(store, key) for key in results}
        if context.has_partition_key_range or len(gates) != 1:
            checks = [_ranged_check_result(gates)]
            _report_per_partition(context, gates)
        else:
            checks = [gate_check_result(key, gate) for key, gate in gates.items()]
        _tag_blocked_run(context, gates)
        yield from materialize_result(
            context,
            results,
            extra=lambda key: quality_metadata(store, key, gates[key]),
            check_results=checks,
        )

    return quality_report


quality_report = build_quality_report(SET0)
