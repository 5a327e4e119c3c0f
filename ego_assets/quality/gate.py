"""The per-episode export gate: the expectation results that decide what goes downstream.

``gate.json`` sits beside the quality report. Every exporter calls `require_gate` for
its episode before writing anything, so an episode whose ERROR-severity expectations
failed is never exported, whichever run (single capture or chunked backfill) asks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ego_assets.quality.expectations import CheckOutcome, ExpectationResults
from ego_assets.quality.report import QualityReport
from ego_assets.trajectory.records import from_jsonable, to_jsonable

GATE_FILE = "gate.json"


class ExportBlockedError(RuntimeError):
    """An export was asked for an episode whose blocking expectations failed."""


@dataclass(frozen=True, slots=True)
class Gate:
    """The gate of one episode.

    Attributes:
        capture_id: the episode.
        data_version: quality code version + the trajectory it was computed from.
        passed: no ERROR-severity expectation failed.
        status: the report's worst metric status (pass / warn / fail).
        worst_metric: the worst metric's key, empty when all pass.
        outcomes: every expectation's outcome.
    """

    capture_id: str
    data_version: str
    passed: bool
    status: str
    worst_metric: str
    outcomes: tuple[CheckOutcome, ...]

    @property
    def errors(self) -> tuple[CheckOutcome, ...]:
        return ExpectationResults(self.outcomes).errors

    @property
    def warnings(self) -> tuple[CheckOutcome, ...]:
        return ExpectationResults(self.outcomes).warnings

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Gate:
        return from_jsonable(cls, json.loads(text))

    @classmethod
    def build(cls, report: QualityReport, results: ExpectationResults, data_version: str) -> Gate:
        return cls(
            capture_id=report.capture_id,
            data_version=data_version,
            passed=results.passed,
            status=report.status,
            worst_metric=report.worst_metric,
            outcomes=results.outcomes,
        )


def describe_failures(gate: Gate) -> list[dict[str, Any]]:
    """Failed outcomes as plain dicts (for metadata and messages)."""
    return [
        {"severity": o.severity, "check": o.description, "observed": list(o.observed)}
        for o in (*gate.errors, *gate.warnings)
    ]


def require_gate(gate: Gate | None, capture_id: str) -> Gate:
    """``gate`` if it passed; raises `ExportBlockedError` if it failed or is missing."""
    if gate is None:
        raise ExportBlockedError(f"capture {capture_id!r}: no quality gate yet; run quality_report")
    if not gate.passed:
        failed = "; ".join(f"{o.description}: {', '.join(o.observed)}" for o in gate.errors)
        raise ExportBlockedError(
            f"capture {capture_id!r}: blocked by failed expectations: {failed}"
        )
    return gate
