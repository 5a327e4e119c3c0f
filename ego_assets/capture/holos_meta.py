"""The non-tabular parts of a ``holos`` package: annotations, calibration, media, files.

Used by `ego_assets.capture.holos`. JSON documents are checked field by field; an error
names the file, the key and, for list items, the 1-based item as the row. Media files
are probed for container metadata only (`probe_video` and the ``wave`` module);
nothing is decoded.
"""

from __future__ import annotations

import struct
import wave
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ego_assets.capture.files import CaptureFiles, number_list, require
from ego_assets.capture.media import check_frame_rows, probe_video
from ego_assets.capture.ranges import CAPTURE_S, DEVICE_S, ClockRange, check_time
from ego_assets.errors import CaptureFormatError
from ego_assets.trajectory.model import (
    Annotations,
    CameraCalibration,
    MediaRef,
    ProcedureStep,
    TranscriptSegment,
    TranscriptToken,
    VlmOutput,
)
from ego_assets.trajectory.streams import Stream

STEREO_JSON = "calibration/stereo.json"
TRANSCRIPT_JSON = "transcript.json"
STEPS_JSON = "events/procedure_steps.json"
VLM_JSON = "vlm/outputs.json"
AUDIO_WAV = "media/audio.wav"
IPHONE_CAMERA = "camera_back"

# relative path -> (FileRef role, MIME type), kept verbatim
FILE_ROLES: Mapping[str, tuple[str, str]] = {
    "metadata.json": ("session_metadata", "application/json"),
    STEREO_JSON: ("stereo_calibration", "application/json"),
    "thumbnail.jpg": ("thumbnail", "image/jpeg"),
    STEPS_JSON: ("procedure_steps", "application/json"),
    TRANSCRIPT_JSON: ("transcript", "application/json"),
    VLM_JSON: ("vlm", "application/json"),
}

_NUMBER = (int, float)


def optional_text(files: CaptureFiles, rel: str, doc: Mapping[str, Any], key: str) -> str:
    """``doc[key]`` as a string, ``""`` when absent or null; any other type is an error."""
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise files.error(rel, f"expected str, got {type(value).__name__}", field=key)
    return value


def _item(
    files: CaptureFiles, rel: str, doc: Any, key: str, kind: type | tuple[type, ...], row: int
) -> Any:
    """``doc[key]`` of the ``row``-th (1-based) item of a JSON list, type-checked."""
    try:
        return require(files, rel, doc, key, kind)
    except CaptureFormatError as exc:
        raise files.error(rel, exc.reason, field=key, row=row) from None


def _time(files: CaptureFiles, rel: str, doc: Any, key: str, row: int, clock: ClockRange) -> float:
    """``doc[key]`` of the ``row``-th item, a plausible time of ``clock``, as a float."""
    value = _item(files, rel, doc, key, _NUMBER, row)
    return float(check_time(files, rel, key, value, clock, row=row))


def _list(files: CaptureFiles, rel: str, doc: Any, key: str | None) -> list[Any]:
    value = doc if key is None else require(files, rel, doc, key, list)
    if not isinstance(value, list):
        raise files.error(rel, f"expected a JSON list, got {type(value).__name__}", field=key)
    return value


def _steps(files: CaptureFiles) -> tuple[ProcedureStep, ...]:
    doc = files.read_json(STEPS_JSON)
    out = []
    for i, step in enumerate(_list(files, STEPS_JSON, doc, "steps"), start=1):
        out.append(
            ProcedureStep(
                index=_item(files, STEPS_JSON, step, "index", int, i),
                step_id=_item(files, STEPS_JSON, step, "step_id", str, i),
                title=_item(files, STEPS_JSON, step, "title", str, i),
                t_start=_time(files, STEPS_JSON, step, "t_start", i, CAPTURE_S),
                t_end=_time(files, STEPS_JSON, step, "t_end", i, CAPTURE_S),
            )
        )
    return tuple(out)


def _transcript(
    files: CaptureFiles,
) -> tuple[tuple[TranscriptSegment, ...], tuple[TranscriptToken, ...]]:
    rel = TRANSCRIPT_JSON
    doc = files.read_json(rel)
    segments, tokens = [], []
    for i, seg in enumerate(_list(files, rel, doc, "segments")):
        row = i + 1
        segments.append(
            TranscriptSegment(
                start_s=_time(files, rel, seg, "start_s", row, CAPTURE_S),
                end_s=_time(files, rel, seg, "end_s", row, CAPTURE_S),
                text=_item(files, rel, seg, "text", str, row),
                is_final=_item(files, rel, seg, "is_final", bool, row),
            )
        )
        for tok in _list(files, rel, seg.get("tokens", []), None):
            tokens.append(
                TranscriptToken(
                    segment=i,
                    start_s=_time(files, rel, tok, "start_s", row, CAPTURE_S),
                    end_s=_time(files, rel, tok, "end_s", row, CAPTURE_S),
                    text=_item(files, rel, tok, "text", str, row),
                )
            )
    return tuple(segments), tuple(tokens)


def _vlm(files: CaptureFiles, seconds: Callable[[float], float]) -> tuple[VlmOutput, ...]:
    out = []
    for i, rec in enumerate(_list(files, VLM_JSON, files.read_json(VLM_JSON), None), start=1):
        t_mono = _time(files, VLM_JSON, rec, "t_mono", i, DEVICE_S)
        out.append(
            VlmOutput(
                t_mono=t_mono,
                t_wall=_item(files, VLM_JSON, rec, "t_wall", str, i),
                time=seconds(t_mono),
                prompt=_item(files, VLM_JSON, rec, "prompt", str, i),
                output=_item(files, VLM_JSON, rec, "output", str, i),
            )
        )
    return tuple(out)


def session_annotations(
    files: CaptureFiles,
    meta: Mapping[str, Any],
    all_files: Sequence[str],
    seconds: Callable[[float], float],
) -> Annotations:
    """Instructions, task language, procedure steps, transcript and VLM outputs.

    Args:
        files: the capture folder.
        meta: the parsed ``metadata.json``.
        all_files: every file of the capture (relative paths).
        seconds: device monotonic seconds -> seconds since capture start.
    """
    instructions = meta.get("instructions") or []
    if not isinstance(instructions, list) or not all(isinstance(s, str) for s in instructions):
        raise files.error("metadata.json", "expected a list of strings", field="instructions")
    task = optional_text(files, "metadata.json", meta, "task")
    segments, tokens = _transcript(files) if TRANSCRIPT_JSON in all_files else ((), ())
    return Annotations(
        instructions=tuple(instructions),
        language=task or (instructions[0] if instructions else ""),
        procedure_steps=_steps(files) if STEPS_JSON in all_files else (),
        transcript=segments,
        transcript_tokens=tokens,
        vlm=_vlm(files, seconds) if VLM_JSON in all_files else (),
    )


def stereo_cameras(files: CaptureFiles, all_files: Sequence[str]) -> tuple[CameraCalibration, ...]:
    """Vision Pro camera calibrations from ``calibration/stereo.json`` (none if absent)."""
    if STEREO_JSON not in all_files:
        return ()
    rel = STEREO_JSON
    cameras = require(files, rel, files.read_json(rel), "cameras", dict)
    out = []
    for row, (name, cam) in enumerate(cameras.items(), start=1):
        try:
            distortion = number_list(files, rel, cam, "distortion")
            cfd = number_list(files, rel, cam, "camera_from_device", 16)
        except CaptureFormatError as exc:
            raise files.error(rel, exc.reason, field=exc.field, row=row) from None
        try:
            out.append(
                CameraCalibration(
                    camera=name,
                    model=_item(files, rel, cam, "model", str, row),
                    width=_item(files, rel, cam, "width", int, row),
                    height=_item(files, rel, cam, "height", int, row),
                    fx=float(_item(files, rel, cam, "fx", _NUMBER, row)),
                    fy=float(_item(files, rel, cam, "fy", _NUMBER, row)),
                    cx=float(_item(files, rel, cam, "cx", _NUMBER, row)),
                    cy=float(_item(files, rel, cam, "cy", _NUMBER, row)),
                    distortion=tuple(distortion),
                    camera_from_device=tuple(cfd),
                )
            )
        except CaptureFormatError:
            raise
        except ValueError as exc:
            raise files.error(rel, str(exc), field=name) from None
    return tuple(out)


def iphone_cameras(
    files: CaptureFiles, media: Sequence[MediaRef], first_intrinsics: Mapping[str, np.ndarray]
) -> tuple[CameraCalibration, ...]:
    """iPhone back camera: first frame's intrinsics (frames CSV) + the video's size."""
    video = next((m for m in media if m.role == IPHONE_CAMERA), None)
    if video is None or IPHONE_CAMERA not in first_intrinsics:
        return ()
    fx, fy, cx, cy = (float(v) for v in first_intrinsics[IPHONE_CAMERA])
    try:
        camera = CameraCalibration(
            IPHONE_CAMERA, "pinhole", video.width, video.height, fx, fy, cx, cy
        )
    except ValueError as exc:
        rel = f"media/{IPHONE_CAMERA}_frames.csv"
        raise files.error(rel, str(exc), field="fx", row=1) from None
    return (camera,)


def is_video(rel: str) -> bool:
    """True for ``media/<camera>.mov``."""
    return rel.startswith("media/") and rel.endswith(".mov") and rel.count("/") == 1


def _probe_wav(files: CaptureFiles, rel: str) -> dict[str, Any]:
    """Rate, channels and duration from the WAV header; the data size must fit the file."""
    path = files.path(rel)
    try:
        with wave.open(str(path), "rb") as wav:
            rate, channels = wav.getframerate(), wav.getnchannels()
            frames, width = wav.getnframes(), wav.getsampwidth()
    except (wave.Error, EOFError, RuntimeError, struct.error, ValueError, OverflowError) as exc:
        detail = str(exc) or "header is truncated or its chunk sizes do not fit the file"
        raise files.error(rel, f"corrupt WAV header: {detail}") from None
    if rate <= 0:
        raise files.error(rel, f"corrupt WAV header: sample rate {rate}")
    data_bytes = frames * channels * width
    if data_bytes > path.stat().st_size:
        raise files.error(
            rel,
            f"corrupt WAV header: data chunk declares {data_bytes} bytes, "
            f"the file has {path.stat().st_size}",
        )
    return {"sample_rate_hz": rate, "channels": channels, "duration_s": frames / rate}


def media_refs(
    files: CaptureFiles, all_files: Sequence[str], frame_streams: Mapping[str, Stream]
) -> tuple[MediaRef, ...]:
    """Every ``media/*.mov`` (with its ``<camera>_frames`` stream) and ``media/audio.wav``."""
    out = []
    for rel in all_files:
        if not is_video(rel):
            continue
        camera = rel[len("media/") : -len(".mov")]
        frames = frame_streams.get(camera)
        probe = probe_video(files, rel)
        if frames is not None:
            check_frame_rows(files, str(frames.attrs["source_file"]), len(frames), rel, probe)
        out.append(
            probe.media_ref(
                camera,
                rel,
                "video/quicktime",
                frames_stream=frames.name if frames is not None else None,
                start_ns=int(frames.timestamp_ns[0]) if frames is not None else None,
            )
        )
    if AUDIO_WAV in all_files:
        out.append(
            MediaRef(
                role="audio",
                path=AUDIO_WAV,
                mime="audio/wav",
                kind="audio",
                **_probe_wav(files, AUDIO_WAV),
            )
        )
    return tuple(out)
