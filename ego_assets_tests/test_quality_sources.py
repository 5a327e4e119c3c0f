"""Quality report on synthetic captures (each fault caught, clean passes) and real Aria data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ego_assets.capture import read_capture
from ego_assets.fixtures import real_fixture
from ego_assets.quality.report import QualityReport, compute_report
from ego_assets.synth import KINDS, synthesize

ARIA_SAMPLE = real_fixture("aria_mps_hand_tracking")
SECONDS = 6.0
SEED = 11


def _report(tmp_path: Path, kind: str, faults: tuple[str, ...] = ()) -> QualityReport:
    folder = synthesize(kind, tmp_path / "capture", seconds=SECONDS, seed=SEED, faults=faults)
    return compute_report(read_capture("synth-capture", folder))


@pytest.mark.parametrize("kind", KINDS)
def test_a_clean_synthetic_capture_passes_every_metric(tmp_path: Path, kind: str) -> None:
    report = _report(tmp_path, kind)
    assert [m.key for m in report.metrics if m.status != "pass"] == []
    assert report.status == "pass" and report.worst_metric == ""
    # WebXR's recorder has explicit gap slots: a few untracked samples, far below 10 %
    assert max(h.tracking_loss_ratio for h in report.hands) < 0.02


# fault -> (capture kind, metric scope, metric name, expected status)
FAULT_CASES = {
    "dropout": ("mano-video", "hand:left", "longest_tracking_loss_s", "warn"),
    "jitter": ("webxr", "hand:left", "jitter_mps3", "fail"),
    "duplicate_timestamps": (
        "holos-iphone",
        "stream:hand_left_landmarks_3d",
        "duplicate_timestamp_ratio",
        "warn",
    ),
    "backwards_timestamps": ("mano-video", "stream:mano_left", "backwards_timestamps", "fail"),
    "dropped_video_frames": (
        "webxr",
        "stream:camera_outward_frames",
        "missing_sample_ratio",
        "warn",
    ),
    "retried_segment": ("holos-iphone", "episode", "segment_retries", "warn"),
    "hand_never_seen": ("holos-iphone", "hand:left", "tracking_loss_ratio", "fail"),
}


@pytest.mark.parametrize("fault", sorted(FAULT_CASES))
def test_each_synthetic_fault_is_caught_by_its_metric(tmp_path: Path, fault: str) -> None:
    kind, scope, name, status = FAULT_CASES[fault]
    report = _report(tmp_path, kind, (fault,))
    result = report.metric(scope, name)
    assert result.status == status, result
    assert report.status in ("warn", "fail") if status == "warn" else report.status == "fail"


def test_fault_figures_match_what_the_generator_injected(tmp_path: Path) -> None:
    report = _report(tmp_path, "mano-video", ("backwards_timestamps", "hand_never_seen"))
    assert report.stream("mano_left").backwards_timestamps == 3  # N_TIMESTAMP_FAULTS
    left = report.hand("left")
    assert (left.valid_samples, left.tracking_loss_ratio) == (0, 1.0)


def test_real_aria_sample_reports_its_53_s_gap_and_untracked_hand_rows(tmp_path: Path) -> None:
    folder = tmp_path / "aria"
    shutil.copytree(ARIA_SAMPLE, folder)
    marker = {"format": "ego-capture-marker", "version": 1, "kind": "aria_mps"}
    (folder / "ego_capture.json").write_text(json.dumps(marker))
    report = compute_report(read_capture("aria-sample", folder))

    results = report.stream("hand_tracking_results_v2.hand_right")
    assert results.nominal_rate_hz == pytest.approx(5.0, rel=1e-3)
    assert results.gap_count == 1
    assert results.longest_gap_s == pytest.approx(53.391453, abs=1e-6)
    assert report.metric("stream:hand_tracking_results_v2.hand_right", "longest_gap_s").status == (
        "fail"
    )
    # wrist_and_palm_poses.csv: left never tracked, right tracked in 6 of 122 rows
    left = report.stream("wrist_and_palm_poses.wrist_left")
    right = report.stream("wrist_and_palm_poses.wrist_right")
    assert (left.samples, left.valid_samples) == (122, 0)
    assert (right.samples, right.valid_samples) == (122, 6)
    # the 63-row landmark file is the primary stream: 3 left and 1 right rows untracked
    hand = report.hand("left")
    assert hand.primary_stream == "wrist_and_palm_poses_v3.hand_left"
    assert hand.tracking_loss_ratio == pytest.approx(3 / 63)
    assert report.hand("right").tracking_loss_ratio == pytest.approx(1 / 63)
    assert report.status == "fail"
