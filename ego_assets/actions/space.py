"""`ActionSpace`: what a release declares about its robot-ready state and actions.

The release spec's ``[actions]`` table parses into one (`ActionSpace.from_table`); every
packing, the card and ``release.json`` read the same object. A bad key or value raises
`ActionSpaceError`, whose message names the key.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

SPACES = ("source", "eef_pose_gripper", "fingertips")
FRAMES = ("head", "world")
HANDS = ("both", "left", "right", "dominant")
ROTATIONS = ("rot6d", "xyzw")
FINGERS = ("thumb", "index", "middle", "ring", "pinky")
AXES = ("x", "y", "z")


class ActionSpaceError(ValueError):
    """An ``[actions]`` key or value that cannot be used (``key`` names it), or a capture
    that cannot give the declared space (``key`` names the setting it cannot honour)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ActionSpaceError(key, f"{value!r} must be one of {', '.join(allowed)}")


def _positive(key: str, value: Any) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise ActionSpaceError(key, f"{value!r} must be a number > 0")


@dataclass(frozen=True, slots=True)
class ActionSpace:
    """The declared state/action space of a release (the spec's ``[actions]`` table).

    Attributes:
        space: ``source`` (each packing's own vectors, unchanged), ``eef_pose_gripper``
            (wrist pose + grasp aperture + gripper bit per hand) or ``fingertips`` (the
            five fingertips in the wrist frame per hand).
        frame: ``head`` (the head/device camera pose at the same instant) or ``world``
            (the capture's world frame) for the wrist pose.
        hands: ``both`` (left then right), ``left``, ``right`` or ``dominant``.
        rotation: ``rot6d`` (first column then second column of the rotation matrix)
            or ``xyzw`` (unit quaternion, scipy's order).
        horizon: H >= 1 future samples per action (``t+1 .. t+H``).
        relative: actions are the pose of ``t+k`` in the wrist frame of ``t``.
        gripper_close_m: aperture (m) below which the gripper closes.
        gripper_open_m: aperture (m) above which a closed gripper opens again (> close).
        fps: None: the caller's clock; else resample at this rate (zero-order hold).
    """

    space: str = "source"
    frame: str = "head"
    hands: str = "both"
    rotation: str = "rot6d"
    horizon: int = 1
    relative: bool = False
    gripper_close_m: float = 0.03
    gripper_open_m: float = 0.04
    fps: float | None = None

    def __post_init__(self) -> None:
        _choice("space", self.space, SPACES)
        _choice("frame", self.frame, FRAMES)
        _choice("hands", self.hands, HANDS)
        _choice("rotation", self.rotation, ROTATIONS)
        if not isinstance(self.horizon, int) or isinstance(self.horizon, bool) or self.horizon < 1:
            raise ActionSpaceError("horizon", f"{self.horizon!r} must be an integer >= 1")
        if not isinstance(self.relative, bool):
            raise ActionSpaceError("relative", f"{self.relative!r} must be true or false")
        _positive("gripper_close_m", self.gripper_close_m)
        _positive("gripper_open_m", self.gripper_open_m)
        if self.gripper_open_m <= self.gripper_close_m:
            raise ActionSpaceError(
                "gripper_open_m",
                f"{self.gripper_open_m!r} must be greater than gripper_close_m "
                f"({self.gripper_close_m!r}): the gap between them is the hysteresis",
            )
        if self.fps is not None:
            _positive("fps", self.fps)

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> ActionSpace:
        """The spec's ``[actions]`` table (keys as the attributes; ``fps`` left out for
        the packing's own clock). A key absent from the table keeps its default.

        Raises:
            ActionSpaceError: an unknown key, or a bad value (the message names the key).
        """
        known = [f.name for f in fields(cls)]
        for key in table:
            if key not in known:
                raise ActionSpaceError(key, f"unknown key (known: {', '.join(known)})")
        values = dict(table)
        for key in ("gripper_close_m", "gripper_open_m", "fps"):
            if key in values and not (key == "fps" and values[key] is None):
                _positive(key, values[key])
                values[key] = float(values[key])
        if "gripper_close_m" in values and "gripper_open_m" not in values:
            # the default gap of 1 cm above a declared close threshold
            values["gripper_open_m"] = values["gripper_close_m"] + 0.01
        return cls(**values)

    @property
    def derived(self) -> bool:
        """Whether the packings derive state and actions (False for ``source``)."""
        return self.space != "source"

    @property
    def hand_prefixes(self) -> tuple[str, ...]:
        """The hands of the state, in order: ``left, right``, one side, or ``dominant``."""
        return ("left", "right") if self.hands == "both" else (self.hands,)

    def hand_names(self, prefix: str, relative: bool = False) -> list[str]:
        """Component names of one hand's state (``relative``: of its relative action)."""
        d = "d" if relative else ""
        if self.space == "fingertips":
            return [f"{prefix}.{finger}_tip.{d}{a}" for finger in FINGERS for a in AXES]
        rot = (
            [f"{d}rot6d_{i}" for i in range(6)]
            if self.rotation == "rot6d"
            else [f"{d}q{a}" for a in ("x", "y", "z", "w")]
        )
        eef = [f"{prefix}.eef.{c}" for c in (*(f"{d}{a}" for a in AXES), *rot)]
        return [*eef, f"{prefix}.grasp_aperture", f"{prefix}.gripper_closed"]

    def state_names(self) -> tuple[str, ...]:
        """Names of the state's S components (the same for every episode); () for source."""
        return _state_names(self)

    def action_names(self) -> tuple[str, ...]:
        """Names of the action's H * W components, step-major: ``t+<k>.<component>``."""
        return _action_names(self)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (release.json, the card, the inputs hash); every key, fixed order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def describe(self) -> str:
        """One short line for the card and ``release diff``."""
        if not self.derived:
            return "source: each packing's own state and action vectors, unchanged"
        if self.space == "fingertips":
            what = "five fingertips in the wrist frame (m)"
        else:
            what = (
                f"wrist pose in the {self.frame} frame ({self.rotation}) + grasp aperture + "
                f"gripper (closed < {self.gripper_close_m:g} m, open > {self.gripper_open_m:g} m)"
            )
        steps = "t+1" if self.horizon == 1 else f"t+1..t+{self.horizon}"
        kind = "relative to the wrist at t" if self.relative else "absolute"
        clock = f"{self.fps:g} Hz" if self.fps is not None else "the packing's clock"
        return f"{self.space}: {what}; hands {self.hands}; actions {steps} {kind}; {clock}"


@functools.lru_cache(maxsize=64)
def _state_names(space: ActionSpace) -> tuple[str, ...]:
    if not space.derived:
        return ()
    return tuple(n for prefix in space.hand_prefixes for n in space.hand_names(prefix))


@functools.lru_cache(maxsize=64)
def _action_names(space: ActionSpace) -> tuple[str, ...]:
    if not space.derived:
        return ()
    return tuple(
        f"t+{k}.{n}"
        for k in range(1, space.horizon + 1)
        for prefix in space.hand_prefixes
        for n in space.hand_names(prefix, relative=space.relative)
    )
