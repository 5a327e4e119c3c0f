"""Great Expectations suite over the quality report: severities and observed values."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ego_assets.quality import expectations
from ego_assets.quality.expectations import (
    ExpectationResults,
    _by_column,
    _suite,
    _validator,
    checks_frame,
    run_expectations,
    warm_up,
)
from ego_assets.quality.report import QualityReport, compute_report
from ego_assets.quality.thresholds import default_thresholds
from ego_assets.trajectory.model import CaptureInfo, Trajectory
from ego_assets.trajectory.streams import Stream, make_stream

START_NS = 1_700_000_000_000_000_000


@pytest.fixture(scope="module", autouse=True)
def _gx_ready() -> None:
    warm_up()


def _stream(name: str, kind: str, seconds: np.ndarray, **attrs: str) -> Stream:
    n = len(seconds)
    ts = START_NS + np.rint(seconds * 1e9).astype(np.int64)
    if kind == "pose":
        fields = {
            "position": np.zeros((n, 3)),
            "rotation": np.tile([0.0, 0.0, 0.0, 1.0], (n, 1)),
            "valid": np.ones(n, bool),
        }
        return make_stream(name, kind, ts, START_NS, fields, {"frame": "world"})
    fields = {"wrist_position": np.zeros((n, 3)), "hand_valid": np.ones(n, bool)}
    return make_stream(name, kind, ts, START_NS, fields, {"frame": "device", **attrs})


def _episode(head_seconds: np.ndarray, hands: tuple[str, ...] = ("left", "right")) -> Trajectory:
    t = np.arange(300) / 30.0
    streams = [_stream("head", "pose", head_seconds)]
    streams += [_stream(f"wrist_{h}", "wrist_palm", t, hand=h) for h in hands]
    return Trajectory(CaptureInfo("cap-gx", "aria-mps", "1", START_NS), tuple(streams))


def test_a_clean_episode_passes_every_check() -> None:
    results = run_expectations(compute_report(_episode(np.arange(600) / 60.0)))
    assert results.passed
    assert [o.success for o in results.outcomes] == [True] * 5
    assert [o.severity for o in results.outcomes] == ["ERROR", "ERROR", "WARN", "WARN", "WARN"]
    assert results.outcomes[0].expectation == (
        "expect_column_min_to_be_between(error_margin)[backwards_timestamps]"
    )


def test_a_backwards_timestamp_fails_with_error_severity_naming_the_stream() -> None:
    t = np.arange(600) / 60.0
    t[100] = t[98]  # sample 100 is stamped before sample 99
    results = run_expectations(compute_report(_episode(t)))
    assert not results.passed
    (error,) = results.errors
    assert error.severity == "ERROR"
    assert error.observed == ("stream:head=1",)
    assert results.warnings == ()


def test_a_hand_never_seen_is_an_error() -> None:
    results = run_expectations(compute_report(_episode(np.arange(600) / 60.0, ("right",))))
    assert [o.observed for o in results.errors] == [("hand:left=1",)]


def test_repeated_timestamps_only_warn() -> None:
    t = np.arange(600) / 60.0
    t[[50, 200]] = t[[49, 199]]
    results = run_expectations(compute_report(_episode(t)))
    assert results.passed
    (warning,) = results.warnings
    assert warning.expectation.endswith("[duplicate_timestamp_ratio]")
    assert warning.observed == ("stream:head=0.00333333",)


def _faulty_report() -> QualityReport:
    """An error (a hand never seen, a backwards stamp) and a warning (repeated stamps)."""
    t = np.arange(600) / 60.0
    t[100] = t[98]
    t[[50, 200]] = t[[49, 199]]
    return compute_report(_episode(t, ("right",)))


def _observed(results: ExpectationResults) -> list[tuple[str, bool, tuple[str, ...]]]:
    return [(o.expectation, o.success, o.observed) for o in results.outcomes]


def test_gx_fails_the_columns_whose_least_margin_is_that_of_the_failing_rows() -> None:
    report = _faulty_report()
    frame = checks_frame(report, default_thresholds())
    columns = ("error_margin", "warn_margin")
    summary = _validator(frame[list(columns)], {"result_format": "SUMMARY"})
    suite = _suite(default_thresholds(), columns)
    by_column = _by_column(summary.validate_expectation_suite(suite))
    assert {c: r.success for c, r in by_column.items()} == {
        "error_margin": False,
        "warn_margin": False,
    }
    # GX's least margin of each column is the margin of one of the rows the outcomes name
    assert by_column["error_margin"].result["observed_value"] == pytest.approx(-1.0)
    results = run_expectations(report)
    assert not results.passed
    assert [o.observed for o in results.errors] == [("stream:head=1",), ("hand:left=1",)]
    least = {
        f"{frame.at[i, 'scope']}={frame.at[i, 'value']:g}": frame.at[i, column]
        for column in columns
        for i in frame.index[frame[column] < 0]
    }
    assert set(least) == {row for o in results.outcomes for row in o.observed}
    for column in columns:
        assert by_column[column].result["observed_value"] == pytest.approx(
            frame[column].min(skipna=True)
        )


def test_a_margin_column_without_a_value_is_left_out_of_the_suite(monkeypatch) -> None:
    # GX fails the least value of an all-null column; no measurable ERROR figure (every
    # one NaN) leaves nothing to check there, as GX skipping the nulls did before
    def unmeasured(report, thresholds):
        frame = checks_frame(report, thresholds)
        frame["value"] = frame["value"].where(frame["error_margin"].isna())
        frame["error_margin"] = np.nan
        return frame

    monkeypatch.setattr(expectations, "checks_frame", unmeasured)
    suites = []
    real_suite = expectations._suite

    def recorded(thresholds, columns):
        suites.append(columns)
        return real_suite(thresholds, columns)

    monkeypatch.setattr(expectations, "_suite", recorded)
    results = run_expectations(_faulty_report())
    assert suites == [("warn_margin",)]
    assert results.passed
    (warning,) = results.warnings
    assert warning.observed == ("stream:head=0.00333333",)


def test_gx_and_the_margins_disagreeing_is_refused_naming_the_capture(monkeypatch) -> None:
    report = _faulty_report()

    def contrary(result):  # GX's verdicts turned around
        by_column = _by_column(result)
        for res in by_column.values():
            res.success = not res.success
        return by_column

    monkeypatch.setattr(expectations, "_by_column", contrary)
    with pytest.raises(RuntimeError, match=r"capture 'cap-gx': GX finds the least error_margin"):
        run_expectations(report)


def test_checks_frame_holds_margins_in_the_column_of_the_severity() -> None:
    report = compute_report(_episode(np.arange(600) / 60.0, ("right",)))
    frame = checks_frame(report, default_thresholds())
    row = frame[(frame["check"] == "tracking_loss_ratio") & (frame["scope"] == "hand:left")]
    assert row["value"].item() == 1.0
    assert row["limit"].item() == 0.5
    assert row["error_margin"].item() == pytest.approx(-0.5)
    assert np.isnan(row["warn_margin"].item())
    gaps = frame[frame["check"] == "longest_gap_s"]
    assert list(gaps["scope"]) == ["stream:head", "stream:wrist_right"]
    assert list(gaps["warn_margin"]) == [2.0, 2.0]


def test_importing_the_quality_package_does_not_import_great_expectations() -> None:
    code = (
        "import sys, ego_assets.quality.expectations, ego_assets.quality.report;"
        "print('great_expectations' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
