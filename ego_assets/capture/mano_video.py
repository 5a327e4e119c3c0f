"""Reader for ``mano_video`` captures: a head-camera clip with MANO hands estimated later.

All streams run on the video frame clock of ``frames.csv`` (T rows): ``mano_left``
and ``mano_right`` (axis 0 of every ``mano.npz`` array: 0 = left, 1 = right),
``video_frames`` (intrinsics and world_to_camera from ``camera.npz``) and, when the
clip has depth, ``depth_frames``. Every array is checked for presence, dtype kind and
shape against T before anything is built; ``depth.npz`` is checked from its header
only (the depth maps themselves stay on disk).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from ego_assets.capture.files import MARKER_FILE, CaptureFiles, require
from ego_assets.capture.media import MAX_FRAME_INDEX, check_frame_rows, probe_video
from ego_assets.capture.npz import ArrayHeader, open_npz
from ego_assets.capture.ranges import EPOCH_NS, check_count, check_times, require_number
from ego_assets.trajectory.model import (
    Annotations,
    CameraCalibration,
    CaptureInfo,
    FileRef,
    MediaRef,
    Trajectory,
)
from ego_assets.trajectory.streams import Stream, make_stream

log = logging.getLogger(__name__)

SCHEMA = "mano-video"
SCHEMA_VERSION = 1
META_FILE = "meta.json"
VIDEO_FILE = "video.mp4"
FRAMES_FILE = "frames.csv"
MANO_FILE = "mano.npz"
CAMERA_FILE = "camera.npz"
N_BETAS = 10
MAX_POSE_COEFFICIENTS = 45  # MANO: 15 joints x 3 axis-angle values, or up to 45 PCA
MAX_FPS = 1000.0
MAX_IMAGE_SIDE = 65_536  # pixels
HANDS = ("left", "right")  # axis 0 of mano.npz (HaWoR order)

# array -> (dtype kinds, shape); "T" = frames.csv rows, "P" = pose coefficients
_MANO_ARRAYS: dict[str, tuple[str, tuple[int | str, ...]]] = {
    "trans": ("f", (2, "T", 3)),
    "root_orient": ("f", (2, "T", 3)),
    "hand_pose": ("f", (2, "T", "P")),
    "betas": ("f", (2, "T", N_BETAS)),
    "valid_detected": ("b", (2, "T")),
    "valid_infilled": ("b", (2, "T")),
}
_MANO_OPTIONAL: dict[str, tuple[str, tuple[int | str, ...]]] = {
    "joints": ("f", (2, "T", 21, 3)),
}
_CAMERA_ARRAYS: dict[str, tuple[str, tuple[int | str, ...]]] = {
    "world_to_camera": ("f", ("T", 4, 4)),
    "intrinsics": ("f", ("T", 4)),
}


@dataclass(frozen=True, slots=True)
class _Meta:
    clip_id: str
    split: str
    dataset_name: str
    fps: float
    width: int
    height: int
    world_frame: str
    handedness: str
    up_axis: str
    pose_space: str
    n_pca: int | None
    flat_hand_mean: bool
    instructions: tuple[str, ...]
    language: str
    depth_path: str | None
    depth_unit: str


def read_mano_video(files: CaptureFiles, marker: Mapping[str, Any]) -> Trajectory:
    """Read a ``mano_video`` capture folder into the canonical `Trajectory`.

    Args:
        files: the capture folder.
        marker: the validated completion marker (``kind == "mano_video"``).

    Raises:
        CaptureFormatError: malformed input, naming capture, file, field (the array
            name for ``.npz`` files) and row.
    """
    meta = _read_meta(files)
    frame_index, ts = _read_frames(files)
    t = len(ts)
    probe = probe_video(files, VIDEO_FILE)
    check_frame_rows(files, FRAMES_FILE, t, VIDEO_FILE, probe)
    start_ns = int(ts[0])
    dims = {"T": t}
    if meta.pose_space == "pca" and meta.n_pca is not None:
        dims["P"] = meta.n_pca
    mano = _load_npz(files, MANO_FILE, _MANO_ARRAYS, _MANO_OPTIONAL, dims)
    camera = _load_npz(files, CAMERA_FILE, _CAMERA_ARRAYS, {}, {"T": t})

    streams = [_mano_stream(mano, i, side, ts, start_ns, meta) for i, side in enumerate(HANDS)]
    streams.append(
        make_stream(
            "video_frames",
            "media_frames",
            ts,
            start_ns,
            {
                "frame_index": frame_index,
                "intrinsics": camera["intrinsics"].astype(np.float64),
                "world_to_camera": camera["world_to_camera"].astype(np.float64),
            },
            {"media": "video", "source_file": FRAMES_FILE, "camera_axes": "opencv"},
        )
    )
    media = [
        probe.media_ref("video", VIDEO_FILE, "video/mp4", frames_stream="video_frames"),
    ]
    if meta.depth_path is not None:
        depth_stream, depth_media = _depth(files, meta, meta.depth_path, frame_index, ts)
        streams.append(depth_stream)
        media.append(depth_media)

    known = {MARKER_FILE, META_FILE, VIDEO_FILE, FRAMES_FILE, MANO_FILE, CAMERA_FILE}
    if meta.depth_path is not None:
        known.add(meta.depth_path)
    info = CaptureInfo(
        capture_id=files.capture,
        source_kind="mano-video",
        source_version=f"{SCHEMA}/{SCHEMA_VERSION}",
        start_ns=start_ns,
        source_capture_id=meta.clip_id,
        dataset_name=meta.dataset_name,
        split=meta.split,
        world_frame=meta.world_frame,
        handedness=meta.handedness,
        up_axis=meta.up_axis,
        cameras=_camera(camera["intrinsics"], meta),
    )
    log.info("mano_video %s: %d frames, depth=%s", files.capture, t, meta.depth_path is not None)
    return Trajectory(
        info=info,
        streams=tuple(streams),
        annotations=Annotations(instructions=meta.instructions, language=meta.language),
        media=tuple(media),
        files=(FileRef("clip_metadata", META_FILE, "application/json"),),
        extra_files=tuple(p for p in files.list_files() if p not in known),
    )


def _read_frames(files: CaptureFiles) -> tuple[np.ndarray, np.ndarray]:
    """`FRAMES_FILE`'s frame indices and timestamps (int64, ns since the epoch), checked."""
    frames = files.read_csv(
        FRAMES_FILE,
        ["frame_index", "timestamp_ns"],
        {"frame_index": pa.int64(), "timestamp_ns": pa.int64()},
    )
    frame_index = frames.column("frame_index").to_numpy().astype(np.int64)
    ts = frames.column("timestamp_ns").to_numpy().astype(np.int64)
    check_count(files, FRAMES_FILE, "frame_index", frame_index, 0, MAX_FRAME_INDEX, "frame")
    check_times(files, FRAMES_FILE, "timestamp_ns", ts, EPOCH_NS)
    return frame_index, ts


def _depth(
    files: CaptureFiles, meta: _Meta, path: str, frame_index: np.ndarray, ts: np.ndarray
) -> tuple[Stream, MediaRef]:
    """The depth maps at ``path`` (one per video frame): their frames stream and media."""
    depth_h, depth_w = _depth_size(files, path, len(ts))
    stream = make_stream(
        "depth_frames",
        "media_frames",
        ts,
        int(ts[0]),
        {"frame_index": frame_index},
        {"media": "depth", "source_file": FRAMES_FILE},
    )
    media = MediaRef(
        role="depth",
        path=path,
        mime="application/x-npz",
        kind="depth",
        width=depth_w,
        height=depth_h,
        fps=meta.fps,
        frame_count=len(ts),
        frames_stream="depth_frames",
        unit=meta.depth_unit,
    )
    return stream, media


def _read_meta(files: CaptureFiles) -> _Meta:
    rel = META_FILE
    doc = files.read_schema_document(rel, SCHEMA, SCHEMA_VERSION)
    mano = require(files, rel, doc, "mano", dict)
    pose_space = require(files, rel, mano, "pose_space", str)
    n_pca = None
    if pose_space == "pca":
        n_pca = int(require_number(files, rel, mano, "n_pca", 1, MAX_POSE_COEFFICIENTS, kind=int))
    instructions = require(files, rel, doc, "instructions", list)
    if not all(isinstance(s, str) for s in instructions):
        raise files.error(rel, "expected a list of strings", field="instructions")
    depth = doc.get("depth")
    depth_path, depth_unit = None, ""
    if depth is not None:
        depth = require(files, rel, doc, "depth", dict)
        depth_path = require(files, rel, depth, "path", str)
        depth_unit = require(files, rel, depth, "unit", str)
        if depth_unit != "m":
            raise files.error(rel, f"depth unit must be 'm', got {depth_unit!r}", field="unit")
    handedness = require(files, rel, doc, "handedness", str)
    up_axis = require(files, rel, doc, "up_axis", str)
    if handedness not in ("right", "left"):
        raise files.error(rel, "must be 'right' or 'left'", field="handedness")
    if up_axis not in ("X", "Y", "Z", "-X", "-Y", "-Z"):
        raise files.error(rel, "must be one of X, Y, Z, -X, -Y, -Z", field="up_axis")
    return _Meta(
        clip_id=require(files, rel, doc, "clip_id", str),
        split=require(files, rel, doc, "split", str),
        dataset_name=require(files, rel, doc, "dataset_name", str),
        fps=require_number(files, rel, doc, "fps", 0, MAX_FPS),
        width=int(require_number(files, rel, doc, "width", 0, MAX_IMAGE_SIDE, kind=int)),
        height=int(require_number(files, rel, doc, "height", 0, MAX_IMAGE_SIDE, kind=int)),
        world_frame=require(files, rel, doc, "world_frame", str),
        handedness=handedness,
        up_axis=up_axis,
        pose_space=pose_space,
        n_pca=n_pca,
        flat_hand_mean=require(files, rel, mano, "flat_hand_mean", bool),
        instructions=tuple(instructions),
        language=require(files, rel, doc, "language", str),
        depth_path=depth_path,
        depth_unit=depth_unit,
    )


def _load_npz(
    files: CaptureFiles,
    rel: str,
    required: Mapping[str, tuple[str, tuple[int | str, ...]]],
    optional: Mapping[str, tuple[str, tuple[int | str, ...]]],
    dims: dict[str, int],
) -> dict[str, np.ndarray]:
    """Load and check the named arrays of an ``.npz``; symbolic dims bind once.

    Each array's dtype and shape are checked from its header, before its data is read
    (`ego_assets.capture.npz`), so memory follows ``frames.csv``, not the headers.
    """
    out: dict[str, np.ndarray] = {}
    with open_npz(files, rel) as npz:
        for name, (kinds, shape) in {**required, **optional}.items():
            if name not in npz.names:
                if name in required:
                    raise files.error(rel, "array is missing", field=name)
                continue
            check = partial(_check_array, files, rel, kinds=kinds, shape=shape, dims=dims)
            out[name] = npz.read(name, check)
    return out


def _check_array(
    files: CaptureFiles,
    rel: str,
    header: ArrayHeader,
    *,
    kinds: str,
    shape: tuple[int | str, ...],
    dims: dict[str, int],
) -> None:
    name, found = header.name, header.shape
    if header.dtype.kind not in kinds:
        expected = {"f": "floating-point", "b": "boolean"}[kinds]
        raise files.error(rel, f"dtype {header.dtype} is not {expected}", field=name)
    if len(found) != len(shape):
        raise files.error(
            rel, f"has {len(found)} dimensions {found}, expected {len(shape)}", field=name
        )
    for axis, (dim, size) in enumerate(zip(shape, found, strict=True)):
        if dim == "P" and "P" not in dims and not 1 <= size <= MAX_POSE_COEFFICIENTS:
            raise files.error(
                rel,
                f"axis {axis} has {size} pose coefficients, expected 1 to "
                f"{MAX_POSE_COEFFICIENTS}; shape {found}",
                field=name,
            )
        expected_size = dims.setdefault(dim, size) if isinstance(dim, str) else dim
        if size != expected_size:
            label = f"{dim} = {expected_size}" if isinstance(dim, str) else str(dim)
            if dim == "T":
                label += " (frames.csv rows)"
            raise files.error(
                rel, f"axis {axis} has size {size}, expected {label}; shape {found}", field=name
            )


def _mano_stream(
    mano: Mapping[str, np.ndarray],
    hand: int,
    side: str,
    ts: np.ndarray,
    start_ns: int,
    meta: _Meta,
) -> Stream:
    fields = {
        "transl": mano["trans"][hand].astype(np.float64),
        "global_orient": mano["root_orient"][hand].astype(np.float64),
        "hand_pose": mano["hand_pose"][hand].astype(np.float64),
        "betas": mano["betas"][hand].astype(np.float64),
        "valid_detected": mano["valid_detected"][hand].astype(bool),
        "valid_infilled": mano["valid_infilled"][hand].astype(bool),
    }
    if "joints" in mano:
        fields["joints"] = mano["joints"][hand].astype(np.float64)
    return make_stream(
        f"mano_{side}",
        "mano",
        ts,
        start_ns,
        fields,
        {
            "hand": side,
            "frame": "world",
            "mano_pose_space": meta.pose_space,
            "flat_hand_mean": meta.flat_hand_mean,
            "source_file": MANO_FILE,
        },
    )


def _camera(intrinsics: np.ndarray, meta: _Meta) -> tuple[CameraCalibration, ...]:
    """The head camera's pinhole model from the first frame with usable intrinsics."""
    usable = np.isfinite(intrinsics).all(axis=1) & (intrinsics[:, :2] > 0).all(axis=1)
    if not usable.any() or meta.width <= 0 or meta.height <= 0:
        return ()
    fx, fy, cx, cy = (float(v) for v in intrinsics[int(np.argmax(usable))])
    return (CameraCalibration("video", "pinhole", meta.width, meta.height, fx, fy, cx, cy),)


def _depth_size(files: CaptureFiles, rel: str, t: int) -> tuple[int, int]:
    """(H, W) of ``depth`` in ``rel``, checked from the .npy header (float, (T, H, W))."""
    with open_npz(files, rel) as npz:
        header = npz.header("depth")
    shape = header.shape
    if header.dtype.kind != "f":
        raise files.error(rel, f"dtype {header.dtype} is not floating-point", field="depth")
    if len(shape) != 3 or shape[0] != t:
        raise files.error(
            rel, f"shape {shape}, expected (T = {t} (frames.csv rows), H, W)", field="depth"
        )
    return int(shape[1]), int(shape[2])
