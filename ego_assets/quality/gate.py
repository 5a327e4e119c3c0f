"""The per-episode export gate: what the policy decided from the report, and why.

``gate.json`` sits beside the quality report. It records every metric at ``warn`` or
``fail`` (a `Finding`), which exports each one blocks under the export policy
(``policy.toml``, its version recorded), the waivers of the episode and the exports left
blocked: ``blocked_exports`` in the policy's names (``webdataset``, ``lerobot``,
``robomimic``) and, beside them, ``blocked_assets`` in the names the Dagster assets and
the export API use (``egosmith_shards``, ``ceres_episode``, ``holos_hdf5``). The second
is derived from the first when written and ignored when read, so gates stored before it
existed read the same. Every exporter calls `require_gate` for its episode before writing anything,
so a blocked episode is never exported, whichever run (single capture or chunked
backfill) asks. The Great Expectations outcomes are kept beside the decision.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from ego_assets.exports.registry import asset_names, policy_keys
from ego_assets.quality.expectations import CheckOutcome, ExpectationResults
from ego_assets.quality.policy import Policy
from ego_assets.quality.report import QualityReport
from ego_assets.quality.waivers import Waiver
from ego_assets.trajectory.records import from_jsonable, to_jsonable

GATE_FILE = "gate.json"
# gate.json's key for `Gate.blocked_assets` (written for readers, not read back)
BLOCKED_ASSETS_KEY = "blocked_assets"
# Reasons spelled out in one-line summaries; the rest are counted ("+N more").
SUMMARY_REASONS = 2


class ExportBlockedError(RuntimeError):
    """An export was asked for an episode that the export policy blocks (or that has no
    gate yet): the gate's decision, with the message naming the reasons.

    Attributes:
        capture_id: the episode.
        reasons: one text per blocking finding (empty when there is no gate yet).
    """

    def __init__(self, message: str, capture_id: str = "", reasons: tuple[str, ...] = ()):
        super().__init__(message)
        self.capture_id = capture_id
        self.reasons = reasons


def format_value(value: float, unit: str) -> str:
    """``value`` to 3 significant digits with its unit (none for ``"1"``)."""
    text = f"{value:.3g}"
    return text if unit in ("1", "") else f"{text} {unit}"


@dataclass(frozen=True, slots=True)
class Finding:
    """One metric at ``warn`` or ``fail`` and what the policy made of it.

    Attributes:
        metric: ``<scope>/<name>``; name: the metric name.
        status: ``"warn"`` or ``"fail"``.
        value: the figure, in ``unit``; limit: the limit it crossed (same unit);
        direction: ``"max"`` (crossed from below) or ``"min"``.
        blocks: exports the policy blocks for it (before waivers).
        waived_by: who waived it ("" when not waived); waiver_reason: why.
    """

    metric: str
    name: str
    status: str
    value: float
    unit: str
    limit: float
    direction: str
    blocks: tuple[str, ...]
    waived_by: str = ""
    waiver_reason: str = ""

    @property
    def blocking(self) -> bool:
        """Blocks at least one export and no waiver lets it through."""
        return bool(self.blocks) and not self.waived_by

    def text(self) -> str:
        """E.g. ``hand:left/tracking_loss_ratio = 1 (fail > 0.5)``."""
        sign = ">" if self.direction == "max" else "<"
        value = format_value(self.value, self.unit)
        return (
            f"{self.metric} = {value} ({self.status} {sign} {format_value(self.limit, self.unit)})"
        )


@dataclass(frozen=True, slots=True)
class Gate:
    """The gate of one episode.

    Attributes:
        capture_id: the episode.
        data_version: quality code version + the trajectory + the waivers it was decided from.
        passed: no export is blocked.
        status: the report's worst metric status (pass / warn / fail).
        worst_metric: the worst metric's key, empty when all pass.
        outcomes: every Great Expectations outcome (recorded, not the decision).
        policy_version: ``version`` of the export policy applied.
        findings: every metric at warn or fail, worst first.
        waivers: the episode's waivers in force when the gate was decided.
        blocked_exports: exports the policy blocks after waivers.
    """

    capture_id: str
    data_version: str
    passed: bool
    status: str
    worst_metric: str
    outcomes: tuple[CheckOutcome, ...]
    policy_version: int = 0
    findings: tuple[Finding, ...] = ()
    waivers: tuple[Waiver, ...] = ()
    blocked_exports: tuple[str, ...] = ()

    @property
    def errors(self) -> tuple[CheckOutcome, ...]:
        return ExpectationResults(self.outcomes).errors

    @property
    def warnings(self) -> tuple[CheckOutcome, ...]:
        return ExpectationResults(self.outcomes).warnings

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why exports are blocked: one text per blocking finding (empty when allowed)."""
        return tuple(f.text() for f in self.findings if f.blocking)

    @property
    def waived(self) -> tuple[Finding, ...]:
        """Findings that would block but a waiver lets through."""
        return tuple(f for f in self.findings if f.blocks and f.waived_by)

    @property
    def verdict(self) -> str:
        """``"blocked"`` or ``"allowed"``."""
        return "allowed" if self.passed else "blocked"

    @property
    def blocked_assets(self) -> tuple[str, ...]:
        """`blocked_exports` as the Dagster assets and the export API name them
        (``holos_hdf5`` for ``robomimic``...), in the same order."""
        return asset_names(self.blocked_exports)

    def allows(self, export: str | None = None) -> bool:
        """Whether ``export`` (None: every export) may be written."""
        return not self.blocked_exports if export is None else export not in self.blocked_exports

    def summary(self) -> str:
        """One line, the same in the demo, the CLI and Dagster:
        ``quality: fail — export: blocked (reason; +2 more)``."""
        head = f"quality: {self.status} — export: {self.verdict}"
        if self.reasons:
            shown = list(self.reasons[:SUMMARY_REASONS])
            if len(self.reasons) > SUMMARY_REASONS:
                shown.append(f"+{len(self.reasons) - SUMMARY_REASONS} more")
            head += f" ({'; '.join(shown)})"
        elif self.waived:
            head += f" (waived: {'; '.join(f'{f.metric} by {f.waived_by}' for f in self.waived)})"
        return head

    def to_json(self) -> str:
        doc = to_jsonable(self)
        doc[BLOCKED_ASSETS_KEY] = list(self.blocked_assets)
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Gate:
        doc = json.loads(text)
        doc.pop(BLOCKED_ASSETS_KEY, None)  # derived from blocked_exports
        return from_jsonable(cls, doc)

    @classmethod
    def build(
        cls,
        report: QualityReport,
        results: ExpectationResults,
        data_version: str,
        policy: Policy,
        waivers: tuple[Waiver, ...] = (),
    ) -> Gate:
        """Decide the gate of ``report`` under ``policy`` with the episode's ``waivers``."""
        order = {"fail": 0, "warn": 1}
        findings = tuple(
            Finding(
                metric=m.key,
                name=m.name,
                status=m.status,
                value=m.value,
                unit=m.unit,
                limit=m.threshold_fail if m.status == "fail" else m.threshold_warn,
                direction=m.direction,
                blocks=policy.blocks(m.name, m.key, m.status),
            )
            for m in sorted(
                (m for m in report.metrics if m.status != "pass"), key=lambda m: order[m.status]
            )
        )
        gate = cls(
            capture_id=report.capture_id,
            data_version=data_version,
            passed=True,
            status=report.status,
            worst_metric=report.worst_metric,
            outcomes=results.outcomes,
            policy_version=policy.version,
            findings=findings,
        )
        return gate.with_waivers(waivers, data_version)

    def with_waivers(self, waivers: tuple[Waiver, ...], data_version: str) -> Gate:
        """This gate decided again with ``waivers`` (findings and policy unchanged)."""
        findings = []
        for f in self.findings:
            waiver = next((w for w in waivers if w.covers(f.name, f.metric)), None)
            if not f.blocks or waiver is None:
                findings.append(replace(f, waived_by="", waiver_reason=""))
            else:
                findings.append(replace(f, waived_by=waiver.by, waiver_reason=waiver.reason))
        blocked = {e for f in findings if f.blocking for e in f.blocks}
        return replace(
            self,
            data_version=data_version,
            passed=not blocked,
            findings=tuple(findings),
            waivers=waivers,
            blocked_exports=tuple(e for e in policy_keys() if e in blocked),
        )


def describe_failures(gate: Gate) -> list[dict[str, Any]]:
    """Failed GX outcomes as plain dicts (for metadata and messages)."""
    return [
        {"severity": o.severity, "check": o.description, "observed": list(o.observed)}
        for o in (*gate.errors, *gate.warnings)
    ]


def require_gate(gate: Gate | None, capture_id: str, export: str | None = None) -> Gate:
    """``gate`` if it allows ``export`` (None: every export); raises `ExportBlockedError`
    naming the reasons if the policy blocks it, or if there is no gate yet."""
    if gate is None:
        raise ExportBlockedError(
            f"capture {capture_id!r}: no quality gate yet; run quality_report", capture_id
        )
    if not gate.allows(export):
        raise ExportBlockedError(
            f"capture {capture_id!r}: export blocked by export policy "
            f"v{gate.policy_version}: {'; '.join(gate.reasons)}",
            capture_id,
            gate.reasons,
        )
    return gate
