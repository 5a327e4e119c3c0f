"""`derive_actions`: per-sample robot-ready state and future actions from a trajectory.

Conventions (every packing writes them in its readers' terms; the names carry them):

* **Clock**: one sample per entry of ``sample_ns`` (source-clock ns). Without it, the
  Holos demo clock of the trajectory (`pick_master`), or with ``fps`` set a grid at that
  rate from the demo clock's first to its last sample. Every stream is read onto it by
  zero-order hold with the Holos staleness rule (`hold_index`, `MAX_AGE_NS`): a sample
  with no stream value at or before it, or one older than 0.25 s, has none.
* **Frames**: ``world`` is the capture's world frame (`CaptureInfo.world_frame`).
  ``head`` is the head/device pose held at the same instant: ``p_head = R_h^T (p - t_h)``
  and ``R_h^T R_wrist``; a stale or missing head pose makes the hand invalid at that
  sample, never an identity. Its axes are one convention whatever the source
  (`HEAD_AXES`: x right, y up, looking along -z, the ARKit / WebXR camera and viewer
  axes): a head camera whose ``world_to_camera`` is in OpenCV axes (x right, y down,
  looking along +z: mano-video, WebXR and EgoSmith videos) is turned into them by the
  fixed ``C = diag(1, -1, -1)``, ``p_head = C R_h^T (p - t_h)``, ``C R_h^T R_wrist``.
  The wrist's own axes stay the source's (``components``). Hands stored in the device
  frame (Project Aria MPS) are kept in it: the MPS files do not state its axes, so it is
  not turned (``info["frame_axes"]`` says so); they have no world pose without a device
  trajectory. ``info["frame_axes"]`` states the axes, ``info["head_axes_from"]`` the
  conversion applied to this capture's head pose.
* **State per hand**, ``eef_pose_gripper``: ``<hand>.eef.x/y/z`` (m), the rotation as
  ``<hand>.eef.rot6d_0..5`` = (R00, R10, R20, R01, R11, R21), the first column then the
  second column of the wrist -> frame matrix (the wrist's x axis, then its y axis, in
  the frame), or ``<hand>.eef.qx/qy/qz/qw`` (xyzw, scipy's order, w >= 0), then
  ``<hand>.grasp_aperture`` (thumb tip to index tip, m) and ``<hand>.gripper_closed``
  (0/1, `gripper_latch`). ``fingertips``: ``<hand>.<finger>_tip.x/y/z``, the five tips
  ``R_wrist^T (tip - wrist)`` (m, wrist frame). ``<hand>`` is ``left``, ``right`` or,
  for ``hands = "dominant"``, ``dominant`` (the same names in every episode; the hand
  it is in ``info["dominant"]``).
* **Validity**: ``valid[<hand>]`` is False where the hand was not tracked, not held or
  (head frame) the head pose was missing or stale; that hand's state is NaN there, never
  a zero pose. A component the source lacks at a tracked sample (an untracked fingertip)
  is NaN on its own, and one the source lacks altogether (`sources`) is NaN throughout.
* **Actions**: ``action[t]`` holds the states of ``t+1 .. t+H``, step-major (reshape to
  (T, H, width)); names ``t+<k>.<state name>``. ``relative``: the wrist pose of ``t+k``
  in the wrist frame of ``t``, ``R_t^T (p_{t+k} - p_t)`` and ``R_t^T R_{t+k}`` (names
  ``t+<k>.<hand>.eef.dx/dy/dz`` and ``.drot6d_i`` / ``.dqx..dqw``), computed from the
  poses in the source's frame (the same in every fixed frame); fingertips relative are
  ``tips_{t+k} - tips_t`` (``.dx/.dy/.dz``); aperture and gripper stay absolute. Past the
  end of the episode the last sample is repeated and ``valid["action"]`` is False (like
  LeRobot's ``action_is_pad``); ``valid["action"]`` is True where every step ``t+k``
  exists and every hand of the state is valid there (and at ``t`` when relative).
* ``space = "source"`` derives nothing: `derive_actions` raises (the packings keep their
  own vectors and bytes for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from ego_assets.actions.sources import (
    ABSENT,
    DEVICE_AXES,
    HEAD_AXES,
    HEAD_POSE_STREAMS,
    ActionSources,
    HandSource,
    HeadSource,
    action_sources,
    hand_source,
    head_source,
)
from ego_assets.actions.space import ActionSpace, ActionSpaceError
from ego_assets.formats.egosmith_lowdim import rot6d
from ego_assets.formats.holos_clock import MAX_AGE_NS, hold_index, pick_master
from ego_assets.formats.holos_tracks import sort_tracks
from ego_assets.trajectory.model import Trajectory

ROT6D_ORDER = "R00 R10 R20 R01 R11 R21 (first column, then second column)"


@dataclass(frozen=True)
class ActionTable:
    """State and future actions of one episode on one clock (see the module docstring).

    Attributes:
        sample_ns: (T,) int64 source-clock ns of each sample.
        state: (T, S) float32, NaN where the hand is not tracked.
        state_names: S names, e.g. ``left.eef.x`` .. ``right.gripper_closed``.
        action: (T, H * W) float32, step-major; names ``t+<k>.<...>``.
        action_names: H * W names.
        valid: ``<hand>`` -> (T,) bool per hand of the state (and, for ``dominant``, the
            hand's own side too), ``action`` -> (T,) bool (no padding, all hands valid).
        info: JSON-able: joint sets, streams, per-component exact/approximate/absent,
            frame and its axes, rotation order, gripper thresholds, clock, dominant hand.
    """

    sample_ns: np.ndarray
    state: np.ndarray
    state_names: tuple[str, ...]
    action: np.ndarray
    action_names: tuple[str, ...]
    valid: Mapping[str, np.ndarray]
    info: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class _Hand:
    """One hand on the sample clock: source-frame pose (for relative actions and the
    wrist frame) and the output-frame pose, all NaN where ``valid`` is False."""

    name: str
    valid: np.ndarray  # (T,)
    position: np.ndarray  # (T, 3) output frame
    rotation: np.ndarray  # (T, 3, 3) wrist -> output frame
    source_position: np.ndarray  # (T, 3) source frame
    source_rotation: np.ndarray  # (T, 3, 3) wrist -> source frame
    tips: np.ndarray  # (T, 5, 3) source frame


def demo_clock(trajectory: Trajectory, fps: float | None = None) -> tuple[np.ndarray, str]:
    """The Holos demo clock of ``trajectory`` (or a grid at ``fps`` over its span) and a
    sentence saying which it is.

    Where the Holos rule finds no hand skeleton, landmarks or device pose (MANO without
    joints, wrist/palm streams only), the clock is that of the hand stream read (right if
    tracked, else left), else that of the head pose (a video's frames).
    """
    tracks = sort_tracks(trajectory)
    master = pick_master(tracks.skeleton_world, tracks.landmarks, tracks.device)
    ns, text = master.timestamp_ns, f"the Holos demo clock: {master.description}"
    if not len(ns):
        ns, text = _fallback_clock(trajectory)
    if fps is None or len(ns) == 0:
        return ns, text
    count = int(np.floor((ns[-1] - ns[0]) * fps / 1e9 + 1e-9)) + 1
    grid = ns[0] + np.rint(np.arange(count) * (1e9 / fps)).astype(np.int64)
    return grid, f"{fps:g} Hz from the first sample of {text}"


def _fallback_clock(trajectory: Trajectory) -> tuple[np.ndarray, str]:
    why = "the Holos rule finds no hand skeleton, landmarks or device pose"
    for side in ("right", "left"):
        src = hand_source(trajectory, side)
        if src is not None and src.tracked.any():
            names = ", ".join(src.streams)
            text = f"{names} ({side} hand, the first tracked of right, left: {why})"
            return np.unique(src.timestamp_ns), text
    head = head_source(trajectory)
    if head is not None:
        return np.unique(head.timestamp_ns), f"{head.stream} (the head pose: {why})"
    return np.zeros(0, np.int64), f"none: {why}, and no hand or head stream"


def _held(ts: np.ndarray, sample_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return hold_index(ts, sample_ns, MAX_AGE_NS)


def _nan_rows(values: np.ndarray, ok: np.ndarray) -> np.ndarray:
    shape = (len(ok),) + (1,) * (values.ndim - 1)
    return np.where(ok.reshape(shape), values, np.nan)


def _hand_on_clock(
    name: str,
    src: HandSource,
    head: HeadSource | None,
    space: ActionSpace,
    sample_ns: np.ndarray,
) -> _Hand:
    n = len(sample_ns)
    index, held = _held(src.timestamp_ns, sample_ns)
    position = src.wrist[index]
    rotation = src.rotation[index] if src.rotation is not None else np.full((n, 3, 3), np.nan)
    tips = src.tips[index] if src.tips is not None else np.full((n, 5, 3), np.nan)
    valid = held & src.tracked[index] & np.isfinite(position).all(axis=1)
    if src.rotation is not None:
        valid &= np.isfinite(rotation).all(axis=(1, 2))
    elif space.space == "fingertips":
        valid[:] = False  # no wrist frame to put the tips in
    out_p, out_r = position, rotation
    if space.space == "eef_pose_gripper":
        if src.hand_centred:
            raise ActionSpaceError(
                "space",
                f"the {src.side} hand ({', '.join(src.streams)}) is only "
                f"in the hand-centred frame {src.frame!r}: no wrist position in space",
            )
        out_p, out_r, head_ok = _to_frame(src, position, rotation, head, space.frame, sample_ns)
        valid &= head_ok
    return _Hand(
        name=name,
        valid=valid,
        position=_nan_rows(out_p, valid),
        rotation=_nan_rows(out_r, valid),
        source_position=_nan_rows(position, valid),
        source_rotation=_nan_rows(rotation, valid),
        tips=_nan_rows(tips, valid),
    )


def _to_frame(
    src: HandSource,
    position: np.ndarray,
    rotation: np.ndarray,
    head: HeadSource | None,
    frame: str,
    sample_ns: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T, 3) wrist positions and (T, 3, 3) rotations of ``src`` (its frame, on the
    clock) in ``frame``, and where the head pose that needs was there (all True when
    it needs none)."""
    n = len(sample_ns)
    where = f"the {src.side} hand ({', '.join(src.streams)})"
    if src.frame not in ("world", "device"):
        raise ActionSpaceError(
            "frame", f"{where} is in the frame {src.frame!r}, not world or device"
        )
    in_device = src.frame == "device"
    if (frame == "world") != in_device:
        return position, rotation, np.ones(n, bool)  # already in the frame asked for
    if in_device and (head is None or head.stream not in HEAD_POSE_STREAMS):
        raise ActionSpaceError(
            "frame",
            f"{where} is in the device frame and no device pose in the world is recorded: "
            "frame = 'world' cannot be given",
        )
    if head is None:
        raise ActionSpaceError(
            "frame",
            f"no head pose is recorded (no {' or '.join(HEAD_POSE_STREAMS)} pose stream, no "
            "video with world_to_camera): frame = 'head' cannot be given",
        )
    h_index, h_held = _held(head.timestamp_ns, sample_ns)
    head_ok = h_held & head.valid[h_index]
    r_h = head.rotation[h_index]
    t_h = head.position[h_index]
    if in_device:  # device -> world: p_w = R_h p + t_h
        return (
            (r_h @ position[:, :, None])[:, :, 0] + t_h,
            r_h @ rotation,
            head_ok,
        )
    return (
        ((position - t_h)[:, None, :] @ r_h)[:, 0],  # R_h^T (p - t_h)
        np.swapaxes(r_h, 1, 2) @ rotation,  # R_h^T R_w
        head_ok,
    )


def quaternions(rotation: np.ndarray) -> np.ndarray:
    """(N, 4) xyzw with w >= 0 of (N, 3, 3) matrices; NaN rows stay NaN."""
    out = np.full((len(rotation), 4), np.nan)
    ok = np.isfinite(rotation).all(axis=(1, 2))
    if ok.any():
        out[ok] = Rotation.from_matrix(rotation[ok]).as_quat(canonical=True)
    return out


def _rotation_values(rotation: np.ndarray, form: str) -> np.ndarray:
    return rot6d(rotation) if form == "rot6d" else quaternions(rotation)


def gripper_latch(aperture: np.ndarray, close_m: float, open_m: float) -> np.ndarray:
    """(T,) float 0/1 gripper state from (T,) apertures (m) with hysteresis, vectorized.

    A sample with aperture < ``close_m`` closes the gripper, one with aperture >
    ``open_m`` opens it; in between the state of the last such sample holds (a forward
    fill of the last crossing). Before the first crossing the gripper is open (so the
    first valid aperture sets the state when it is below ``close_m``). NaN apertures
    (untracked) give NaN and leave the latch as it was.
    """
    with np.errstate(invalid="ignore"):
        closing = aperture < close_m
        opening = aperture > open_m
    event = closing | opening
    last = np.maximum.accumulate(np.where(event, np.arange(len(aperture)), -1))
    state = np.where(last >= 0, closing[np.maximum(last, 0)], False).astype(np.float64)
    state[~np.isfinite(aperture)] = np.nan
    return state


def _wrist_tips(hand: _Hand) -> np.ndarray:
    """(T, 5, 3) fingertips in the wrist frame: R^T (tip - wrist)."""
    offset = hand.tips - hand.source_position[:, None, :]
    return offset @ hand.source_rotation  # rows: (R^T v)^T


def _hand_state(hand: _Hand, space: ActionSpace) -> np.ndarray:
    n = len(hand.valid)
    if space.space == "fingertips":
        return _wrist_tips(hand).reshape(n, 15)
    aperture = np.linalg.norm(hand.tips[:, 0] - hand.tips[:, 1], axis=1)
    closed = gripper_latch(aperture, space.gripper_close_m, space.gripper_open_m)
    return np.concatenate(
        [
            hand.position,
            _rotation_values(hand.rotation, space.rotation),
            aperture[:, None],
            closed[:, None],
        ],
        axis=1,
    )


def _relative_steps(
    hand: _Hand, state: np.ndarray, space: ActionSpace, ahead: np.ndarray
) -> np.ndarray:
    """(T, H, W) relative actions of one hand towards the (T, H) rows ``ahead``: the wrist
    pose of each row in the wrist frame of ``t`` (see the module docstring)."""
    if space.space == "fingertips":  # the state is the tips in the wrist frame already
        return state[ahead] - state[:, None, :]
    n, h = ahead.shape
    r_t = hand.source_rotation
    offset = hand.source_position[ahead] - hand.source_position[:, None, :]
    dp = offset @ r_t  # rows R_t^T (p_{t+k} - p_t)
    dr = np.swapaxes(r_t, 1, 2)[:, None] @ hand.source_rotation[ahead]  # R_t^T R_{t+k}
    rotation = _rotation_values(dr.reshape(n * h, 3, 3), space.rotation).reshape(n, h, -1)
    return np.concatenate([dp, rotation, state[ahead][:, :, -2:]], axis=2)


def _dominant(sources: ActionSources, sample_ns: np.ndarray) -> tuple[str, str]:
    """The dominant side and the rule that chose it."""
    if sources.dominant is not None:
        name, value = sources.dominant
        return value, f"capture characteristic {name} = {value!r}"
    counts = {}
    for side in ("right", "left"):
        src = sources.hands[side]
        if src is None:
            counts[side] = 0
            continue
        index, held = _held(src.timestamp_ns, sample_ns)
        counts[side] = int(np.count_nonzero(held & src.tracked[index]))
    side = "right" if counts["right"] >= counts["left"] else "left"
    rule = (
        f"the hand tracked in more samples ({counts['right']} right, {counts['left']} left; "
        "right on a tie): the capture does not say which hand is dominant"
    )
    return side, rule


def _absent_hand(name: str, n: int) -> _Hand:
    nan3, nan33 = np.full((n, 3), np.nan), np.full((n, 3, 3), np.nan)
    return _Hand(name, np.zeros(n, bool), nan3, nan33, nan3, nan33, np.full((n, 5, 3), np.nan))


def _frame_axes(space: ActionSpace, head: HeadSource | None, sources) -> str:
    if space.space == "fingertips":
        return "wrist frame of each hand (its source's wrist axes, see components)"
    if space.frame == "world":
        return "the capture's world frame (CaptureInfo.world_frame, up_axis, handedness)"
    if _in_device(sources):
        return DEVICE_AXES
    return HEAD_AXES if head is not None else "no head pose"


def _in_device(sources) -> bool:
    return any(s is not None and s.frame == "device" for s in sources)


def _head_axes_from(space: ActionSpace, head: HeadSource | None, sources) -> str | None:
    """How this capture's head pose reached `HEAD_AXES` (None: no head frame in use)."""
    if space.space != "eef_pose_gripper" or space.frame != "head" or head is None:
        return None
    if _in_device(sources):
        return "none: the hands are in the device frame already"
    return f"{head.stream}: {head.conversion}"


def derive_actions(
    trajectory: Trajectory, space: ActionSpace, sample_ns: np.ndarray | None = None
) -> ActionTable:
    """State and actions of ``trajectory`` in ``space`` on ``sample_ns`` (see the module
    docstring for every convention).

    Args:
        trajectory: one episode.
        space: the declared space (not ``source``).
        sample_ns: the packing's own clock (source-clock ns, sorted); None: the Holos
            demo clock of the trajectory (resampled at ``space.fps`` when set).

    Raises:
        ActionSpaceError: ``space.space == "source"`` (nothing to derive), or the capture
            cannot give the declared frame (no head pose; device-frame hands and
            ``frame = "world"``; only hand-centred positions for ``eef_pose_gripper``).
    """
    _check_derived(space)
    clock = "the packing's frame clock"
    if sample_ns is None:
        try:
            sample_ns, clock = demo_clock(trajectory, space.fps)
        except ActionSpaceError as exc:
            raise _naming(trajectory.info.capture_id, exc) from None
    return _named(action_sources(trajectory), space, np.asarray(sample_ns, np.int64), clock)


def derive_from_sources(
    sources: ActionSources, space: ActionSpace, sample_ns: np.ndarray
) -> ActionTable:
    """`derive_actions` from the trajectory's `ActionSources` (read once, or stored beside
    the trajectory) on the packing's clock ``sample_ns`` (source-clock ns, sorted): the
    same table, bit for bit."""
    _check_derived(space)
    return _named(sources, space, np.asarray(sample_ns, np.int64), "the packing's frame clock")


def _check_derived(space: ActionSpace) -> None:
    if not space.derived:
        raise ActionSpaceError("space", "'source' keeps each packing's own vectors: no derivation")


def _named(
    sources: ActionSources, space: ActionSpace, sample_ns: np.ndarray, clock: str
) -> ActionTable:
    """`_derive`, its refusals naming the capture (the setting it cannot give)."""
    try:
        return _derive(sources, space, sample_ns, clock)
    except ActionSpaceError as exc:
        raise _naming(sources.capture_id, exc) from None


def _naming(capture_id: str, exc: ActionSpaceError) -> ActionSpaceError:
    return ActionSpaceError(exc.key, f"capture {capture_id!r}: {exc.message}")


def _derive(
    sources: ActionSources, space: ActionSpace, sample_ns: np.ndarray, clock: str
) -> ActionTable:
    n = len(sample_ns)
    hand_sources = sources.hands
    head = sources.head_for_frames() if space.space == "eef_pose_gripper" else None
    info: dict[str, Any] = {}
    if space.hands == "dominant":
        side, rule = _dominant(sources, sample_ns)
        picked = [("dominant", side)]
        info["dominant"] = {"hand": side, "rule": rule}
    elif space.hands == "both":
        picked = [("left", "left"), ("right", "right")]
    else:
        picked = [(space.hands, space.hands)]
    hands = []
    for name, side in picked:
        src = hand_sources[side]
        hands.append(
            _absent_hand(name, n)
            if src is None
            else _hand_on_clock(name, src, head, space, sample_ns)
        )
    states = [_hand_state(h, space) for h in hands]
    state = np.concatenate(states, axis=1) if states else np.zeros((n, 0))
    action, action_ok = _actions(hands, states, space)
    valid: dict[str, np.ndarray] = {h.name: h.valid for h in hands}
    for (_, side), h in zip(picked, hands, strict=True):
        valid.setdefault(side, h.valid)
    valid["action"] = action_ok
    info.update(_info(sources, space, head, [s for _, s in picked], clock))
    return ActionTable(
        sample_ns=sample_ns,
        state=state.astype(np.float32),
        state_names=space.state_names(),
        action=action.astype(np.float32),
        action_names=space.action_names(),
        valid=valid,
        info=info,
    )


def _actions(
    hands: list[_Hand], states: list[np.ndarray], space: ActionSpace
) -> tuple[np.ndarray, np.ndarray]:
    """(T, H * W) actions, step-major, and their (T,) validity (see the module docstring)."""
    n = len(hands[0].valid) if hands else 0
    steps = np.arange(1, space.horizon + 1)
    wanted = np.arange(n)[:, None] + steps  # (T, H) rows t+1 .. t+H
    ahead = np.minimum(wanted, max(n - 1, 0))
    all_valid = np.logical_and.reduce([h.valid for h in hands]) if hands else np.ones(n, bool)
    ok = (wanted < n).all(axis=1) & all_valid[ahead].all(axis=1)
    if space.relative:
        ok &= all_valid
    blocks = [
        _relative_steps(hand, state, space, ahead) if space.relative else state[ahead]
        for hand, state in zip(hands, states, strict=True)
    ]
    if not blocks:
        return np.zeros((n, 0)), ok
    out = np.concatenate(blocks, axis=2)
    return out.reshape(n, out.shape[1] * out.shape[2]), ok


def _info(
    read: ActionSources,
    space: ActionSpace,
    head: HeadSource | None,
    sides: list[str],
    clock: str,
) -> dict[str, Any]:
    sources = read.hands
    hands: dict[str, Any] = {}
    for side in sides:
        src = sources[side]
        if src is None:
            hands[side] = {
                "streams": [],
                "joint_set": None,
                "components": {c: f"{ABSENT}: no stream of this hand" for c in _COMPONENTS},
            }
        else:
            hands[side] = {
                "streams": list(src.streams),
                "joint_set": src.joint_set,
                "source_frame": src.frame,
                "components": dict(src.components),
            }
    return {
        "space": space.to_json(),
        "capture_id": read.capture_id,
        "hands": hands,
        "frame": "wrist" if space.space == "fingertips" else space.frame,
        "frame_axes": _frame_axes(space, head, [sources[s] for s in sides]),
        "head_axes_from": _head_axes_from(space, head, [sources[s] for s in sides]),
        "world_frame": read.world_frame,
        "head_stream": head.stream if head is not None else None,
        "rotation": ROT6D_ORDER if space.rotation == "rot6d" else "quaternion xyzw, w >= 0",
        "gripper": {
            "close_m": space.gripper_close_m,
            "open_m": space.gripper_open_m,
            "rule": "closed once the aperture is below close_m, open again once it is above "
            "open_m; open before the first crossing; NaN where the aperture is",
        },
        "clock": clock,
        "max_age_ns": MAX_AGE_NS,
        "padding": "past the end the last sample is repeated; valid['action'] is False there",
    }


_COMPONENTS = ("wrist_position", "wrist_rotation", "fingertips", "grasp_aperture")
