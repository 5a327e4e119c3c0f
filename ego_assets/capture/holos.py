"""Reader for ``holos`` packages (Apple Vision Pro and iPhone, schema_version 1).

Follows ``docs/capture-formats.md``: every CSV is read once with pyarrow against its
exact header, columns come out as numpy blocks, and nothing is sorted, deduplicated or
filled: duplicate/backwards times and NaN values stay as read and `make_stream` flags
them. Malformed input raises `CaptureFormatError` naming capture, file, field and row.
The session JSON files (annotations, calibration) and media probing live in
`ego_assets.capture.holos_meta`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ego_assets.capture import holos_meta
from ego_assets.capture.files import MARKER_FILE, CaptureFiles, column_block, require
from ego_assets.capture.media import MAX_FRAME_INDEX
from ego_assets.capture.poses import compose_poses, invert_pose
from ego_assets.capture.ranges import DEVICE_S, EPOCH_NS, check_count, check_time, check_times
from ego_assets.trajectory.joints import ARKIT27, VISION21
from ego_assets.trajectory.model import CameraCalibration, CaptureInfo, FileRef, Trajectory
from ego_assets.trajectory.streams import AttrValue, Stream, make_stream

SCHEMA = "holos-capture"
SCHEMA_VERSION = 1
METADATA = "metadata.json"
SOURCE_KINDS = {"visionpro": "holos-visionpro", "iphone": "holos-iphone"}
SIDES = ("left", "right")
STANDARD_GRAVITY = 9.80665  # m s-2 per g (Core Motion reports g)
TRACKING_STATES = ("normal", "limited", "notAvailable")

DEVICE_POSE_CSV = "device_pose.csv"
IMU_CSV = "imu.csv"
ANCHORS_CSV = "objects/anchors.csv"
HAND_CSV = "hands/{side}.csv"
LANDMARKS_CSV = "hands/{side}_landmarks.csv"
FRAMES_CSV = "media/{camera}_frames.csv"

NOMINAL_RATE_HZ = {"device_pose": 60.0, "hands": 90.0, "landmarks": 15.0, "imu": 100.0}

POSE_COLUMNS = ("t_mono_s", "tx", "ty", "tz", "qx", "qy", "qz", "qw")
HAND_ANCHOR_COLUMNS = tuple(f"anchor_{c}" for c in ("px", "py", "pz", "qx", "qy", "qz", "qw"))
HAND_COLUMNS = (
    "t_mono_s",
    "hand_tracked",
    *HAND_ANCHOR_COLUMNS,
    *(f"{j}_{c}" for j in ARKIT27 for c in ("px", "py", "pz", "qx", "qy", "qz", "qw", "tracked")),
)
LANDMARK_COLUMNS = (
    "t_mono_s",
    "hand_confidence",
    *(f"{j}_{c}" for j in VISION21 for c in ("x", "y", "z", "u", "v", "c")),
)
IMU_COLUMNS = (
    "t_mono_s",
    *(f"user_accel_{a}_g" for a in "xyz"),
    *(f"rotation_rate_{a}" for a in "xyz"),
    *(f"gravity_{a}_g" for a in "xyz"),
)
ANCHOR_COLUMNS = ("t_mono_s", "anchor_id", "name", *POSE_COLUMNS[1:], "is_tracked")
FRAME_COLUMNS = ("frame_index", "t_mono_s", "fx", "fy", "cx", "cy", *POSE_COLUMNS[1:])


def _joint_columns(names: Sequence[str], suffixes: Sequence[str]) -> list[str]:
    return [f"{j}_{s}" for j in names for s in suffixes]


@dataclass(frozen=True, slots=True)
class _Clock:
    """Device monotonic seconds -> Unix ns (``origin + round(t * 1e6) * 1000``)."""

    origin_ns: int
    start_ns: int

    def to_ns(self, t_mono_s: np.ndarray) -> np.ndarray:
        """(T,) int64 epoch ns of (T,) float64 monotonic seconds (microsecond resolution)."""
        return np.int64(self.origin_ns) + np.rint(t_mono_s * 1e6).astype(np.int64) * 1000

    def seconds(self, t_mono_s: float) -> float:
        """Capture-relative seconds of one monotonic time."""
        ns = self.origin_ns + round(t_mono_s * 1e6) * 1000
        return (ns - self.start_ns) / 1e9


@dataclass(frozen=True, slots=True)
class _Reader:
    files: CaptureFiles
    clock: _Clock

    def table(
        self, rel: str, columns: Sequence[str], types: Mapping[str, pa.DataType] | None = None
    ) -> pa.Table:
        return self.files.read_csv(rel, columns, {"t_mono_s": pa.float64(), **(types or {})})

    def times(self, rel: str, table: pa.Table) -> np.ndarray:
        """(T,) int64 epoch ns of the ``t_mono_s`` column (outside `DEVICE_S`: an error)."""
        t = table.column("t_mono_s").to_numpy()
        check_times(self.files, rel, "t_mono_s", t, DEVICE_S)
        return self.clock.to_ns(t)

    def flags01(self, rel: str, table: pa.Table, names: Sequence[str]) -> np.ndarray:
        """(T, len(names)) bool of 0/1 columns; any other value is an error naming it."""
        raw = column_block(table, names, "int8")
        bad = (raw != 0) & (raw != 1)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            raise self.files.error(
                rel,
                f"boolean must be 0 or 1, got {int(raw[row, col])}",
                field=names[col],
                row=int(row) + 1,
            )
        return raw.astype(bool)

    def stream(
        self,
        name: str,
        kind: str,
        ts: np.ndarray,
        fields: Mapping[str, np.ndarray],
        attrs: Mapping[str, AttrValue],
    ) -> Stream:
        return make_stream(name, kind, ts, self.clock.start_ns, fields, attrs)


def _int8_types(names: Sequence[str]) -> dict[str, pa.DataType]:
    return {n: pa.int8() for n in names}


def _device_pose(r: _Reader, iphone: bool) -> Stream:
    rel = DEVICE_POSE_CSV
    columns = (*POSE_COLUMNS, "tracking_state") if iphone else POSE_COLUMNS
    table = r.table(rel, columns, {"tracking_state": pa.string()})
    fields: dict[str, np.ndarray] = {
        "position": column_block(table, POSE_COLUMNS[1:4]),
        "rotation": column_block(table, POSE_COLUMNS[4:8]),
    }
    if iphone:
        state_col = table.column("tracking_state")
        known = pc.is_in(state_col, value_set=pa.array(TRACKING_STATES))
        unknown = ~known.to_numpy(zero_copy_only=False)
        if unknown.any():
            row = int(np.flatnonzero(unknown)[0])
            raise r.files.error(
                rel,
                f"tracking_state must be one of {TRACKING_STATES}, got {state_col[row].as_py()!r}",
                field="tracking_state",
                row=row + 1,
            )
        state = np.asarray(state_col.to_numpy(zero_copy_only=False), dtype=object)
        fields["tracking_state"] = state
        fields["valid"] = state != "notAvailable"
    else:
        finite = np.isfinite(fields["position"]).all(axis=1) & np.isfinite(fields["rotation"]).all(
            axis=1
        )
        fields["valid"] = finite
    attrs: dict[str, AttrValue] = {
        "frame": "world",
        "nominal_rate_hz": NOMINAL_RATE_HZ["device_pose"],
        "source_file": rel,
    }
    return r.stream("device_pose", "pose", r.times(rel, table), fields, attrs)


_HAND_TRACKED = _joint_columns(ARKIT27, ("tracked",))
_HAND_POSITION = _joint_columns(ARKIT27, ("px", "py", "pz"))
_HAND_ROTATION = _joint_columns(ARKIT27, ("qx", "qy", "qz", "qw"))


def _arkit_hand_columns(r: _Reader, rel: str) -> tuple[np.ndarray, ...]:
    """The arrays of one ARKit hand CSV; its Arrow table is released on return.

    Returns:
        (T,) int64 epoch ns; (T, 7) float64 anchor pose (px, py, pz, qx, qy, qz, qw;
        metres, world); (T, 27, 3) float64 local positions (m) and (T, 27, 4) float64
        local quaternions (xyzw), anchor frame; (T, 27) bool joint tracked; (T,) bool
        hand tracked.
    """
    table = r.table(rel, HAND_COLUMNS, _int8_types(("hand_tracked", *_HAND_TRACKED)))
    n, n_joints = table.num_rows, len(ARKIT27)
    return (
        r.times(rel, table),
        column_block(table, HAND_ANCHOR_COLUMNS),
        column_block(table, _HAND_POSITION).reshape(n, n_joints, 3),
        column_block(table, _HAND_ROTATION).reshape(n, n_joints, 4),
        r.flags01(rel, table, _HAND_TRACKED),
        r.flags01(rel, table, ("hand_tracked",))[:, 0],
    )


def _arkit_hand(r: _Reader, side: str) -> list[Stream]:
    """``hand_<side>_{world,local,anchor}`` from ``hands/<side>.csv`` (one parse).

    The file holds ARKit's own representation: the hand anchor's pose in world
    (``originFromAnchorTransform``, origin at the wrist) and each joint relative to the
    anchor (``anchorFromJointTransform``). The world joints are derived as the device
    derives them: ``world = anchor ∘ local`` (see `compose_poses`).
    """
    rel = HAND_CSV.format(side=side)
    ts, anchor, local_p, local_q, joint_valid, hand_valid = _arkit_hand_columns(r, rel)
    world_p, world_q = compose_poses(anchor[:, :3], anchor[:, 3:], local_p, local_q)
    common: dict[str, AttrValue] = {
        "hand": side,
        "nominal_rate_hz": NOMINAL_RATE_HZ["hands"],
        "source_file": rel,
    }
    joints: dict[str, AttrValue] = {**common, "joint_set": "arkit27"}
    flags = {"joint_valid": joint_valid, "hand_valid": hand_valid}
    world = {"position": world_p, "rotation": world_q, **flags}
    local = {"position": local_p, "rotation": local_q, **flags}
    anchor_pose = {
        "position": np.ascontiguousarray(anchor[:, :3]),
        "rotation": np.ascontiguousarray(anchor[:, 3:]),
        "valid": hand_valid,
    }
    return [
        r.stream(f"hand_{side}_world", "hand_joints", ts, world, {**joints, "frame": "world"}),
        r.stream(f"hand_{side}_local", "hand_joints", ts, local, {**joints, "frame": "wrist"}),
        r.stream(f"hand_{side}_anchor", "pose", ts, anchor_pose, {**common, "frame": "world"}),
    ]


_LANDMARK_XYZ = _joint_columns(VISION21, ("x", "y", "z"))
_LANDMARK_UV = _joint_columns(VISION21, ("u", "v"))
_LANDMARK_C = _joint_columns(VISION21, ("c",))


# Frames an iPhone capture may declare for its 3D landmarks (metadata
# ``landmarks_3d_frame``): ``"world"`` (ARKit world, the default) or ``"hand"``
# (hand-centred, e.g. MediaPipe world landmarks). Motion figures skip hand-centred ones.
LANDMARK_FRAMES = ("world", "hand")


def landmarks_frame(files: CaptureFiles, meta: Mapping[str, object]) -> str:
    """The declared frame of the 3D landmarks (`LANDMARK_FRAMES`), "world" by default."""
    frame = holos_meta.optional_text(files, METADATA, meta, "landmarks_3d_frame") or "world"
    if frame not in LANDMARK_FRAMES:
        raise files.error(
            METADATA,
            f"landmarks_3d_frame {frame!r} is not one of {list(LANDMARK_FRAMES)}",
            field="landmarks_3d_frame",
        )
    return frame


def _vision_hand(r: _Reader, side: str, frame: str = "world") -> list[Stream]:
    rel = LANDMARKS_CSV.format(side=side)
    table = r.table(rel, LANDMARK_COLUMNS)
    n = table.num_rows
    ts = r.times(rel, table)
    confidence = table.column("hand_confidence").to_numpy()
    joint_confidence = column_block(table, _LANDMARK_C)
    valid = confidence > 0
    common: dict[str, AttrValue] = {
        "joint_set": "vision21",
        "hand": side,
        "nominal_rate_hz": NOMINAL_RATE_HZ["landmarks"],
        "source_file": rel,
    }
    hand3d = {
        "position": column_block(table, _LANDMARK_XYZ).reshape(n, len(VISION21), 3),
        "joint_confidence": joint_confidence,
        "hand_valid": valid,
        "hand_confidence": confidence,
    }
    hand2d = {
        "uv": column_block(table, _LANDMARK_UV).reshape(n, len(VISION21), 2),
        "joint_confidence": joint_confidence,
        "hand_valid": valid,
        "hand_confidence": confidence,
    }
    return [
        r.stream(
            f"hand_{side}_landmarks_3d", "hand_joints", ts, hand3d, {**common, "frame": frame}
        ),
        r.stream(
            f"hand_{side}_landmarks_2d",
            "hand_landmarks_2d",
            ts,
            hand2d,
            {**common, "image_origin": "lower-left"},
        ),
    ]


def _imu(r: _Reader) -> Stream:
    table = r.table(IMU_CSV, IMU_COLUMNS)
    fields = {
        "accel": column_block(table, IMU_COLUMNS[1:4]) * STANDARD_GRAVITY,
        "gyro": column_block(table, IMU_COLUMNS[4:7]),
        "gravity": column_block(table, IMU_COLUMNS[7:10]) * STANDARD_GRAVITY,
    }
    attrs: dict[str, AttrValue] = {
        "frame": "device",
        "nominal_rate_hz": NOMINAL_RATE_HZ["imu"],
        "source_file": IMU_CSV,
    }
    return r.stream("imu", "imu", r.times(IMU_CSV, table), fields, attrs)


def _anchors(r: _Reader) -> Stream:
    rel = ANCHORS_CSV
    strings = {"anchor_id": pa.string(), "name": pa.string(), "is_tracked": pa.int8()}
    table = r.table(rel, ANCHOR_COLUMNS, strings)
    fields = {
        "anchor_id": np.asarray(table.column("anchor_id").to_pylist(), dtype=object),
        "anchor_name": np.asarray(table.column("name").to_pylist(), dtype=object),
        "position": column_block(table, POSE_COLUMNS[1:4]),
        "rotation": column_block(table, POSE_COLUMNS[4:8]),
        "valid": r.flags01(rel, table, ("is_tracked",))[:, 0],
    }
    attrs: dict[str, AttrValue] = {"frame": "world", "source_file": rel}
    return r.stream("object_pose", "object_pose", r.times(rel, table), fields, attrs)


def _camera_frames(r: _Reader, camera: str) -> tuple[Stream, np.ndarray]:
    """The ``<camera>_frames`` stream and its (T, 4) intrinsics (fx, fy, cx, cy, px)."""
    rel = FRAMES_CSV.format(camera=camera)
    table = r.table(rel, FRAME_COLUMNS, {"frame_index": pa.int64()})
    intrinsics = column_block(table, FRAME_COLUMNS[2:6])
    frame_index = table.column("frame_index").to_numpy().astype(np.int64, copy=False)
    check_count(r.files, rel, "frame_index", frame_index, 0, MAX_FRAME_INDEX, "frame")
    fields = {
        "frame_index": frame_index,
        "intrinsics": intrinsics,
        "world_to_camera": invert_pose(
            column_block(table, POSE_COLUMNS[1:4]), column_block(table, POSE_COLUMNS[4:8])
        ),
    }
    # the frames CSV gives ARKit camera poses: x right, y up, looking along -z
    attrs: dict[str, AttrValue] = {"media": camera, "source_file": rel, "camera_axes": "arkit"}
    stream = r.stream(f"{camera}_frames", "media_frames", r.times(rel, table), fields, attrs)
    return stream, intrinsics


def _read_clock(files: CaptureFiles, meta: Mapping[str, object]) -> _Clock:
    clock = require(files, METADATA, meta, "clock", dict)
    origin = require(files, METADATA, clock, "mono_origin_epoch_ns", int)
    check_time(files, METADATA, "mono_origin_epoch_ns", origin, EPOCH_NS)
    start_mono = require(files, METADATA, clock, "capture_start_mono_s", (int, float))
    check_time(files, METADATA, "capture_start_mono_s", start_mono, DEVICE_S)
    return _Clock(origin, origin + round(float(start_mono) * 1e6) * 1000)


def _read_metadata(files: CaptureFiles) -> dict[str, object]:
    meta = files.read_schema_document(METADATA, SCHEMA, SCHEMA_VERSION)
    modality = require(files, METADATA, meta, "modality", str)
    if modality not in SOURCE_KINDS:
        raise files.error(
            METADATA, f"modality must be one of {tuple(SOURCE_KINDS)}", field="modality"
        )
    return meta


def read_holos(files: CaptureFiles, marker: dict) -> Trajectory:
    """Read a holos package into the canonical `Trajectory`.

    Args:
        files: the capture folder.
        marker: the validated completion marker (kind ``holos``).

    Returns:
        Streams ``device_pose``; Vision Pro ``hand_{left,right}_{world,local}`` (arkit27,
        world = anchor ∘ local) and ``hand_{left,right}_anchor`` (the hand anchor pose);
        iPhone ``hand_{left,right}_landmarks_{3d,2d}`` (vision21) and ``imu``; optional
        ``imu``, ``object_pose`` and ``<camera>_frames``; plus info, annotations, media
        and file references. Times are Unix ns (``clock == "epoch"``).

    Raises:
        CaptureFormatError: malformed input, naming capture, file, field and row.
    """
    meta = _read_metadata(files)
    modality = str(meta["modality"])
    iphone = modality == "iphone"
    clock = _read_clock(files, meta)
    r = _Reader(files, clock)
    consumed = {MARKER_FILE, METADATA, DEVICE_POSE_CSV}
    streams = [_device_pose(r, iphone)]
    frame = landmarks_frame(files, meta) if iphone else "world"
    for side in SIDES:
        if iphone:
            consumed.add(LANDMARKS_CSV.format(side=side))
            streams.extend(_vision_hand(r, side, frame))
        else:
            consumed.add(HAND_CSV.format(side=side))
            streams.extend(_arkit_hand(r, side))
    if iphone or files.exists(IMU_CSV):
        consumed.add(IMU_CSV)
        streams.append(_imu(r))
    if files.exists(ANCHORS_CSV):
        consumed.add(ANCHORS_CSV)
        streams.append(_anchors(r))

    all_files = files.list_files()
    cameras = sorted(
        {p[len("media/") : -len("_frames.csv")] for p in all_files if _is_frames_csv(p)}
        | {p[len("media/") : -len(".mov")] for p in all_files if holos_meta.is_video(p)}
    )
    first_intrinsics: dict[str, np.ndarray] = {}
    for camera in cameras:
        rel = FRAMES_CSV.format(camera=camera)
        if rel in all_files:
            consumed.add(rel)
            stream, intrinsics = _camera_frames(r, camera)
            streams.append(stream)
            first_intrinsics[camera] = intrinsics[0]
    frame_streams = {str(s.attrs["media"]): s for s in streams if s.kind == "media_frames"}
    media = holos_meta.media_refs(files, all_files, frame_streams)
    consumed.update(m.path for m in media)

    file_refs = tuple(
        FileRef(role, rel, mime)
        for rel, (role, mime) in holos_meta.FILE_ROLES.items()
        if rel in all_files
    )
    consumed.update(f.path for f in file_refs)
    if iphone:
        calibrations = holos_meta.iphone_cameras(files, media, first_intrinsics)
    else:
        calibrations = holos_meta.stereo_cameras(files, all_files)
    info = _capture_info(files, meta, clock, calibrations)
    return Trajectory(
        info=info,
        streams=tuple(streams),
        annotations=holos_meta.session_annotations(files, meta, all_files, clock.seconds),
        media=media,
        files=file_refs,
        extra_files=tuple(p for p in all_files if p not in consumed),
    )


def _is_frames_csv(rel: str) -> bool:
    return rel.startswith("media/") and rel.endswith("_frames.csv") and rel.count("/") == 1


def _capture_info(
    files: CaptureFiles,
    meta: Mapping[str, object],
    clock: _Clock,
    cameras: tuple[CameraCalibration, ...],
) -> CaptureInfo:
    text = holos_meta.optional_text
    device = meta.get("device", {})
    app = meta.get("app", {})
    if not isinstance(device, dict) or not isinstance(app, dict):
        field = "device" if not isinstance(device, dict) else "app"
        raise files.error(METADATA, "expected a JSON object", field=field)
    device_text = text(files, METADATA, device, "model")
    if device.get("os"):
        device_text = f"{device_text} ({text(files, METADATA, device, 'os')})"
    app_text = " ".join(
        t for t in (text(files, METADATA, app, "name"), text(files, METADATA, app, "version")) if t
    )
    fields = {
        key: text(files, METADATA, meta, key)
        for key in ("capture_id", "title", "institution", "organization_id")
    }
    conventions: dict[str, str] = {
        "world_frame": text(files, METADATA, meta, "world_frame") or "world",
        "handedness": text(files, METADATA, meta, "handedness") or "right",
        "up_axis": text(files, METADATA, meta, "up_axis") or "Y",
    }
    try:
        return CaptureInfo(
            capture_id=files.capture,
            source_capture_id=fields["capture_id"],
            source_kind=SOURCE_KINDS[str(meta["modality"])],
            source_version=f"{SCHEMA}/{SCHEMA_VERSION}",
            start_ns=clock.start_ns,
            clock="epoch",
            device=device_text,
            app=app_text,
            title=fields["title"],
            institution=fields["institution"],
            organization_id=fields["organization_id"],
            modality=str(meta["modality"]),
            cameras=cameras,
            world_frame=conventions["world_frame"],
            handedness=conventions["handedness"],
            up_axis=conventions["up_axis"],
        )
    except ValueError as exc:
        key = next((k for k in conventions if k in str(exc)), None)
        raise files.error(METADATA, str(exc), field=key) from None
