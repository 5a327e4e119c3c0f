"""Named hand joint sets and the maps between them, each saying what it loses.

Joint sets (order is normative for each source):

* ``webxr25``: WebXR Hand Input, wrist .. pinky-finger-tip (no palm).
* ``arkit27``: visionOS ``HandSkeleton.JointName`` 0-26, incl. ``forearmWrist`` (25) and
  ``forearmArm`` (26).
* ``vision21``: Apple Vision ``VNHumanHandPoseObservation`` (same order as MediaPipe).
* ``mediapipe21``: MediaPipe Hands.
* ``aria21``: Project Aria MPS (fingertips first, wrist 5, palm centre 20).
* ``mano16``: MANO kinematic joints (smplx ``J_regressor`` order).
* ``mano21``: ``mano16`` + fingertip vertices (thumb, index, middle, ring, pinky).

A `JointMap` picks, for every target joint, a source joint index or -1 (missing).
Positions map exactly; rotations and radii carry over only between sets that have
them (``webxr25`` <-> ``arkit27``). Missing joints come out as NaN with a False mask.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

_FINGERS = ("index", "middle", "ring", "pinky")

WEBXR25: tuple[str, ...] = (
    "wrist",
    "thumb-metacarpal",
    "thumb-phalanx-proximal",
    "thumb-phalanx-distal",
    "thumb-tip",
    *(
        f"{f}-finger-{p}"
        for f in _FINGERS
        for p in (
            "metacarpal",
            "phalanx-proximal",
            "phalanx-intermediate",
            "phalanx-distal",
            "tip",
        )
    ),
)

ARKIT27: tuple[str, ...] = (
    "wrist",
    "thumbKnuckle",
    "thumbIntermediateBase",
    "thumbIntermediateTip",
    "thumbTip",
    *(
        f"{f}Finger{p}"
        for f in ("index", "middle", "ring", "little")
        for p in ("Metacarpal", "Knuckle", "IntermediateBase", "IntermediateTip", "Tip")
    ),
    "forearmWrist",
    "forearmArm",
)

VISION21: tuple[str, ...] = (
    "wrist",
    "thumbCMC",
    "thumbMP",
    "thumbIP",
    "thumbTip",
    *(
        f"{f}{p}"
        for f in ("index", "middle", "ring", "little")
        for p in ("MCP", "PIP", "DIP", "Tip")
    ),
)

MEDIAPIPE21: tuple[str, ...] = (
    "WRIST",
    "THUMB_CMC",
    "THUMB_MCP",
    "THUMB_IP",
    "THUMB_TIP",
    *(
        f"{f}_{p}"
        for f in ("INDEX_FINGER", "MIDDLE_FINGER", "RING_FINGER", "PINKY")
        for p in ("MCP", "PIP", "DIP", "TIP")
    ),
)

ARIA21: tuple[str, ...] = (
    "thumb_fingertip",
    "index_fingertip",
    "middle_fingertip",
    "ring_fingertip",
    "pinky_fingertip",
    "wrist",
    "thumb_intermediate",
    "thumb_distal",
    *(f"{f}_{p}" for f in _FINGERS for p in ("proximal", "intermediate", "distal")),
    "palm_center",
)

MANO16: tuple[str, ...] = (
    "wrist",
    *(f"{f}{i}" for f in ("index", "middle", "pinky", "ring", "thumb") for i in (1, 2, 3)),
)
MANO21: tuple[str, ...] = (*MANO16, "thumb_tip", "index_tip", "middle_tip", "ring_tip", "pinky_tip")

JOINT_SETS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "webxr25": WEBXR25,
        "arkit27": ARKIT27,
        "vision21": VISION21,
        "mediapipe21": MEDIAPIPE21,
        "aria21": ARIA21,
        "mano16": MANO16,
        "mano21": MANO21,
    }
)

# Sets that carry a full pose (rotation) and, for WebXR, a radius per joint.
POSE_JOINT_SETS = frozenset({"webxr25", "arkit27"})

# Fingertips per set, in thumb, index, middle, ring, pinky order.
FINGERTIPS: Mapping[str, tuple[int, ...]] = MappingProxyType(
    {
        "webxr25": (4, 9, 14, 19, 24),
        "arkit27": (4, 9, 14, 19, 24),
        "vision21": (4, 8, 12, 16, 20),
        "mediapipe21": (4, 8, 12, 16, 20),
        "aria21": (0, 1, 2, 3, 4),
        "mano21": (16, 17, 18, 19, 20),
    }
)
WRIST: Mapping[str, int] = MappingProxyType(
    {"webxr25": 0, "arkit27": 0, "vision21": 0, "mediapipe21": 0, "aria21": 5, "mano21": 0}
)


def _chain_parents(first: int, lengths: tuple[int, ...]) -> tuple[int, ...]:
    """Parents of finger chains that all hang off the wrist (joint 0)."""
    parents = [-1]
    joint = first
    for length in lengths:
        parents += [0] + [joint + i for i in range(length - 1)]
        joint += length
    return tuple(parents)


# WebXR / ARKit: thumb has 4 joints, the other fingers 5 (metacarpal .. tip).
_WEBXR_PARENTS = _chain_parents(1, (4, 5, 5, 5, 5))
# MediaPipe / Vision: 4 joints per finger (thumb CMC .. tip, MCP .. tip).
_LANDMARK21_PARENTS = _chain_parents(1, (4, 4, 4, 4, 4))

# Parent of each joint (-1 = root) for the skeleton sets; bones are (parent, child).
PARENTS: Mapping[str, tuple[int, ...]] = MappingProxyType(
    {
        "webxr25": _WEBXR_PARENTS,
        "arkit27": (*_WEBXR_PARENTS, 0, 25),  # forearmWrist <- wrist, forearmArm <- forearmWrist
        "mediapipe21": _LANDMARK21_PARENTS,
        "vision21": _LANDMARK21_PARENTS,
        # fingertips hang off the distal joints; wrist is joint 5
        "aria21": (7, 10, 13, 16, 19, -1, 5, 6, 5, 8, 9, 5, 11, 12, 5, 14, 15, 5, 17, 18, 5),
        # wrist, index/middle/pinky/ring/thumb chains of 3, then the five tips
        "mano21": (-1, 0, 1, 2, 0, 4, 5, 0, 7, 8, 0, 10, 11, 0, 13, 14, 15, 3, 6, 12, 9),
    }
)


def bones(joint_set: str) -> tuple[tuple[int, int], ...]:
    """(parent, child) index pairs of a skeleton set."""
    return tuple((p, c) for c, p in enumerate(PARENTS[joint_set]) if p >= 0)


@dataclass(frozen=True, slots=True)
class JointMap:
    """Source -> target joint set: ``index[t]`` is the source joint for target ``t`` or -1.

    ``lost`` lists what the map cannot carry, in words, for docs and metadata.
    """

    source: str
    target: str
    index: tuple[int, ...]
    lost: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.index) != len(JOINT_SETS[self.target]):
            raise ValueError(f"map {self.source}->{self.target}: wrong index length")
        if any(i >= len(JOINT_SETS[self.source]) for i in self.index):
            raise ValueError(f"map {self.source}->{self.target}: index out of range")

    @property
    def dropped(self) -> tuple[str, ...]:
        """Source joints that no target joint takes."""
        used = set(self.index)
        return tuple(n for i, n in enumerate(JOINT_SETS[self.source]) if i not in used)

    @property
    def missing(self) -> tuple[str, ...]:
        """Target joints that have no source joint (NaN after mapping)."""
        names = JOINT_SETS[self.target]
        return tuple(names[t] for t, i in enumerate(self.index) if i < 0)

    def apply(self, values: np.ndarray, axis: int = -2) -> tuple[np.ndarray, np.ndarray]:
        """Map ``values`` along the joint ``axis`` (default: (..., J, C) arrays).

        Returns:
            (mapped values with NaN for missing joints (float) or False (bool),
             (J_target,) bool mask of joints that have a source).
        """
        index = np.asarray(self.index)
        present = index >= 0
        taken = np.take(values, np.where(present, index, 0), axis=axis)
        if not present.all():
            shape = [1] * taken.ndim
            shape[axis] = len(index)
            fill = np.nan if taken.dtype.kind == "f" else 0
            taken = np.where(present.reshape(shape), taken, fill)
        return taken, present


def _by_name(source: str, target: str, pairs: Mapping[str, str], lost: tuple[str, ...]) -> JointMap:
    src = JOINT_SETS[source]
    index = tuple(src.index(pairs[name]) if name in pairs else -1 for name in JOINT_SETS[target])
    return JointMap(source, target, index, lost)


def _invert(m: JointMap, lost: tuple[str, ...]) -> JointMap:
    index = [-1] * len(JOINT_SETS[m.source])
    for t, s in enumerate(m.index):
        if s >= 0:
            index[s] = t
    return JointMap(m.target, m.source, tuple(index), lost)


def _compose(a: JointMap, b: JointMap, lost: tuple[str, ...]) -> JointMap:
    if a.target != b.source:
        raise ValueError(f"cannot compose {a.source}->{a.target} with {b.source}->{b.target}")
    index = tuple(a.index[i] if i >= 0 else -1 for i in b.index)
    return JointMap(a.source, b.target, index, lost)


_ARKIT_TO_WEBXR = JointMap(
    "arkit27",
    "webxr25",
    tuple(range(25)),
    ("forearmWrist and forearmArm poses (no WebXR joint)",),
)
_WEBXR_TO_MEDIAPIPE = _by_name(
    "webxr25",
    "mediapipe21",
    {
        "WRIST": "wrist",
        "THUMB_CMC": "thumb-metacarpal",
        "THUMB_MCP": "thumb-phalanx-proximal",
        "THUMB_IP": "thumb-phalanx-distal",
        "THUMB_TIP": "thumb-tip",
        **{
            f"{mp}_{j}": f"{wx}-finger-{p}"
            for mp, wx in (
                ("INDEX_FINGER", "index"),
                ("MIDDLE_FINGER", "middle"),
                ("RING_FINGER", "ring"),
                ("PINKY", "pinky"),
            )
            for j, p in (
                ("MCP", "phalanx-proximal"),
                ("PIP", "phalanx-intermediate"),
                ("DIP", "phalanx-distal"),
                ("TIP", "tip"),
            )
        },
    },
    (
        "the four finger metacarpal joints (MediaPipe has no metacarpal base)",
        "joint orientations and radii (landmarks are points)",
    ),
)
_MANO21_TO_MEDIAPIPE = JointMap(
    "mano21",
    "mediapipe21",
    (0, 13, 14, 15, 16, 1, 2, 3, 17, 4, 5, 6, 18, 10, 11, 12, 19, 7, 8, 9, 20),
    ("nothing: a reordering of the same 21 points",),
)
_ARIA_TO_MEDIAPIPE = JointMap(
    "aria21",
    "mediapipe21",
    (5, -1, 6, 7, 0, 8, 9, 10, 1, 11, 12, 13, 2, 14, 15, 16, 3, 17, 18, 19, 4),
    ("palm_center (no MediaPipe landmark); THUMB_CMC has no Aria landmark and is NaN",),
)
_VISION_TO_MEDIAPIPE = JointMap(
    "vision21",
    "mediapipe21",
    tuple(range(21)),
    ("nothing: the same 21 landmarks in the same order, other names",),
)

_MAPS: dict[tuple[str, str], JointMap] = {}


def _register(m: JointMap) -> None:
    _MAPS[(m.source, m.target)] = m


for _m in (
    _ARKIT_TO_WEBXR,
    _WEBXR_TO_MEDIAPIPE,
    _MANO21_TO_MEDIAPIPE,
    _ARIA_TO_MEDIAPIPE,
    _VISION_TO_MEDIAPIPE,
):
    _register(_m)
_register(
    _invert(
        _ARKIT_TO_WEBXR, ("forearmWrist and forearmArm are missing (NaN): WebXR has no forearm",)
    )
)
_register(
    _invert(
        _WEBXR_TO_MEDIAPIPE,
        (
            "the four finger metacarpals are missing (NaN)",
            "orientations and radii are missing",
        ),
    )
)
_register(_invert(_MANO21_TO_MEDIAPIPE, ("nothing: a reordering",)))
_register(_invert(_ARIA_TO_MEDIAPIPE, ("palm_center is missing (NaN); THUMB_CMC is dropped",)))
_register(_invert(_VISION_TO_MEDIAPIPE, ("nothing: a renaming",)))


def joint_map(source: str, target: str) -> JointMap:
    """The map from ``source`` to ``target``: direct, or the shortest chain of direct maps.

    A chained map's ``lost`` lists what every hop loses.
    """
    if source not in JOINT_SETS or target not in JOINT_SETS:
        raise KeyError(f"unknown joint set in {source!r} -> {target!r}")
    if source == target:
        n = len(JOINT_SETS[source])
        return JointMap(source, target, tuple(range(n)), ("nothing: identity",))
    paths: dict[str, JointMap] = {
        source: JointMap(source, source, tuple(range(len(JOINT_SETS[source]))), ())
    }
    frontier = [source]
    while frontier:
        nxt = []
        for node in frontier:
            for (a, b), hop in _MAPS.items():
                if a == node and b not in paths:
                    prev = paths[node]
                    lost = hop.lost if a == source else (*prev.lost, *hop.lost)
                    paths[b] = _compose(prev, hop, lost)
                    nxt.append(b)
        frontier = nxt
    if target not in paths:
        raise KeyError(f"no joint map {source!r} -> {target!r}")
    return paths[target]


def map_positions(positions: np.ndarray, source: str, target: str) -> tuple[np.ndarray, np.ndarray]:
    """Map (..., J_source, 3) positions to (..., J_target, 3); NaN where missing.

    Returns the mapped positions and the (J_target,) mask of joints that have a source.
    """
    return joint_map(source, target).apply(positions, axis=-2)


def bone_lengths(positions: np.ndarray, joint_set: str) -> np.ndarray:
    """(..., n_bones) Euclidean bone lengths, metres, from (..., J, 3) positions."""
    pairs = np.asarray(bones(joint_set))
    diff = positions[..., pairs[:, 1], :] - positions[..., pairs[:, 0], :]
    # what np.linalg.norm(diff, axis=-1) computes, summed in the same order, without its
    # slow reduction over a 3-long axis
    squared = (
        diff[..., 0] * diff[..., 0] + diff[..., 1] * diff[..., 1] + diff[..., 2] * diff[..., 2]
    )
    return np.sqrt(squared)
