"""Per-stream quality: sample timing, gaps, data faults, quaternion norms.

All figures are computed with numpy over whole arrays. Timing uses ``timestamp_ns``
(the source clock) and gives seconds; ``time`` (seconds since capture start) only
places gaps on the capture's time axis.

Definitions (documented with their thresholds in ``docs/quality.md``):

* nominal rate: the stream's ``nominal_rate_hz`` attr when present and > 0, else the
  inverse of the median positive interval;
* gap: an interval longer than ``max(gap.factor / nominal_rate_hz, gap.min_s)``;
* dt coefficient of variation: std / mean of the positive intervals that are not gaps,
  so that one long hole does not hide (or fake) clock jitter;
* missing samples: for every gap, ``round(interval * nominal_rate_hz) - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ego_assets.quality.thresholds import Thresholds
from ego_assets.trajectory.streams import SampleFlag, Stream

# Kinds whose samples are events in long format (several rows per instant): timing
# metrics (duplicates, gaps, regularity) do not apply to them.
UNTIMED_KINDS = frozenset({"object_pose"})
# Kinds whose NaN values are part of the format: pinch is NaN while a hand is untracked;
# a video frame's camera model is NaN where the device gave no pose for that frame.
NAN_BY_DESIGN_KINDS = frozenset({"pinch", "media_frames"})
# Validity field per kind: the source's own flag, before any filling.
VALIDITY_FIELD = {
    "pose": "valid",
    "object_pose": "valid",
    "hand_joints": "hand_valid",
    "hand_landmarks_2d": "hand_valid",
    "wrist_palm": "hand_valid",
    "mano": "valid_detected",
}
# Quaternion fields (xyzw) per kind.
ROTATION_FIELD = {
    "pose": "rotation",
    "object_pose": "rotation",
    "hand_joints": "rotation",
    "wrist_palm": "wrist_rotation",
}
# Gaps kept in the report per stream (the longest ones); gap_count counts all.
MAX_LISTED_GAPS = 200


@dataclass(frozen=True, slots=True)
class Gap:
    """A hole in a stream: ``start_s`` seconds since capture start, ``length_s`` seconds."""

    start_s: float
    length_s: float


@dataclass(frozen=True, slots=True)
class StreamQuality:
    """Quality figures of one stream. NaN marks a figure that cannot be measured.

    Attributes:
        name: stream name; kind: its kind; hand: its ``hand`` attr or "".
        samples: number of samples.
        timed: False for event streams (object anchors) where timing checks do not apply.
        nominal_rate_hz: declared rate, or 1 / median interval (see ``rate_source``).
        rate_source: ``"attr"`` or ``"median_dt"`` (``""`` when there is no interval).
        measured_rate_hz: (distinct timestamps - 1) / time span.
        dt_cv: coefficient of variation of the non-gap intervals.
        duplicate_timestamps: samples flagged `SampleFlag.DUPLICATE_TIMESTAMP`.
        backwards_timestamps: samples flagged `SampleFlag.BACKWARDS_TIMESTAMP`.
        duplicate_timestamp_ratio: duplicate_timestamps / samples.
        gap_count: intervals longer than the gap limit; gap_limit_s: that limit.
        longest_gap_s: longest such interval (0 when none); gap_total_s: their sum.
        missing_samples: samples estimated missing inside the gaps.
        missing_sample_ratio: missing_samples / (samples + missing_samples).
        non_finite_samples: samples flagged `SampleFlag.NON_FINITE` (any NaN/inf).
        non_finite_valid: of those, samples that the source marked valid, counting only
            joints it marked valid (NaN in an untracked hand is not a fault).
        non_finite_ratio: non_finite_valid / valid samples (NaN for NaN-by-design kinds).
        valid_samples: samples the source marked valid (= samples without a validity field).
        quat_norm_error_max: max | |q| - 1 | over finite valid quaternions (NaN: none).
        out_of_domain_ratio: valid samples with a confidence outside [0, 1] or a negative
            radius / valid samples (NaN for streams without either field).
        start_s, end_s: first and last sample time, seconds since capture start.
        gaps: the longest `MAX_LISTED_GAPS` gaps, in time order.
    """

    name: str
    kind: str
    hand: str
    samples: int
    timed: bool
    nominal_rate_hz: float
    rate_source: str
    measured_rate_hz: float
    dt_cv: float
    duplicate_timestamps: int
    backwards_timestamps: int
    duplicate_timestamp_ratio: float
    gap_count: int
    gap_limit_s: float
    longest_gap_s: float
    gap_total_s: float
    missing_samples: int
    missing_sample_ratio: float
    non_finite_samples: int
    non_finite_valid: int
    non_finite_ratio: float
    valid_samples: int
    quat_norm_error_max: float
    out_of_domain_ratio: float
    start_s: float
    end_s: float
    gaps: tuple[Gap, ...]


def validity(stream: Stream) -> np.ndarray:
    """(T,) bool: the source's own validity flag, all True for kinds without one."""
    name = VALIDITY_FIELD.get(stream.kind)
    if name is None or name not in stream.fields:
        return np.ones(len(stream), bool)
    return np.asarray(stream.fields[name], bool)


def joint_mask(stream: Stream) -> np.ndarray | None:
    """(T, J) bool of joints the source tracked (``joint_valid``, else confidence > 0)."""
    if "joint_valid" in stream.fields:
        return np.asarray(stream.fields["joint_valid"], bool)
    if "joint_confidence" in stream.fields:
        return np.asarray(stream.fields["joint_confidence"] > 0, bool)
    return None


def nominal_rate(stream: Stream) -> tuple[float, str]:
    """(rate in Hz, ``"attr"`` | ``"median_dt"`` | ``""``); NaN when not measurable."""
    declared = stream.attrs.get("nominal_rate_hz")
    if isinstance(declared, int | float) and not isinstance(declared, bool) and declared > 0:
        return float(declared), "attr"
    dt = np.diff(stream.timestamp_ns)
    positive = dt[dt > 0]
    if positive.size == 0:
        return float("nan"), ""
    return 1e9 / float(np.median(positive)), "median_dt"


def gap_limit_s(rate_hz: float, thresholds: Thresholds) -> float:
    """Longest interval (s) that is not a gap at ``rate_hz``."""
    if not np.isfinite(rate_hz) or rate_hz <= 0:
        return float("inf")
    return max(thresholds.gap_factor / rate_hz, thresholds.gap_min_s)


def _non_finite_valid(stream: Stream, valid: np.ndarray) -> int:
    n = len(stream)
    joints = joint_mask(stream)
    bad = np.zeros(n, bool)
    for spec in stream.spec.fields:
        arr = stream.fields.get(spec.name)
        if arr is None or arr.dtype.kind != "f" or n == 0:
            continue
        finite = np.isfinite(arr)
        if finite.all():  # the common case, one pass over the field
            continue
        if joints is not None and spec.shape[:1] == ("J",):
            per_joint = ~_all_last(finite.reshape(n, arr.shape[1], -1))
            bad |= (per_joint & joints).any(axis=1)
        else:
            bad |= ~_all_last(finite.reshape(n, -1))
    return int(np.count_nonzero(bad & valid))


def _all_last(values: np.ndarray) -> np.ndarray:
    """``values.all(axis=-1)`` of a bool array, one vectorised AND per component (numpy
    reduces a short last axis slowly)."""
    out = values[..., 0].copy()
    for k in range(1, values.shape[-1]):
        out &= values[..., k]
    return out


def _quat_norm_error(stream: Stream, valid: np.ndarray) -> float:
    name = ROTATION_FIELD.get(stream.kind)
    if name is None or name not in stream.fields or len(stream) == 0:
        return float("nan")
    quats = stream.fields[name][valid]
    err = np.abs(np.sqrt(np.einsum("...i,...i->...", quats, quats)) - 1.0)
    joints = joint_mask(stream)
    if joints is not None and err.ndim == 2:
        err = np.where(joints[valid], err, np.nan)
    finite = err[np.isfinite(err)]
    return float(finite.max()) if finite.size else float("nan")


def out_of_domain_ratio(stream: Stream) -> float:
    """Share of valid samples with a confidence outside [0, 1] or a negative radius of a
    tracked joint; NaN for streams with neither field."""
    names = [f for f in ("hand_confidence", "joint_confidence", "radius") if f in stream.fields]
    if not names or not len(stream):
        return float("nan")
    valid = validity(stream)
    bad = np.zeros(len(stream), bool)
    mask = joint_mask(stream) if "radius" in names else None
    for name in names:
        values = np.asarray(stream.fields[name], np.float64).reshape(len(stream), -1)
        finite = np.isfinite(values)
        if name == "radius":
            wrong = finite & (values < 0)
            if mask is not None:
                wrong &= mask
        else:
            wrong = finite & ((values < 0) | (values > 1))
        bad |= wrong.any(axis=1)
    n_valid = int(np.count_nonzero(valid))
    return float(np.count_nonzero(bad & valid) / n_valid) if n_valid else float("nan")


def _timing(stream: Stream, limit_s: float) -> tuple[float, float, np.ndarray, np.ndarray]:
    """(measured rate Hz, dt cv, gap indices, gap lengths s).

    Intervals that start or end at a sample flagged duplicate or backwards are not
    measured: a repeated stamp makes the next interval two periods long, which is the
    duplicate's fault, not a hole in the stream.
    """
    ts = stream.timestamp_ns
    dt_s = np.diff(ts).astype(np.float64) / 1e9
    if np.all(dt_s >= 0):  # sorted: count the steps instead of sorting again
        n_distinct = 1 + int(np.count_nonzero(dt_s > 0)) if ts.size else 0
        span_s = float(ts[-1] - ts[0]) / 1e9 if ts.size else 0.0
    else:
        n_distinct, span_s = np.unique(ts).size, float(ts.max() - ts.min()) / 1e9
    measured = (n_distinct - 1) / span_s if span_s > 0 else float("nan")
    faulty = (stream.flags & (SampleFlag.DUPLICATE_TIMESTAMP | SampleFlag.BACKWARDS_TIMESTAMP)) > 0
    clean = ~faulty[:-1] & ~faulty[1:] & (dt_s > 0)
    is_gap = clean & (dt_s > limit_s)
    regular = dt_s[clean & ~is_gap]
    mean = float(regular.mean()) if regular.size else 0.0
    cv = float(regular.std() / mean) if mean > 0 else float("nan")
    idx = np.flatnonzero(is_gap)
    return measured, cv, idx, dt_s[idx]


def stream_quality(stream: Stream, thresholds: Thresholds) -> StreamQuality:
    """Measure one stream (see the module docstring for the definitions)."""
    n = len(stream)
    timed = stream.kind not in UNTIMED_KINDS
    valid = validity(stream)
    flags = stream.flags
    dup = int(np.count_nonzero(flags & SampleFlag.DUPLICATE_TIMESTAMP)) if timed else 0
    back = int(np.count_nonzero(flags & SampleFlag.BACKWARDS_TIMESTAMP)) if timed else 0
    rate_hz, rate_source = nominal_rate(stream) if timed else (float("nan"), "")
    limit_s = gap_limit_s(rate_hz, thresholds)
    measured, cv, gap_idx, gap_len = _timing(stream, limit_s)
    if not timed:
        cv, gap_idx, gap_len = float("nan"), gap_idx[:0], gap_len[:0]
    missing = int(np.maximum(np.rint(gap_len * rate_hz) - 1, 0).sum()) if gap_len.size else 0
    keep = np.sort(np.argsort(-gap_len, kind="stable")[:MAX_LISTED_GAPS])
    gaps = tuple(
        Gap(float(stream.time[i]), float(length))
        for i, length in zip(gap_idx[keep], gap_len[keep], strict=True)
    )
    n_valid = int(np.count_nonzero(valid))
    nf_valid = _non_finite_valid(stream, valid)
    if stream.kind in NAN_BY_DESIGN_KINDS:
        nf_ratio = float("nan")
    else:
        nf_ratio = nf_valid / n_valid if n_valid else 0.0
    return StreamQuality(
        name=stream.name,
        kind=stream.kind,
        hand=str(stream.attrs.get("hand", "")),
        samples=n,
        timed=timed,
        nominal_rate_hz=rate_hz,
        rate_source=rate_source,
        measured_rate_hz=measured,
        dt_cv=cv,
        duplicate_timestamps=dup,
        backwards_timestamps=back,
        duplicate_timestamp_ratio=dup / n if n else 0.0,
        gap_count=int(gap_idx.size),
        gap_limit_s=limit_s,
        longest_gap_s=float(gap_len.max()) if gap_len.size else 0.0,
        gap_total_s=float(gap_len.sum()),
        missing_samples=missing,
        missing_sample_ratio=missing / (n + missing) if n + missing else 0.0,
        non_finite_samples=int(np.count_nonzero(flags & SampleFlag.NON_FINITE)),
        non_finite_valid=nf_valid,
        non_finite_ratio=nf_ratio,
        valid_samples=n_valid,
        quat_norm_error_max=_quat_norm_error(stream, valid),
        out_of_domain_ratio=out_of_domain_ratio(stream),
        start_s=float(stream.time.min()) if n else float("nan"),
        end_s=float(stream.time.max()) if n else float("nan"),
        gaps=gaps,
    )
