"""Stream kinds of the canonical trajectory and the `Stream` container.

Every stream is a table of samples on its own clock:

* ``timestamp_ns``: (T,) int64, nanoseconds since the Unix epoch (or since the device's
  boot when the capture's ``clock`` is ``"device"``, see `CaptureInfo`);
* ``time``: (T,) float64, seconds since the capture start;
* ``flags``: (T,) uint8 bitmask of data faults found on reading (`SampleFlag`): kept,
  never repaired, so the quality report can measure them;
* named fields whose per-sample shape, dtype and unit are fixed by the stream kind
  (`STREAM_KINDS`). Symbolic dimensions (``J`` joints, ``P`` pose coefficients,
  ``B`` shape coefficients) are bound per stream and must agree across its fields.

Units are SI (m, s, rad, m s-2, rad s-1), quaternions are ``xyzw``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

AttrValue = str | int | float | bool

# Values of a stream's ``frame`` attr whose positions are relative to the hand itself
# (origin at the wrist or the hand's centre, moving with it): ``"wrist"`` (a skeleton in
# its wrist/anchor frame) and ``"hand"`` (landmarks a source declares hand-centred, such
# as MediaPipe world landmarks). Every other frame (``"world"``, ``"device"``, a camera)
# places the hand in space. Figures of hand motion need the latter.
HAND_CENTRED_FRAMES = frozenset({"wrist", "hand"})


class SampleFlag(enum.IntFlag):
    """Per-sample data faults, as found in the source (never repaired)."""

    DUPLICATE_TIMESTAMP = 1
    BACKWARDS_TIMESTAMP = 2
    NON_FINITE = 4


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a stream kind.

    Attributes:
        name: column name.
        dtype: numpy dtype name (``"float64"``, ``"bool"``, ``"int64"``, ``"str"``).
        shape: per-sample shape; ints are fixed, strings are symbolic dims.
        unit: UDUNITS-style unit (``"m"``, ``"rad"``, ``"1"``, ``"m s-2"``...).
        required: whether every stream of the kind carries it.
        description: what it is, with its frame.
    """

    name: str
    dtype: str
    shape: tuple[int | str, ...]
    unit: str
    required: bool
    description: str


@dataclass(frozen=True, slots=True)
class StreamKind:
    """A stream kind: its fields and the attrs every stream of it must declare."""

    name: str
    fields: tuple[FieldSpec, ...]
    required_attrs: tuple[str, ...]
    description: str

    def field(self, name: str) -> FieldSpec:
        for spec in self.fields:
            if spec.name == name:
                return spec
        raise KeyError(f"stream kind {self.name!r} has no field {name!r}")


def _f(
    name: str, dtype: str, shape: tuple[int | str, ...], unit: str, required: bool, desc: str
) -> FieldSpec:
    return FieldSpec(name, dtype, shape, unit, required, desc)


_POSITION = "position (x, y, z), metres, in the stream's frame"
_ROTATION = "orientation quaternion (x, y, z, w), unit norm, in the stream's frame"

STREAM_KINDS: Mapping[str, StreamKind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (
            StreamKind(
                "pose",
                (
                    _f("position", "float64", (3,), "m", True, _POSITION),
                    _f("rotation", "float64", (4,), "1", True, _ROTATION),
                    _f("valid", "bool", (), "1", True, "the source reported this pose as valid"),
                    _f("tracking_state", "str", (), "1", False, "source tracking state text"),
                ),
                ("frame",),
                "A rigid pose over time: head/device, a camera, a wrist.",
            ),
            StreamKind(
                "object_pose",
                (
                    _f("anchor_id", "str", (), "1", True, "stable id of the tracked object"),
                    _f("anchor_name", "str", (), "1", True, "human name of the object"),
                    _f("position", "float64", (3,), "m", True, _POSITION),
                    _f("rotation", "float64", (4,), "1", True, _ROTATION),
                    _f("valid", "bool", (), "1", True, "the anchor was tracked"),
                ),
                ("frame",),
                "Tracked object anchors, one row per anchor update (long format).",
            ),
            StreamKind(
                "hand_joints",
                (
                    _f("position", "float64", ("J", 3), "m", True, "joint positions, " + _POSITION),
                    _f("rotation", "float64", ("J", 4), "1", False, "joint orientations (xyzw)"),
                    _f("radius", "float64", ("J",), "m", False, "joint radius (WebXR)"),
                    _f("joint_valid", "bool", ("J",), "1", False, "per-joint tracked flag"),
                    _f("joint_confidence", "float64", ("J",), "1", False, "per-joint confidence"),
                    _f("hand_valid", "bool", (), "1", True, "hand tracked, as the source said"),
                    _f("hand_confidence", "float64", (), "1", False, "per-hand confidence"),
                ),
                ("joint_set", "hand", "frame"),
                "A hand skeleton or landmark set in 3D (joint names from `joint_set`).",
            ),
            StreamKind(
                "hand_landmarks_2d",
                (
                    _f("uv", "float64", ("J", 2), "1", True, "normalized image (u, v)"),
                    _f("joint_confidence", "float64", ("J",), "1", True, "0 = not seen"),
                    _f("hand_valid", "bool", (), "1", True, "hand detected"),
                    _f("hand_confidence", "float64", (), "1", False, "per-hand confidence"),
                ),
                ("joint_set", "hand", "image_origin"),
                "Hand landmarks in normalized image coordinates.",
            ),
            StreamKind(
                "wrist_palm",
                (
                    _f("wrist_position", "float64", (3,), "m", True, "wrist, " + _POSITION),
                    _f("palm_position", "float64", (3,), "m", False, "palm centre, " + _POSITION),
                    _f("wrist_rotation", "float64", (4,), "1", False, "wrist orientation xyzw"),
                    _f("wrist_normal", "float64", (3,), "1", False, "wrist normal, unit"),
                    _f("palm_normal", "float64", (3,), "1", False, "palm normal, unit"),
                    _f("hand_valid", "bool", (), "1", True, "hand tracked, as the source said"),
                    _f("hand_confidence", "float64", (), "1", False, "tracking confidence"),
                ),
                ("hand", "frame"),
                "Wrist and palm pose of one hand (Project Aria MPS).",
            ),
            StreamKind(
                "mano",
                (
                    _f("transl", "float64", (3,), "m", True, "wrist translation, world frame"),
                    _f("global_orient", "float64", (3,), "rad", True, "root rotation, axis-angle"),
                    _f("hand_pose", "float64", ("P",), "1", True, "MANO pose PCA coefficients"),
                    _f("betas", "float64", ("B",), "1", True, "MANO shape coefficients"),
                    _f("valid_detected", "bool", (), "1", True, "hand detected in this frame"),
                    _f("valid_infilled", "bool", (), "1", False, "valid after infilling"),
                    _f("joints", "float64", (21, 3), "m", False, "MANO-21 joints, world frame"),
                ),
                ("hand", "frame", "mano_pose_space", "flat_hand_mean"),
                "Per-frame MANO parameters of one hand, estimated from video.",
            ),
            StreamKind(
                "imu",
                (
                    _f("accel", "float64", (3,), "m s-2", True, "user acceleration, device frame"),
                    _f("gyro", "float64", (3,), "rad s-1", True, "rotation rate, device frame"),
                    _f("gravity", "float64", (3,), "m s-2", False, "gravity, device frame"),
                ),
                ("frame",),
                "Inertial samples (Core Motion device motion).",
            ),
            StreamKind(
                "media_frames",
                (
                    _f("frame_index", "int64", (), "1", True, "index of the frame in the file"),
                    _f("intrinsics", "float64", (4,), "px", False, "fx, fy, cx, cy (pixels)"),
                    _f("world_to_camera", "float64", (4, 4), "m", False, "world->camera 4x4"),
                ),
                ("media",),
                "Presentation timing of each frame of a video or depth file (+ camera model).",
            ),
            StreamKind(
                "pinch",
                (
                    _f("left", "float64", (), "m", True, "thumb-tip to index-tip distance, left"),
                    _f("right", "float64", (), "m", True, "thumb-tip to index-tip distance, right"),
                ),
                (),
                "Pinch distances per recorder slot (NaN where the hand was not tracked).",
            ),
            StreamKind(
                "vector",
                (_f("values", "float64", ("D",), "1", True, "the source's values, as given"),),
                ("names",),
                "A named vector column an imported dataset carries that no other kind "
                "types (LeRobot state/action columns, robomimic obs): ``names`` is the JSON "
                "list of the D component names, ``unit`` (optional attr) their unit.",
            ),
            StreamKind(
                "recorder_slots",
                (
                    _f("slot_index", "int64", (), "1", True, "recorder frame index in the journal"),
                    _f("gap", "bool", (), "1", True, "explicit missing-observation slot"),
                    _f("source_time", "float64", (), "s", False, "recorder monotonic time"),
                ),
                ("rate_hz",),
                "The WebXR recorder's slot clock, including its explicit gap slots.",
            ),
        )
    }
)


@dataclass(frozen=True, slots=True)
class Stream:
    """One stream of samples on its own clock.

    Attributes:
        name: unique within the capture, e.g. ``"hand_right_world"``.
        kind: key of `STREAM_KINDS`.
        timestamp_ns: (T,) int64, ns since the Unix epoch (device clock for ``clock="device"``).
        time: (T,) float64, seconds since the capture start.
        fields: field name -> (T, *shape) array, as declared by the kind.
        attrs: declared attrs (frame, joint_set, hand, media, nominal_rate_hz, source_file...).
        flags: (T,) uint8 `SampleFlag` bitmask.
    """

    name: str
    kind: str
    timestamp_ns: np.ndarray
    time: np.ndarray
    fields: Mapping[str, np.ndarray]
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)
    flags: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))

    def __post_init__(self) -> None:
        if self.kind not in STREAM_KINDS:
            raise ValueError(f"stream {self.name!r}: unknown kind {self.kind!r}")
        kind = STREAM_KINDS[self.kind]
        n = len(self.timestamp_ns)
        if self.timestamp_ns.dtype != np.int64 or self.timestamp_ns.ndim != 1:
            raise ValueError(f"stream {self.name!r}: timestamp_ns must be (T,) int64")
        if self.time.dtype != np.float64 or self.time.shape != (n,):
            raise ValueError(f"stream {self.name!r}: time must be (T,) float64")
        if self.flags.shape != (n,) or self.flags.dtype != np.uint8:
            raise ValueError(f"stream {self.name!r}: flags must be (T,) uint8")
        for attr in kind.required_attrs:
            if attr not in self.attrs:
                raise ValueError(f"stream {self.name!r}: kind {self.kind!r} needs attr {attr!r}")
        dims: dict[str, int] = {}
        for spec in kind.fields:
            if spec.name not in self.fields:
                if spec.required:
                    raise ValueError(f"stream {self.name!r}: missing field {spec.name!r}")
                continue
            arr = self.fields[spec.name]
            _check_dtype(self.name, spec, arr)
            if arr.ndim != 1 + len(spec.shape) or arr.shape[0] != n:
                raise ValueError(
                    f"stream {self.name!r}: field {spec.name!r} has shape {arr.shape}, "
                    f"expected ({n}, {', '.join(map(str, spec.shape))})"
                )
            for dim, size in zip(spec.shape, arr.shape[1:], strict=True):
                expected = dims.setdefault(dim, size) if isinstance(dim, str) else dim
                if size != expected:
                    raise ValueError(
                        f"stream {self.name!r}: field {spec.name!r} dim {dim} is {size}, "
                        f"expected {expected}"
                    )
        unknown = set(self.fields) - {spec.name for spec in kind.fields}
        if unknown:
            raise ValueError(f"stream {self.name!r}: fields not in kind {self.kind!r}: {unknown}")

    def __len__(self) -> int:
        return len(self.timestamp_ns)

    @property
    def spec(self) -> StreamKind:
        return STREAM_KINDS[self.kind]

    def dims(self) -> dict[str, int]:
        """Symbolic dimension sizes bound by this stream's fields (e.g. ``{"J": 27}``)."""
        dims: dict[str, int] = {}
        for spec in self.spec.fields:
            if spec.name in self.fields:
                for dim, size in zip(spec.shape, self.fields[spec.name].shape[1:], strict=True):
                    if isinstance(dim, str):
                        dims[dim] = size
        return dims


def _check_dtype(stream: str, spec: FieldSpec, arr: np.ndarray) -> None:
    if spec.dtype == "str":
        ok = arr.dtype == object or arr.dtype.kind == "U"
    else:
        ok = arr.dtype == np.dtype(spec.dtype)
    if not ok:
        raise ValueError(
            f"stream {stream!r}: field {spec.name!r} has dtype {arr.dtype}, expected {spec.dtype}"
        )


def sample_flags(timestamp_ns: np.ndarray, fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """Flag duplicate and backwards timestamps and non-finite float values, per sample.

    Args:
        timestamp_ns: (T,) int64 as read.
        fields: the stream's fields; float fields are checked for NaN/inf. A NaN in an
            untracked joint is not a fault only if the source wrote it so; it is flagged
            all the same and the quality report reads it against the validity flags.

    Returns:
        (T,) uint8 `SampleFlag` bitmask; sample i is compared with sample i-1.
    """
    n = len(timestamp_ns)
    flags = np.zeros(n, np.uint8)
    if n > 1:
        step = timestamp_ns[1:] - timestamp_ns[:-1]
        if not (step > 0).all():  # the per-sample masks only when something is to flag
            flags[1:][step == 0] |= np.uint8(SampleFlag.DUPLICATE_TIMESTAMP)
            flags[1:][step < 0] |= np.uint8(SampleFlag.BACKWARDS_TIMESTAMP)
    for arr in fields.values():
        if arr.dtype.kind == "f" and n:
            finite = np.isfinite(arr)
            if not finite.all():
                flags[~finite.reshape(n, -1).all(axis=1)] |= np.uint8(SampleFlag.NON_FINITE)
    return flags


def make_stream(
    name: str,
    kind: str,
    timestamp_ns: np.ndarray,
    start_ns: int,
    fields: Mapping[str, np.ndarray],
    attrs: Mapping[str, AttrValue],
) -> Stream:
    """Build a `Stream`, deriving ``time`` from ``start_ns`` and the fault ``flags``."""
    ts = np.ascontiguousarray(timestamp_ns, dtype=np.int64)
    time = (ts - np.int64(start_ns)).astype(np.float64) / 1e9
    return Stream(
        name=name,
        kind=kind,
        timestamp_ns=ts,
        time=time,
        fields=MappingProxyType(dict(fields)),
        attrs=MappingProxyType(dict(attrs)),
        flags=sample_flags(ts, fields),
    )
