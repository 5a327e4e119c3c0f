"""Reader for ``mano_sequence`` captures: a TACO-style MANO sequence with its head video.

A capture holds the sequence's files byte for byte under their TACO names:

    left_hand.pkl, right_hand.pkl              per frame: hand_pose (3 + P), hand_trans (3, m)
    left_hand_shape.pkl, right_hand_shape.pkl  betas (10)
    egocentric_intrinsic.txt                   3x3 camera matrix, pixels
    egocentric_frame_extrinsic.npy             (T, 4, 4) world -> camera (OpenCV axes)
    video.mp4                                  the egocentric (head) camera
    mano_sequence.json                         optional: {"schema": "mano-sequence",
                                               "schema_version": 1, "pose_space":
                                               "axis_angle" | "pca", "n_pca": P,
                                               "flat_hand_mean": bool}

Pickles are read with `ego_assets.capture.safe_pickle` (plain data only, never run). A
hand pickle is a dict of frame id -> ``{"hand_pose", "hand_trans"}`` (frames in numeric
id order; ``None`` = no hand that frame), a list of such dicts, or one dict of (T, 3 + P)
and (T, 3) arrays. Without ``mano_sequence.json`` the pose is TACO's: 48 axis-angle
values (global orient + 15 joints), ``flat_hand_mean`` False.

The MANO parameters land as the mano-video reader keeps them (``mano_left``,
``mano_right``: ``transl`` m world, ``global_orient`` = pose[:3] rad axis-angle,
``hand_pose`` = pose[3:], ``betas`` per frame, ``valid_detected`` = the frame has a
finite hand; attrs ``mano_pose_space``, ``flat_hand_mean``), so EgoSmith's ``mano.npy``
and lowdim come out the same way; no MANO model is shipped, so there are no joints.
Time: the source has no timestamps; frame ``i`` is at ``i / fps`` (the video's rate) on a
``device`` clock from 0, declared as derived.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ego_assets.capture.files import MARKER_FILE, CaptureFiles, require
from ego_assets.capture.head_video import head_video, imported_from
from ego_assets.capture.provenance import PROVENANCE_FILE
from ego_assets.capture.ranges import require_number
from ego_assets.capture.safe_pickle import load_data_pickle
from ego_assets.trajectory.model import (
    Annotations,
    CaptureInfo,
    FileRef,
    Trajectory,
)
from ego_assets.trajectory.streams import Stream, make_stream

HANDS = ("left", "right")
HAND_FILE = "{side}_hand.pkl"
SHAPE_FILE = "{side}_hand_shape.pkl"
INTRINSIC_FILE = "egocentric_intrinsic.txt"
EXTRINSIC_FILE = "egocentric_frame_extrinsic.npy"
VIDEO_FILE = "video.mp4"
DECLARATION_FILE = "mano_sequence.json"
SCHEMA = "mano-sequence"
N_BETAS = 10
MAX_PCA = 45
MAX_FRAMES = 30 * 3600 * 4


def read_mano_sequence(files: CaptureFiles, marker: Mapping[str, Any]) -> Trajectory:
    """Read a ``mano_sequence`` capture folder into the canonical `Trajectory`.

    Raises:
        CaptureFormatError: malformed input, naming capture, file, field (pickle key,
            global or array) and row (1-based frame).
    """
    pose_space, n_pose, flat_hand_mean = _declaration(files)
    extrinsic = _extrinsic(files)
    t = len(extrinsic)
    intrinsic = _intrinsic(files)
    video = head_video(files, VIDEO_FILE, t, "sequence's frames")
    ts = video.timestamp_ns
    streams: list[Stream] = []
    for side in HANDS:
        pose, trans = _hand_frames(files, HAND_FILE.format(side=side), t, 3 + n_pose)
        betas = _betas(files, SHAPE_FILE.format(side=side))
        valid = np.isfinite(pose).all(axis=1) & np.isfinite(trans).all(axis=1)
        fields = {
            "transl": trans,
            "global_orient": pose[:, :3].copy(),
            "hand_pose": pose[:, 3:].copy(),
            "betas": np.tile(betas, (t, 1)),
            "valid_detected": valid,
        }
        attrs = {
            **video.attrs,
            "hand": side,
            "frame": "world",
            "mano_pose_space": pose_space,
            "flat_hand_mean": flat_hand_mean,
            "source_file": HAND_FILE.format(side=side),
        }
        streams.append(make_stream(f"mano_{side}", "mano", ts, 0, fields, attrs))
    streams.append(video.frames_stream(intrinsic, extrinsic, "opencv", EXTRINSIC_FILE))
    provenance, original, refs = imported_from(files)
    parts = original.split("/")
    info = CaptureInfo(
        capture_id=files.capture,
        source_kind="mano-sequence",
        source_version=f"{SCHEMA}/1",
        start_ns=0,
        clock="device",
        source_capture_id=original.rsplit("/", 1)[0],
        title=parts[-3] if len(parts) >= 3 else "",
        world_frame="dataset_world",
        dataset_name=str(provenance["dataset"]) if provenance else "",
        cameras=video.cameras(intrinsic),
    )
    if files.exists(DECLARATION_FILE):
        refs.append(FileRef("mano_declaration", DECLARATION_FILE, "application/json"))
    known = {MARKER_FILE, PROVENANCE_FILE, DECLARATION_FILE, INTRINSIC_FILE, EXTRINSIC_FILE}
    known |= {VIDEO_FILE, *(f.format(side=s) for s in HANDS for f in (HAND_FILE, SHAPE_FILE))}
    return Trajectory(
        info=info,
        streams=tuple(streams),
        annotations=Annotations(),
        media=(video.media(),),
        files=tuple(refs),
        extra_files=tuple(p for p in files.list_files() if p not in known),
        quirks=tuple(video.quirks()),
    )


def _declaration(files: CaptureFiles) -> tuple[str, int, bool]:
    """(pose space, pose coefficients after the global orient, flat_hand_mean)."""
    if not files.exists(DECLARATION_FILE):
        return "axis_angle", 45, False
    rel = DECLARATION_FILE
    doc = files.read_schema_document(rel, SCHEMA, 1)
    space = require(files, rel, doc, "pose_space", str)
    flat = bool(require(files, rel, doc, "flat_hand_mean", bool))
    if space == "axis_angle":
        return space, 45, flat
    if space != "pca":
        raise files.error(rel, "must be 'axis_angle' or 'pca'", field="pose_space")
    return space, int(require_number(files, rel, doc, "n_pca", 1, MAX_PCA, kind=int)), flat


def _extrinsic(files: CaptureFiles) -> np.ndarray:
    """(T, 4, 4) float64 world -> camera, checked from the header before reading."""
    rel = EXTRINSIC_FILE
    try:
        arr = np.load(files.path(rel), allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError, EOFError) as exc:
        raise files.error(rel, f"not a readable .npy array: {exc}") from None
    if not isinstance(arr, np.ndarray) or arr.dtype.kind != "f":
        raise files.error(rel, f"dtype {getattr(arr, 'dtype', '?')} is not floating-point")
    if arr.ndim != 3 or arr.shape[1:] != (4, 4) or not 1 <= arr.shape[0] <= MAX_FRAMES:
        raise files.error(rel, f"shape {arr.shape}, expected (T, 4, 4)")
    return np.array(arr, dtype=np.float64)


def _intrinsic(files: CaptureFiles) -> np.ndarray:
    rel = INTRINSIC_FILE
    text = files.read_bytes(rel).decode("utf-8", errors="replace")
    try:
        k = np.array(
            [
                [float(v) for v in line.replace(",", " ").split()]
                for line in text.splitlines()
                if line.strip()
            ]
        )
    except ValueError as exc:
        raise files.error(rel, f"not a 3x3 matrix of numbers: {exc}") from None
    if k.shape != (3, 3) or not np.isfinite(k).all() or k[0, 0] <= 0 or k[1, 1] <= 0:
        raise files.error(
            rel, f"needs a finite 3x3 matrix with positive focal lengths, got shape {k.shape}"
        )
    return k


def _vector(
    files: CaptureFiles, rel: str, value: Any, size: int, field: str, row: int | None
) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise files.error(
            rel, f"expected {size} numbers, got {type(value).__name__}", field=field, row=row
        ) from None
    if arr.size != size:
        raise files.error(rel, f"has {arr.size} values, expected {size}", field=field, row=row)
    return arr


def _hand_frames(
    files: CaptureFiles, rel: str, t: int, n_pose: int
) -> tuple[np.ndarray, np.ndarray]:
    """(T, n_pose) pose and (T, 3) translation of one hand pickle; NaN where no hand."""
    data = load_data_pickle(files, rel)
    if isinstance(data, Mapping) and "hand_pose" in data and "hand_trans" in data:
        pose = np.asarray(data["hand_pose"], dtype=np.float64)
        trans = np.asarray(data["hand_trans"], dtype=np.float64)
        if pose.shape != (t, n_pose):
            raise files.error(
                rel, f"shape {pose.shape}, expected ({t}, {n_pose})", field="hand_pose"
            )
        if trans.shape != (t, 3):
            raise files.error(rel, f"shape {trans.shape}, expected ({t}, 3)", field="hand_trans")
        return pose, trans
    frames: Sequence[Any]
    if isinstance(data, Mapping):
        frames = [data[k] for k in sorted(data, key=_frame_order)]
    elif isinstance(data, list | tuple):
        frames = data
    else:
        raise files.error(rel, f"expected a dict or list of frames, got {type(data).__name__}")
    if len(frames) != t:
        raise files.error(
            rel, f"has {len(frames)} frames, {EXTRINSIC_FILE} has {t}", field="hand_pose"
        )
    pose = np.full((t, n_pose), np.nan)
    trans = np.full((t, 3), np.nan)
    for i, frame in enumerate(frames):
        if frame is None:
            continue
        if not isinstance(frame, Mapping):
            raise files.error(rel, f"frame is a {type(frame).__name__}, not a dict", row=i + 1)
        for key in ("hand_pose", "hand_trans"):
            if key not in frame:
                raise files.error(rel, "missing key", field=key, row=i + 1)
        pose[i] = _vector(files, rel, frame["hand_pose"], n_pose, "hand_pose", i + 1)
        trans[i] = _vector(files, rel, frame["hand_trans"], 3, "hand_trans", i + 1)
    return pose, trans


def _frame_order(key: Any) -> tuple[int, Any]:
    """Numeric frame ids in numeric order (``"00010"`` after ``"00009"``), others after."""
    text = str(key)
    return (0, int(text)) if text.isdigit() else (1, text)


def _betas(files: CaptureFiles, rel: str) -> np.ndarray:
    data = load_data_pickle(files, rel)
    if isinstance(data, Mapping):
        key = next((k for k in ("betas", "hand_shape", "shape") if k in data), None)
        if key is None:
            raise files.error(rel, "no betas (keys betas, hand_shape or shape)", field="betas")
        data = data[key]
    return _vector(files, rel, data, N_BETAS, "betas", None)
