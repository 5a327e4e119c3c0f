"""Great Expectations 1.x suite over a compact table derived from the quality report.

GX and pandas cost seconds to import, so they are imported inside the functions that
need them (a code location that only defines the assets never loads them), and the
ephemeral context, its pandas datasource and the suite are built once per process.

GX spends its time per expectation (building the metric graph), not per row, so the
checks are laid out long: `checks_frame` has one row per (scope, check) with the value,
its limit and the margin ``limit - value``, in an ``error_margin`` column for checks of
severity ERROR and a ``warn_margin`` column for WARN. The suite is then one expectation
a margin column: its least margin is at least 0 (``expect_column_min_to_be_between``;
GX skips the nulls), an aggregate that GX resolves with one metric, about half the cost
of the per-row ``expect_column_values_to_be_between`` over the same column. A column with
no measurable margin has nothing to check and is left out of that capture's suite (GX
fails the minimum of an all-null column). The failing rows are those whose margin is
below zero; `run_expectations` maps them back to one `CheckOutcome` per check and refuses
to go on when GX's verdict on a column and its rows disagree.

Severity: ``ERROR`` blocks every downstream asset of the episode; ``WARN`` is reported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from ego_assets.quality.thresholds import Thresholds, default_thresholds

if TYPE_CHECKING:
    import pandas as pd
    from great_expectations.core.batch_definition import BatchDefinition
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.core.expectation_validation_result import (
        ExpectationSuiteValidationResult,
        ExpectationValidationResult,
    )
    from great_expectations.data_context import AbstractDataContext
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )
    from great_expectations.validator.v1_validator import Validator as V1Validator

    from ego_assets.quality.report import QualityReport

log = logging.getLogger(__name__)

_GX_SEVERITY = {"ERROR": "critical", "WARN": "warning"}
_MARGIN_COLUMN = {"ERROR": "error_margin", "WARN": "warn_margin"}
_EXPECTATION = "expect_column_min_to_be_between"
_DATASOURCE = "ego_quality"
_ASSET = "episode_checks"


@dataclass(frozen=True, slots=True)
class Check:
    """One check of the suite.

    Attributes:
        name: the report figure checked (``StreamQuality``/``HandQuality`` attribute).
        scope: ``"stream"`` or ``"hand"``: which rows of the report it reads.
        severity: ``"ERROR"`` (blocks downstream) or ``"WARN"``.
        limit: ``"zero"`` (value must be 0) or ``"fail"`` (at most the metric's fail limit).
        description: what it checks, in words.
    """

    name: str
    scope: str
    severity: str
    limit: str
    description: str


CHECKS: tuple[Check, ...] = (
    Check("backwards_timestamps", "stream", "ERROR", "zero", "no timestamp goes backwards"),
    Check(
        "tracking_loss_ratio",
        "hand",
        "ERROR",
        "fail",
        "each hand is tracked in enough of its samples",
    ),
    Check("duplicate_timestamp_ratio", "stream", "WARN", "zero", "no timestamp is repeated"),
    Check("non_finite_ratio", "stream", "WARN", "zero", "no NaN/inf in samples marked valid"),
    Check("longest_gap_s", "stream", "WARN", "fail", "no gap is longer than the fail limit"),
)


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """One check's result on one episode.

    Attributes:
        expectation: GX expectation and the check, e.g.
            ``"expect_column_min_to_be_between(error_margin)[backwards_timestamps]"``.
        description: what it checks, in words.
        severity: ``"ERROR"`` or ``"WARN"``.
        success: whether every row of the check met it.
        observed: the offending rows as ``"<scope>=<value>"``.
    """

    expectation: str
    description: str
    severity: str
    success: bool
    observed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ExpectationResults:
    """All outcomes of one episode's suite, one per `CHECKS` entry, in that order."""

    outcomes: tuple[CheckOutcome, ...]

    @property
    def passed(self) -> bool:
        """True when no ERROR check failed (the episode may go downstream)."""
        return not self.errors

    @property
    def errors(self) -> tuple[CheckOutcome, ...]:
        return tuple(o for o in self.outcomes if o.severity == "ERROR" and not o.success)

    @property
    def warnings(self) -> tuple[CheckOutcome, ...]:
        return tuple(o for o in self.outcomes if o.severity == "WARN" and not o.success)


def _limit(check: Check, thresholds: Thresholds) -> float:
    return 0.0 if check.limit == "zero" else thresholds.metric(check.name).fail


def checks_frame(report: QualityReport, thresholds: Thresholds) -> pd.DataFrame:
    """The table the suite validates: one row per (scope, check).

    Columns: ``check`` and ``scope`` (str); ``value``, ``limit``, ``error_margin`` and
    ``warn_margin`` (float64; a margin is ``limit - value`` in the column of the check's
    severity and null in the other, and null when the value is not measurable).
    Figures that do not apply (timing of event streams) have no row.
    """
    import pandas as pd

    checks, scopes, values, limits, severities = [], [], [], [], []
    for check in CHECKS:
        if check.scope == "stream":
            items = [(f"stream:{s.name}", getattr(s, check.name)) for s in report.streams]
            if check.name != "non_finite_ratio":
                timed = {f"stream:{s.name}" for s in report.streams if s.timed}
                items = [(scope, v) for scope, v in items if scope in timed]
        else:
            items = [(f"hand:{h.hand}", getattr(h, check.name)) for h in report.hands]
        for scope, value in items:
            checks.append(check.name)
            scopes.append(scope)
            values.append(float(value))
            limits.append(_limit(check, thresholds))
            severities.append(check.severity)
    value_arr, limit_arr = np.asarray(values, np.float64), np.asarray(limits, np.float64)
    margin = limit_arr - value_arr
    severity_arr = np.asarray(severities, dtype=object)
    return pd.DataFrame(
        {
            "check": checks,
            "scope": scopes,
            "value": value_arr,
            "limit": limit_arr,
            "error_margin": np.where(severity_arr == "ERROR", margin, np.nan),
            "warn_margin": np.where(severity_arr == "WARN", margin, np.nan),
        }
    )


@cache
def _gx() -> tuple[AbstractDataContext, BatchDefinition]:
    """The process's ephemeral GX context and its whole-dataframe batch definition."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas(_DATASOURCE).add_dataframe_asset(_ASSET)
    return context, asset.add_batch_definition_whole_dataframe("whole")


@cache
def _suite(thresholds: Thresholds, columns: tuple[str, ...]) -> ExpectationSuite:
    """The suite for ``thresholds`` over the margin ``columns``, registered once in the
    process's context."""
    import great_expectations as gx
    from great_expectations.expectations.metadata_types import FailureSeverity

    context, _ = _gx()
    name = f"ego_quality_v{thresholds.version}_{hash((thresholds, columns)) & 0xFFFFFFFF:08x}"
    suite = context.suites.add(gx.ExpectationSuite(name=name))
    for severity, column in _MARGIN_COLUMN.items():
        if column in columns:
            suite.add_expectation(
                gx.expectations.ExpectColumnMinToBeBetween(
                    column=column, min_value=0.0, severity=FailureSeverity(_GX_SEVERITY[severity])
                )
            )
    return suite


def _validator(frame: pd.DataFrame, result_format: dict[str, Any]) -> V1Validator:
    """A GX validator of ``frame`` as a batch of the process's dataframe asset."""
    from great_expectations.validator.v1_validator import Validator

    return Validator(
        batch_definition=_gx()[1],
        batch_parameters={"dataframe": frame},
        result_format=result_format,
    )


def warm_up(thresholds: Thresholds | None = None) -> None:
    """Import GX and build the context and suite now (about 10 s on a cold process)."""
    _suite(
        thresholds if thresholds is not None else default_thresholds(),
        tuple(_MARGIN_COLUMN.values()),
    )


def run_expectations(
    report: QualityReport, thresholds: Thresholds | None = None
) -> ExpectationResults:
    """Validate ``report`` with the GX suite; ERROR failures mean: block downstream."""
    limits = thresholds if thresholds is not None else default_thresholds()
    frame = checks_frame(report, limits)
    margins = {column: frame[column].to_numpy() for column in _MARGIN_COLUMN.values()}
    below = {column: set(np.flatnonzero(m < 0).tolist()) for column, m in margins.items()}
    measured = tuple(column for column, m in margins.items() if not np.isnan(m).all())
    if measured:
        # GX gets the columns its suite reads (it hashes and sizes the whole frame)
        validator = _validator(frame[list(measured)], {"result_format": "BOOLEAN_ONLY"})
        result = validator.validate_expectation_suite(_suite(limits, measured))
        for column, res in _by_column(result).items():
            if res.success == bool(below[column]):
                raise RuntimeError(
                    f"capture {report.capture_id!r}: GX finds the least {column} "
                    f"{'at or above' if res.success else 'below'} zero, the margins below "
                    f"zero are rows {sorted(below[column])} of {len(frame)}"
                    f"{_raised(res)}"
                )
    failing = set().union(*below.values())
    outcomes = []
    for check in CHECKS:
        rows = frame.index[frame["check"] == check.name]
        bad = [i for i in rows if i in failing]
        column = _MARGIN_COLUMN[check.severity]
        outcomes.append(
            CheckOutcome(
                expectation=f"{_EXPECTATION}({column})[{check.name}]",
                description=check.description,
                severity=check.severity,
                success=not bad,
                observed=tuple(f"{frame.at[i, 'scope']}={frame.at[i, 'value']:g}" for i in bad),
            )
        )
    failed = [o for o in outcomes if not o.success]
    if failed:
        log.info("capture %s: failed checks: %s", report.capture_id, failed)
    return ExpectationResults(tuple(outcomes))


def _by_column(result: ExpectationSuiteValidationResult) -> dict[str, ExpectationValidationResult]:
    """Each expectation's result of ``result`` by the column it validates."""
    return {str(_config(res).kwargs["column"]): res for res in result.results}


def _raised(result: ExpectationValidationResult) -> str:
    """``: <GX's exception>`` when validating ``result`` raised one, else nothing."""
    info = result.exception_info or {}
    message = info.get("exception_message") if info.get("raised_exception") else None
    return f": {message}" if message else ""


def _config(result: ExpectationValidationResult) -> ExpectationConfiguration:
    config = result.expectation_config
    if config is None:
        raise RuntimeError("GX returned a result without its expectation configuration")
    return config
