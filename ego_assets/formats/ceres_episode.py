"""The rows of one CERES LeRobot episode, built from a canonical `Trajectory`.

One row per exported frame at the dataset rate ``fps``:

* **Recorder slots** (``recorder_slots`` stream, WebXR journals): one row per retained
  slot, in journal order, gap slots included. ``fps`` is the recorder rate. Every slot
  stream (head, hands, pinch) has a row per slot, so nothing is resampled.
* **Otherwise, with a camera**: one row per frame of the selected video
  (``fps`` = its rate, rounded); pose streams are sampled at each frame's time.
* **Otherwise**: a uniform grid at the fastest hand/head stream's rate over its span.

Sampling a stream at a row time takes its nearest sample, if it lies within half the
stream's sample period plus half the output period; otherwise that part of the row is
untracked. Retried segments (outcome ``retry``) are removed: by slot range for
recorder slots, by time range otherwise.

``observation.state`` (410 float32, names in `STATE_NAMES`): head tracked flag, head
position (m) and rotation (xyzw), then per hand (left, right) the tracked flag and, for
each of the 25 WebXR joints, position (m), rotation (xyzw) and radius (m). Positions
and rotations are in the stream's frame (world for every source except Project Aria
MPS, whose hands are in the device frame). Every value of an untracked head, hand or
joint is 0, and joints or components the source lacks are 0 as well. ``action`` is
the left and right pinch distance (m, thumb tip to index tip), recorded by WebXR,
otherwise computed from the exported joints; 0 when the hand is untracked. Gap rows
have every flag cleared and both actions 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ego_assets.trajectory.joints import JOINT_SETS, POSE_JOINT_SETS, joint_map
from ego_assets.trajectory.model import MediaRef, Segment, Trajectory
from ego_assets.trajectory.streams import Stream

SIDES = ("left", "right")
WEBXR_JOINTS = JOINT_SETS["webxr25"]
JOINT_WIDTH = 8  # position 3, rotation 4, radius 1
HAND_WIDTH = 1 + len(WEBXR_JOINTS) * JOINT_WIDTH
STATE_DIM = 8 + 2 * HAND_WIDTH
THUMB_TIP, INDEX_TIP = WEBXR_JOINTS.index("thumb-tip"), WEBXR_JOINTS.index("index-finger-tip")
# Camera roles in order of preference: the outward (egocentric) camera of each source.
CAMERA_ROLES = ("camera_outward", "video", "camera_back", "camera_left", "camera_right")
HEAD_STREAMS = ("head", "device_pose")
# Richest joint sets first when a capture has several hand streams for one side.
JOINT_SET_PREFERENCE = ("webxr25", "arkit27", "vision21", "mediapipe21", "mano21", "aria21")


def _state_names() -> tuple[str, ...]:
    names = ["head.tracked"]
    names += [f"head.position.{a}" for a in "xyz"] + [f"head.rotation.{a}" for a in "xyzw"]
    for side in SIDES:
        names.append(f"{side}_hand.tracked")
        for joint in WEBXR_JOINTS:
            names += [f"{side}_hand.{joint}.position.{a}" for a in "xyz"]
            names += [f"{side}_hand.{joint}.rotation.{a}" for a in "xyzw"]
            names.append(f"{side}_hand.{joint}.radius")
    return tuple(names)


STATE_NAMES = _state_names()
ACTION_NAMES = ("left_hand.pinch_distance", "right_hand.pinch_distance")
assert len(STATE_NAMES) == STATE_DIM == 410


def hand_offset(side: str) -> int:
    """Column of ``<side>_hand.tracked`` in the state vector."""
    return 8 + SIDES.index(side) * HAND_WIDTH


@dataclass(frozen=True, slots=True)
class RetainedSegment:
    """A segment kept in the export, with its exported row range [row_start, row_end)."""

    segment: Segment
    row_start: int
    row_end: int
    frames: int
    gaps: int
    source_start_s: float
    source_end_s: float


@dataclass(frozen=True, slots=True)
class EpisodeRows:
    """The exported rows of one episode (N rows) and how to cut the camera video.

    Attributes:
        fps: dataset frame rate (integer frames per second).
        state: (N, 410) float32 `STATE_NAMES`.
        action: (N, 2) float32 pinch distances, metres.
        source_frame_index: (N,) int64 recorder slot / source video frame / grid index.
        source_timestamp: (N,) float64 source time, seconds (recorder monotonic time
            for recorder slots, else seconds since the capture start).
        source_gap: (N,) bool explicit missing-observation slot.
        tasks: distinct task texts in order of first use.
        task_index: (N,) int64 index into ``tasks``.
        camera: the selected video, or None.
        frame_for_row: (N,) int64 presentation index of the source video frame of each
            row (None without camera).
        segments: retained segments with their row ranges.
        sources: which stream fed each part of the state (for the metadata sidecar).
    """

    fps: int
    state: np.ndarray
    action: np.ndarray
    source_frame_index: np.ndarray
    source_timestamp: np.ndarray
    source_gap: np.ndarray
    tasks: tuple[str, ...]
    task_index: np.ndarray
    camera: MediaRef | None
    frame_for_row: np.ndarray | None
    segments: tuple[RetainedSegment, ...]
    sources: dict[str, Any]

    def __len__(self) -> int:
        return len(self.source_frame_index)


class EpisodeError(ValueError):
    """A trajectory that cannot be exported; the message names capture and stream."""


def select_camera(trajectory: Trajectory) -> MediaRef | None:
    """The outward camera video (first of `CAMERA_ROLES` present), or None."""
    videos = {m.role: m for m in trajectory.media if m.kind == "video" and m.frames_stream}
    return next((videos[r] for r in CAMERA_ROLES if r in videos), None)


def _rate_of(stream: Stream) -> float:
    """Nominal rate of a stream (attr), else from its median sample spacing."""
    rate = stream.attrs.get("nominal_rate_hz") or stream.attrs.get("rate_hz")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
        return float(rate)
    if len(stream) < 2:
        return 0.0
    step = float(np.median(np.diff(np.sort(stream.time))))
    return 1.0 / step if step > 0 else 0.0


def nearest_rows(sample_t: np.ndarray, query_t: np.ndarray, tolerance: float) -> np.ndarray:
    """(M,) index of the sample nearest each query time, -1 when none within tolerance."""
    if len(sample_t) == 0:
        return np.full(len(query_t), -1, dtype=np.int64)
    order = np.argsort(sample_t, kind="stable")
    ordered = sample_t[order]
    right = np.clip(np.searchsorted(ordered, query_t, side="left"), 0, len(ordered) - 1)
    left = np.clip(right - 1, 0, len(ordered) - 1)
    use_left = np.abs(query_t - ordered[left]) <= np.abs(ordered[right] - query_t)
    pick = np.where(use_left, left, right)
    ok = np.abs(ordered[pick] - query_t) <= tolerance
    return np.where(ok, order[pick], -1).astype(np.int64)


def _finite(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), values, 0.0)


class _Builder:
    """Fills the state columns from the trajectory's streams, row by row index."""

    def __init__(self, trajectory: Trajectory, n: int) -> None:
        self.trajectory = trajectory
        self.key = trajectory.info.capture_id
        self.state = np.zeros((n, STATE_DIM), dtype=np.float64)
        self.pinch = np.full((n, 2), np.nan)
        self.present = {side: np.zeros((n, len(WEBXR_JOINTS)), dtype=bool) for side in SIDES}
        self.sources: dict[str, Any] = {}

    def head(self, stream: Stream, rows: np.ndarray) -> None:
        """Head pose: ``rows[i]`` is the sample of row i, -1 for none."""
        found = rows >= 0
        take = np.where(found, rows, 0)
        valid = found & stream.fields["valid"][take]
        pose = np.concatenate([stream.fields["position"][take], stream.fields["rotation"][take]], 1)
        self.state[:, 0] = valid
        self.state[:, 1:8] = np.where(valid[:, None], _finite(pose), 0.0)
        self.sources["head"] = {"stream": stream.name, "frame": stream.attrs.get("frame")}

    def hand_joints(self, side: str, stream: Stream, rows: np.ndarray) -> None:
        """A ``hand_joints`` stream of any joint set, mapped onto the 25 WebXR joints."""
        joint_set = str(stream.attrs["joint_set"])
        mapping = joint_map(joint_set, "webxr25")
        found = rows >= 0
        take = np.where(found, rows, 0)
        fields = stream.fields
        tracked = found & fields["hand_valid"][take]
        position, has_source = mapping.apply(fields["position"][take], axis=1)
        joint_ok = np.broadcast_to(has_source, position.shape[:2]).copy()
        if "joint_valid" in fields:
            valid, _ = mapping.apply(fields["joint_valid"][take], axis=1)
            joint_ok &= valid.astype(bool)
        joint_ok &= tracked[:, None] & np.isfinite(position).all(axis=2)
        block = np.zeros((len(rows), len(WEBXR_JOINTS), JOINT_WIDTH))
        block[:, :, 0:3] = position
        filled = ["position"]
        if joint_set in POSE_JOINT_SETS and "rotation" in fields:
            block[:, :, 3:7], _ = mapping.apply(fields["rotation"][take], axis=1)
            filled.append("rotation")
        if "radius" in fields:
            block[:, :, 7], _ = mapping.apply(fields["radius"][take], axis=1)
            filled.append("radius")
        block = np.where(joint_ok[:, :, None], _finite(block), 0.0)
        self._store_hand(side, tracked, block, joint_ok)
        self.sources[f"{side}_hand"] = {
            "stream": stream.name,
            "joint_set": joint_set,
            "frame": stream.attrs.get("frame"),
            "filled": filled,
            "missing_joints": list(mapping.missing),
        }

    def mano(self, side: str, stream: Stream, rows: np.ndarray) -> None:
        """MANO: the 21 model joints (world) when the stream has them, mapped to WebXR."""
        found = rows >= 0
        take = np.where(found, rows, 0)
        tracked = found & stream.fields["valid_detected"][take]
        if "joints" not in stream.fields:
            self.sources[f"{side}_hand"] = {"stream": stream.name, "filled": []}
            return
        mapping = joint_map("mano21", "webxr25")
        position, has_source = mapping.apply(stream.fields["joints"][take], axis=1)
        joint_ok = has_source[None, :] & tracked[:, None] & np.isfinite(position).all(axis=2)
        block = np.zeros((len(rows), len(WEBXR_JOINTS), JOINT_WIDTH))
        block[:, :, 0:3] = np.where(joint_ok[:, :, None], _finite(position), 0.0)
        self._store_hand(side, tracked, block, joint_ok)
        self.sources[f"{side}_hand"] = {
            "stream": stream.name,
            "joint_set": "mano21",
            "frame": stream.attrs.get("frame"),
            "filled": ["position"],
            "missing_joints": list(mapping.missing),
        }

    def _store_hand(self, side: str, tracked: np.ndarray, block: np.ndarray, ok: np.ndarray):
        start = hand_offset(side)
        self.state[:, start] = tracked
        self.state[:, start + 1 : start + HAND_WIDTH] = block.reshape(len(block), -1)
        self.present[side] = ok

    def pinch_from(self, stream: Stream, rows: np.ndarray) -> None:
        found = rows >= 0
        take = np.where(found, rows, 0)
        for i, side in enumerate(SIDES):
            self.pinch[:, i] = np.where(found, stream.fields[side][take], np.nan)
        self.sources["action"] = {"stream": stream.name, "computed": False}

    def action(self) -> np.ndarray:
        """Recorded pinch where finite, else thumb-tip to index-tip distance; 0 untracked."""
        out = np.zeros((len(self.state), 2))
        computed = False
        for i, side in enumerate(SIDES):
            start = hand_offset(side)
            tracked = self.state[:, start] > 0
            joints = self.state[:, start + 1 : start + HAND_WIDTH].reshape(-1, 25, JOINT_WIDTH)
            tips = self.present[side][:, THUMB_TIP] & self.present[side][:, INDEX_TIP]
            distance = np.linalg.norm(joints[:, THUMB_TIP, :3] - joints[:, INDEX_TIP, :3], axis=1)
            recorded = self.pinch[:, i]
            value = np.where(np.isfinite(recorded), recorded, np.where(tips, distance, 0.0))
            computed |= bool((~np.isfinite(recorded) & tips & tracked).any())
            out[:, i] = np.where(tracked, value, 0.0)
        self.sources.setdefault("action", {"computed": True})
        if computed:
            self.sources["action"]["computed"] = True
        return out


def _slot_stream(trajectory: Trajectory, name: str, n: int) -> Stream | None:
    if not trajectory.has_stream(name):
        return None
    stream = trajectory.stream(name)
    if len(stream) != n:
        raise EpisodeError(
            f"capture {trajectory.info.capture_id!r}: stream {name!r} has {len(stream)} rows, "
            f"recorder_slots has {n}; slot streams must have one row per slot"
        )
    return stream


def _hand_stream(trajectory: Trajectory, side: str) -> Stream | None:
    """The best hand stream of ``side``: world frame first, richest joint set first."""
    candidates = [
        s
        for s in trajectory.streams
        if s.kind in ("hand_joints", "mano") and s.attrs.get("hand") == side and len(s)
    ]

    def rank(s: Stream) -> tuple[int, int]:
        joint_set = "mano21" if s.kind == "mano" else str(s.attrs.get("joint_set"))
        order = JOINT_SET_PREFERENCE.index(joint_set) if joint_set in JOINT_SET_PREFERENCE else 99
        return (0 if s.attrs.get("frame") == "world" else 1, order)

    usable = [s for s in candidates if s.kind == "mano" or s.attrs.get("joint_set") in JOINT_SETS]
    return min(usable, key=rank) if usable else None


def _head_stream(trajectory: Trajectory) -> Stream | None:
    for name in HEAD_STREAMS:
        if trajectory.has_stream(name) and trajectory.stream(name).kind == "pose":
            return trajectory.stream(name)
    return None


def _fill(builder: _Builder, trajectory: Trajectory, times: np.ndarray, fps: int) -> None:
    """Sample head and hands at ``times`` (seconds since capture start)."""
    head = _head_stream(trajectory)
    if head is not None:
        builder.head(head, nearest_rows(head.time, times, _tolerance(head, fps)))
    for side in SIDES:
        hand = _hand_stream(trajectory, side)
        if hand is None:
            continue
        rows = nearest_rows(hand.time, times, _tolerance(hand, fps))
        if hand.kind == "mano":
            builder.mano(side, hand, rows)
        else:
            builder.hand_joints(side, hand, rows)


def _tolerance(stream: Stream, fps: int) -> float:
    rate = _rate_of(stream)
    return (0.5 / rate if rate > 0 else 0.0) + 0.5 / fps


def _retry_segments(trajectory: Trajectory) -> tuple[Segment, ...]:
    return tuple(s for s in trajectory.annotations.segments if s.outcome == "retry")


def _default_task(trajectory: Trajectory) -> str:
    """Task text of rows outside any segment: instructions, else title, else the source."""
    ann = trajectory.annotations
    if ann.instructions:
        return " ".join(ann.instructions)
    if trajectory.info.title:
        return trajectory.info.title
    return f"{trajectory.info.source_kind} demonstration"


def build_rows(trajectory: Trajectory) -> EpisodeRows:
    """The exported rows of ``trajectory`` (see the module docstring).

    Raises:
        EpisodeError: nothing to export (no slots, no camera frames, no pose stream),
            or slot streams whose lengths disagree; the message names the capture.
    """
    key = trajectory.info.capture_id
    camera = select_camera(trajectory)
    frames = trajectory.stream(camera.frames_stream) if camera and camera.frames_stream else None
    if trajectory.has_stream("recorder_slots"):
        return _from_slots(trajectory, camera, frames)
    if frames is not None and len(frames):
        fps = max(1, round(camera.fps if camera and camera.fps > 0 else _rate_of(frames)))
        times = frames.time
        frame_index = frames.fields["frame_index"].astype(np.int64)
        frame_for_row = np.arange(len(frames), dtype=np.int64)
    else:
        feeds = [
            s
            for s in (
                _head_stream(trajectory),
                *map(lambda side: _hand_stream(trajectory, side), SIDES),
            )
            if s is not None
        ]
        if not feeds:
            raise EpisodeError(f"capture {key!r}: no camera, head or hand stream to export")
        rate = max(_rate_of(s) for s in feeds)
        if not rate > 0:
            raise EpisodeError(f"capture {key!r}: cannot tell the rate of {feeds[0].name!r}")
        fps = max(1, round(rate))
        t0 = min(float(s.time.min()) for s in feeds)
        t1 = max(float(s.time.max()) for s in feeds)
        times = t0 + np.arange(int(np.floor((t1 - t0) * fps + 1e-6)) + 1) / fps
        frame_index = np.arange(len(times), dtype=np.int64)
        frame_for_row = None
    ns = trajectory.info.start_ns + np.round(times * 1e9).astype(np.int64)
    keep = np.ones(len(times), dtype=bool)
    for seg in _retry_segments(trajectory):
        keep &= ~((ns >= seg.start_ns) & (ns < seg.end_ns))
    times, frame_index, ns = times[keep], frame_index[keep], ns[keep]
    if frame_for_row is not None:
        frame_for_row = frame_for_row[keep]
    builder = _Builder(trajectory, len(times))
    _fill(builder, trajectory, times, fps)
    gap = np.zeros(len(times), dtype=bool)
    segments = _segments_by_time(trajectory, ns, gap, times, 0.0)
    return _finish(
        trajectory, builder, fps, frame_index, times, gap, ns, camera, frame_for_row, segments
    )


def _from_slots(
    trajectory: Trajectory, camera: MediaRef | None, frames: Stream | None
) -> EpisodeRows:
    key = trajectory.info.capture_id
    slots = trajectory.stream("recorder_slots")
    n = len(slots)
    if n == 0:
        raise EpisodeError(f"capture {key!r}: recorder_slots is empty")
    fps = round(float(slots.attrs["rate_hz"]))
    if fps < 1:
        raise EpisodeError(f"capture {key!r}: recorder_slots rate_hz {slots.attrs['rate_hz']!r}")
    slot = slots.fields["slot_index"]
    keep = np.ones(n, dtype=bool)
    for seg in _retry_segments(trajectory):
        if seg.start_slot is not None and seg.end_slot is not None:
            keep &= ~((slot >= seg.start_slot) & (slot < seg.end_slot))
        else:
            keep &= ~((slots.timestamp_ns >= seg.start_ns) & (slots.timestamp_ns < seg.end_ns))
    rows = np.flatnonzero(keep)
    gap = slots.fields["gap"][rows].astype(bool)
    source_t = slots.fields.get("source_time")
    source_time = (source_t if source_t is not None else slots.time)[rows].astype(np.float64)
    builder = _Builder(trajectory, len(rows))
    head = _slot_stream(trajectory, "head", n)
    if head is not None:
        builder.head(head, rows)
    for side in SIDES:
        hand = _slot_stream(trajectory, f"hand_{side}", n)
        if hand is not None:
            builder.hand_joints(side, hand, rows)
    pinch = _slot_stream(trajectory, "pinch", n)
    if pinch is not None:
        builder.pinch_from(pinch, rows)
    frame_for_row = None
    if frames is not None and len(frames) and camera is not None:
        frame_for_row = _hold_frames(frames.time, slots.time[rows], fps)
    # source seconds = capture seconds + offset (the recorder clock vs capture start)
    offset = float(np.median(source_time - slots.time[rows])) if len(rows) else 0.0
    ns = slots.timestamp_ns[rows]
    segments = _segments_by_slot(trajectory, slot[rows], gap, offset)
    return _finish(
        trajectory,
        builder,
        fps,
        slot[rows].astype(np.int64),
        source_time,
        gap,
        ns,
        camera,
        frame_for_row,
        segments,
    )


def _hold_frames(frame_t: np.ndarray, row_t: np.ndarray, fps: int) -> np.ndarray:
    """Source frame of each row: nearest in time within half a period, else the last one
    before (held); rows before the first frame take the first frame. Non-decreasing."""
    order = np.argsort(frame_t, kind="stable")
    ordered = frame_t[order]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    near = nearest_rows(frame_t, row_t, 0.5 / fps)
    before = np.clip(np.searchsorted(ordered, row_t + 0.5 / fps, side="right") - 1, 0, None)
    pick = np.where(near >= 0, rank[np.where(near >= 0, near, 0)], before)
    return np.maximum.accumulate(pick).astype(np.int64)


def _segments_by_slot(
    trajectory: Trajectory, kept_slots: np.ndarray, gap: np.ndarray, offset: float
) -> list[RetainedSegment]:
    out = []
    start_ns = trajectory.info.start_ns
    for seg in trajectory.annotations.segments:
        if seg.outcome == "retry" or seg.start_slot is None or seg.end_slot is None:
            continue
        inside = np.flatnonzero((kept_slots >= seg.start_slot) & (kept_slots < seg.end_slot))
        out.append(_retained(seg, inside, gap, start_ns, offset))
    return out


def _segments_by_time(
    trajectory: Trajectory, ns: np.ndarray, gap: np.ndarray, times: np.ndarray, offset: float
) -> list[RetainedSegment]:
    out = []
    for seg in trajectory.annotations.segments:
        if seg.outcome == "retry":
            continue
        inside = np.flatnonzero((ns >= seg.start_ns) & (ns < seg.end_ns))
        out.append(_retained(seg, inside, gap, trajectory.info.start_ns, offset))
    return out


def _retained(
    seg: Segment, inside: np.ndarray, gap: np.ndarray, start_ns: int, offset: float
) -> RetainedSegment:
    first = int(inside[0]) if len(inside) else 0
    last = int(inside[-1]) + 1 if len(inside) else 0
    return RetainedSegment(
        segment=seg,
        row_start=first,
        row_end=last,
        frames=len(inside),
        gaps=int(gap[inside].sum()),
        source_start_s=(seg.start_ns - start_ns) / 1e9 + offset,
        source_end_s=(seg.end_ns - start_ns) / 1e9 + offset,
    )


def _finish(
    trajectory: Trajectory,
    builder: _Builder,
    fps: int,
    frame_index: np.ndarray,
    source_time: np.ndarray,
    gap: np.ndarray,
    ns: np.ndarray,
    camera: MediaRef | None,
    frame_for_row: np.ndarray | None,
    segments: list[RetainedSegment],
) -> EpisodeRows:
    key = trajectory.info.capture_id
    if len(frame_index) == 0:
        raise EpisodeError(f"capture {key!r}: no rows left to export")
    action = builder.action()
    state = builder.state
    state[gap] = 0.0
    action[gap] = 0.0
    task_of_row = np.full(len(frame_index), -1, dtype=np.int64)
    tasks: list[str] = []
    for retained in segments:
        text = retained.segment.task or _default_task(trajectory)
        if text not in tasks:
            tasks.append(text)
        task_of_row[retained.row_start : retained.row_end] = tasks.index(text)
    if (task_of_row < 0).any():
        text = _default_task(trajectory)
        if text not in tasks:
            tasks.append(text)
        task_of_row[task_of_row < 0] = tasks.index(text)
    # renumber tasks by first use along the rows
    first_use = [int(t) for t in dict.fromkeys(task_of_row.tolist())]
    remap = np.zeros(len(tasks), dtype=np.int64)
    remap[first_use] = np.arange(len(first_use))
    ordered_tasks = tuple(tasks[i] for i in first_use)
    return EpisodeRows(
        fps=fps,
        state=state.astype(np.float32),
        action=action.astype(np.float32),
        source_frame_index=np.asarray(frame_index, dtype=np.int64),
        source_timestamp=np.asarray(source_time, dtype=np.float64),
        source_gap=np.asarray(gap, dtype=bool),
        tasks=ordered_tasks,
        task_index=remap[task_of_row],
        camera=camera if frame_for_row is not None else None,
        frame_for_row=frame_for_row,
        segments=tuple(segments),
        sources=builder.sources,
    )
