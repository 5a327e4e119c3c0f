"""The per-episode quality report: figures, pass/warn/fail verdicts, JSON and Parquet.

`compute_report` measures a canonical `Trajectory` (streams, hands, cross-stream timing,
episode) and classifies every thresholded figure with ``thresholds.toml``.
`write_report` writes ``quality.json`` (the whole report) and ``quality.parquet`` (one
row, `ROW_SCHEMA`, documented in ``docs/quality.md``) atomically.
"""

from __future__ import annotations

import io
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.fileio import json_bytes, write_file_atomic
from ego_assets.quality.hands import HANDS, HandQuality, hand_quality
from ego_assets.quality.streams import StreamQuality, nominal_rate, stream_quality
from ego_assets.quality.thresholds import Thresholds, default_thresholds
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.records import to_jsonable
from ego_assets.trajectory.streams import Stream

REPORT_VERSION = "quality-report-2"
REPORT_JSON = "quality.json"
REPORT_PARQUET = "quality.parquet"
STATUS_ORDER = {"pass": 0, "warn": 1, "fail": 2}

_HAND_ROW_FIGURES: tuple[tuple[str, pa.DataType], ...] = (
    ("primary_stream", pa.string()),
    ("tracking_loss_ratio", pa.float64()),
    ("longest_tracking_loss_s", pa.float64()),
    ("mean_confidence", pa.float64()),
    ("bone_length_cv_max", pa.float64()),
    ("betas_std_max", pa.float64()),
    ("wrist_speed_p99_mps", pa.float64()),
    ("teleport_count", pa.int64()),
    ("jitter_mps3", pa.float64()),
    ("jitter_third_diff_mm", pa.float64()),
    ("rotation_axis_error_deg", pa.float64()),
    ("chirality_mismatch_ratio", pa.float64()),
    ("pinch_distance_error_m", pa.float64()),
)

# One row per episode in quality.parquet; columns are append-only (docs/quality.md).
ROW_SCHEMA = pa.schema(
    [
        ("capture_id", pa.string()),
        ("source_kind", pa.string()),
        ("report_version", pa.string()),
        ("thresholds_version", pa.int64()),
        ("status", pa.string()),
        ("worst_metric", pa.string()),
        ("n_fail", pa.int64()),
        ("n_warn", pa.int64()),
        ("n_pass", pa.int64()),
        ("duration_s", pa.float64()),
        ("n_streams", pa.int64()),
        ("has_instructions", pa.bool_()),
        ("n_segments", pa.int64()),
        ("n_retries", pa.int64()),
        *((f"{hand}_{name}", dtype) for hand in HANDS for name, dtype in _HAND_ROW_FIGURES),
        ("total_gap_count", pa.int64()),
        ("total_gap_s", pa.float64()),
        ("max_longest_gap_s", pa.float64()),
        ("max_missing_sample_ratio", pa.float64()),
        ("max_dt_cv", pa.float64()),
        ("total_duplicate_timestamps", pa.int64()),
        ("total_backwards_timestamps", pa.int64()),
        ("total_non_finite_valid", pa.int64()),
        ("video_hand_offset_p50_ms", pa.float64()),
        ("video_hand_offset_p99_ms", pa.float64()),
        ("start_misalignment_s", pa.float64()),
        ("end_misalignment_s", pa.float64()),
        ("max_out_of_domain_ratio", pa.float64()),
    ]
)


@dataclass(frozen=True, slots=True)
class MetricResult:
    """One thresholded figure and its verdict.

    Attributes:
        name: metric name (a key of ``thresholds.toml``).
        scope: ``"stream:<name>"``, ``"hand:<left|right>"``, ``"cross"`` or ``"episode"``.
        value: the figure, in ``unit``.
        status: ``"pass"``, ``"warn"`` or ``"fail"``.
        threshold_warn, threshold_fail: the limits applied; direction: ``"max"``/``"min"``.
    """

    name: str
    scope: str
    value: float
    unit: str
    status: str
    threshold_warn: float
    threshold_fail: float
    direction: str

    @property
    def key(self) -> str:
        """``"<scope>/<name>"``, unique within a report."""
        return f"{self.scope}/{self.name}"


@dataclass(frozen=True, slots=True)
class VideoHandOffset:
    """Distance from each video frame to the nearest sample of a hand stream.

    Attributes:
        video_stream, hand_stream: stream names.
        p50_ms, p99_ms: percentiles of the distance, milliseconds.
        period_s: the coarser of the two nominal periods, seconds.
        p99_periods: p99 / period (0.5 = half a frame of the coarser stream).
    """

    video_stream: str
    hand_stream: str
    p50_ms: float
    p99_ms: float
    period_s: float
    p99_periods: float


@dataclass(frozen=True, slots=True)
class CrossStreamQuality:
    """Timing across streams; NaN where there is nothing to compare.

    Attributes:
        video_hand: one entry per (video frames stream, hand primary stream).
        video_hand_offset_p50_ms, video_hand_offset_p99_ms: worst over ``video_hand``.
        video_hand_offset_p99_periods: worst p99 in periods of the coarser stream.
        start_misalignment_s: latest first sample - earliest first sample (timed streams).
        end_misalignment_s: latest last sample - earliest last sample (timed streams).
    """

    video_hand: tuple[VideoHandOffset, ...]
    video_hand_offset_p50_ms: float
    video_hand_offset_p99_ms: float
    video_hand_offset_p99_periods: float
    start_misalignment_s: float
    end_misalignment_s: float


@dataclass(frozen=True, slots=True)
class EpisodeQuality:
    """Episode-level facts: duration (s) and the annotations present.

    ``segment_retries`` counts segments with outcome ``"retry"`` plus procedure-step
    visits that repeat the step visited just before (a retried step on Holos).
    """

    duration_s: float
    stream_count: int
    has_instructions: bool
    instruction_count: int
    segment_count: int
    segment_retries: int
    quirk_count: int


@dataclass(frozen=True, slots=True)
class QualityReport:
    """The quality report of one capture (one episode)."""

    capture_id: str
    source_kind: str
    report_version: str
    thresholds_version: int
    status: str
    worst_metric: str
    streams: tuple[StreamQuality, ...]
    hands: tuple[HandQuality, ...]
    cross: CrossStreamQuality
    episode: EpisodeQuality
    metrics: tuple[MetricResult, ...]

    def count(self, status: str) -> int:
        """Number of metrics with ``status``."""
        return sum(1 for m in self.metrics if m.status == status)

    def hand(self, hand: str) -> HandQuality:
        for h in self.hands:
            if h.hand == hand:
                return h
        raise KeyError(f"no hand {hand!r} in the report")

    def stream(self, name: str) -> StreamQuality:
        for s in self.streams:
            if s.name == name:
                return s
        raise KeyError(f"no stream {name!r} in the report")

    def metric(self, scope: str, name: str) -> MetricResult:
        for m in self.metrics:
            if m.scope == scope and m.name == name:
                return m
        raise KeyError(f"no metric {name!r} in scope {scope!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values; NaN and inf become None."""
        return _json_safe(to_jsonable(self))

    def to_json(self) -> str:
        """The report as JSON text (sorted keys, 2-space indent, no NaN)."""
        doc = self.to_dict()  # no NaN or inf left (json.dumps's allow_nan=False holds)
        return json_bytes(doc, indent=2, sort_keys=True).decode() + "\n"

    def to_row(self) -> dict[str, Any]:
        """The one-row summary, keys and order of `ROW_SCHEMA`."""
        streams = [s for s in self.streams if s.timed]
        row: dict[str, Any] = {
            "capture_id": self.capture_id,
            "source_kind": self.source_kind,
            "report_version": self.report_version,
            "thresholds_version": self.thresholds_version,
            "status": self.status,
            "worst_metric": self.worst_metric,
            "n_fail": self.count("fail"),
            "n_warn": self.count("warn"),
            "n_pass": self.count("pass"),
            "duration_s": self.episode.duration_s,
            "n_streams": self.episode.stream_count,
            "has_instructions": self.episode.has_instructions,
            "n_segments": self.episode.segment_count,
            "n_retries": self.episode.segment_retries,
        }
        for hand in self.hands:
            for name, _ in _HAND_ROW_FIGURES:
                row[f"{hand.hand}_{name}"] = getattr(hand, name)
        row.update(
            total_gap_count=sum(s.gap_count for s in streams),
            total_gap_s=float(sum(s.gap_total_s for s in streams)),
            max_longest_gap_s=_nanmax([s.longest_gap_s for s in streams]),
            max_missing_sample_ratio=_nanmax([s.missing_sample_ratio for s in streams]),
            max_dt_cv=_nanmax([s.dt_cv for s in streams]),
            total_duplicate_timestamps=sum(s.duplicate_timestamps for s in streams),
            total_backwards_timestamps=sum(s.backwards_timestamps for s in streams),
            total_non_finite_valid=sum(s.non_finite_valid for s in self.streams),
            video_hand_offset_p50_ms=self.cross.video_hand_offset_p50_ms,
            video_hand_offset_p99_ms=self.cross.video_hand_offset_p99_ms,
            start_misalignment_s=self.cross.start_misalignment_s,
            end_misalignment_s=self.cross.end_misalignment_s,
            max_out_of_domain_ratio=_nanmax([s.out_of_domain_ratio for s in self.streams]),
        )
        return {name: row[name] for name in ROW_SCHEMA.names}

    def to_parquet_bytes(self) -> bytes:
        """``quality.parquet`` content: `to_row` as one row with `ROW_SCHEMA`."""
        table = pa.Table.from_pylist([self.to_row()], schema=ROW_SCHEMA)
        sink = io.BytesIO()
        pq.write_table(table, sink)
        return sink.getvalue()


def _nanmax(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return max(finite) if finite else float("nan")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):  # numpy's float64 made a float: orjson writes plain floats
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _nearest_distance_s(frames_ns: np.ndarray, samples_ns: np.ndarray) -> np.ndarray:
    """(F,) seconds from each frame time to the nearest sample time."""
    samples = np.unique(samples_ns)
    idx = np.searchsorted(samples, frames_ns)
    after = samples[np.minimum(idx, samples.size - 1)]
    before = samples[np.maximum(idx - 1, 0)]
    dist = np.minimum(np.abs(frames_ns - after), np.abs(frames_ns - before))
    return dist.astype(np.float64) / 1e9


def _video_streams(trajectory: Trajectory) -> tuple[Stream, ...]:
    kind_of = {m.frames_stream: m.kind for m in trajectory.media if m.frames_stream}
    return tuple(
        s
        for s in trajectory.streams_of_kind("media_frames")
        if len(s) and kind_of.get(s.name, "video") == "video"
    )


def _cross(trajectory: Trajectory, hands: tuple[HandQuality, ...]) -> CrossStreamQuality:
    nan = float("nan")
    pairs = []
    for video in _video_streams(trajectory):
        video_rate, _ = nominal_rate(video)
        for hand in hands:
            if hand.primary_stream is None:
                continue
            stream = trajectory.stream(hand.primary_stream)
            if not len(stream):
                continue
            dist = _nearest_distance_s(video.timestamp_ns, stream.timestamp_ns)
            hand_rate, _ = nominal_rate(stream)
            period = float(np.nanmax([1.0 / video_rate, 1.0 / hand_rate]))
            p50, p99 = np.percentile(dist, [50, 99])
            pairs.append(
                VideoHandOffset(
                    video.name, stream.name, p50 * 1e3, p99 * 1e3, period, float(p99 / period)
                )
            )
    timed = [s for s in trajectory.streams if len(s) and s.kind != "object_pose"]
    starts = [float(s.time.min()) for s in timed]
    ends = [float(s.time.max()) for s in timed]
    return CrossStreamQuality(
        video_hand=tuple(pairs),
        video_hand_offset_p50_ms=max((p.p50_ms for p in pairs), default=nan),
        video_hand_offset_p99_ms=max((p.p99_ms for p in pairs), default=nan),
        video_hand_offset_p99_periods=max((p.p99_periods for p in pairs), default=nan),
        start_misalignment_s=max(starts) - min(starts) if starts else nan,
        end_misalignment_s=max(ends) - min(ends) if ends else nan,
    )


def _episode(trajectory: Trajectory) -> EpisodeQuality:
    notes = trajectory.annotations
    instructions = [i for i in notes.instructions if i.strip()]
    steps = [s.step_id for s in notes.procedure_steps]
    repeats = sum(1 for a, b in itertools.pairwise(steps) if a == b)
    return EpisodeQuality(
        duration_s=trajectory.duration_s,
        stream_count=len(trajectory.streams),
        has_instructions=bool(instructions),
        instruction_count=len(instructions),
        segment_count=len(notes.segments),
        segment_retries=sum(1 for s in notes.segments if s.outcome == "retry") + repeats,
        quirk_count=len(trajectory.quirks),
    )


_STREAM_METRICS = (
    "backwards_timestamps",
    "duplicate_timestamp_ratio",
    "dt_cv",
    "missing_sample_ratio",
    "longest_gap_s",
    "non_finite_ratio",
    "quat_norm_error_max",
    "out_of_domain_ratio",
)
_TIMED_ONLY = frozenset(_STREAM_METRICS[:5])
_HAND_METRICS = (
    "tracking_loss_ratio",
    "longest_tracking_loss_s",
    "mean_confidence",
    "bone_length_cv_max",
    "betas_std_max",
    "wrist_speed_p99_mps",
    "teleport_count",
    "jitter_mps3",
    "rotation_axis_error_deg",
    "chirality_mismatch_ratio",
    "pinch_distance_error_m",
)
_CROSS_METRICS = ("start_misalignment_s", "end_misalignment_s")


def _classify(
    thresholds: Thresholds, scope: str, figures: list[tuple[str, float]]
) -> list[MetricResult]:
    out = []
    for name, raw in figures:
        value = float(raw)
        if math.isnan(value):
            continue
        limit = thresholds.metric(name)
        out.append(
            MetricResult(
                name,
                scope,
                value,
                limit.unit,
                limit.classify(value),
                limit.warn,
                limit.fail,
                limit.direction,
            )
        )
    return out


def _metrics(
    thresholds: Thresholds,
    streams: tuple[StreamQuality, ...],
    hands: tuple[HandQuality, ...],
    cross: CrossStreamQuality,
    episode: EpisodeQuality,
) -> tuple[MetricResult, ...]:
    out: list[MetricResult] = []
    for sq in streams:
        names = [n for n in _STREAM_METRICS if sq.timed or n not in _TIMED_ONLY]
        out += _classify(thresholds, f"stream:{sq.name}", [(n, getattr(sq, n)) for n in names])
    for hq in hands:
        skipped = {entry.split(":", 1)[0] for entry in hq.skipped}
        figures = [(n, getattr(hq, n)) for n in _HAND_METRICS if n not in skipped]
        out += _classify(thresholds, f"hand:{hq.hand}", figures)
    cross_figures = [(n, getattr(cross, n)) for n in _CROSS_METRICS]
    cross_figures.append(("video_hand_offset_p99_periods", cross.video_hand_offset_p99_periods))
    out += _classify(thresholds, "cross", cross_figures)
    out += _classify(
        thresholds,
        "episode",
        [("duration_s", episode.duration_s), ("segment_retries", episode.segment_retries)],
    )
    return tuple(out)


def compute_report(trajectory: Trajectory, thresholds: Thresholds | None = None) -> QualityReport:
    """Measure ``trajectory`` and classify every figure (packaged thresholds by default)."""
    limits = thresholds if thresholds is not None else default_thresholds()
    streams = tuple(stream_quality(s, limits) for s in trajectory.streams)
    by_name = {sq.name: sq for sq in streams}
    duration_s = trajectory.duration_s
    mirrored = trajectory.info.handedness == "left"
    hands = tuple(
        hand_quality(h, trajectory.streams, by_name, limits, duration_s, mirrored) for h in HANDS
    )
    cross = _cross(trajectory, hands)
    episode = _episode(trajectory)
    metrics = _metrics(limits, streams, hands, cross, episode)
    worst = max(metrics, key=lambda m: STATUS_ORDER[m.status], default=None)
    status = worst.status if worst is not None else "pass"
    return QualityReport(
        capture_id=trajectory.info.capture_id,
        source_kind=trajectory.info.source_kind,
        report_version=REPORT_VERSION,
        thresholds_version=limits.version,
        status=status,
        worst_metric=worst.key if worst is not None and status != "pass" else "",
        streams=streams,
        hands=hands,
        cross=cross,
        episode=episode,
        metrics=metrics,
    )


def write_report(report: QualityReport, folder: Path) -> tuple[Path, Path]:
    """Write ``quality.json`` and ``quality.parquet`` into ``folder`` (each temp + rename).

    Returns:
        (json path, parquet path).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    json_path, parquet_path = folder / REPORT_JSON, folder / REPORT_PARQUET
    write_file_atomic(json_path, report.to_json().encode("utf-8"))
    write_file_atomic(parquet_path, report.to_parquet_bytes())
    return json_path, parquet_path
