"""Fault injection plan: which faults a synthetic capture carries, and where.

Every choice is drawn from a generator seeded by (seed, fault, stream name), so one
stream's faults never shift when another stream is added or changed.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

FAULTS = (
    "dropout",
    "jitter",
    "duplicate_timestamps",
    "backwards_timestamps",
    "dropped_video_frames",
    "retried_segment",
    "hand_never_seen",
    # plausibility faults: each one is caught by one plausibility metric (docs/quality.md)
    "quaternion_wxyz",
    "swapped_hands",
    "negative_radius",
    "pinch_strength",
    "teleport",
)
# The original faults apply to every kind; plausibility faults to the kinds whose files
# carry what they break (joint rotations, radii and pinch: WebXR; a 15 Hz hand: iPhone).
PLAUSIBILITY_FAULTS = {
    "quaternion_wxyz": ("webxr",),
    "swapped_hands": ("webxr", "holos-visionpro", "holos-iphone"),
    "negative_radius": ("webxr",),
    "pinch_strength": ("webxr",),
    "teleport": ("webxr", "holos-iphone"),
}
# One line per fault for `ego-assets synth --help` (docs/capture-formats.md has the detail).
FAULT_MEANINGS = {
    "dropout": "each hand loses tracking for one 0.55-0.9 s stretch",
    "jitter": "4 mm std noise on hand joint positions",
    "duplicate_timestamps": "3 samples per stream repeat the previous timestamp",
    "backwards_timestamps": "3 samples per stream are stamped half a period early",
    "dropped_video_frames": "two runs of 1-3 frames missing from each video",
    "retried_segment": "a segment (webxr) or procedure step (holos) is taken twice",
    "hand_never_seen": "the left hand is never tracked nor drawn",
    "quaternion_wxyz": "webxr joint rotations written w first",
    "swapped_hands": "left and right hands written under each other's side",
    "negative_radius": "webxr joint radii written negative",
    "pinch_strength": "webxr pinch written as a 0-1 strength, not a distance in metres",
    "teleport": "a wrist jumps 12 cm for 2 samples and comes back",
}
JITTER_STD_M = 0.004
TELEPORT_M = 0.12  # the hand jumps this far for TELEPORT_SAMPLES samples, then comes back
TELEPORT_SAMPLES = 2
PINCH_STRENGTH_RANGE_M = 0.1  # pinch_strength writes 1 - distance / this, clipped to [0, 1]
MIN_DROPOUT_S = 0.5
N_TIMESTAMP_FAULTS = 3


@dataclass(frozen=True)
class FaultPlan:
    """The faults requested for one capture.

    Attributes:
        faults: requested fault names (subset of `FAULTS`).
        seed: capture seed.
        seconds: capture duration, seconds.
    """

    faults: frozenset[str]
    seed: int
    seconds: float

    def __post_init__(self) -> None:
        unknown = sorted(self.faults - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault option(s) {unknown}; known: {list(FAULTS)}")

    def has(self, name: str) -> bool:
        return name in self.faults

    def rng(self, purpose: str) -> np.random.Generator:
        """A generator for one purpose (stable across runs and Python versions)."""
        return np.random.default_rng([self.seed, zlib.crc32(purpose.encode("utf-8"))])

    def dropout_intervals(self, side: str) -> list[tuple[float, float]]:
        """Tracking-loss stretches (start, end) in capture seconds for one hand (≥ 0.5 s)."""
        if not self.has("dropout"):
            return []
        rng = self.rng(f"dropout-{side}")
        length = min(rng.uniform(MIN_DROPOUT_S + 0.05, 0.9), 0.5 * self.seconds)
        length = max(length, MIN_DROPOUT_S + 0.02)
        latest = max(0.2, self.seconds - length - 0.2)
        start = rng.uniform(min(0.2, latest), latest)
        return [(start, start + length)]

    def tracked(self, side: str, t: np.ndarray) -> np.ndarray:
        """(T,) bool: whether the device tracks hand ``side`` at capture times ``t`` (s)."""
        if side == "left" and self.has("hand_never_seen"):
            return np.zeros(len(t), dtype=bool)
        out = np.ones(len(t), dtype=bool)
        for a, b in self.dropout_intervals(side):
            out &= ~((t >= a) & (t < b))
        return out

    def hand_present(self, side: str) -> bool:
        """False for a hand that is never in the scene (``hand_never_seen``: left)."""
        return not (side == "left" and self.has("hand_never_seen"))

    def stamp_times(self, stream: str, t: np.ndarray, period_s: float) -> np.ndarray:
        """Timestamps to write for samples taken at ``t`` (s): a few repeated / backwards.

        ``duplicate_timestamps``: sample i repeats sample i-1's time.
        ``backwards_timestamps``: sample i is stamped half a period before sample i-1.
        """
        out = np.array(t, dtype=np.float64)
        want = [f for f in ("duplicate_timestamps", "backwards_timestamps") if self.has(f)]
        if not want or len(t) < 8:
            return out
        candidates = np.arange(3, len(t) - 1, 3)
        rng = self.rng(f"timestamps-{stream}")
        k = min(len(candidates), N_TIMESTAMP_FAULTS * len(want))
        picks = np.sort(rng.choice(candidates, size=k, replace=False))
        order = rng.permutation(k)
        for n, fault in enumerate(want):
            idx = picks[order[n::2] if len(want) == 2 else order]
            if fault == "duplicate_timestamps":
                out[idx] = out[idx - 1]
            else:
                out[idx] = out[idx - 1] - 0.5 * period_s
        return out

    def kept_frames(self, stream: str, n: int) -> np.ndarray:
        """(n,) bool: video frames kept (``dropped_video_frames`` removes 2 short runs)."""
        keep = np.ones(n, dtype=bool)
        if not self.has("dropped_video_frames") or n < 12:
            return keep
        rng = self.rng(f"frames-{stream}")
        half = n // 2
        for lo, hi in ((2, half - 4), (half, n - 4)):
            start = int(rng.integers(lo, max(lo + 1, hi)))
            keep[start : start + int(rng.integers(1, 4))] = False
        return keep

    def written_side(self, side: str) -> str:
        """The side a hand is written under (``swapped_hands``: the other one)."""
        if not self.has("swapped_hands"):
            return side
        return "right" if side == "left" else "left"

    def joint_quaternions(self, quat: np.ndarray) -> np.ndarray:
        """(..., 4) xyzw quaternions as written (``quaternion_wxyz``: w first)."""
        return quat[..., [3, 0, 1, 2]] if self.has("quaternion_wxyz") else quat

    def radii(self, radii: np.ndarray) -> np.ndarray:
        """Joint radii (m) as written (``negative_radius``: sign flipped)."""
        return -radii if self.has("negative_radius") else radii

    def pinch(self, distance_m: np.ndarray) -> np.ndarray:
        """Pinch values as written: the thumb-index distance in metres, or under
        ``pinch_strength`` a 0-1 strength (1 = touching) as some runtimes report it."""
        if not self.has("pinch_strength"):
            return distance_m
        return np.clip(1.0 - distance_m / PINCH_STRENGTH_RANGE_M, 0.0, 1.0)

    def teleport(self, stream: str, positions: np.ndarray) -> np.ndarray:
        """(T, ..., 3) positions with, under ``teleport``, the whole hand moved
        `TELEPORT_M` sideways for `TELEPORT_SAMPLES` samples around the middle."""
        if not self.has("teleport") or len(positions) < 8:
            return positions
        start = len(positions) // 2 + int(self.rng(f"teleport-{stream}").integers(-2, 3))
        out = positions.copy()
        out[start : start + TELEPORT_SAMPLES, ..., 0] += TELEPORT_M
        return out

    def jitter(self, stream: str, positions: np.ndarray) -> np.ndarray:
        """``positions`` (..., 3) m plus Gaussian noise (std `JITTER_STD_M`) under ``jitter``."""
        if not self.has("jitter"):
            return positions
        return positions + self.rng(f"jitter-{stream}").normal(0.0, JITTER_STD_M, positions.shape)


def make_plan(
    faults: Sequence[str], seed: int, seconds: float, applicable: Sequence[str]
) -> FaultPlan:
    """Validate ``faults`` and log those that do not apply to the kind (they are ignored)."""
    plan = FaultPlan(frozenset(faults), seed, seconds)
    for name in sorted(plan.faults - set(applicable)):
        log.info("fault %r does not apply to this capture kind; ignored", name)
    return FaultPlan(plan.faults & frozenset(applicable), seed, seconds)


def forward_fill_index(tracked: np.ndarray) -> np.ndarray:
    """(T,) int: index of the latest tracked sample at or before each sample, -1 if none."""
    idx = np.where(tracked, np.arange(len(tracked)), -1)
    return np.maximum.accumulate(idx) if len(idx) else idx
