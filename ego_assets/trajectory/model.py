"""The canonical trajectory: one capture's streams, annotations and media, source-free.

Every capture reader produces a `Trajectory`; every exporter reads one. Nothing is
resampled here: each `Stream` keeps its own clock, validity is stored exactly as the
source gave it, and faults are flagged, not repaired. Frames and conventions are
declared once per capture in `CaptureInfo` (world frame, handedness, up axis, metres,
quaternions ``xyzw``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ego_assets.trajectory.records import from_jsonable, to_jsonable
from ego_assets.trajectory.streams import Stream

MODEL_VERSION = "ego-trajectory-1"
SOURCE_KINDS = (
    "holos-visionpro",
    "holos-iphone",
    "webxr",
    "mano-video",
    "aria-mps",
    "egodex",
    "lerobot-v3",
    "holos-hdf5",
    "egosmith-webdataset",
    "mano-sequence",
)
AVAILABILITY_STATUSES = ("known", "unknown", "unavailable")
SEGMENT_OUTCOMES = ("success", "completed", "retry", "failed", "aborted", "unknown")

JsonScalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class CameraCalibration:
    """Intrinsics (pixels) and lens distortion of one camera.

    ``distortion`` for ``pinhole-radtan5`` is (k1, k2, p1, p2, k3).
    ``camera_from_device`` is a row-major 4x4 (metres), identity when unknown.
    """

    camera: str
    model: str
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: tuple[float, ...] = ()
    rms_error_px: float | None = None
    sample_count: int | None = None
    captured_at: str | None = None
    camera_from_device: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0 or self.fx <= 0 or self.fy <= 0:
            raise ValueError(f"camera {self.camera!r}: size and focal lengths must be > 0")
        if self.camera_from_device is not None and len(self.camera_from_device) != 16:
            raise ValueError(f"camera {self.camera!r}: camera_from_device needs 16 values")


@dataclass(frozen=True, slots=True)
class Characteristic:
    """A capture characteristic with explicit availability (CERES convention)."""

    name: str
    status: str
    value: JsonScalar = None

    def __post_init__(self) -> None:
        if self.status not in AVAILABILITY_STATUSES:
            raise ValueError(f"characteristic {self.name!r}: status {self.status!r}")
        if self.status != "known" and self.value is not None:
            raise ValueError(f"characteristic {self.name!r}: only 'known' carries a value")


@dataclass(frozen=True, slots=True)
class StudyInfo:
    """Optional study metadata: pseudonymous identifiers only, never names."""

    headset_id: str | None = None
    demonstrator_id: str | None = None
    project_id: str | None = None
    consent_date: str | None = None
    consent_document_id: str | None = None
    raw_audio_retained: bool | None = None


@dataclass(frozen=True, slots=True)
class TaskSpecification:
    """A canonical task specification attached to the recording (versioned JSON)."""

    version: str
    sha256: str
    path: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class Segment:
    """A task segment. Times are the source clock (``timestamp_ns``); end exclusive.

    ``outcome == "retry"`` marks an attempt that the next take of the same
    (cycle, repetition) replaces; it is kept here and dropped only by exporters.
    """

    segment_id: str
    task: str
    cycle: int
    repetition: int
    take: int
    outcome: str
    start_ns: int
    end_ns: int
    start_slot: int | None = None
    end_slot: int | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in SEGMENT_OUTCOMES:
            raise ValueError(f"segment {self.segment_id!r}: outcome {self.outcome!r}")
        if self.end_ns < self.start_ns:
            raise ValueError(f"segment {self.segment_id!r}: ends before it starts")


@dataclass(frozen=True, slots=True)
class ProcedureStep:
    """One visit of a procedure step, seconds since capture start."""

    index: int
    step_id: str
    title: str
    t_start: float
    t_end: float


@dataclass(frozen=True, slots=True)
class TranscriptSegment:
    """A transcribed utterance, seconds since capture start."""

    start_s: float
    end_s: float
    text: str
    is_final: bool


@dataclass(frozen=True, slots=True)
class TranscriptToken:
    """A word of a transcript segment (``segment`` indexes `Annotations.transcript`)."""

    segment: int
    start_s: float
    end_s: float
    text: str


@dataclass(frozen=True, slots=True)
class VlmOutput:
    """A vision-language model output: device monotonic s, wall time ISO-8601, capture s."""

    t_mono: float
    t_wall: str
    time: float
    prompt: str
    output: str


@dataclass(frozen=True, slots=True)
class Annotations:
    """Language and event annotations of a capture."""

    instructions: tuple[str, ...] = ()
    language: str = ""
    segments: tuple[Segment, ...] = ()
    procedure_steps: tuple[ProcedureStep, ...] = ()
    transcript: tuple[TranscriptSegment, ...] = ()
    transcript_tokens: tuple[TranscriptToken, ...] = ()
    vlm: tuple[VlmOutput, ...] = ()

    @property
    def transcript_text(self) -> str:
        """Final transcript segments joined by spaces."""
        return " ".join(s.text for s in self.transcript if s.is_final)


@dataclass(frozen=True, slots=True)
class MediaRef:
    """A media file of the raw capture, kept as bytes and referenced with its timing.

    ``path`` is relative to the raw capture folder. ``frames_stream`` names the
    ``media_frames`` stream with each frame's timestamp (video and depth).
    """

    role: str
    path: str
    mime: str
    kind: str
    codec: str = ""
    width: int = 0
    height: int = 0
    fps: float = 0.0
    frame_count: int = 0
    duration_s: float = 0.0
    frames_stream: str | None = None
    sample_rate_hz: int = 0
    channels: int = 0
    start_ns: int | None = None
    unit: str = ""


@dataclass(frozen=True, slots=True)
class FileRef:
    """A raw file kept verbatim (session metadata, calibration JSON, thumbnail...)."""

    role: str
    path: str
    mime: str


@dataclass(frozen=True, slots=True)
class Quirk:
    """A known oddity of a source file that the reader met and reported."""

    file: str
    description: str
    rows: int = 0
    field: str | None = None


@dataclass(frozen=True, slots=True)
class CaptureInfo:
    """Who, what and which conventions: stated once per capture.

    ``capture_id`` is the platform's key; ``source_capture_id`` the id the recording
    app gave (Holos capture id, CERES episode id, clip id).
    ``start_ns`` is the capture start on the ``clock`` of every stream: ``"epoch"``
    (Unix ns) or ``"device"`` (a device clock with unknown epoch, e.g. Aria MPS).
    ``world_frame``, ``handedness``, ``up_axis`` describe the frame that the streams
    with ``frame == "world"`` use.
    """

    capture_id: str
    source_kind: str
    source_version: str
    start_ns: int
    clock: str = "epoch"
    source_capture_id: str = ""
    device: str = ""
    app: str = ""
    title: str = ""
    institution: str = ""
    organization_id: str = ""
    modality: str = ""
    world_frame: str = "world"
    handedness: str = "right"
    up_axis: str = "Y"
    length_unit: str = "m"
    quaternion_order: str = "xyzw"
    embodiment: str = "human"
    dataset_name: str = ""
    split: str = ""
    recorder_rate_hz: float | None = None
    cameras: tuple[CameraCalibration, ...] = ()
    characteristics: tuple[Characteristic, ...] = ()
    study: StudyInfo | None = None
    task_specification: TaskSpecification | None = None

    def __post_init__(self) -> None:
        if self.source_kind not in SOURCE_KINDS:
            raise ValueError(f"capture {self.capture_id!r}: source_kind {self.source_kind!r}")
        if self.clock not in ("epoch", "device"):
            raise ValueError(f"capture {self.capture_id!r}: clock {self.clock!r}")
        if self.handedness not in ("right", "left"):
            raise ValueError(f"capture {self.capture_id!r}: handedness {self.handedness!r}")
        if self.up_axis not in ("X", "Y", "Z", "-X", "-Y", "-Z"):
            raise ValueError(f"capture {self.capture_id!r}: up_axis {self.up_axis!r}")


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One capture in the canonical model: what every exporter reads."""

    info: CaptureInfo
    streams: tuple[Stream, ...]
    annotations: Annotations = Annotations()
    media: tuple[MediaRef, ...] = ()
    files: tuple[FileRef, ...] = ()
    extra_files: tuple[str, ...] = ()
    quirks: tuple[Quirk, ...] = ()

    def __post_init__(self) -> None:
        names = [s.name for s in self.streams]
        if len(set(names)) != len(names):
            raise ValueError(f"capture {self.info.capture_id!r}: duplicate stream names")
        for media in self.media:
            if media.frames_stream is not None and media.frames_stream not in names:
                raise ValueError(f"media {media.role!r}: no stream {media.frames_stream!r}")

    def stream(self, name: str) -> Stream:
        """The stream called ``name`` (KeyError naming the available ones otherwise)."""
        for s in self.streams:
            if s.name == name:
                return s
        raise KeyError(f"no stream {name!r}; streams: {[s.name for s in self.streams]}")

    def has_stream(self, name: str) -> bool:
        return any(s.name == name for s in self.streams)

    def streams_of_kind(self, kind: str) -> tuple[Stream, ...]:
        return tuple(s for s in self.streams if s.kind == kind)

    def media_ref(self, role: str) -> MediaRef:
        for m in self.media:
            if m.role == role:
                return m
        raise KeyError(f"no media {role!r}; media: {[m.role for m in self.media]}")

    @property
    def duration_s(self) -> float:
        """Span from the capture start to the last sample of any stream, seconds."""
        ends = [float(s.time.max()) for s in self.streams if len(s)]
        return max(ends, default=0.0)

    def header_to_dict(self) -> dict[str, Any]:
        """Everything but the stream samples, as plain JSON (``capture.json``)."""
        return {
            "model_version": MODEL_VERSION,
            "info": to_jsonable(self.info),
            "annotations": to_jsonable(self.annotations),
            "media": to_jsonable(self.media),
            "files": to_jsonable(self.files),
            "extra_files": list(self.extra_files),
            "quirks": to_jsonable(self.quirks),
        }


@dataclass(frozen=True, slots=True)
class TrajectoryHeader:
    """``capture.json`` without the streams (what `Trajectory.header_to_dict` writes)."""

    info: CaptureInfo
    annotations: Annotations
    media: tuple[MediaRef, ...]
    files: tuple[FileRef, ...]
    extra_files: tuple[str, ...]
    quirks: tuple[Quirk, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrajectoryHeader:
        if data.get("model_version") != MODEL_VERSION:
            raise ValueError(
                f"capture.json model_version {data.get('model_version')!r}, "
                f"this code reads {MODEL_VERSION!r}"
            )
        derived = ("model_version", "streams", "duration_s")
        body = {k: v for k, v in data.items() if k not in derived}
        return from_jsonable(cls, body)
