"""Parse the WebXR recorder journal ``slots.jsonl`` into arrays, one row per slot.

Fast path: each line is parsed (by orjson where it reads the line as `json.loads` does:
`CaptureFiles.read_json_lines`), the per-slot values are gathered with comprehensions
and turned into numpy arrays whose dtype and shape are checked in one go. Only when
that check fails does `_diagnose` walk the records one by one to name the exact line and
field (so a malformed journal costs a second pass; a good one does not).

Gap slots keep their slot number and time and nothing else: their head, hands and
pinch are NaN with False flags, whatever the line carries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ego_assets.capture.files import CaptureFiles, number_problem
from ego_assets.capture.ranges import SESSION_MS
from ego_assets.errors import CaptureFormatError

SLOTS_FILE = "slots.jsonl"
N_JOINTS = 25
JOINT_VALUES = 9  # px, py, pz, qx, qy, qz, qw, radius, tracked
SIDES = ("left", "right")
MAX_SLOT = 10**9  # recorder slot numbers (and segment counters) lie in 0..MAX_SLOT

_NUMBER = (int, float)


@dataclass(frozen=True, slots=True)
class HandArrays:
    """One hand over all slots (reference-space frame, metres).

    Attributes:
        position: (N, 25, 3) float64, NaN where the hand is null or the slot a gap.
        rotation: (N, 25, 4) float64 quaternions xyzw, NaN likewise.
        radius: (N, 25) float64 joint radius, metres, NaN likewise.
        joint_valid: (N, 25) bool, the joint's tracked value (False where NaN).
        hand_valid: (N,) bool, hand present, ``tracked`` and not a gap slot.
    """

    position: np.ndarray
    rotation: np.ndarray
    radius: np.ndarray
    joint_valid: np.ndarray
    hand_valid: np.ndarray


@dataclass(frozen=True, slots=True)
class SlotArrays:
    """The journal as arrays, one row per line (gap slots included, file order).

    Attributes:
        slot: (N,) int64 recorder slot numbers.
        t_ms: (N,) float64 milliseconds since the session's time origin.
        gap: (N,) bool explicit missing-observation slots.
        head_position: (N, 3) float64 metres, NaN where absent or gap.
        head_rotation: (N, 4) float64 xyzw, NaN where absent or gap.
        head_valid: (N,) bool, head present, ``tracked`` and not a gap slot.
        hands: ``"left"``/``"right"`` -> `HandArrays`.
        pinch: (N, 2) float64 metres (left, right), NaN where null or gap.
    """

    slot: np.ndarray
    t_ms: np.ndarray
    gap: np.ndarray
    head_position: np.ndarray
    head_rotation: np.ndarray
    head_valid: np.ndarray
    hands: dict[str, HandArrays]
    pinch: np.ndarray


class _Invalid(Exception):
    """The fast path met something it cannot type; `_diagnose` says what and where."""


def read_slots(files: CaptureFiles) -> SlotArrays:
    """Read ``slots.jsonl``.

    Raises:
        CaptureFormatError: missing/empty file, a malformed line, a missing key, a value
            of the wrong type or a wrong joint count (row = 1-based line number).
    """
    records, lines = files.read_json_lines(SLOTS_FILE)
    try:
        return _build(records)
    except (_Invalid, KeyError, TypeError, ValueError, AttributeError, OverflowError):
        _diagnose(files, records, lines)
        raise files.error(SLOTS_FILE, "journal values could not be typed") from None


def _types_ok(values: Sequence[Any], allowed: tuple[type, ...]) -> bool:
    return set(map(type, values)) <= set(allowed)


def _array(values: list[Any], shape: tuple[int, ...], kinds: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (len(values), *shape) or arr.dtype.kind not in kinds:
        raise _Invalid
    return arr.astype(np.float64)


def _build(records: list[Any]) -> SlotArrays:
    n = len(records)
    if not _types_ok(records, (dict,)):
        raise _Invalid
    slot = [r["slot"] for r in records]
    t_ms = [r["t_ms"] for r in records]
    gap_list = [r["gap"] for r in records]
    if not (_types_ok(slot, (int,)) and _types_ok(t_ms, _NUMBER) and _types_ok(gap_list, (bool,))):
        raise _Invalid
    slot_arr = np.array(slot, dtype=np.int64)  # OverflowError beyond int64: diagnosed
    t_arr = np.array(t_ms, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        in_range = (t_arr >= SESSION_MS.lo) & (t_arr <= SESSION_MS.hi)
    if not (in_range.all() and (slot_arr >= 0).all() and (slot_arr <= MAX_SLOT).all()):
        raise _Invalid
    gap = np.array(gap_list, dtype=bool)
    live = np.flatnonzero(~gap)

    heads = [records[i].get("head") for i in live]
    present = np.array([h is not None for h in heads], dtype=bool)
    rows = live[present]
    heads = [h for h in heads if h is not None]
    head_position = np.full((n, 3), np.nan)
    head_rotation = np.full((n, 4), np.nan)
    head_valid = np.zeros(n, dtype=bool)
    if heads:
        tracked = [h["tracked"] for h in heads]
        if not _types_ok(tracked, (bool,)):
            raise _Invalid
        head_position[rows] = _array([h["p"] for h in heads], (3,), "iuf")
        head_rotation[rows] = _array([h["q"] for h in heads], (4,), "iuf")
        head_valid[rows] = np.array(tracked, dtype=bool)

    pinches = [records[i].get("pinch") for i in live]
    pinch = np.full((n, 2), np.nan)
    pairs = [(p["left"], p["right"]) for p in pinches if p is not None]
    if pairs:
        if not _types_ok([v for pair in pairs for v in pair], (int, float, type(None))):
            raise _Invalid
        pinch[live[[p is not None for p in pinches]]] = np.array(pairs, dtype=np.float64)

    hands = {side: _hand(records, live, side) for side in SIDES}
    return SlotArrays(
        slot=slot_arr,
        t_ms=t_arr,
        gap=gap,
        head_position=head_position,
        head_rotation=head_rotation,
        head_valid=head_valid,
        hands=hands,
        pinch=pinch,
    )


def _hand(records: list[Any], live: np.ndarray, side: str) -> HandArrays:
    n = len(records)
    hands = [records[i].get(side) for i in live]
    rows = live[np.array([h is not None for h in hands], dtype=bool)]
    hands = [h for h in hands if h is not None]
    position = np.full((n, N_JOINTS, 3), np.nan)
    rotation = np.full((n, N_JOINTS, 4), np.nan)
    radius = np.full((n, N_JOINTS), np.nan)
    joint_valid = np.zeros((n, N_JOINTS), dtype=bool)
    hand_valid = np.zeros(n, dtype=bool)
    if hands:
        tracked = [h["tracked"] for h in hands]
        if not _types_ok(tracked, (bool,)):
            raise _Invalid
        joints = _array([h["joints"] for h in hands], (N_JOINTS, JOINT_VALUES), "iufb")
        position[rows] = joints[..., 0:3]
        rotation[rows] = joints[..., 3:7]
        radius[rows] = joints[..., 7]
        flag = joints[..., 8]
        if not np.isin(flag, (0, 1)).all():  # a 0.5 must not read as tracked
            raise _Invalid
        joint_valid[rows] = flag != 0
        hand_valid[rows] = np.array(tracked, dtype=bool)
    return HandArrays(position, rotation, radius, joint_valid, hand_valid)


def _diagnose(files: CaptureFiles, records: list[Any], lines: list[int]) -> None:
    """Raise a `CaptureFormatError` for the first invalid record (slow path)."""
    for record, line in zip(records, lines, strict=True):
        problem = _record_problem(record)
        if problem is not None:
            field, message = problem
            raise CaptureFormatError(files.capture, SLOTS_FILE, message, field=field, row=line)


def _kind(value: Any, kinds: tuple[type, ...]) -> bool:
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


def _number_text(value: int) -> str:
    return str(value) if abs(value) < 10**24 else f"of {len(str(abs(value)))} digits"


def _type_problem(field: str, value: Any, kinds: tuple[type, ...]) -> tuple[str, str] | None:
    if _kind(value, kinds):
        return None
    expected = "a number" if float in kinds else kinds[0].__name__
    return field, f"expected {expected}, got {type(value).__name__}"


def _record_problem(record: Any) -> tuple[str, str] | None:
    if not isinstance(record, dict):
        return "slot", f"expected a JSON object, got {type(record).__name__}"
    for key, kinds in (("slot", (int,)), ("t_ms", _NUMBER), ("gap", (bool,))):
        if key not in record:
            return key, "missing field"
        problem = _type_problem(key, record[key], kinds)
        if problem:
            return problem
    if not 0 <= record["slot"] <= MAX_SLOT:
        return "slot", f"slot {_number_text(record['slot'])} is outside 0 to {MAX_SLOT}"
    time_problem = SESSION_MS.problem(record["t_ms"])
    if time_problem:
        return "t_ms", time_problem
    if record["gap"]:
        return None
    head = record.get("head")
    if head is not None:
        problem = _object_problem("head", head, (("p", 3), ("q", 4)))
        if problem:
            return problem
    for side in SIDES:
        hand = record.get(side)
        if hand is not None:
            problem = _hand_problem(side, hand)
            if problem:
                return problem
    pinch = record.get("pinch")
    if pinch is not None:
        if not isinstance(pinch, dict):
            return "pinch", f"expected an object, got {type(pinch).__name__}"
        for side in SIDES:
            if side not in pinch:
                return f"pinch.{side}", "missing field"
            value = pinch[side]
            if value is not None and not _kind(value, _NUMBER):
                return f"pinch.{side}", f"expected a number or null, got {type(value).__name__}"
            if isinstance(value, int) and number_problem(value):
                return f"pinch.{side}", str(number_problem(value))
    return None


def _object_problem(
    name: str, obj: Any, vectors: tuple[tuple[str, int], ...]
) -> tuple[str, str] | None:
    if not isinstance(obj, dict):
        return name, f"expected an object, got {type(obj).__name__}"
    if "tracked" not in obj:
        return f"{name}.tracked", "missing field"
    problem = _type_problem(f"{name}.tracked", obj["tracked"], (bool,))
    if problem:
        return problem
    for key, size in vectors:
        field = f"{name}.{key}"
        if key not in obj:
            return field, "missing field"
        problem = _vector_problem(field, obj[key], size, _NUMBER)
        if problem:
            return problem
    return None


def _vector_problem(
    field: str, value: Any, size: int, kinds: tuple[type, ...]
) -> tuple[str, str] | None:
    if not isinstance(value, list):
        return field, f"expected a list of {size} numbers, got {type(value).__name__}"
    if len(value) != size:
        return field, f"expected {size} values, got {len(value)}"
    for i, v in enumerate(value):
        if not _kind(v, kinds):
            return field, f"value {i}: expected a number, got {type(v).__name__}"
        problem = number_problem(v) if isinstance(v, int) else None
        if problem:
            return field, f"value {i}: {problem}"
    return None


def _hand_problem(side: str, hand: Any) -> tuple[str, str] | None:
    problem = _object_problem(side, hand, ())
    if problem:
        return problem
    field = f"{side}.joints"
    joints = hand.get("joints")
    if not isinstance(joints, list):
        return field, f"expected a list of {N_JOINTS} joints, got {type(joints).__name__}"
    if len(joints) != N_JOINTS:
        return field, f"expected {N_JOINTS} joints, got {len(joints)}"
    for j, joint in enumerate(joints):
        problem = _vector_problem(field, joint, JOINT_VALUES, (*_NUMBER, bool))
        if problem:
            return field, f"joint {j}: {problem[1]}"
        if joint[JOINT_VALUES - 1] not in (0, 1):  # True/False and 0/1 only
            return field, f"joint {j}: tracked value {joint[-1]!r} is not 0 or 1"
    return None


def slot_timestamps_ns(time_origin_epoch_ms: float, t_ms: np.ndarray) -> np.ndarray:
    """``round((time_origin_epoch_ms + t_ms) * 1e6)`` as (N,) int64 ns since the epoch.

    The origin's whole milliseconds are added as an exact integer so that float64
    keeps sub-microsecond resolution (a plain float sum near 1.8e18 ns rounds to 256 ns).
    """
    whole_ms = math.floor(time_origin_epoch_ms)
    fraction_ms = time_origin_epoch_ms - whole_ms
    offset = np.rint((fraction_ms + np.asarray(t_ms, dtype=np.float64)) * 1e6).astype(np.int64)
    return np.int64(whole_ms) * np.int64(1_000_000) + offset
