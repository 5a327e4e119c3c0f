"""The demo clock of a Holos HDF5 export: which stream sets it and how others follow it.

robomimic wants one sample axis per demo, while a capture records every stream on its
own clock. The export picks one *master* stream (`pick_master`) and samples every other
stream onto its timestamps by zero-order hold (`hold_rows`): each master sample carries
the newest value of the other stream at or before it, or NaN when that stream has no
sample yet or its newest one is older than `MAX_AGE_NS`. Everything works on int64
nanoseconds, vectorized (``searchsorted``), with no per-sample Python loop.

This module also derives the robomimic ``actions`` (`wrist_delta`): the per-sample
difference of a pose, position ``p[t+1] - p[t]`` (metres) and rotation
``q[t+1] * conj(q[t])`` (xyzw), with the identity on the last row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ego_assets.trajectory.streams import Stream

# A held value older than this (ns) is stale: NaN rather than a frozen pose.
MAX_AGE_NS = 250_000_000
IDENTITY_XYZW = np.array([0.0, 0.0, 0.0, 1.0])


@dataclass(frozen=True, slots=True)
class Track:
    """One role of the demo (a hand skeleton, a hand's landmarks, the device pose).

    ``streams`` are the canonical streams that fill the role, concatenated in time when
    there are several (Project Aria MPS writes one file per recording).
    """

    role: str
    side: str
    streams: tuple[Stream, ...]

    @property
    def timestamp_ns(self) -> np.ndarray:
        return np.concatenate([s.timestamp_ns for s in self.streams])

    def field(self, name: str) -> np.ndarray:
        """The field over all streams (the stream's own array, not a copy, when one)."""
        if len(self.streams) == 1:
            return np.asarray(self.streams[0].fields[name])
        return np.concatenate([np.asarray(s.fields[name]) for s in self.streams])

    def has_field(self, name: str) -> bool:
        return all(name in s.fields for s in self.streams)

    @property
    def names(self) -> str:
        return ", ".join(s.name for s in self.streams)

    def tracked(self) -> bool:
        """Whether any sample says the hand (or pose) was tracked."""
        for key in ("hand_valid", "valid", "valid_detected"):
            if self.has_field(key):
                return bool(self.field(key).any())
        return len(self.timestamp_ns) > 0


@dataclass(frozen=True, slots=True)
class MasterClock:
    """The demo's sample axis.

    Attributes:
        track: the track whose clock it is (None: no hand or device stream at all).
        timestamp_ns: (T,) int64, strictly increasing (duplicates of the source dropped).
        description: the ``master_clock`` attribute text.
    """

    track: Track | None
    timestamp_ns: np.ndarray
    description: str


def pick_master(
    skeletons: dict[str, Track], landmarks: dict[str, Track], device: Track | None
) -> MasterClock:
    """The dominant hand's clock: right if tracked, else left; skeleton before landmarks;
    else the device pose.

    Args:
        skeletons: side -> hand skeleton track (world frame, with joint orientations).
        landmarks: side -> 3D landmark track (positions only).
        device: the headset or phone pose track.
    """
    for kind, tracks in (("skeleton", skeletons), ("landmarks", landmarks)):
        for side in ("right", "left"):
            track = tracks.get(side)
            if track is not None and track.tracked():
                text = f"{track.names} ({side} hand {kind}; the first tracked of right, left)"
                return MasterClock(track, np.unique(track.timestamp_ns), text)
    if device is not None and len(device.timestamp_ns):
        text = f"{device.names} (device pose: no hand was tracked)"
        return MasterClock(device, np.unique(device.timestamp_ns), text)
    return MasterClock(None, np.zeros(0, np.int64), "none: no hand or device pose stream")


def hold_index(
    sample_ns: np.ndarray, target_ns: np.ndarray, max_age_ns: int = MAX_AGE_NS
) -> tuple[np.ndarray, np.ndarray]:
    """Zero-order hold of samples at ``sample_ns`` onto ``target_ns``.

    Returns:
        ``index`` (T,) int64 into the samples (0 where not held) and ``held`` (T,) bool:
        a sample exists at or before the target time and is at most ``max_age_ns`` old.
        Unsorted sample times are held by time order (stable for duplicates: the later
        row of equal timestamps wins).
    """
    if len(sample_ns) == 0:
        zeros = np.zeros(len(target_ns), np.int64)
        return zeros, np.zeros(len(target_ns), bool)
    order = np.argsort(sample_ns, kind="stable")
    ordered = sample_ns[order]
    pos = np.searchsorted(ordered, target_ns, side="right") - 1
    held = pos >= 0
    pos = np.maximum(pos, 0)
    held &= (target_ns - ordered[pos]) <= max_age_ns
    return order[pos].astype(np.int64), held


def hold_rows(values: np.ndarray, index: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``values[index]`` as float64 with NaN in every row where ``valid`` is False.

    ``valid`` is (T,) or (T, *leading trailing dims*), broadcast against the rows.
    """
    out = np.asarray(values)[index].astype(np.float64, copy=False)
    out[~np.asarray(valid, dtype=bool)] = np.nan
    return out


def same_rows(index: np.ndarray) -> np.ndarray | None:
    """``index`` itself, or None when it is ``0 .. T-1`` (the track is on the master clock:
    its rows can be read as they are, without a gather)."""
    n = len(index)
    if n and index[0] == 0 and index[-1] == n - 1 and bool((np.diff(index) == 1).all()):
        return None
    return index


@dataclass(frozen=True, slots=True)
class Rows:
    """A (T, ...) array assembled block by block, never whole: ``parts`` joined on their
    last axis, rows ``index`` of them, ``pick`` on axis 1, NaN where ``valid`` is False.

    The same values as ``hold_rows(np.concatenate(parts, axis=-1)[:, pick], index,
    valid)`` (cast to ``dtype``), without the full-size temporaries: the writer asks for
    one chunk-aligned block of rows at a time (`block`).

    Attributes:
        parts: source arrays (N, *inner, width_i), the same leading axes.
        dtype: the output dtype.
        index: (T,) source row of each output row; None: output row t is source row t.
        pick: selection on axis 1 (a joint subset: a slice, an index array or one index).
        valid: (T,) or (T, *picked inner) bool; False entries become NaN; None: all valid.
    """

    parts: tuple[np.ndarray, ...]
    dtype: np.dtype
    index: np.ndarray | None = None
    pick: slice | np.ndarray | int | None = None
    valid: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        first = self.parts[0]
        rows = len(first) if self.index is None else len(self.index)
        inner = first.shape[1:-1] if self.pick is None else first[:0][:, self.pick].shape[1:-1]
        return (rows, *inner, sum(p.shape[-1] for p in self.parts))

    def block(self, start: int, stop: int) -> np.ndarray:
        """Output rows ``[start, stop)``."""
        rows: slice | np.ndarray = (
            slice(start, stop) if self.index is None else self.index[start:stop]
        )
        out = np.empty((stop - start, *self.shape[1:]), dtype=self.dtype)
        col = 0
        for part in self.parts:
            width = part.shape[-1]
            if self.pick is None:
                out[..., col : col + width] = part[rows]
            elif isinstance(self.pick, np.ndarray) and isinstance(rows, np.ndarray):
                out[..., col : col + width] = part[rows[:, None], self.pick]
            else:
                out[..., col : col + width] = part[rows, self.pick]
            col += width
        if self.valid is not None:
            out[~self.valid[start:stop]] = np.nan
        return out

    def array(self) -> np.ndarray:
        """All rows at once (small arrays: the wrist of a skeleton)."""
        return self.block(0, self.shape[0])


def wrist_delta(pose: np.ndarray) -> np.ndarray:
    """Per-sample delta of a (T, 7) pose (x y z qx qy qz qw) or (T, 3) position.

    Row t is ``p[t+1] - p[t]`` and, for poses, ``q[t+1] * conj(q[t])`` (xyzw); the last
    row is the identity. A row whose two samples are not both finite is the identity too,
    so the actions stay NaN-free (one NaN would spoil a whole action dimension's
    normalisation statistics in robomimic).
    """
    from scipy.spatial.transform import Rotation

    n, width = pose.shape
    out = np.zeros((n, width))
    if width == 7:
        out[:, 3:] = IDENTITY_XYZW
    if n < 2:
        return out
    ok = np.isfinite(pose).all(axis=1)
    pair = ok[:-1] & ok[1:]
    rows = np.flatnonzero(pair)
    out[rows, :3] = pose[rows + 1, :3] - pose[rows, :3]
    if width == 7 and len(rows):
        before = Rotation.from_quat(pose[rows, 3:])
        after = Rotation.from_quat(pose[rows + 1, 3:])
        out[rows, 3:] = (after * before.inv()).as_quat()
    return out


def sample_ranges(
    time_s: np.ndarray, starts: Sequence[float], ends: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """Demo sample ranges ``[start, end)`` of time intervals ``[t_start, t_end)`` (seconds)."""
    start = np.searchsorted(time_s, np.asarray(starts, dtype=np.float64), side="left")
    end = np.searchsorted(time_s, np.asarray(ends, dtype=np.float64), side="left")
    return start.astype(np.int64), np.maximum(end, start).astype(np.int64)


def nearest_index(sample_ns: np.ndarray, target_ns: np.ndarray) -> np.ndarray:
    """(T,) int64 index of the sample nearest each target time (-1 without samples)."""
    if len(sample_ns) == 0:
        return np.full(len(target_ns), -1, np.int64)
    order = np.argsort(sample_ns, kind="stable")
    ordered = sample_ns[order]
    right = np.clip(np.searchsorted(ordered, target_ns, side="left"), 0, len(ordered) - 1)
    left = np.maximum(right - 1, 0)
    pick_left = np.abs(target_ns - ordered[left]) <= np.abs(ordered[right] - target_ns)
    return order[np.where(pick_left, left, right)].astype(np.int64)
