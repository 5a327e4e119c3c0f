"""Quality metrics against hand-computed values on small constructed trajectories."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ego_assets.quality.report import ROW_SCHEMA, compute_report, write_report
from ego_assets.quality.thresholds import MetricThreshold, default_thresholds
from ego_assets.trajectory.joints import ARKIT27, bone_lengths
from ego_assets.trajectory.model import (
    Annotations,
    CaptureInfo,
    MediaRef,
    ProcedureStep,
    Segment,
    Trajectory,
)
from ego_assets.trajectory.streams import Stream, make_stream

START_NS = 1_700_000_000_000_000_000


def _ts(seconds: np.ndarray) -> np.ndarray:
    return START_NS + np.rint(np.asarray(seconds) * 1e9).astype(np.int64)


def _skeleton() -> np.ndarray:
    """(27, 3) an ARKit-like rest skeleton with distinct, non-zero bone lengths."""
    rng = np.random.default_rng(7)
    return rng.uniform(-0.08, 0.08, (len(ARKIT27), 3))


def _hand(
    hand: str,
    seconds: np.ndarray,
    *,
    positions: np.ndarray | None = None,
    valid: np.ndarray | None = None,
    frame: str = "world",
    rate_hz: float | None = None,
    confidence: np.ndarray | None = None,
) -> Stream:
    n = len(seconds)
    if positions is None:
        positions = np.broadcast_to(_skeleton(), (n, len(ARKIT27), 3)).copy()
    if hand == "left":  # the mirror image of the right hand's skeleton (its chirality)
        positions = positions * np.array([-1.0, 1.0, 1.0])
    fields = {
        "position": positions,
        "hand_valid": np.ones(n, bool) if valid is None else valid,
    }
    if confidence is not None:
        fields["hand_confidence"] = confidence
    attrs: dict[str, str | float] = {"joint_set": "arkit27", "hand": hand, "frame": frame}
    if rate_hz is not None:
        attrs["nominal_rate_hz"] = rate_hz
    return make_stream(f"hand_{hand}_{frame}", "hand_joints", _ts(seconds), START_NS, fields, attrs)


def _head(seconds: np.ndarray, rotation: np.ndarray | None = None) -> Stream:
    n = len(seconds)
    quat = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1)) if rotation is None else rotation
    fields = {"position": np.zeros((n, 3)), "rotation": quat, "valid": np.ones(n, bool)}
    return make_stream("head", "pose", _ts(seconds), START_NS, fields, {"frame": "world"})


def _trajectory(*streams: Stream, annotations: Annotations | None = None, media=()) -> Trajectory:
    info = CaptureInfo("cap-1", "holos-visionpro", "1", START_NS)
    return Trajectory(info, tuple(streams), annotations or Annotations(), tuple(media))


def _both_hands(seconds: np.ndarray, **kw) -> tuple[Stream, Stream]:
    return _hand("left", seconds, **kw), _hand("right", seconds, **kw)


def test_a_two_second_hole_in_a_10_hz_stream_is_one_gap_of_two_seconds() -> None:
    t = np.arange(100) * 0.1
    t[50:] += 1.9  # the interval 49 -> 50 is 2.0 s
    report = compute_report(_trajectory(_head(t)))
    head = report.stream("head")
    assert head.nominal_rate_hz == pytest.approx(10.0)
    assert head.rate_source == "median_dt"
    assert head.gap_count == 1
    assert head.longest_gap_s == pytest.approx(2.0)
    assert head.gap_total_s == pytest.approx(2.0)
    assert head.gaps[0].start_s == pytest.approx(4.9)
    assert head.missing_samples == 19
    assert head.missing_sample_ratio == pytest.approx(19 / 119)
    assert head.dt_cv == pytest.approx(0.0, abs=1e-6)
    assert head.measured_rate_hz == pytest.approx(99 / 11.8)
    assert report.metric("stream:head", "longest_gap_s").status == "warn"
    assert report.metric("stream:head", "missing_sample_ratio").status == "fail"


def test_declared_nominal_rate_sets_the_gap_limit() -> None:
    t = np.arange(50) / 30.0
    t[25:] += 1 / 30.0  # one dropped frame at 30 Hz
    stream = make_stream(
        "cam",
        "media_frames",
        _ts(t),
        START_NS,
        {"frame_index": np.arange(50)},
        {"media": "camera_left", "nominal_rate_hz": 30.0},
    )
    sq = compute_report(_trajectory(stream)).stream("cam")
    assert sq.rate_source == "attr"
    assert sq.gap_limit_s == pytest.approx(0.05)
    assert sq.gap_count == 1
    assert sq.missing_samples == 1
    assert sq.longest_gap_s == pytest.approx(2 / 30, abs=1e-6)


def test_duplicate_and_backwards_timestamps_are_counted_from_the_flags() -> None:
    t = np.array([0.0, 0.1, 0.1, 0.2, 0.15, 0.3, 0.4, 0.4, 0.5, 0.6])
    report = compute_report(_trajectory(_head(t)))
    head = report.stream("head")
    assert head.duplicate_timestamps == 2
    assert head.backwards_timestamps == 1
    assert head.duplicate_timestamp_ratio == pytest.approx(0.2)
    assert report.metric("stream:head", "backwards_timestamps").status == "fail"
    assert report.metric("stream:head", "duplicate_timestamp_ratio").status == "fail"
    assert report.status == "fail"


def test_one_ten_centimetre_jump_at_90_hz_is_one_teleport() -> None:
    n = 90
    t = np.arange(n) / 90.0
    pos = np.broadcast_to(_skeleton(), (n, 27, 3)).copy()
    pos[:, :, 0] += 0.01 * np.arange(n)[:, None]  # 1 cm per sample = 0.9 m/s
    pos[60:, :, 0] += 0.10  # sample 59 -> 60 moves 11 cm = 9.9 m/s
    left, right = _both_hands(t, positions=pos, rate_hz=90.0)
    hand = compute_report(_trajectory(left, right)).hand("right")
    assert hand.teleport_count == 1
    assert hand.wrist_speed_max_mps == pytest.approx(9.9, rel=1e-6)
    speeds = np.full(n - 1, 0.9)
    speeds[59] = 9.9
    assert hand.wrist_speed_p99_mps == pytest.approx(np.percentile(speeds, 99), rel=1e-6)


def test_a_twelve_centimetre_jump_at_15_hz_is_a_teleport_and_a_fast_reach_is_not() -> None:
    n = 30
    t = np.arange(n) / 15.0
    pos = np.broadcast_to(_skeleton(), (n, 27, 3)).copy()
    pos[:, :, 2] += 0.1 * np.arange(n)[:, None]  # 10 cm per 67 ms step: 1.5 m/s, smooth
    pos[15:17, :, 0] += 0.12  # two samples 12 cm aside (1.8 m/s each way), then back
    left, right = _both_hands(t, positions=pos, rate_hz=15.0)
    hand = compute_report(_trajectory(left, right)).hand("right")
    assert hand.teleport_count == 1  # one event: out, stay, back
    assert hand.wrist_speed_max_mps < 3.0
    smooth = np.broadcast_to(_skeleton(), (n, 27, 3)).copy()
    smooth[:, :, 2] += 0.1 * np.arange(n)[:, None]
    left, right = _both_hands(t, positions=smooth, rate_hz=15.0)
    assert compute_report(_trajectory(left, right)).hand("right").teleport_count == 0


def test_a_five_centimetre_step_within_one_30_hz_frame_is_a_teleport() -> None:
    n = 30
    t = np.arange(n) / 30.0
    pos = np.broadcast_to(_skeleton(), (n, 27, 3)).copy()
    pos[15:, :, 1] += 0.06  # 6 cm in 33 ms = 1.8 m/s: slower than 3 m/s, longer than 5 cm
    left, right = _both_hands(t, positions=pos)
    assert compute_report(_trajectory(left, right)).hand("left").teleport_count == 1


def test_motion_across_an_untracked_sample_is_not_measured() -> None:
    n = 40
    t = np.arange(n) / 30.0
    pos = np.broadcast_to(_skeleton(), (n, 27, 3)).copy()
    pos[20:, :, 2] += 1.0  # a 1 m jump, but sample 20 is untracked
    valid = np.ones(n, bool)
    valid[20] = False
    left, right = _both_hands(t, positions=pos, valid=valid)
    hand = compute_report(_trajectory(left, right)).hand("left")
    assert hand.teleport_count == 0
    assert hand.wrist_speed_max_mps == pytest.approx(0.0)


def test_bone_lengths_alternating_by_ten_percent_give_a_cv_of_0_1() -> None:
    n = 40
    scale = np.where(np.arange(n) % 2 == 0, 0.9, 1.1)
    pos = _skeleton()[None] * scale[:, None, None]
    left, right = _both_hands(np.arange(n) / 30.0, positions=pos)
    report = compute_report(_trajectory(left, right))
    hand = report.hand("left")
    assert len(hand.bone_length_cv) == 26
    np.testing.assert_allclose(hand.bone_length_cv, 0.1, rtol=1e-9)
    assert hand.bone_names[0] == "wrist>thumbKnuckle"
    assert report.metric("hand:left", "bone_length_cv_max").status == "warn"


def test_bone_cv_ignores_untracked_samples() -> None:
    n = 20
    pos = np.broadcast_to(_skeleton(), (n, 27, 3)).copy()
    pos[5] *= 3.0  # a wild skeleton, but the source marked the hand untracked there
    valid = np.ones(n, bool)
    valid[5] = False
    left, _ = _both_hands(np.arange(n) / 30.0, positions=pos, valid=valid)
    hand = compute_report(_trajectory(left)).hand("left")
    assert hand.bone_length_cv_max == pytest.approx(0.0, abs=1e-12)
    assert bone_lengths(pos[5], "arkit27")[0] > 0


def test_jitter_of_a_cubic_is_six_times_its_coefficient() -> None:
    n = 90
    t = np.arange(n) / 90.0
    a = 2.0  # x(t) = a t^3: third difference = 6 a h^3, times fps^3 = 6 a = 12 m s-3
    pos = np.broadcast_to(_skeleton(), (n, 27, 3)).copy()
    pos[:, :, 0] += a * t[:, None] ** 3
    left, right = _both_hands(t, positions=pos, rate_hz=90.0)
    hand = compute_report(_trajectory(left, right)).hand("left")
    assert hand.jitter_mps3 == pytest.approx(12.0, rel=1e-6)
    assert hand.jitter_third_diff_mm == pytest.approx(12.0 / 90.0**3 * 1e3, rel=1e-6)


def test_tracking_loss_ratio_is_the_share_of_samples_the_source_marked_untracked() -> None:
    n = 100
    valid = np.arange(n) >= 25
    conf = np.where(valid, 0.8, 0.0)
    left, right = _both_hands(np.arange(n) / 30.0, valid=valid, confidence=conf)
    report = compute_report(_trajectory(left, right))
    hand = report.hand("left")
    assert hand.samples == 100 and hand.valid_samples == 75
    assert hand.tracking_loss_ratio == pytest.approx(0.25)
    assert hand.mean_confidence == pytest.approx(0.8)
    assert report.metric("hand:left", "tracking_loss_ratio").status == "warn"


def test_longest_tracking_loss_spans_from_the_last_valid_to_the_next_valid_sample() -> None:
    n = 100
    valid = np.ones(n, bool)
    valid[40:61] = False  # samples 40..60 untracked at 30 Hz: valid 39 -> 61 is 22 / 30 s
    valid[:3] = False  # stream start -> first valid sample (3) is 3 / 30 s
    left, right = _both_hands(np.arange(n) / 30.0, valid=valid)
    report = compute_report(_trajectory(left, right))
    assert report.hand("left").longest_tracking_loss_s == pytest.approx(22 / 30)
    assert report.metric("hand:left", "longest_tracking_loss_s").status == "warn"


def test_a_duplicate_stamp_is_not_also_counted_as_a_gap() -> None:
    t = np.arange(60) / 30.0
    t[20] = t[19]  # the sample after the repeat is two periods after it
    sq = compute_report(_trajectory(_head(t))).stream("head")
    assert sq.duplicate_timestamps == 1
    assert sq.gap_count == 0 and sq.missing_samples == 0


def test_a_procedure_step_visited_twice_in_a_row_is_a_retry() -> None:
    steps = tuple(
        ProcedureStep(i, step, step, float(i), float(i + 1))
        for i, step in enumerate(("grasp", "pour", "pour", "place"))
    )
    t = np.arange(300) / 30.0
    report = compute_report(
        _trajectory(*_both_hands(t), annotations=Annotations(procedure_steps=steps))
    )
    assert report.episode.segment_retries == 1
    assert report.metric("episode", "segment_retries").status == "warn"


def test_a_hand_never_seen_fails_with_tracking_loss_one() -> None:
    _, right = _both_hands(np.arange(300) / 30.0)
    report = compute_report(_trajectory(right))
    left = report.hand("left")
    assert left.primary_stream is None
    assert left.tracking_loss_ratio == 1.0
    result = report.metric("hand:left", "tracking_loss_ratio")
    assert (result.status, result.threshold_fail) == ("fail", 0.5)
    assert report.status == "fail"
    assert report.worst_metric == "hand:left/tracking_loss_ratio"


def test_primary_hand_stream_prefers_the_world_skeleton_over_the_local_one() -> None:
    t = np.arange(30) / 30.0
    local = _hand("left", t, frame="local", valid=np.zeros(30, bool))
    world = _hand("left", t, frame="world")
    hand = compute_report(_trajectory(local, world)).hand("left")
    assert hand.primary_stream == "hand_left_world"
    assert hand.candidate_streams == ("hand_left_world", "hand_left_local")
    assert hand.tracking_loss_ratio == 0.0


def test_video_frames_two_ms_off_the_hand_clock_give_a_two_ms_offset() -> None:
    hand_t = np.arange(900) / 90.0
    video_t = np.arange(300) / 30.0 + 0.002
    video = make_stream(
        "camera_left_frames",
        "media_frames",
        _ts(video_t),
        START_NS,
        {"frame_index": np.arange(300)},
        {"media": "camera_left"},
    )
    left, right = _both_hands(hand_t, rate_hz=90.0)
    media = (MediaRef("camera_left", "media/camera_left.mov", "video/quicktime", "video",
                      frames_stream="camera_left_frames"),)  # fmt: skip
    cross = compute_report(_trajectory(left, right, video, media=media)).cross
    assert len(cross.video_hand) == 2
    assert cross.video_hand_offset_p50_ms == pytest.approx(2.0, abs=1e-5)
    assert cross.video_hand_offset_p99_ms == pytest.approx(2.0, abs=1e-5)
    assert cross.video_hand_offset_p99_periods == pytest.approx(0.06, abs=1e-4)
    assert cross.start_misalignment_s == pytest.approx(0.002)


def test_nan_in_a_tracked_sample_is_a_fault_and_in_an_untracked_one_is_not() -> None:
    n = 50
    pos = np.broadcast_to(_skeleton(), (n, 27, 3)).copy()
    pos[3, 4] = np.nan
    pos[7, 0] = np.inf
    valid = np.ones(n, bool)
    valid[7] = False
    left, right = _both_hands(np.arange(n) / 30.0, positions=pos, valid=valid)
    report = compute_report(_trajectory(left, right))
    sq = report.stream("hand_left_world")
    assert sq.non_finite_samples == 2
    assert sq.non_finite_valid == 1
    assert sq.non_finite_ratio == pytest.approx(1 / 49)
    assert report.metric("stream:hand_left_world", "non_finite_ratio").status == "fail"


def test_quaternion_norm_error_is_the_largest_deviation_from_unit_norm() -> None:
    n = 20
    quat = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
    quat[4] = [0.0, 0.0, 0.0, 1.02]
    report = compute_report(_trajectory(_head(np.arange(n) / 60.0, rotation=quat)))
    assert report.stream("head").quat_norm_error_max == pytest.approx(0.02)
    assert report.metric("stream:head", "quat_norm_error_max").status == "fail"


def test_mano_betas_drift_is_measured_on_detected_frames_only() -> None:
    n = 30
    betas = np.zeros((n, 10))
    betas[::2, 0] = 0.2  # alternating 0 / 0.2: std 0.1
    detected = np.ones(n, bool)
    fields = {
        "transl": np.zeros((n, 3)),
        "global_orient": np.zeros((n, 3)),
        "hand_pose": np.zeros((n, 45)),
        "betas": betas,
        "valid_detected": detected,
    }
    attrs = {"hand": "right", "frame": "world", "mano_pose_space": "pca", "flat_hand_mean": False}
    mano = make_stream("mano_right", "mano", _ts(np.arange(n) / 30.0), START_NS, fields, attrs)
    report = compute_report(_trajectory(mano))
    assert report.hand("right").betas_std_max == pytest.approx(0.1)
    assert report.metric("hand:right", "betas_std_max").status == "warn"


def test_thresholds_classify_in_both_directions() -> None:
    upper = MetricThreshold("x", "1", "max", warn=0.1, fail=0.5)
    assert [upper.classify(v) for v in (0.1, 0.2, 0.5, 0.6)] == ["pass", "warn", "warn", "fail"]
    lower = MetricThreshold("y", "1", "min", warn=0.5, fail=0.3)
    assert [lower.classify(v) for v in (0.6, 0.4, 0.3, 0.2)] == ["pass", "warn", "warn", "fail"]
    assert upper.classify(math.nan) == "pass"
    with pytest.raises(ValueError, match="looser"):
        MetricThreshold("z", "1", "max", warn=0.5, fail=0.1)
    limits = default_thresholds()
    assert limits.metric("tracking_loss_ratio").warn == pytest.approx(0.10)
    assert limits.metric("segment_retries").fail == math.inf


def test_clean_episode_passes_and_retries_warn() -> None:
    t = np.arange(600) / 60.0
    left, right = _both_hands(t, rate_hz=60.0)
    seg = Segment("s1", "pour", 0, 0, 0, "retry", START_NS, START_NS + 10**9)
    notes = Annotations(instructions=("pour the water",), segments=(seg,))
    report = compute_report(_trajectory(left, right, _head(t), annotations=notes))
    assert report.count("fail") == 0
    assert report.status == "warn"
    assert report.worst_metric == "episode/segment_retries"
    assert report.episode.segment_retries == 1 and report.episode.has_instructions


def test_write_report_writes_json_and_one_parquet_row_with_the_schema(tmp_path: Path) -> None:
    t = np.arange(300) / 30.0
    _, right = _both_hands(t)
    report = compute_report(_trajectory(right, _head(t)))
    json_path, parquet_path = write_report(report, tmp_path / "out")
    data = json.loads(json_path.read_text())
    assert data["status"] == "fail"
    assert data["hands"][0]["mean_confidence"] is None  # NaN is written as null
    table = pq.read_table(parquet_path)
    assert table.schema.equals(ROW_SCHEMA)
    row = table.to_pylist()[0]
    assert row["capture_id"] == "cap-1"
    assert row["left_tracking_loss_ratio"] == 1.0
    assert row["right_tracking_loss_ratio"] == 0.0
    assert row["right_primary_stream"] == "hand_right_world"
    assert row["n_fail"] == report.count("fail") == 2  # left: loss ratio and longest loss
    assert row["left_longest_tracking_loss_s"] == pytest.approx(299 / 30)
    assert row["duration_s"] == pytest.approx(299 / 30)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "quality.json",
        "quality.parquet",
    ]
    # the standard library's text, byte for byte (orjson writes it: `fileio.json_bytes`)
    expected = json.dumps(report.to_dict(), sort_keys=True, indent=2, allow_nan=False) + "\n"
    assert json_path.read_text() == expected


def test_every_thresholded_metric_has_a_row_in_docs_quality() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "quality.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in doc.splitlines() if line[:3] == "| `"}
    missing = [m.name for m in default_thresholds().metrics if m.name not in rows]
    assert missing == []


def test_docs_quality_gives_each_metric_the_unit_the_gate_records() -> None:
    """The unit column of docs/quality.md is thresholds.toml's (the one gate.json and the
    Dagster metadata carry): a count is ``1`` there, not "count"."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "quality.md").read_text()
    units = {
        cells[1].strip("`"): cells[3]
        for line in doc.splitlines()
        if line[:3] == "| `" and len(cells := [c.strip() for c in line.split("|")]) == 8
    }
    wrong = {
        m.name: (units[m.name], m.unit)
        for m in default_thresholds().metrics
        if units.get(m.name, m.unit) != m.unit
    }
    assert wrong == {}
    assert units["backwards_timestamps"] == units["teleport_count"] == "1"
