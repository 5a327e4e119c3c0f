"""Per-hand quality: tracking loss, confidence, skeleton consistency, wrist motion, jitter.

A capture may carry several streams for one hand (world and local skeletons, 3D and
2D landmarks, MANO, Aria wrist/palm). Hand metrics are computed on one primary
stream, chosen by `PRIMARY_ORDER`, and the report names it.

Motion figures only use pairs (speed, teleports) or windows of four samples (jitter)
in which every sample is valid according to the source, and (for jitter) no interval
is a gap. Positions are metres in the stream's frame; speeds m/s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ego_assets.quality.plausibility import (
    chirality_mismatch_ratio,
    pinch_distance_error_m,
    rotation_axis_error_deg,
    teleport_flags,
)
from ego_assets.quality.streams import (
    StreamQuality,
    gap_limit_s,
    joint_mask,
    nominal_rate,
    validity,
)
from ego_assets.quality.thresholds import Thresholds
from ego_assets.trajectory.joints import FINGERTIPS, JOINT_SETS, PARENTS, WRIST, bone_lengths
from ego_assets.trajectory.streams import HAND_CENTRED_FRAMES, Stream

HANDS = ("left", "right")
HAND_KINDS = frozenset({"hand_joints", "hand_landmarks_2d", "wrist_palm", "mano"})
# Primary stream preference (lower first): world skeleton, other 3D landmarks, MANO,
# Aria wrist/palm, wrist-relative skeleton (no wrist motion), 2D landmarks (no metres).
PRIMARY_ORDER = (
    "hand_joints/world",
    "hand_joints",
    "mano",
    "wrist_palm",
    "hand_joints/local",
    "hand_landmarks_2d",
)


@dataclass(frozen=True, slots=True)
class HandQuality:
    """Quality figures of one hand, from its primary stream. NaN: not measurable.

    Attributes:
        hand: ``"left"`` or ``"right"``.
        primary_stream: name of the stream measured (None: no stream for this hand).
        candidate_streams: every stream of this hand, primary first.
        samples: samples of the primary stream; valid_samples: those the source marked
            valid (``hand_valid`` / ``valid_detected``), before any filling.
        tracking_loss_ratio: 1 - valid_samples / samples (1.0 without any sample).
        longest_tracking_loss_s: longest time without a valid sample: between two
            consecutive valid samples, or from the stream's first sample to its first valid
            one, or from its last valid one to its last sample; the whole stream span (the
            episode duration without a stream) when the hand is never valid.
        mean_confidence: mean source confidence over valid samples (per-hand confidence,
            else the mean per-joint confidence); NaN when the source has none.
        bone_names: ``"parent>child"`` per bone of the skeleton (sensor skeletons only).
        bone_length_cv: (n_bones,) std / median of each bone length over valid samples.
        bone_length_cv_max: largest of those.
        betas_std_max: largest per-coefficient std of MANO betas over detected frames.
        wrist_speed_p99_mps, wrist_speed_max_mps: over consecutive valid pairs, m/s.
        teleport_count: teleport events: runs of consecutive valid pairs that jump
            (see `plausibility.teleport_flags` and ``thresholds.toml``).
        jitter_mps3: mean |third difference| x rate^3 of wrist and fingertips, m s-3
            (HaWoR convention; it grows with the cube of the rate for the same noise).
        jitter_third_diff_mm: the same mean |third difference| in millimetres, without the
            rate factor: white position noise of std s gives about 7.1 s at any rate.
        quat_norm_error_max: from the primary stream's `StreamQuality`.
        non_finite_valid: valid samples with NaN/inf in tracked joints (primary stream).
        rotation_axis_error_deg, chirality_mismatch_ratio, pinch_distance_error_m:
            plausibility figures of the primary stream (`ego_assets.quality.plausibility`).
        skipped: ``"<figure>: <why>"`` for figures not measured on this stream (e.g.
            motion figures of landmarks declared in a hand-centred frame).
    """

    hand: str
    primary_stream: str | None
    candidate_streams: tuple[str, ...]
    samples: int
    valid_samples: int
    tracking_loss_ratio: float
    longest_tracking_loss_s: float
    mean_confidence: float
    bone_names: tuple[str, ...]
    bone_length_cv: tuple[float, ...]
    bone_length_cv_max: float
    betas_std_max: float
    wrist_speed_p99_mps: float
    wrist_speed_max_mps: float
    teleport_count: int
    jitter_mps3: float
    jitter_third_diff_mm: float
    quat_norm_error_max: float
    non_finite_valid: int
    rotation_axis_error_deg: float = float("nan")
    chirality_mismatch_ratio: float = float("nan")
    pinch_distance_error_m: float = float("nan")
    skipped: tuple[str, ...] = ()


# Figures that need positions in a world (or device) frame: hand motion.
WORLD_FRAME_FIGURES = ("wrist_speed_p99_mps", "teleport_count", "jitter_mps3")


def primary_rank(stream: Stream) -> int:
    """Position of the stream's kind/frame in `PRIMARY_ORDER`."""
    keyed = f"{stream.kind}/{stream.attrs.get('frame', '')}"
    if keyed in PRIMARY_ORDER:
        return PRIMARY_ORDER.index(keyed)
    return PRIMARY_ORDER.index(stream.kind)


def hand_streams(streams: tuple[Stream, ...], hand: str) -> tuple[Stream, ...]:
    """Streams of ``hand``, primary first (rank, then most samples, then name)."""
    mine = [s for s in streams if s.kind in HAND_KINDS and s.attrs.get("hand") == hand]
    return tuple(sorted(mine, key=lambda s: (primary_rank(s), -len(s), s.name)))


def tracked_points(stream: Stream) -> tuple[np.ndarray, np.ndarray] | None:
    """((T, K, 3) float64 wrist-then-fingertip positions in metres, (T, K) bool tracked).

    Point 0 is the wrist. None for streams without metric positions (2D landmarks).
    """
    n = len(stream)
    if stream.kind == "hand_joints":
        joint_set = str(stream.attrs.get("joint_set", ""))
        index = (WRIST.get(joint_set, 0), *FINGERTIPS.get(joint_set, ()))
        points = stream.fields["position"][:, index, :]
        mask = joint_mask(stream)
        tracked = np.ones((n, len(index)), bool) if mask is None else mask[:, index]
    elif stream.kind == "mano" and "joints" in stream.fields:
        index = (WRIST["mano21"], *FINGERTIPS["mano21"])
        points = stream.fields["joints"][:, index, :]
        tracked = np.ones((n, len(index)), bool)
    elif stream.kind == "mano":
        points = stream.fields["transl"][:, None, :]
        tracked = np.ones((n, 1), bool)
    elif stream.kind == "wrist_palm":
        points = stream.fields["wrist_position"][:, None, :]
        tracked = np.ones((n, 1), bool)
    else:
        return None
    tracked = tracked & validity(stream)[:, None] & np.isfinite(points).all(axis=2)
    return np.asarray(points, np.float64), tracked


def _mean_confidence(stream: Stream, valid: np.ndarray) -> float:
    if "hand_confidence" in stream.fields:
        conf = stream.fields["hand_confidence"][valid]
    elif "joint_confidence" in stream.fields:
        conf = stream.fields["joint_confidence"][valid].mean(axis=1)
    else:
        return float("nan")
    conf = conf[np.isfinite(conf)]
    return float(conf.mean()) if conf.size else float("nan")


def _bone_cv(stream: Stream, valid: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    joint_set = str(stream.attrs.get("joint_set", ""))
    if stream.kind != "hand_joints" or joint_set not in PARENTS:
        return (), np.zeros(0)
    names = JOINT_SETS[joint_set]
    parents = PARENTS[joint_set]
    pairs = np.asarray([(p, c) for c, p in enumerate(parents) if p >= 0])
    bone_names = tuple(f"{names[p]}>{names[c]}" for p, c in pairs)
    lengths = bone_lengths(stream.fields["position"][valid], joint_set)
    mask = joint_mask(stream)
    if mask is not None:
        ok = mask[valid]
        lengths = np.where(ok[:, pairs[:, 0]] & ok[:, pairs[:, 1]], lengths, np.nan)
    lengths = np.where(np.isfinite(lengths), lengths, np.nan)
    counts = np.count_nonzero(np.isfinite(lengths), axis=0)
    cv = np.full(len(pairs), np.nan)
    measurable = counts >= 2
    if measurable.any():
        sub = lengths[:, measurable]
        # nanmedian goes column by column in Python; without a NaN it is np.median
        has_nan = bool(np.isnan(sub).any())
        median = np.nanmedian(sub, axis=0) if has_nan else np.median(sub, axis=0)
        std = np.nanstd(sub, axis=0)
        cv[measurable] = np.where(median > 0, std / np.where(median > 0, median, 1.0), np.nan)
    return bone_names, cv


def _betas_std(stream: Stream, valid: np.ndarray) -> float:
    if stream.kind != "mano":
        return float("nan")
    betas = stream.fields["betas"][valid]
    betas = betas[np.isfinite(betas).all(axis=1)]
    if len(betas) < 2:
        return float("nan")
    return float(betas.std(axis=0).max())


def _longest_loss_s(stream: Stream, valid: np.ndarray) -> float:
    if not len(stream):
        return float("nan")
    times = stream.time[valid]
    edges = np.concatenate(([stream.time.min()], times, [stream.time.max()]))
    return float(np.diff(edges).max()) if edges.size > 1 else 0.0


def wrist_steps(
    stream: Stream, points: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Wrist motion between consecutive samples that both have a tracked wrist.

    ``points``: `tracked_points` of ``stream`` when the caller has it already.

    Returns:
        (pair: (T-1,) bool, interval i -> i+1 measured; step_m: metres moved per
        measured interval; dt_s: its length in seconds, > 0), or None for streams
        without metric positions or with fewer than two samples. Speed = step_m / dt_s.
    """
    got = points if points is not None else tracked_points(stream)
    if got is None or len(stream) < 2:
        return None
    positions, tracked = got
    dt_s = np.diff(stream.timestamp_ns).astype(np.float64) / 1e9
    pair = tracked[:-1, 0] & tracked[1:, 0] & (dt_s > 0)
    step_m = np.linalg.norm(np.diff(positions[:, 0, :], axis=0), axis=1)[pair]
    return pair, step_m, dt_s[pair]


def _motion(stream: Stream, thresholds: Thresholds) -> tuple[float, float, int, float]:
    """(wrist speed p99 m/s, max m/s, teleport events, mean |third difference| m)."""
    got = tracked_points(stream)
    steps = wrist_steps(stream, got)
    nan = float("nan")
    if got is None or steps is None:
        return nan, nan, 0, nan
    points, tracked = got
    dt_s = np.diff(stream.timestamp_ns).astype(np.float64) / 1e9
    limit = gap_limit_s(nominal_rate(stream)[0], thresholds)
    pair, step_m, pair_dt_s = steps
    speed = step_m / pair_dt_s
    if speed.size:
        p99, top = float(np.percentile(speed, 99)), float(speed.max())
        flags = teleport_flags(
            points[:, 0, :],
            dt_s,
            pair & (dt_s <= limit),
            thresholds.teleport_speed_mps,
            thresholds.teleport_step_m,
        )
        teleports = int(np.count_nonzero(flags[1:] & ~flags[:-1]) + int(flags[:1].sum()))
    else:
        p99, top, teleports = nan, nan, 0
    if len(stream) < 4:
        return p99, top, teleports, nan
    interval_ok = (dt_s > 0) & (dt_s <= limit)
    window_ok = interval_ok[:-2] & interval_ok[1:-1] & interval_ok[2:]
    third = points[3:] - 3.0 * points[2:-1] + 3.0 * points[1:-2] - points[:-3]
    ok = tracked[3:] & tracked[2:-1] & tracked[1:-2] & tracked[:-3] & window_ok[:, None]
    norms = np.linalg.norm(np.where(ok[..., None], third, 0.0), axis=2)[ok]
    return p99, top, teleports, float(norms.mean()) if norms.size else nan


def hand_quality(
    hand: str,
    streams: tuple[Stream, ...],
    stream_reports: dict[str, StreamQuality],
    thresholds: Thresholds,
    duration_s: float,
    left_handed_frame: bool = False,
) -> HandQuality:
    """Measure ``hand`` on its primary stream among ``streams``.

    ``duration_s`` (the episode's) is the tracking-loss length of a hand without a stream;
    ``left_handed_frame``: the capture's coordinates are left-handed (chirality flips).
    Motion figures are skipped, and say why, when the primary stream's positions are in
    a hand-centred frame (`HAND_CENTRED_FRAMES`): they would measure nothing real.
    """
    candidates = hand_streams(streams, hand)
    nan = float("nan")
    if not candidates:
        return HandQuality(
            hand, None, (), 0, 0, 1.0, duration_s, nan, (), (), nan, nan, nan, nan, 0, nan,
            nan, nan, 0,
        )  # fmt: skip
    primary = candidates[0]
    valid = validity(primary)
    n, n_valid = len(primary), int(np.count_nonzero(valid))
    names, cv = _bone_cv(primary, valid)
    finite_cv = cv[np.isfinite(cv)]
    frame = str(primary.attrs.get("frame", ""))
    skipped: tuple[str, ...] = ()
    if frame in HAND_CENTRED_FRAMES:
        p99, top, teleports, third_m = nan, nan, 0, nan
        why = f"positions are in the hand-centred frame {frame!r}, not a world frame"
        skipped = tuple(f"{name}: {why}" for name in WORLD_FRAME_FIGURES)
    else:
        p99, top, teleports, third_m = _motion(primary, thresholds)
    pinch = next((s for s in streams if s.kind == "pinch"), None)
    sq = stream_reports[primary.name]
    rate_hz = sq.nominal_rate_hz
    return HandQuality(
        hand=hand,
        primary_stream=primary.name,
        candidate_streams=tuple(s.name for s in candidates),
        samples=n,
        valid_samples=n_valid,
        tracking_loss_ratio=1.0 - n_valid / n if n else 1.0,
        longest_tracking_loss_s=_longest_loss_s(primary, valid),
        mean_confidence=_mean_confidence(primary, valid),
        bone_names=names,
        bone_length_cv=tuple(float(v) for v in cv),
        bone_length_cv_max=float(finite_cv.max()) if finite_cv.size else nan,
        betas_std_max=_betas_std(primary, valid),
        wrist_speed_p99_mps=p99,
        wrist_speed_max_mps=top,
        teleport_count=teleports,
        jitter_mps3=third_m * rate_hz**3,
        jitter_third_diff_mm=third_m * 1e3,
        quat_norm_error_max=sq.quat_norm_error_max,
        non_finite_valid=sq.non_finite_valid,
        rotation_axis_error_deg=rotation_axis_error_deg(primary),
        chirality_mismatch_ratio=chirality_mismatch_ratio(primary, hand, left_handed_frame),
        pinch_distance_error_m=pinch_distance_error_m(primary, pinch, hand),
        skipped=skipped,
    )
