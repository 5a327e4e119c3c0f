"""``ceres/episode-metadata.json`` (schema ``ceres-episode-export-metadata``, version 3).

Provenance of one exported episode: identifiers, the selected camera, capture
characteristics with explicit availability (``known`` with a value, ``unknown`` when the
platform did not say, ``unavailable`` when the capability was off), optional study
metadata, camera calibration, the retained task segments and the task specification.
Nothing here is a raw device identifier or a browser user-agent string: the canonical
model never carries them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ego_assets.formats.ceres_episode import EpisodeRows
from ego_assets.trajectory.model import CameraCalibration, MediaRef, StudyInfo, Trajectory

METADATA_SCHEMA = "ceres-episode-export-metadata"
METADATA_VERSION = 3
TASK_SPEC_DIR = "ceres/task-specifications"

# Readable demonstrator designators: "<family>,,<animal>,<material>", the family a word
# pair picked by the last two bytes of the study headset id.
_FAMILY_FIRST = (
    "amber", "birch", "cedar", "dune", "ember", "fern", "granite", "harbor",
    "indigo", "juniper", "kelp", "lunar", "maple", "north", "opal", "prairie",
)  # fmt: skip
_FAMILY_SECOND = (
    "brook", "canyon", "delta", "field", "glade", "hollow", "isle", "meadow",
    "ridge", "shore", "spring", "summit", "terrace", "valley", "willow", "grove",
)  # fmt: skip
_ANIMALS = (
    "badger", "crane", "dolphin", "falcon", "gecko", "heron", "ibex", "jaguar",
    "koala", "lynx", "marten", "narwhal", "otter", "puffin", "quail", "raven",
)  # fmt: skip
_MATERIALS = (
    "basalt", "bronze", "clay", "copper", "flint", "glass", "graphite", "iron",
    "jade", "linen", "marble", "obsidian", "pewter", "quartz", "slate", "wool",
)  # fmt: skip


def demonstrator_designator(headset_id: str | None, seed: str) -> str:
    """A readable stand-in for a blank demonstrator id: ``family,,animal,material``.

    The family word pair comes from the final two bytes of ``headset_id`` (UTF-8) when
    one is given; animal and material (and the family without a headset id) are drawn
    from ``seed`` (the episode id), so re-exporting the same episode writes the same
    designator.
    """
    drawn = hashlib.sha256(seed.encode("utf-8")).digest()
    pair = headset_id.encode("utf-8")[-2:] if headset_id else b""
    if len(pair) < 2:
        pair = drawn[:2]
    family = f"{_FAMILY_FIRST[pair[0] % 16]}-{_FAMILY_SECOND[pair[1] % 16]}"
    return f"{family},,{_ANIMALS[drawn[2] % 16]},{_MATERIALS[drawn[3] % 16]}"


def _study(study: StudyInfo | None, episode_id: str) -> dict[str, Any] | None:
    if study is None:
        return None
    blank = not (study.demonstrator_id or "").strip()
    return {
        "headset_id": study.headset_id,
        "demonstrator_id": (
            demonstrator_designator(study.headset_id, episode_id)
            if blank
            else study.demonstrator_id
        ),
        "demonstrator_id_generated": blank,
        "project_id": study.project_id,
        "consent_date": study.consent_date,
        "consent_document_id": study.consent_document_id,
        "raw_audio_retained": study.raw_audio_retained,
    }


def _calibration_of(trajectory: Trajectory, camera: MediaRef | None) -> CameraCalibration | None:
    cameras = trajectory.info.cameras
    if camera is None or not cameras:
        return None
    for calibration in cameras:
        if camera.role in (calibration.camera, f"camera_{calibration.camera}"):
            return calibration
    return cameras[0] if len(cameras) == 1 else None


def _calibration(calibration: CameraCalibration | None) -> dict[str, Any] | None:
    if calibration is None:
        return None
    return {
        "camera": calibration.camera,
        "model": calibration.model,
        "intrinsics": {
            "width": calibration.width,
            "height": calibration.height,
            "fx": calibration.fx,
            "fy": calibration.fy,
            "cx": calibration.cx,
            "cy": calibration.cy,
        },
        "distortion": list(calibration.distortion),
        "rms_error_px": calibration.rms_error_px,
        "sample_count": calibration.sample_count,
        "captured_at": calibration.captured_at,
    }


def _availability(value: Any, available: bool = True) -> dict[str, Any]:
    if not available:
        return {"status": "unavailable"}
    if value is None or value == "":
        return {"status": "unknown"}
    return {"status": "known", "value": value}


def _characteristics(trajectory: Trajectory) -> dict[str, dict[str, Any]]:
    info = trajectory.info
    out = {"device": _availability(info.device or None)}
    for item in info.characteristics:
        out[item.name] = (
            {"status": item.status, "value": item.value}
            if item.status == "known"
            else {"status": item.status}
        )
    return out


def task_spec_sidecar(trajectory: Trajectory, raw_dir: Path) -> tuple[str, bytes] | None:
    """(SHA-256, bytes) of the attached task specification, or None.

    Raises:
        ValueError: the raw file's digest differs from the one the trajectory recorded.
    """
    spec = trajectory.info.task_specification
    if spec is None:
        return None
    data = (Path(raw_dir) / spec.path).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise ValueError(
            f"capture {trajectory.info.capture_id!r}: task specification {spec.path!r} has "
            f"SHA-256 {digest}, the trajectory recorded {spec.sha256}"
        )
    return digest, data


def episode_metadata(
    trajectory: Trajectory, rows: EpisodeRows, episode_index: int, video: str, has_spec: bool
) -> dict[str, Any]:
    """The sidecar document (see the module docstring)."""
    info = trajectory.info
    episode_id = info.source_capture_id or info.capture_id
    camera = rows.camera
    spec = info.task_specification
    return {
        "schema": METADATA_SCHEMA,
        "version": METADATA_VERSION,
        "episode": {
            "id": episode_id,
            "index": episode_index,
            "capture_key": info.capture_id,
            "source_kind": info.source_kind,
            "frames": len(rows),
            "fps": rows.fps,
        },
        "camera": {
            "selected": camera.role if camera else None,
            "width": camera.width if camera else None,
            "height": camera.height if camera else None,
            "fps": camera.fps if camera else None,
            "codec": camera.codec if camera else None,
            "video": video,
            "audio": "not exported",
        },
        "capture": {
            "characteristics": _characteristics(trajectory),
            "recorder_rate_hz": _availability(
                info.recorder_rate_hz, available=info.recorder_rate_hz is not None
            ),
            "world_frame": info.world_frame,
            "up_axis": info.up_axis,
            "handedness": info.handedness,
            "length_unit": info.length_unit,
            "quaternion_order": info.quaternion_order,
        },
        "study": _study(info.study, episode_id),
        "calibration": _calibration(_calibration_of(trajectory, camera)),
        "segments": [
            {
                "segment_id": r.segment.segment_id,
                "task": r.segment.task,
                "cycle": r.segment.cycle,
                "repetition": r.segment.repetition,
                "take": r.segment.take,
                "annotations": dict(r.segment.annotations),
                "outcome": r.segment.outcome,
                "frame_count": r.frames,
                "gap_count": r.gaps,
                "source_start_s": r.source_start_s,
                "source_end_s": r.source_end_s,
                "frame_start": r.row_start,
                "frame_end": r.row_end,
            }
            for r in rows.segments
        ],
        "task_specification": (
            {
                "version": spec.version,
                "sha256": spec.sha256,
                "path": f"{TASK_SPEC_DIR}/{spec.sha256}.json",
            }
            if spec is not None and has_spec
            else None
        ),
        "state_sources": rows.sources,
    }
