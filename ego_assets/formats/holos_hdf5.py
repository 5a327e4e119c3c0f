"""Holos HDF5 export: one self-contained ``.h5`` file per capture (HolosCapture-1.0).

The layout is robomimic's (``/data/demo_0``, ``/mask/all``) with HDF5 dimension scales
on every axis, CF-1.11 attributes, Image spec 1.2 pictures, MIME-tagged opaque media
and everything Holos-specific under ``/holos`` and ``/media``; docs/formats/holos-hdf5.md
describes every group, dataset and attribute. Reads only the canonical `Trajectory`
plus the raw bytes of the files it embeds (media, verbatim JSON, the thumbnail, files
with no typed home), never a capture reader.

Units are SI (m, s, ns, m s-2, rad s-1), poses are ``x y z qx qy qz qw`` (metres, unit
quaternion xyzw) in the capture's world frame (ARKit world for Holos: +Y up,
right-handed) unless a dataset's ``frame`` attribute says otherwise.

Writes go to a temporary sibling that is renamed into place (`write_holos_hdf5`): a
reader or a later run never sees a half-written file under the final name. The same
trajectory and raw bytes give the same file bytes, except the time in ``history``.
"""

from __future__ import annotations

import datetime as dt
import json
import mimetypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ego_assets.fileio import atomic_output
from ego_assets.formats.holos_clock import (
    MAX_AGE_NS,
    MasterClock,
    Rows,
    Track,
    hold_index,
    hold_rows,
    nearest_index,
    pick_master,
    same_rows,
    sample_ranges,
    wrist_delta,
)
from ego_assets.progress import WRITE_TASK, report
from ego_assets.trajectory.joints import JOINT_SETS, WRIST
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.records import to_jsonable
from ego_assets.trajectory.streams import Stream

FORMAT_NAME = "holos_hdf5"
CONVENTION_VERSION = "HolosCapture-1.0"
CONVENTIONS = f"CF-1.11, {CONVENTION_VERSION}"
# Code version of the exporter: bump exactly when the bytes for an unchanged input change.
EXPORTER_VERSION = f"{FORMAT_NAME}-1+{CONVENTION_VERSION}"
REFERENCES = "ego_assets docs/formats/holos-hdf5.md (Holos HDF5 export, HolosCapture-1.0)"
ENV_NAME = "holos_capture"
ENV_TYPE_NO_SIMULATOR = 99
DEMO = "data/demo_0"

POSE_COMPONENTS = ("x", "y", "z", "qx", "qy", "qz", "qw")
AXIS_XYZ = ("x", "y", "z")
IMAGE_UV = ("u", "v")
INTRINSICS = ("fx", "fy", "cx", "cy")
# ARKit's skeleton has 27 joints; the format's joint scale has 26: forearmArm is left out.
ARKIT_OMITTED = ("forearmArm",)

GZIP_LEVEL = 4
MEDIA_GZIP_LEVEL = 1  # container bytes hardly compress; level 1 keeps the cost down
TINY_BYTES = 1024  # datasets smaller than this are stored contiguous and unfiltered
CHUNK_TARGET_BYTES = 64 * 1024  # time-major chunks of about this size (whole rows)
OBS_CHUNK_ROWS = 64  # at most this many samples per obs chunk (random short windows)
BLOCK_BYTES = 1 << 20  # assembled (`Rows`) datasets are written this much at a time
MEDIA_CHUNK_BYTES = 1 << 20
MEDIA_READ_BYTES = 8 << 20
FILL = np.nan
PURE_DIM = "This is a netCDF dimension but not a netCDF variable."
SIDES = ("left", "right")
DEVICE_CLOCK_COMMENT = (
    "device clock with no known epoch: dates are the device clock read as Unix time, "
    "not wall-clock time; differences are exact"
)
# model units UDUNITS does not know -> (CF units, comment saying what they are)
NON_UDUNITS = {"px": ("1", "pixels")}

RESAMPLING = (
    "zero-order hold onto master_clock: every sample carries the newest value of each other "
    "stream at or before its time; NaN where that stream has no sample yet, its newest "
    f"sample is older than {MAX_AGE_NS / 1e9:g} s, or the source marked it not tracked"
)
ACTION_DERIVATION = (
    "dominant-hand wrist pose delta on the demo clock: position p[t+1] - p[t] (m) and "
    "rotation q[t+1] * conj(q[t]) (xyzw); identity on the last row and where either "
    "sample is missing (NaN-free)"
)
ACTION_DERIVATION_POSITION = (
    "dominant-hand wrist position delta on the demo clock: p[t+1] - p[t] (m); the wrist "
    "landmark carries no rotation; zero on the last row and where either sample is missing"
)
ACTION_DERIVATION_DEVICE = (
    "no hand was tracked: device pose delta on the demo clock, position p[t+1] - p[t] (m) "
    "and rotation q[t+1] * conj(q[t]) (xyzw); identity on the last row and where missing"
)


@dataclass
class ExportNotes:
    """What an export wrote, skipped and embedded verbatim (also the JSON sidecar).

    Attributes:
        capture_id: the episode.
        source_kind: the capture's source kind.
        samples: demo samples (T).
        master_clock: the ``master_clock`` attribute.
        obs: the ``obs`` keys written.
        raw: the ``/holos/raw`` groups written.
        skipped: spec items the capture has no data for, each with the reason.
        extras: package files embedded under ``/holos/files`` (no typed home).
        decode_frames: whether decoded video frames were added.
    """

    capture_id: str
    source_kind: str
    samples: int = 0
    master_clock: str = ""
    obs: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    decode_frames: bool = False

    def skip(self, item: str, reason: str) -> None:
        self.skipped.append({"item": item, "reason": reason})

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self.__dict__), indent=1, sort_keys=True) + "\n"


# --------------------------------------------------------------------------- helpers


def iso_utc(epoch_ns: int) -> str:
    """ISO-8601 UTC (``Z``) of epoch nanoseconds: microseconds, nanoseconds when needed."""
    seconds, rem = divmod(int(epoch_ns), 1_000_000_000)
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{rem // 1000:06d}" if rem % 1000 == 0 else f"{rem:09d}"
    return f"{stamp}.{frac}Z"


def _fixed_ascii_attr(obj: h5py.HLObject, name: str, text: str) -> None:
    """A NULLTERM fixed-length ASCII string attribute (what the Image spec prescribes)."""
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(len(text) + 1)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    if h5py.h5a.exists(obj.id, name.encode()):
        h5py.h5a.delete(obj.id, name.encode())
    attr = h5py.h5a.create(obj.id, name.encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
    attr.write(np.array(text.encode("ascii"), dtype=f"S{len(text) + 1}"), mtype=tid)


def chunk_rows(row_bytes: int, rows: int) -> int:
    """Rows per time-major chunk: a power of two near `CHUNK_TARGET_BYTES`, at most ``rows``."""
    target = max(1, CHUNK_TARGET_BYTES // max(1, row_bytes))
    power = 1 << (target.bit_length() - 1)
    return max(1, min(power, rows))


def _u8(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=bool).astype(np.uint8)


class _Writer:
    """Dataset, scale and attribute helpers over one open file (deterministic layout)."""

    def __init__(self, f: h5py.File, device_clock: bool = False) -> None:
        self.f = f
        self.device_clock = device_clock

    def group(self, path: str) -> h5py.Group:
        if path in self.f:
            return self.f[path]
        return self.f.create_group(path, track_order=False)

    def string_scale(self, group: h5py.Group, name: str, values: Sequence[str]) -> h5py.Dataset:
        """A 1-D variable-length UTF-8 coordinate scale named ``name``."""
        ds = group.create_dataset(
            name, data=np.array(list(values), dtype=object), dtype=h5py.string_dtype()
        )
        ds.make_scale(name)
        return ds

    def pure_dim(self, group: h5py.Group, name: str, size: int) -> h5py.Dataset:
        """A netCDF-4 dimension without values (no bytes stored)."""
        ds = group.create_dataset(name, shape=(size,), dtype=">f4")
        ds.make_scale(f"{PURE_DIM}{size:10d}")
        return ds

    def time_scale(self, group: h5py.Group, time_s: np.ndarray, units: str) -> h5py.Dataset:
        """``time`` float64 seconds since the capture start: the CF time coordinate."""
        ds = self._create(group, "time", np.asarray(time_s, dtype=np.float64))
        ds.make_scale("time")
        ds.attrs["units"] = units
        ds.attrs["long_name"] = "time since the capture start"
        ds.attrs["standard_name"] = "time"
        ds.attrs["axis"] = "T"
        ds.attrs["calendar"] = "proleptic_gregorian"
        ds.attrs["units_metadata"] = "leap_seconds: none"
        if self.device_clock:
            ds.attrs["comment"] = DEVICE_CLOCK_COMMENT
        return ds

    def _create(
        self, group: h5py.Group, name: str, data: np.ndarray | Rows, fill: bool = False
    ) -> h5py.Dataset:
        """A dataset holding ``data``: time-major gzip chunks unless tiny.

        `Rows` are written in blocks of whole chunks (about `BLOCK_BYTES`), each assembled
        just before it is written, so no full-size copy of the values ever exists.
        """
        if not isinstance(data, Rows):
            data = np.ascontiguousarray(data)
        shape, dtype = data.shape, np.dtype(data.dtype)
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        kwargs: dict[str, Any] = {}
        if fill:
            kwargs["fillvalue"] = FILL
        rows = shape[0] if shape else 0
        if row_bytes * rows >= TINY_BYTES and rows > 0:
            rows = chunk_rows(row_bytes, shape[0])
            if group.name.endswith("/obs"):  # loaders read short windows of obs
                rows = min(rows, OBS_CHUNK_ROWS)
            kwargs.update(
                chunks=(rows, *shape[1:]),
                compression="gzip",
                compression_opts=GZIP_LEVEL,
                shuffle=True,
                fletcher32=True,
            )
        if not isinstance(data, Rows):
            return group.create_dataset(name, data=data, **kwargs)
        ds = group.create_dataset(name, shape=shape, dtype=dtype, **kwargs)
        step = max(1, rows) * max(1, BLOCK_BYTES // max(1, rows * row_bytes))
        for start in range(0, shape[0], step):
            stop = min(start + step, shape[0])
            ds.write_direct(data.block(start, stop), dest_sel=np.s_[start:stop])
        return ds

    def data(
        self,
        group: h5py.Group,
        name: str,
        values: np.ndarray | Rows,
        dims: Sequence[h5py.Dataset],
        units: str,
        long_name: str,
        **attrs: Any,
    ) -> h5py.Dataset:
        """A numeric dataset with a scale on every axis and its CF attributes.

        Float datasets get ``_FillValue`` NaN (a stream can be absent at any sample).
        """
        if not isinstance(values, Rows):
            values = np.asarray(values)
            if values.dtype == bool:
                values = values.astype(np.uint8)
        is_float = np.dtype(values.dtype).kind == "f"
        ds = self._create(group, name, values, fill=is_float)
        self.attach(ds, dims)
        ds.attrs["units"] = units
        ds.attrs["long_name"] = long_name
        if is_float:
            ds.attrs["_FillValue"] = np.float64(FILL)
        for key, value in attrs.items():
            ds.attrs[key] = value
        return ds

    def strings(
        self, group: h5py.Group, name: str, values: Sequence[str], dims: Sequence[h5py.Dataset]
    ) -> h5py.Dataset:
        """A variable-length UTF-8 string dataset (HDF5 cannot filter these)."""
        ds = group.create_dataset(
            name, data=np.array(list(values), dtype=object), dtype=h5py.string_dtype()
        )
        self.attach(ds, dims)
        return ds

    def text(self, group: h5py.Group, name: str, text: str, **attrs: Any) -> h5py.Dataset:
        """A scalar variable-length UTF-8 string dataset."""
        ds = group.create_dataset(name, data=text, dtype=h5py.string_dtype())
        for key, value in attrs.items():
            ds.attrs[key] = value
        return ds

    @staticmethod
    def attach(ds: h5py.Dataset, dims: Sequence[h5py.Dataset]) -> None:
        if len(dims) != ds.ndim:
            raise ValueError(f"{ds.name}: {ds.ndim} axes but {len(dims)} scales")
        for axis, scale in enumerate(dims):
            if scale.shape[0] != ds.shape[axis]:
                raise ValueError(
                    f"{ds.name}: axis {axis} has {ds.shape[axis]} entries, "
                    f"scale {scale.name} has {scale.shape[0]}"
                )
            ds.dims[axis].attach_scale(scale)

    def image_attrs(self, ds: h5py.Dataset) -> None:
        """Image spec 1.2 attributes of a truecolor, pixel-interlaced picture.

        Written after the scales are attached: HDF5 refuses to attach scales to an IMAGE.
        """
        _fixed_ascii_attr(ds, "CLASS", "IMAGE")
        _fixed_ascii_attr(ds, "IMAGE_VERSION", "1.2")
        _fixed_ascii_attr(ds, "IMAGE_SUBCLASS", "IMAGE_TRUECOLOR")
        _fixed_ascii_attr(ds, "INTERLACE_MODE", "INTERLACE_PIXEL")

    def opaque(
        self, group: h5py.Group, name: str, source: Path, mime: str, dim_name: str | None
    ) -> h5py.Dataset:
        """The bytes of ``source`` as a 1-D ``H5T_OPAQUE`` dataset tagged ``mime``.

        One element per byte, 1 MiB chunks, gzip + shuffle + Fletcher-32, streamed from
        the file in blocks. The type is transient (committing it breaks h5netcdf).
        ``dim_name`` adds a pure-dimension scale for the byte axis in the same group.
        """
        size = source.stat().st_size
        tid = h5py.h5t.create(h5py.h5t.OPAQUE, 1)
        tid.set_tag(mime.encode("ascii"))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_obj_track_times(False)
        if size >= TINY_BYTES:
            dcpl.set_chunk((min(MEDIA_CHUNK_BYTES, size),))
            dcpl.set_shuffle()
            dcpl.set_deflate(MEDIA_GZIP_LEVEL)
            dcpl.set_fletcher32()
        space = h5py.h5s.create_simple((size,))
        did = h5py.h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
        with source.open("rb") as fh:
            offset = 0
            while offset < size:
                block = fh.read(min(MEDIA_READ_BYTES, size - offset))
                if not block:
                    raise OSError(f"{source}: shorter than {size} bytes")
                arr = np.frombuffer(block, dtype="V1")
                file_space = did.get_space()
                file_space.select_hyperslab((offset,), (len(arr),))
                did.write(h5py.h5s.create_simple((len(arr),)), file_space, arr, mtype=tid)
                offset += len(arr)
        ds = h5py.Dataset(did)
        ds.attrs["mime_type"] = mime
        if dim_name is not None:
            self.attach(ds, [self.pure_dim(group, dim_name, size)])
        return ds


# --------------------------------------------------------------------- the capture


@dataclass(frozen=True, slots=True)
class _Tracks:
    """The canonical streams sorted into the roles the format names."""

    device: Track | None
    skeleton_world: dict[str, Track]
    skeleton_local: dict[str, Track]
    landmarks: dict[str, Track]
    landmarks_2d: dict[str, Track]
    imu: Stream | None
    objects: Stream | None
    joint_set: str | None
    landmark_set: str | None


def _side_tracks(streams: Sequence[Stream], role: str) -> dict[str, Track]:
    out: dict[str, Track] = {}
    for side in SIDES:
        mine = tuple(s for s in streams if s.attrs.get("hand") == side and len(s))
        if mine:
            out[side] = Track(role, side, mine)
    return out


def _one_joint_set(streams: Sequence[Stream], what: str) -> str | None:
    sets = sorted({str(s.attrs["joint_set"]) for s in streams})
    if len(sets) > 1:
        raise ValueError(f"{what} streams use different joint sets {sets}; one file has one scale")
    return sets[0] if sets else None


def sort_tracks(trajectory: Trajectory) -> _Tracks:
    """Assign every stream the format knows to its role (the rest is raw-only)."""
    streams = trajectory.streams
    joints = [s for s in streams if s.kind == "hand_joints"]
    world = [s for s in joints if "rotation" in s.fields and s.attrs.get("frame") == "world"]
    local = [s for s in joints if "rotation" in s.fields and s.attrs.get("frame") == "wrist"]
    points = [s for s in joints if "rotation" not in s.fields]
    mano = [s for s in streams if s.kind == "mano" and "joints" in s.fields]
    device = next(
        (
            s
            for name in ("device_pose", "head")
            for s in streams
            if s.name == name and s.kind == "pose"
        ),
        None,
    )
    imus = [s for s in streams if s.kind == "imu"]
    objects = [s for s in streams if s.kind == "object_pose"]
    landmark_set = _one_joint_set(points, "3D landmark")
    if mano and not points:
        landmark_set = "mano21"
    return _Tracks(
        device=Track("device", "", (device,)) if device is not None and len(device) else None,
        skeleton_world=_side_tracks(world, "skeleton"),
        skeleton_local=_side_tracks(local, "skeleton_local"),
        landmarks=_side_tracks(points or mano, "landmarks"),
        landmarks_2d=_side_tracks([s for s in streams if s.kind == "hand_landmarks_2d"], "2d"),
        imu=imus[0] if imus else None,
        objects=objects[0] if objects else None,
        joint_set=_one_joint_set(world + local, "hand skeleton"),
        landmark_set=landmark_set,
    )


def joint_names(joint_set: str) -> tuple[str, ...]:
    """Names on the ``joint`` scale: the set's joints, ARKit without `ARKIT_OMITTED`."""
    names = JOINT_SETS[joint_set]
    if joint_set == "arkit27":
        return tuple(n for n in names if n not in ARKIT_OMITTED)
    return names


def _joint_keep(joint_set: str) -> np.ndarray:
    names = JOINT_SETS[joint_set]
    kept = set(joint_names(joint_set))
    return np.array([i for i, n in enumerate(names) if n in kept], dtype=np.int64)


def _joint_pick(joint_set: str) -> slice | np.ndarray:
    """`_joint_keep` as a slice when the kept joints are one run (ARKit: all but the last),
    so selecting them is a view rather than a copy."""
    keep = _joint_keep(joint_set)
    if len(keep) and bool((np.diff(keep) == 1).all()):
        return slice(int(keep[0]), int(keep[-1]) + 1)
    return keep


def _track_validity(track: Track) -> np.ndarray:
    for key in ("hand_valid", "valid", "valid_detected"):
        if track.has_field(key):
            return track.field(key).astype(bool)
    return np.ones(len(track.timestamp_ns), bool)


def _skeleton_rows(
    track: Track, pick: slice | np.ndarray, index: np.ndarray, held: np.ndarray
) -> tuple[Rows, np.ndarray]:
    """(T, J, 7) float64 joint poses of ``track`` held onto the demo clock, NaN where not
    held or not tracked (hand and joint flags), and the (T, J) validity mask."""
    valid = (held & _track_validity(track)[index])[:, None]
    if track.has_field("joint_valid"):
        valid = valid & track.field("joint_valid")[index][:, pick].astype(bool)
    parts = (track.field("position"), track.field("rotation"))
    valid = np.broadcast_to(valid, (len(index), parts[0][:0, pick].shape[1]))
    rows = Rows(
        parts,
        np.dtype(np.float64),
        index=same_rows(index),
        pick=pick,
        valid=None if valid.all() else valid,
    )
    return rows, valid


def _landmark_points(track: Track) -> tuple[np.ndarray, np.ndarray]:
    """(N, L, 3) landmark positions and (N, L) confidence (0 = not seen)."""
    mano = track.streams[0].kind == "mano"
    points = track.field("joints" if mano else "position")
    hand = _track_validity(track)
    if track.has_field("joint_confidence"):
        conf = track.field("joint_confidence")
    elif track.has_field("hand_confidence"):
        conf = np.repeat(track.field("hand_confidence")[:, None], points.shape[1], axis=1)
    else:
        conf = np.repeat(hand.astype(np.float64)[:, None], points.shape[1], axis=1)
    return points, np.where(hand[:, None], conf, 0.0)


# ------------------------------------------------------------------------ writing


def _capture_start(trajectory: Trajectory) -> str:
    info = trajectory.info
    if info.clock == "epoch":
        return iso_utc(info.start_ns)
    return f"{iso_utc(info.start_ns)} (device clock read as Unix time, no epoch)"


def time_units(trajectory: Trajectory) -> str:
    """CF units of every ``time``: seconds since the capture start, ISO-8601 UTC.

    A device clock without an epoch (Project Aria MPS) is read as if it were Unix time;
    the root ``clock`` attribute and each ``time``'s ``comment`` say so.
    """
    return f"seconds since {iso_utc(trajectory.info.start_ns)}"


def _root_attrs(f: h5py.File, trajectory: Trajectory, history_time: str) -> None:
    info = trajectory.info
    source = " / ".join(p for p in (info.device, info.app) if p) or info.source_kind
    attrs: dict[str, Any] = {
        "Conventions": CONVENTIONS,
        "holos_convention_version": CONVENTION_VERSION,
        "title": info.title or f"capture {info.capture_id}",
        "institution": info.institution or "unknown (the capture does not say)",
        "source": f"{source} ({info.source_kind}, {info.source_version})",
        "history": f"{history_time} written by ego_assets {EXPORTER_VERSION}",
        "references": REFERENCES,
        "capture_id": info.source_capture_id or info.capture_id,
        "organization_id": info.organization_id,
        "modality": info.modality or info.source_kind,
        "capture_start": _capture_start(trajectory),
        "platform_capture_key": info.capture_id,
        "source_kind": info.source_kind,
        "clock": info.clock,
    }
    for key, value in attrs.items():
        f.attrs[key] = value


def _root_scales(w: _Writer, tracks: _Tracks) -> dict[str, h5py.Dataset]:
    root = w.f["/"]
    scales = {
        "pose_component": w.string_scale(root, "pose_component", POSE_COMPONENTS),
        "axis_xyz": w.string_scale(root, "axis_xyz", AXIS_XYZ),
        "demo": w.string_scale(root, "demo", ["demo_0"]),
    }
    scales["pose_component"].attrs["long_name"] = "pose components: position m, quaternion xyzw"
    if tracks.joint_set is not None:
        joint = w.string_scale(root, "joint", joint_names(tracks.joint_set))
        joint.attrs["long_name"] = "hand skeleton joint"
        joint.attrs["joint_set"] = tracks.joint_set
        omitted = [
            n for n in JOINT_SETS[tracks.joint_set] if n not in joint_names(tracks.joint_set)
        ]
        joint.attrs["omitted_joints"] = ", ".join(omitted)
        if omitted:
            joint.attrs["comment"] = (
                f"{tracks.joint_set} has {len(JOINT_SETS[tracks.joint_set])} joints; "
                f"{', '.join(omitted)} is left out of the whole file so that forearmWrist "
                "keeps its place in the 26-joint ARKit HandSkeleton scale"
            )
        scales["joint"] = joint
    if tracks.landmark_set is not None:
        landmark = w.string_scale(root, "landmark", JOINT_SETS[tracks.landmark_set])
        landmark.attrs["long_name"] = "hand landmark"
        landmark.attrs["joint_set"] = tracks.landmark_set
        scales["landmark"] = landmark
    if tracks.landmarks_2d:
        scales["image_uv"] = w.string_scale(root, "image_uv", IMAGE_UV)
    if tracks.objects is not None:
        ids = sorted(set(tracks.objects.fields["anchor_id"].tolist()))
        obj = w.string_scale(root, "tracked_object", ids)
        obj.attrs["long_name"] = "tracked object anchor id"
        names: dict[str, str] = {}
        for anchor, name in zip(
            tracks.objects.fields["anchor_id"].tolist(),
            tracks.objects.fields["anchor_name"].tolist(),
            strict=True,
        ):
            names.setdefault(anchor, name)
        w.strings(root, "tracked_object_name", [names[i] for i in ids], [obj])
        scales["tracked_object"] = obj
    return scales


def _robomimic_groups(w: _Writer, trajectory: Trajectory, samples: int) -> None:
    data = w.group("data")
    data.attrs["total"] = np.int64(samples)
    env_kwargs = to_jsonable(trajectory.info)
    env_args = {"env_name": ENV_NAME, "type": ENV_TYPE_NO_SIMULATOR, "env_kwargs": env_kwargs}
    data.attrs["env_args"] = json.dumps(env_args, sort_keys=True)
    mask = w.group("mask")
    w.strings(mask, "all", ["demo_0"], [w.f["demo"]])


def _demo_attrs(demo: h5py.Group, trajectory: Trajectory, master: MasterClock) -> None:
    info = trajectory.info
    demo.attrs["num_samples"] = np.int64(len(master.timestamp_ns))
    demo.attrs["frame"] = f"{info.world_frame}"
    demo.attrs["handedness"] = info.handedness
    demo.attrs["up_axis"] = info.up_axis
    demo.attrs["quaternion_order"] = info.quaternion_order
    demo.attrs["length_unit"] = info.length_unit
    demo.attrs["master_clock"] = master.description
    demo.attrs["resampling"] = RESAMPLING


@dataclass
class _Section:
    """One part of the file and what every part's writer needs."""

    w: _Writer
    trajectory: Trajectory
    tracks: _Tracks
    scales: dict
    notes: ExportNotes

    def __post_init__(self) -> None:
        """Per-part set-up after the shared fields are stored."""


class _Demo(_Section):
    """Writes ``/data/demo_0``: the one-clock view robomimic reads."""

    def __post_init__(self) -> None:
        trajectory, tracks, w = self.trajectory, self.tracks, self.w
        self.master = pick_master(tracks.skeleton_world, tracks.landmarks, tracks.device)
        self.ns = self.master.timestamp_ns
        self.time_s = (self.ns - np.int64(trajectory.info.start_ns)).astype(np.float64) / 1e9
        self.demo = w.group(DEMO)
        self.obs = w.group(f"{DEMO}/obs")
        self.time = w.time_scale(self.demo, self.time_s, time_units(trajectory))
        self.wrists: dict[str, np.ndarray] = {}
        self.device_pose: np.ndarray | None = None

    def hold(self, track: Track) -> tuple[np.ndarray, np.ndarray]:
        index, held = hold_index(track.timestamp_ns, self.ns)
        return index, held

    def obs_data(
        self, name: str, values: np.ndarray | Rows, dims: list, units: str, long_name: str, **a
    ):
        self.w.data(self.obs, name, values, [self.time, *dims], units, long_name, **a)
        self.notes.obs.append(name)
        for scale in dims:
            self.axis_labels(scale)

    def axis_labels(self, scale: h5py.Dataset) -> None:
        """A copy of a root scale's labels inside ``obs``, on that scale's axis.

        xarray's ``open_dataset(group="data/demo_0/obs")`` sees only the group's own
        variables; a variable named like its dimension becomes that axis's index, so
        ``.sel(joint="forearmWrist")`` works. robomimic reads only the obs keys it is given.
        """
        name = scale.name.rsplit("/", 1)[-1]
        if name in self.obs:
            return
        ds = self.w.strings(self.obs, name, [_label(v) for v in scale[...]], [scale])
        ds.attrs["long_name"] = f"labels of the {name} axis (copy of /{name})"

    def write(self) -> None:
        t = self.tracks
        _demo_attrs(self.demo, self.trajectory, self.master)
        self.w.data(
            self.demo,
            "timestamp_ns",
            self.ns,
            [self.time],
            "ns",
            "nanoseconds since the Unix epoch (ROS 2 convention)"
            if self.trajectory.info.clock == "epoch"
            else "nanoseconds on the device clock",
        )
        self.obs_data("timestamp", self.time_s, [], "s", "seconds since the capture start")
        pc = self.scales["pose_component"]
        if t.device is not None:
            index, held = self.hold(t.device)
            pose = np.concatenate([t.device.field("position"), t.device.field("rotation")], axis=1)
            self.device_pose = hold_rows(pose, index, held & _track_validity(t.device)[index])
            self.obs_data(
                "device_pose",
                self.device_pose,
                [pc],
                "m",
                "device (headset or phone) pose: position m, quaternion xyzw",
                frame=self.trajectory.info.world_frame,
            )
        else:
            self.notes.skip("obs/device_pose", "no device pose stream")
        self._skeletons()
        self._landmarks()
        self._objects()
        self._imu()
        self._actions_states()

    def _skeletons(self) -> None:
        t = self.tracks
        for frame, tracks, label in (
            ("world", t.skeleton_world, "world"),
            ("local", t.skeleton_local, "relative to the wrist anchor"),
        ):
            for side in SIDES:
                name = f"hand_{side}_joints_{frame}"
                track = tracks.get(side)
                if track is None or t.joint_set is None:
                    self.notes.skip(f"obs/{name}", f"no {side} hand skeleton ({frame})")
                    continue
                pick = _joint_pick(t.joint_set)
                index, held = self.hold(track)
                values, valid = _skeleton_rows(track, pick, index, held)
                self.obs_data(
                    name,
                    values,
                    [self.scales["joint"], self.scales["pose_component"]],
                    "m",
                    f"{side} hand joint poses {label}: position m, quaternion xyzw",
                    frame=str(track.streams[0].attrs.get("frame")),
                    comment="x, y, z in metres; qx, qy, qz, qw unitless",
                )
                if frame == "world":
                    wrist = joint_names(t.joint_set).index("wrist")
                    source = int(_joint_keep(t.joint_set)[wrist])
                    column = valid[:, wrist]
                    self.wrists[side] = Rows(
                        values.parts,
                        values.dtype,
                        index=values.index,
                        pick=source,
                        valid=None if column.all() else column,
                    ).array()

    def _landmarks(self) -> None:
        t = self.tracks
        for side in SIDES:
            name = f"hand_{side}_landmarks_3d"
            track = t.landmarks.get(side)
            if track is None:
                self.notes.skip(f"obs/{name}", f"no {side} hand 3D landmarks")
                self.notes.skip(f"obs/hand_{side}_landmarks_confidence", f"no {side} landmarks")
                continue
            points, conf = _landmark_points(track)
            index, held = self.hold(track)
            valid = held & _track_validity(track)[index]
            mask = None if valid.all() else valid
            values = Rows((points,), np.dtype(np.float64), index=same_rows(index), valid=mask)
            dims = [self.scales["landmark"], self.scales["axis_xyz"]]
            frame = str(track.streams[0].attrs.get("frame", "world"))
            self.obs_data(name, values, dims, "m", f"{side} hand 3D landmarks", frame=frame)
            self.obs_data(
                f"hand_{side}_landmarks_confidence",
                hold_rows(conf, index, held),
                [self.scales["landmark"]],
                "1",
                f"{side} hand per-landmark confidence, 0 = not seen",
            )
            if side not in self.wrists:
                wrist = WRIST[t.landmark_set or ""]  # MediaPipe spells it "WRIST"
                self.wrists[side] = Rows(
                    values.parts, values.dtype, index=values.index, pick=wrist, valid=mask
                ).array()

    def _objects(self) -> None:
        stream = self.tracks.objects
        if stream is None:
            self.notes.skip("obs/object_pose", "no tracked object anchors")
            return
        ids = [_label(s) for s in self.scales["tracked_object"][...]]
        anchor = np.asarray(stream.fields["anchor_id"].tolist(), dtype=object)
        pose = np.concatenate([stream.fields["position"], stream.fields["rotation"]], axis=1)
        out = np.full((len(self.ns), len(ids), 7), np.nan)
        for k, anchor_id in enumerate(ids):
            rows = np.flatnonzero(anchor == anchor_id)
            index, held = hold_index(stream.timestamp_ns[rows], self.ns)
            out[:, k] = hold_rows(pose[rows], index, held & stream.fields["valid"][rows][index])
        self.obs_data(
            "object_pose",
            out,
            [self.scales["tracked_object"], self.scales["pose_component"]],
            "m",
            "tracked object anchor poses: position m, quaternion xyzw",
            frame=str(stream.attrs.get("frame")),
        )

    def _imu(self) -> None:
        imu = self.tracks.imu
        if imu is None:
            self.notes.skip("obs/imu_accel", "no IMU stream")
            self.notes.skip("obs/imu_gyro", "no IMU stream")
            return
        index, held = hold_index(imu.timestamp_ns, self.ns)
        xyz = [self.scales["axis_xyz"]]
        frame = str(imu.attrs.get("frame"))
        self.obs_data(
            "imu_accel",
            hold_rows(imu.fields["accel"], index, held),
            xyz,
            "m s-2",
            "user acceleration, device frame",
            frame=frame,
        )
        self.obs_data(
            "imu_gyro",
            hold_rows(imu.fields["gyro"], index, held),
            xyz,
            "rad s-1",
            "rotation rate, device frame",
            frame=frame,
        )

    def _actions_states(self) -> None:
        track = self.master.track
        n = len(self.ns)
        if track is not None and track.role != "device" and track.side in self.wrists:
            side = track.side
            pose = self.wrists[side]
            derivation = ACTION_DERIVATION if pose.shape[1] == 7 else ACTION_DERIVATION_POSITION
        elif self.device_pose is not None:
            side, pose, derivation = "none", self.device_pose, ACTION_DERIVATION_DEVICE
        else:
            side, pose = "none", np.full((n, 7), np.nan)
            derivation = "no hand or device pose: identity on every row"
        actions = wrist_delta(pose)
        names = [f"d{c}" for c in POSE_COMPONENTS[: actions.shape[1]]]
        action_scale = self.w.string_scale(self.demo, "action_component", names)
        ds = self.w.data(
            self.demo,
            "actions",
            actions,
            [self.time, action_scale],
            "m",
            "wrist pose delta to the next sample: position m, quaternion xyzw",
            derivation=derivation,
            source_hand=side,
        )
        del ds.attrs["_FillValue"]  # never NaN
        parts: list[tuple[str, np.ndarray, Sequence[str]]] = []
        if self.device_pose is not None:
            parts.append(("device_pose", self.device_pose, POSE_COMPONENTS))
        for s in SIDES:
            if s in self.wrists:
                width = self.wrists[s].shape[1]
                parts.append((f"hand_{s}_wrist", self.wrists[s], POSE_COMPONENTS[:width]))
        states = np.concatenate([p[1] for p in parts], axis=1) if parts else np.zeros((n, 0))
        labels = [f"{name}.{c}" for name, _, comps in parts for c in comps]
        state_scale = self.w.string_scale(self.demo, "state_component", labels)
        self.w.data(
            self.demo,
            "states",
            states,
            [self.time, state_scale],
            "m",
            "device pose and wrist poses on the demo clock (layout on state_component)",
            comment="positions in metres, quaternions xyzw unitless; NaN where not tracked",
        )

    def next_obs(self) -> None:
        """``next_obs/<key>``: each obs key shifted by one sample, as a virtual dataset.

        robomimic reads ``next_obs`` by default (``load_next_obs=True``). The mapping
        points into this file (source file ``.``), so it costs no copy and survives a
        rename; the last row repeats the last sample.
        """
        group = self.w.group(f"{DEMO}/next_obs")
        for key in self.notes.obs:
            src = self.obs[key]
            n = src.shape[0]
            layout = h5py.VirtualLayout(src.shape, src.dtype, filename=self.w.f.filename)
            layout.dcpl.set_obj_track_times(False)  # no timestamp: same input, same bytes
            if n:
                source = h5py.VirtualSource(src)
                layout[: n - 1] = source[1:n]
                layout[n - 1] = source[n - 1]
            fill = FILL if src.dtype.kind == "f" else 0
            ds = group.create_virtual_dataset(key, layout, fillvalue=fill)
            for axis in range(src.ndim):
                ds.dims[axis].attach_scale(src.dims[axis][0])
            for name in ("units", "long_name", "_FillValue", "frame"):
                if name in src.attrs:
                    ds.attrs[name] = src.attrs[name]
            ds.attrs["comment"] = f"obs/{key} one sample later (virtual; last row repeated)"

    def frame_index(self, camera: str, frames: Stream) -> None:
        values = nearest_index(frames.timestamp_ns, self.ns)
        self.obs_data(
            f"{camera}_frame_index",
            values,
            [],
            "1",
            f"row of /holos/raw/video/{camera}/frames nearest each demo sample (-1: none)",
        )


class _Raw(_Section):
    """Writes ``/holos/raw``: every stream on its own clock, unchanged samples."""

    def __post_init__(self) -> None:
        self.units = time_units(self.trajectory)

    def clock(self, path: str, stream: Stream, rows: np.ndarray | None = None) -> tuple:
        group = self.w.group(path)
        ts = stream.timestamp_ns if rows is None else stream.timestamp_ns[rows]
        t = stream.time if rows is None else stream.time[rows]
        time = self.w.time_scale(group, t, self.units)
        self.w.data(group, "timestamp_ns", ts, [time], "ns", "source timestamp, nanoseconds")
        group.attrs["source_stream"] = stream.name
        group.attrs["stream_kind"] = stream.kind
        # every attr, so an import rebuilds the stream; netCDF has no booleans: 0/1 int8,
        # their names listed in ``boolean_attrs``
        flags = sorted(k for k, v in stream.attrs.items() if isinstance(v, bool))
        for key, value in sorted(stream.attrs.items()):
            group.attrs[key] = np.int8(value) if key in flags else value
        if flags:
            group.attrs["boolean_attrs"] = ", ".join(flags)
        self.notes.raw.append(path)
        return group, time

    def write(self) -> dict[str, str]:
        """Write every stream; returns media role -> frames group path (for decoding)."""
        placed: dict[str, str] = {}
        typed = self._typed_groups()
        for stream in sorted(self.trajectory.streams, key=lambda s: s.name):
            path, how = typed.get(stream.name, (f"holos/raw/{_safe(stream.name)}", "generic"))
            if how == "pose":
                self._pose(path, stream)
            elif how == "skeleton":
                self._skeleton(path, stream)
            elif how in ("landmarks_3d", "landmarks_2d"):
                self._landmarks(path, stream, how)
            elif how == "imu":
                self._imu(path, stream)
            elif how == "objects":
                self._objects(stream)
            elif how == "video":
                self._generic(path, stream)
                placed[str(stream.attrs["media"])] = path
            else:
                self._generic(path, stream)
        for spec_path in (
            "holos/raw/device_pose",
            "holos/raw/imu",
            "holos/raw/object_pose",
        ):
            if not any(p.startswith(spec_path) for p in self.notes.raw):
                self.notes.skip(spec_path, "the capture has no such stream")
        for kind in (
            "hand_pose_world",
            "hand_pose_local",
            "hand_landmarks_3d",
            "hand_landmarks_2d",
        ):
            for side in SIDES:
                spec_path = f"holos/raw/{kind}/{side}"
                if spec_path not in self.notes.raw:
                    self.notes.skip(spec_path, "the capture has no such stream")
        return placed

    def _typed_groups(self) -> dict[str, tuple[str, str]]:
        """Stream name -> (group path, writer) for streams with a named home in the format."""
        t = self.tracks
        out: dict[str, tuple[str, str]] = {}
        if t.device is not None:
            out[t.device.streams[0].name] = ("holos/raw/device_pose", "pose")
        for kind, tracks, how in (
            ("hand_pose_world", t.skeleton_world, "skeleton"),
            ("hand_pose_local", t.skeleton_local, "skeleton"),
            ("hand_landmarks_3d", t.landmarks, "landmarks_3d"),
            ("hand_landmarks_2d", t.landmarks_2d, "landmarks_2d"),
        ):
            for side, track in tracks.items():
                if len(track.streams) == 1 and track.streams[0].kind != "mano":
                    out[track.streams[0].name] = (f"holos/raw/{kind}/{side}", how)
        if t.imu is not None:
            out[t.imu.name] = ("holos/raw/imu", "imu")
        if t.objects is not None:
            out[t.objects.name] = ("holos/raw/object_pose", "objects")
        for s in self.trajectory.streams:
            if s.kind == "media_frames":
                out[s.name] = (f"holos/raw/video/{_safe(str(s.attrs['media']))}", "video")
        return out

    def _pose(self, path: str, stream: Stream) -> None:
        group, time = self.clock(path, stream)
        pose = np.concatenate([stream.fields["position"], stream.fields["rotation"]], axis=1)
        pc = self.scales["pose_component"]
        self.w.data(group, "pose", pose, [time, pc], "m", "pose: position m, quaternion xyzw")
        self.w.data(group, "valid", stream.fields["valid"], [time], "1", "pose reported valid")
        if "tracking_state" in stream.fields:
            ds = self.w.strings(
                group, "tracking_state", stream.fields["tracking_state"].tolist(), [time]
            )
            ds.attrs["long_name"] = "ARKit tracking state (normal, limited, notAvailable)"

    def _skeleton(self, path: str, stream: Stream) -> None:
        group, time = self.clock(path, stream)
        keep = _joint_pick(str(stream.attrs["joint_set"]))
        parts = (stream.fields["position"], stream.fields["rotation"])
        pose = Rows(parts, np.result_type(*parts), pick=keep)
        dims = [time, self.scales["joint"]]
        self.w.data(
            group,
            "joints",
            pose,
            [*dims, self.scales["pose_component"]],
            "m",
            "joint poses as recorded: position m, quaternion xyzw",
        )
        if "joint_valid" in stream.fields:
            self.w.data(
                group,
                "joint_valid",
                stream.fields["joint_valid"][:, keep],
                dims,
                "1",
                "joint tracked",
            )
        if "radius" in stream.fields:
            self.w.data(
                group, "radius", stream.fields["radius"][:, keep], dims, "m", "joint radius"
            )
        if "joint_confidence" in stream.fields:
            self.w.data(
                group,
                "joint_confidence",
                stream.fields["joint_confidence"][:, keep],
                dims,
                "1",
                "joint confidence",
            )
        self.w.data(group, "hand_valid", stream.fields["hand_valid"], [time], "1", "hand tracked")
        if "hand_confidence" in stream.fields:
            self.w.data(
                group,
                "hand_confidence",
                stream.fields["hand_confidence"],
                [time],
                "1",
                "hand confidence",
            )

    def _landmarks(self, path: str, stream: Stream, how: str) -> None:
        group, time = self.clock(path, stream)
        landmark = self.scales["landmark"]
        if how == "landmarks_3d":
            points = stream.fields["position"]
            comp, units, what = self.scales["axis_xyz"], "m", "3D landmarks, metres"
        else:
            points = stream.fields["uv"]
            comp, units, what = self.scales["image_uv"], "1", "normalized image u, v"
            group.attrs["image_origin"] = str(stream.attrs["image_origin"])
        self.w.data(group, "points", points, [time, landmark, comp], units, what)
        if "joint_confidence" in stream.fields:
            self.w.data(
                group,
                "confidence",
                stream.fields["joint_confidence"],
                [time, landmark],
                "1",
                "per-landmark confidence, 0 = not seen",
            )
        if "hand_confidence" in stream.fields:
            self.w.data(
                group,
                "hand_confidence",
                stream.fields["hand_confidence"],
                [time],
                "1",
                "hand confidence",
            )
        self.w.data(group, "hand_valid", stream.fields["hand_valid"], [time], "1", "hand detected")

    def _imu(self, path: str, stream: Stream) -> None:
        group, time = self.clock(path, stream)
        group.attrs["source"] = f"measured ({stream.attrs.get('source_file', stream.name)})"
        xyz = [time, self.scales["axis_xyz"]]
        self.w.data(
            group, "accel", stream.fields["accel"], xyz, "m s-2", "user acceleration, device frame"
        )
        self.w.data(
            group, "gyro", stream.fields["gyro"], xyz, "rad s-1", "rotation rate, device frame"
        )
        if "gravity" in stream.fields:
            self.w.data(
                group, "gravity", stream.fields["gravity"], xyz, "m s-2", "gravity, device frame"
            )

    def _objects(self, stream: Stream) -> None:
        anchors = np.asarray(stream.fields["anchor_id"].tolist(), dtype=object)
        names = stream.fields["anchor_name"]
        pose = np.concatenate([stream.fields["position"], stream.fields["rotation"]], axis=1)
        for anchor in sorted(set(anchors.tolist())):
            rows = np.flatnonzero(anchors == anchor)
            group, time = self.clock(f"holos/raw/object_pose/{_safe(anchor)}", stream, rows)
            group.attrs["anchor_id"] = anchor
            group.attrs["name"] = str(names[rows[0]])
            pc = self.scales["pose_component"]
            self.w.data(
                group,
                "pose",
                pose[rows],
                [time, pc],
                "m",
                "anchor pose: position m, quaternion xyzw",
            )
            self.w.data(group, "valid", stream.fields["valid"][rows], [time], "1", "anchor tracked")

    def _generic(self, path: str, stream: Stream) -> None:
        """Any other stream: each field as a dataset, trailing axes on pure dimensions."""
        group, time = self.clock(path, stream)
        for spec in stream.spec.fields:
            if spec.name not in stream.fields:
                continue
            values = stream.fields[spec.name]
            dims = [time]
            for axis, size in enumerate(values.shape[1:], start=1):
                dims.append(self.w.pure_dim(group, f"{spec.name}_dim{axis}", size))
            if spec.dtype == "str":
                ds = self.w.strings(group, spec.name, values.tolist(), dims)
                ds.attrs["long_name"] = spec.description
            elif spec.unit in NON_UDUNITS:
                units, comment = NON_UDUNITS[spec.unit]
                self.w.data(
                    group, spec.name, values, dims, units, spec.description, comment=comment
                )
            else:
                self.w.data(group, spec.name, values, dims, spec.unit, spec.description)


def _label(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _safe(name: str) -> str:
    """A group name from a stream, anchor or file name (no '/', not '.' or '..')."""
    cleaned = name.replace("/", "_").strip()
    return cleaned if cleaned not in ("", ".", "..") else f"_{cleaned}"


# ------------------------------------------------------------------- annotations


def _compound(rows: Sequence[tuple[Any, ...]], fields: list[tuple[str, Any]]) -> np.ndarray:
    dtype = np.dtype(
        [(name, h5py.string_dtype() if kind is str else kind) for name, kind in fields]
    )
    return np.array(rows, dtype=dtype)


def _record_dataset(w: _Writer, group_path: str, name: str, dim: str, table: np.ndarray) -> None:
    group = w.group(group_path)
    ds = group.create_dataset(name, data=table)
    w.attach(ds, [w.pure_dim(group, dim, len(table))])


def _annotations(
    w: _Writer, trajectory: Trajectory, time_s: np.ndarray, notes: ExportNotes
) -> None:
    ann = trajectory.annotations
    if ann.transcript:
        rows: list[tuple[Any, ...]] = [
            (s.start_s, s.end_s, s.text, s.is_final) for s in ann.transcript
        ]
        table = _compound(
            rows, [("start_s", "<f8"), ("end_s", "<f8"), ("text", str), ("is_final", "?")]
        )
        _record_dataset(w, "holos/transcript", "segments", "segment", table)
        tokens = [(t.segment, t.start_s, t.end_s, t.text) for t in ann.transcript_tokens]
        table = _compound(
            tokens, [("segment", "<i8"), ("start_s", "<f8"), ("end_s", "<f8"), ("text", str)]
        )
        _record_dataset(w, "holos/transcript", "tokens", "token", table)
        w.text(w.group("holos/transcript"), "full_text", ann.transcript_text)
    else:
        notes.skip("holos/transcript", "no transcript")
    if ann.procedure_steps:
        steps = ann.procedure_steps
        start, end = sample_ranges(time_s, [s.t_start for s in steps], [s.t_end for s in steps])
        rows = [
            (s.index, s.step_id, s.title, s.t_start, s.t_end, int(a), int(b))
            for s, a, b in zip(steps, start, end, strict=True)
        ]
        fields = [
            ("index", "<i8"),
            ("step_id", str),
            ("title", str),
            ("t_start", "<f8"),
            ("t_end", "<f8"),
            ("start_sample", "<i8"),
            ("end_sample", "<i8"),
        ]
        _record_dataset(w, "holos/events", "procedure_steps", "step", _compound(rows, fields))
        w.f["holos/events/procedure_steps"].attrs["comment"] = (
            "t_start, t_end: seconds since the capture start; start_sample, end_sample: "
            "indices into /data/demo_0 (end exclusive)"
        )
    else:
        notes.skip("holos/events/procedure_steps", "no procedure steps")
    if ann.vlm:
        rows = [(v.t_mono, v.t_wall, v.prompt, v.output) for v in ann.vlm]
        fields = [("t_mono", "<f8"), ("t_wall", str), ("prompt", str), ("output", str)]
        _record_dataset(w, "holos/vlm", "output", "vlm_record", _compound(rows, fields))
    else:
        notes.skip("holos/vlm/output", "no VLM outputs")


# ------------------------------------------------------------------- files, media

# FileRef role -> where its verbatim JSON goes (other JSON roles: /holos/metadata/<role>)
_JSON_HOMES = {
    "session_metadata": "holos/metadata/session",
    "stereo_calibration": "holos/metadata/stereo_calibration",
    "procedure_steps": "holos/events/procedure_steps_json",
}
# parsed into typed datasets; the verbatim copy would say the same again
_PARSED_ROLES = ("transcript", "vlm")


def _thumbnail(w: _Writer, path: Path) -> None:
    from PIL import Image

    with Image.open(path) as img:
        rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    group = w.group("holos/metadata")
    ds = w._create(group, "thumbnail", rgb)
    h, wd, c = rgb.shape
    dims = [
        w.pure_dim(group, "thumbnail_y", h),
        w.pure_dim(group, "thumbnail_x", wd),
        w.pure_dim(group, "thumbnail_channel", c),
    ]
    w.attach(ds, dims)
    w.image_attrs(ds)
    ds.attrs["long_name"] = "capture thumbnail, RGB"
    ds.attrs["units"] = "1"


def _files(w: _Writer, trajectory: Trajectory, raw_dir: Path, notes: ExportNotes) -> None:
    roles = {f.role: f for f in trajectory.files}
    for ref in trajectory.files:
        if ref.role == "thumbnail":
            _thumbnail(w, raw_dir / ref.path)
        elif ref.role in _PARSED_ROLES:
            continue
        elif ref.mime == "application/json":
            home = _JSON_HOMES.get(ref.role, f"holos/metadata/{_safe(ref.role)}")
            parent, _, name = home.rpartition("/")
            text = (raw_dir / ref.path).read_text(encoding="utf-8")
            w.text(w.group(parent), name, text, source_file=ref.path, mime_type=ref.mime)
        else:
            _embed_file(w, raw_dir, ref.path, ref.mime)
            notes.extras.append(ref.path)
    for role, home in (
        ("session_metadata", "session"),
        ("stereo_calibration", "stereo_calibration"),
    ):
        if role not in roles:
            notes.skip(f"holos/metadata/{home}", f"no {role} file")
    if "thumbnail" not in roles:
        notes.skip("holos/metadata/thumbnail", "no thumbnail")
    for rel in sorted(trajectory.extra_files):
        mime = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        _embed_file(w, raw_dir, rel, mime)
        notes.extras.append(rel)


def _embed_file(w: _Writer, raw_dir: Path, rel: str, mime: str) -> None:
    parts = [_safe(p) for p in rel.split("/") if p]
    group = w.group("/".join(["holos/files", *parts[:-1]]))
    ds = w.opaque(group, parts[-1], raw_dir / rel, mime, None)
    ds.attrs["source_file"] = rel


def _media(w: _Writer, trajectory: Trajectory, raw_dir: Path, notes: ExportNotes) -> None:
    group = w.group("media")
    for ref in trajectory.media:
        name = _safe(ref.role)
        ds = w.opaque(group, name, raw_dir / ref.path, ref.mime, f"{name}_bytes")
        ds.attrs["source_file"] = ref.path
        if ref.kind == "audio":
            ds.attrs["sample_rate_hz"] = np.int64(ref.sample_rate_hz)
            ds.attrs["channels"] = np.int64(ref.channels)
            ds.attrs["duration_s"] = np.float64(ref.duration_s)
        else:
            ds.attrs["codec"] = ref.codec
            ds.attrs["width"] = np.int64(ref.width)
            ds.attrs["height"] = np.int64(ref.height)
            ds.attrs["fps"] = np.float64(ref.fps)
            ds.attrs["duration_s"] = np.float64(ref.duration_s)
            ds.attrs["frame_count"] = np.int64(ref.frame_count)
            if ref.unit:
                ds.attrs["unit"] = ref.unit
    if not any(m.kind == "audio" for m in trajectory.media):
        notes.skip("media/audio", "no audio")
    if not any(m.kind == "video" for m in trajectory.media):
        notes.skip("media/<camera>", "no video")


def _decode_frames(
    w: _Writer,
    trajectory: Trajectory,
    raw_dir: Path,
    placed: dict[str, str],
    demo: _Demo,
    notes: ExportNotes,
) -> None:
    """``/holos/raw/video/<camera>/frames`` uint8 [F, H, W, 3] (one frame per chunk) and
    ``obs/<camera>_frame_index``; rows follow the camera's frame timing stream."""
    import av

    for ref in trajectory.media:
        if ref.kind != "video":
            continue
        if ref.frames_stream is None or ref.role not in placed:
            notes.skip(f"holos/raw/video/{ref.role}/frames", "the video has no frame timing")
            continue
        frames = trajectory.stream(ref.frames_stream)
        group = w.f[placed[ref.role]]
        wanted = np.asarray(frames.fields["frame_index"], dtype=np.int64)
        rows_of: dict[int, list[int]] = {}
        for row, index in enumerate(wanted.tolist()):
            rows_of.setdefault(index, []).append(row)
        with av.open(str(raw_dir / ref.path)) as container:
            stream = container.streams.video[0]
            h, wd = stream.codec_context.height, stream.codec_context.width
            dims = [
                group["time"],
                w.pure_dim(group, "y", h),
                w.pure_dim(group, "x", wd),
                w.pure_dim(group, "channel", 3),
            ]
            ds = group.create_dataset(
                "frames",
                shape=(len(wanted), h, wd, 3),
                dtype=np.uint8,
                chunks=(1, h, wd, 3),
                compression="gzip",
                compression_opts=GZIP_LEVEL,
                shuffle=True,
                fletcher32=True,
            )
            for number, frame in enumerate(container.decode(stream)):
                for row in rows_of.get(number, ()):
                    ds[row] = frame.to_ndarray(format="rgb24")
        w.attach(ds, dims)
        w.image_attrs(ds)
        ds.attrs["long_name"] = f"decoded {ref.role} frames, RGB, rows as the frame timing"
        ds.attrs["units"] = "1"
        demo.frame_index(_safe(ref.role), frames)


# ---------------------------------------------------------------------------- entry


def write_file(
    trajectory: Trajectory,
    raw_dir: Path,
    out: Path,
    *,
    decode_frames: bool = False,
    history_time: str | None = None,
) -> ExportNotes:
    """Write the export of ``trajectory`` to ``out`` (not atomic: see `write_holos_hdf5`).

    Args:
        trajectory: the canonical capture.
        raw_dir: the raw capture folder (media, verbatim files and extras are read here).
        out: the file to create (overwritten).
        decode_frames: also write decoded video frames and ``obs/<camera>_frame_index``.
        history_time: ISO-8601 time for ``history`` (default: now, UTC).
    """
    raw_dir = Path(raw_dir)
    notes = ExportNotes(trajectory.info.capture_id, trajectory.info.source_kind)
    notes.decode_frames = decode_frames
    history_time = history_time or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tracks = sort_tracks(trajectory)
    sections = 7 + int(decode_frames)  # reported as WRITE_TASK progress, one unit each
    with h5py.File(out, "w", track_order=False) as f:
        report(WRITE_TASK, 0, sections)
        w = _Writer(f, device_clock=trajectory.info.clock == "device")
        _root_attrs(f, trajectory, history_time)
        scales = _root_scales(w, tracks)
        demo = _Demo(w, trajectory, tracks, scales, notes)
        notes.samples = len(demo.ns)
        notes.master_clock = demo.master.description
        _robomimic_groups(w, trajectory, notes.samples)
        report(WRITE_TASK, 1, sections)
        demo.write()
        report(WRITE_TASK, 2, sections)
        placed = _Raw(w, trajectory, tracks, scales, notes).write()
        report(WRITE_TASK, 3, sections)
        _annotations(w, trajectory, demo.time_s, notes)
        _files(w, trajectory, raw_dir, notes)
        report(WRITE_TASK, 4, sections)
        _media(w, trajectory, raw_dir, notes)
        report(WRITE_TASK, 5, sections)
        if decode_frames:
            _decode_frames(w, trajectory, raw_dir, placed, demo, notes)
            report(WRITE_TASK, 6, sections)
        demo.next_obs()
    report(WRITE_TASK, sections, sections)
    return notes


def write_holos_hdf5(
    trajectory: Trajectory,
    raw_dir: Path,
    out: Path,
    *,
    decode_frames: bool = False,
    history_time: str | None = None,
) -> ExportNotes:
    """Write the export atomically: a temporary sibling renamed onto ``out``
    (`fileio.atomic_output`; a killed run's temporary is cleared by
    `fileio.remove_temporaries`).

    See `write_file` for the arguments. Returns the export notes (also what the JSON
    sidecar holds).
    """
    with atomic_output(Path(out), fsync=True, lock=False) as tmp:  # HDF5 locks it
        return write_file(
            trajectory, raw_dir, tmp, decode_frames=decode_frames, history_time=history_time
        )


def notes_bytes(notes: ExportNotes) -> bytes:
    return notes.to_json().encode("utf-8")


def read_opaque(ds: h5py.Dataset) -> tuple[str, bytes]:
    """(MIME tag, bytes) of a tagged opaque dataset (h5py cannot slice these)."""
    tid = ds.id.get_type()
    buf = np.empty(ds.shape, dtype=f"V{tid.get_size()}")
    if ds.size:
        ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=tid)
    return tid.get_tag().decode("ascii"), buf.tobytes()
