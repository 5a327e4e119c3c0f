"""Reader for ``webxr`` captures: the CERES-style browser recorder journal.

Every slot stream (``recorder_slots``, ``head``, ``hand_left``, ``hand_right``,
``pinch``) has one row per journal line, gap slots included, so row i of each is the
same recorder slot. ``camera_outward_frames`` has one row per video frame. Times:
``timestamp_ns = round((time_origin_epoch_ms + t_ms) * 1e6)``.

``session.json`` also carries ``user_agent`` and ``camera_device_id``; they are never
read into the trajectory, and ``session.json`` is not kept as a verbatim file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ego_assets.capture.files import (
    MARKER_FILE,
    CaptureFiles,
    number_list,
    number_problem,
    require,
)
from ego_assets.capture.media import MAX_FRAME_INDEX, check_frame_rows, probe_video
from ego_assets.capture.poses import invert_pose
from ego_assets.capture.ranges import (
    EPOCH_MS,
    SESSION_MS,
    check_count,
    check_time,
    check_times,
    require_number,
)
from ego_assets.capture.webxr_slots import (
    MAX_SLOT,
    SIDES,
    SlotArrays,
    read_slots,
    slot_timestamps_ns,
)
from ego_assets.trajectory.model import (
    AVAILABILITY_STATUSES,
    SEGMENT_OUTCOMES,
    Annotations,
    CameraCalibration,
    CaptureInfo,
    Characteristic,
    FileRef,
    Segment,
    StudyInfo,
    TaskSpecification,
    Trajectory,
)
from ego_assets.trajectory.streams import AttrValue, Stream, make_stream

log = logging.getLogger(__name__)

SCHEMA = "ceres-journal"
SCHEMA_VERSION = 1
SESSION_FILE = "session.json"
SEGMENTS_FILE = "segments.json"
VIDEO_FILE = "camera/outward.mp4"
FRAMES_FILE = "camera/frames.csv"
CALIBRATION_FILE = "calibration.json"
JOINT_SET = "webxr25"
CAMERA_ROLE = "camera_outward"
CAMERA_FRAMES_STREAM = "camera_outward_frames"
MIN_RATE_HZ = 0.1  # recorder slots per second
MAX_RATE_HZ = 1000.0
_STUDY_STRINGS = (
    "headset_id",
    "demonstrator_id",
    "project_id",
    "consent_date",
    "consent_document_id",
)


@dataclass(frozen=True, slots=True)
class _Session:
    """What the reader takes from ``session.json`` (never the user agent or device id)."""

    episode_id: str
    recorder_rate_hz: float
    reference_space: str
    time_origin_epoch_ms: float
    camera_id: str
    characteristics: tuple[Characteristic, ...]
    study: StudyInfo | None
    task: str
    instructions: tuple[str, ...]
    task_spec_path: str | None
    task_spec_version: str | None


def read_webxr(files: CaptureFiles, marker: Mapping[str, Any]) -> Trajectory:
    """Read a ``webxr`` capture folder into the canonical `Trajectory`.

    Args:
        files: the capture folder.
        marker: the validated completion marker (``kind == "webxr"``).

    Raises:
        CaptureFormatError: malformed input, naming capture, file, field and row.
    """
    session = _read_session(files)
    slots = read_slots(files)
    slot_ns = slot_timestamps_ns(session.time_origin_epoch_ms, slots.t_ms)
    start_ns = int(slot_ns[0])
    calibration, camera_from_head = _read_calibration(files, session.camera_id)
    streams = _slot_streams(slots, slot_ns, start_ns, session.recorder_rate_hz)
    frames = _camera_frames(files, session, slots, start_ns, calibration, camera_from_head)
    streams.append(frames)
    segments = _read_segments(files, slots, slot_ns, session.recorder_rate_hz)
    task_spec = _read_task_spec(files, session)

    probe = probe_video(files, VIDEO_FILE)
    check_frame_rows(files, FRAMES_FILE, len(frames), VIDEO_FILE, probe)
    media = (
        probe.media_ref(CAMERA_ROLE, VIDEO_FILE, "video/mp4", frames_stream=CAMERA_FRAMES_STREAM),
    )
    kept: list[FileRef] = []
    if calibration is not None:
        kept.append(FileRef("camera_calibration", CALIBRATION_FILE, "application/json"))
    if task_spec is not None:
        kept.append(FileRef("task_specification", task_spec.path, "application/json"))
    known = {MARKER_FILE, SESSION_FILE, "slots.jsonl", SEGMENTS_FILE, VIDEO_FILE, FRAMES_FILE}
    known.update(f.path for f in kept)
    extra = tuple(p for p in files.list_files() if p not in known)

    info = CaptureInfo(
        capture_id=files.capture,
        source_kind="webxr",
        source_version=f"{SCHEMA}/{SCHEMA_VERSION}",
        start_ns=start_ns,
        source_capture_id=session.episode_id,
        world_frame=session.reference_space,
        handedness="right",
        up_axis="Y",
        recorder_rate_hz=session.recorder_rate_hz,
        cameras=() if calibration is None else (calibration,),
        characteristics=session.characteristics,
        study=session.study,
        task_specification=task_spec,
    )
    annotations = Annotations(
        instructions=session.instructions, language=session.task, segments=segments
    )
    log.info("webxr %s: %d slots, %d segments", files.capture, len(slots.slot), len(segments))
    return Trajectory(
        info=info,
        streams=tuple(streams),
        annotations=annotations,
        media=media,
        files=tuple(kept),
        extra_files=extra,
    )


def _read_session(files: CaptureFiles) -> _Session:
    rel = SESSION_FILE
    doc = files.read_schema_document(rel, SCHEMA, SCHEMA_VERSION)
    rate = require_number(files, rel, doc, "recorder_rate_hz", MIN_RATE_HZ, MAX_RATE_HZ)
    camera = require(files, rel, doc, "camera", dict)
    instructions = require(files, rel, doc, "instructions", list)
    if not all(isinstance(s, str) for s in instructions):
        raise files.error(rel, "expected a list of strings", field="instructions")
    spec = doc.get("task_specification")
    if spec is not None:
        require(files, rel, doc, "task_specification", dict)
        spec_path = require(files, rel, spec, "path", str)
        spec_version = require(files, rel, spec, "version", str)
    return _Session(
        episode_id=require(files, rel, doc, "episode_id", str),
        recorder_rate_hz=rate,
        reference_space=require(files, rel, doc, "reference_space", str),
        time_origin_epoch_ms=float(
            check_time(
                files,
                rel,
                "time_origin_epoch_ms",
                require(files, rel, doc, "time_origin_epoch_ms", (int, float)),
                EPOCH_MS,
            )
        ),
        camera_id=require(files, rel, camera, "id", str),
        characteristics=_characteristics(files, doc.get("capture_characteristics") or {}),
        study=_study(files, doc.get("study")),
        task=require(files, rel, doc, "task", str),
        instructions=tuple(instructions),
        task_spec_path=spec_path if spec is not None else None,
        task_spec_version=spec_version if spec is not None else None,
    )


def _characteristics(files: CaptureFiles, doc: Any) -> tuple[Characteristic, ...]:
    if not isinstance(doc, dict):
        raise files.error(SESSION_FILE, "expected an object", field="capture_characteristics")
    out = []
    for name, entry in sorted(doc.items()):
        field = f"capture_characteristics.{name}"
        status = entry.get("status") if isinstance(entry, dict) else None
        if status not in AVAILABILITY_STATUSES:
            raise files.error(
                SESSION_FILE, f"status must be one of {AVAILABILITY_STATUSES}", field=field
            )
        value = entry.get("value") if status == "known" else None
        if isinstance(value, dict | list):
            value = _json_text(files, SESSION_FILE, field, value)
        elif number_problem(value) is not None:
            raise files.error(SESSION_FILE, str(number_problem(value)), field=field)
        out.append(Characteristic(name=name, status=status, value=value))
    return tuple(out)


def _json_text(
    files: CaptureFiles, rel: str, field: str, value: Any, row: int | None = None
) -> str:
    """``value`` as compact JSON text; NaN, infinities and huge integers are refused."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:  # NaN/inf (allow_nan) or an int over the digit limit
        message = f"value cannot be kept as JSON: {exc}"
        raise files.error(rel, message, field=field, row=row) from None


def _study(files: CaptureFiles, doc: Any) -> StudyInfo | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise files.error(SESSION_FILE, "expected an object", field="study")
    values: dict[str, Any] = {}
    for key in _STUDY_STRINGS:
        if doc.get(key) is not None:
            values[key] = require(files, SESSION_FILE, doc, key, str)
    if doc.get("raw_audio_retained") is not None:
        values["raw_audio_retained"] = require(files, SESSION_FILE, doc, "raw_audio_retained", bool)
    return StudyInfo(**values)


def _read_task_spec(files: CaptureFiles, session: _Session) -> TaskSpecification | None:
    if session.task_spec_path is None or session.task_spec_version is None:
        return None
    rel = session.task_spec_path
    data = files.read_bytes(rel)
    doc = files.read_json(rel)
    title = doc.get("title") if isinstance(doc, dict) else None
    return TaskSpecification(
        version=session.task_spec_version,
        sha256=hashlib.sha256(data).hexdigest(),
        path=rel,
        title=title if isinstance(title, str) else "",
    )


def _read_calibration(
    files: CaptureFiles, camera_id: str
) -> tuple[CameraCalibration | None, np.ndarray | None]:
    """The outward camera's calibration and its (4, 4) camera_from_head, if the file exists."""
    rel = CALIBRATION_FILE
    if not files.exists(rel):
        return None, None
    doc = files.read_json(rel)
    if not isinstance(doc, dict):
        raise files.error(rel, "expected a JSON object")
    number = (int, float)
    distortion = number_list(files, rel, doc, "distortion")
    matrix = number_list(files, rel, doc, "camera_from_head", 16)
    optional: dict[str, Any] = {}
    for key, kind in (("rms_error_px", number), ("sample_count", int), ("captured_at", str)):
        if doc.get(key) is not None:
            optional[key] = require(files, rel, doc, key, kind)
    if "rms_error_px" in optional:
        optional["rms_error_px"] = float(optional["rms_error_px"])
    try:
        calibration = CameraCalibration(
            camera=camera_id,
            model=require(files, rel, doc, "model", str),
            width=require(files, rel, doc, "width", int),
            height=require(files, rel, doc, "height", int),
            fx=float(require(files, rel, doc, "fx", number)),
            fy=float(require(files, rel, doc, "fy", number)),
            cx=float(require(files, rel, doc, "cx", number)),
            cy=float(require(files, rel, doc, "cy", number)),
            distortion=tuple(distortion),
            camera_from_device=tuple(matrix),
            **optional,
        )
    except ValueError as exc:
        raise files.error(rel, str(exc)) from None
    return calibration, np.array(matrix, dtype=np.float64).reshape(4, 4)


def _slot_streams(
    slots: SlotArrays, slot_ns: np.ndarray, start_ns: int, rate_hz: float
) -> list[Stream]:
    source: dict[str, AttrValue] = {"source_file": "slots.jsonl", "nominal_rate_hz": rate_hz}
    streams = [
        make_stream(
            "recorder_slots",
            "recorder_slots",
            slot_ns,
            start_ns,
            {"slot_index": slots.slot, "gap": slots.gap, "source_time": slots.t_ms / 1000.0},
            {"rate_hz": rate_hz, **source},
        ),
        make_stream(
            "head",
            "pose",
            slot_ns,
            start_ns,
            {
                "position": slots.head_position,
                "rotation": slots.head_rotation,
                "valid": slots.head_valid,
            },
            {"frame": "world", **source},
        ),
    ]
    for side in SIDES:
        hand = slots.hands[side]
        streams.append(
            make_stream(
                f"hand_{side}",
                "hand_joints",
                slot_ns,
                start_ns,
                {
                    "position": hand.position,
                    "rotation": hand.rotation,
                    "radius": hand.radius,
                    "joint_valid": hand.joint_valid,
                    "hand_valid": hand.hand_valid,
                },
                {"joint_set": JOINT_SET, "hand": side, "frame": "world", **source},
            )
        )
    streams.append(
        make_stream(
            "pinch",
            "pinch",
            slot_ns,
            start_ns,
            {"left": slots.pinch[:, 0].copy(), "right": slots.pinch[:, 1].copy()},
            source,
        )
    )
    return streams


def _camera_frames(
    files: CaptureFiles,
    session: _Session,
    slots: SlotArrays,
    start_ns: int,
    calibration: CameraCalibration | None,
    camera_from_head: np.ndarray | None,
) -> Stream:
    """One row per video frame; world_to_camera = camera_from_head @ inverse(head pose)."""
    table = files.read_csv(
        FRAMES_FILE,
        ["frame_index", "t_ms", "slot"],
        {"frame_index": pa.int64(), "t_ms": pa.float64(), "slot": pa.int64()},
    )
    frame_index = table.column("frame_index").to_numpy().astype(np.int64)
    frame_slot = table.column("slot").to_numpy().astype(np.int64)
    t_ms = table.column("t_ms").to_numpy().astype(np.float64)
    check_count(files, FRAMES_FILE, "frame_index", frame_index, 0, MAX_FRAME_INDEX, "frame")
    check_count(files, FRAMES_FILE, "slot", frame_slot, 0, MAX_SLOT, "slot")
    check_times(files, FRAMES_FILE, "t_ms", t_ms, SESSION_MS)
    n = len(frame_index)
    fields: dict[str, np.ndarray] = {"frame_index": frame_index}
    if calibration is not None and camera_from_head is not None:
        c = calibration
        fields["intrinsics"] = np.tile(np.array([c.fx, c.fy, c.cx, c.cy]), (n, 1))
        row = _slot_rows(slots.slot, frame_slot)
        found = row >= 0
        head_from_world = invert_pose(
            slots.head_position[np.where(found, row, 0)],
            slots.head_rotation[np.where(found, row, 0)],
        )
        world_to_camera = camera_from_head @ head_from_world
        usable = found & slots.head_valid[np.where(found, row, 0)]
        world_to_camera[~usable] = np.nan
        fields["world_to_camera"] = world_to_camera
    return make_stream(
        CAMERA_FRAMES_STREAM,
        "media_frames",
        slot_timestamps_ns(session.time_origin_epoch_ms, t_ms),
        start_ns,
        fields,
        {"media": CAMERA_ROLE, "source_file": FRAMES_FILE, "camera_axes": "opencv"},
    )


def _slot_rows(journal_slots: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """(M,) int64 journal row of each wanted slot number (first occurrence), -1 if absent."""
    order = np.argsort(journal_slots, kind="stable")
    ordered = journal_slots[order]
    pos = np.searchsorted(ordered, wanted, side="left")
    clipped = np.minimum(pos, len(ordered) - 1)
    hit = (pos < len(ordered)) & (ordered[clipped] == wanted)
    return np.where(hit, order[clipped], -1)


def _read_segments(
    files: CaptureFiles, slots: SlotArrays, slot_ns: np.ndarray, rate_hz: float
) -> tuple[Segment, ...]:
    """Segments with times from the slots: start = first slot >= start_slot, end likewise.

    An ``end_slot`` past the journal ends one recorder period after the last slot.
    """
    rel = SEGMENTS_FILE
    doc = files.read_json(rel)
    entries = require(files, rel, doc, "segments", list)
    order = np.argsort(slots.slot, kind="stable")
    ordered = slots.slot[order]
    last_ns = int(slot_ns[order[-1]]) + round(1e9 / rate_hz)
    out = []
    for row, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            raise files.error(rel, "expected a segment object", field="segments", row=row)
        values: dict[str, Any] = {}
        for key, kind in (
            ("segment_id", str),
            ("task", str),
            ("cycle", int),
            ("repetition", int),
            ("take", int),
            ("outcome", str),
            ("start_slot", int),
            ("end_slot", int),
        ):
            if key not in entry:
                raise files.error(rel, "missing field", field=key, row=row)
            value = entry[key]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise files.error(
                    rel, f"expected {kind.__name__}, got {type(value).__name__}", field=key, row=row
                )
            if isinstance(value, int) and not 0 <= value <= MAX_SLOT:
                message = f"{value} is outside 0 to {MAX_SLOT}"
                raise files.error(rel, message, field=key, row=row)
            values[key] = value
        if values["outcome"] not in SEGMENT_OUTCOMES:
            raise files.error(
                rel, f"outcome must be one of {SEGMENT_OUTCOMES}", field="outcome", row=row
            )
        start_slot, end_slot = values["start_slot"], values["end_slot"]
        if end_slot < start_slot:
            raise files.error(rel, "end_slot is before start_slot", field="end_slot", row=row)
        pos = np.searchsorted(ordered, [start_slot, end_slot], side="left")
        if pos[0] >= len(ordered):
            raise files.error(rel, "start_slot is past the journal", field="start_slot", row=row)
        start_ns = int(slot_ns[order[pos[0]]])
        end_ns = int(slot_ns[order[pos[1]]]) if pos[1] < len(ordered) else last_ns
        annotations = entry.get("annotations") or {}
        if not isinstance(annotations, dict):
            raise files.error(rel, "expected an object", field="annotations", row=row)
        out.append(
            Segment(
                start_ns=start_ns,
                end_ns=max(end_ns, start_ns),
                annotations={
                    str(k): v
                    if isinstance(v, str)
                    else _json_text(files, rel, f"annotations.{k}", v, row)
                    for k, v in annotations.items()
                },
                **values,
            )
        )
    return tuple(out)
