"""The Holos HDF5 writer core: the format's constants, the export notes and `H5Writer`
(datasets, scales, attributes and opaque media over one open file).

Part of the writer of `ego_assets.formats.holos_hdf5` (the format: docs/formats/holos-hdf5.md).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ego_assets.formats.holos_clock import (
    MAX_AGE_NS,
    Rows,
)
from ego_assets.trajectory.records import to_jsonable

if TYPE_CHECKING:
    import h5py  # imported where used: a code location defining assets loads no h5py

FORMAT_NAME = "holos_hdf5"
CONVENTION_VERSION = "HolosCapture-1.0"
CONVENTIONS = f"CF-1.11, {CONVENTION_VERSION}"
# Code version of the exporter: bump exactly when the bytes for an unchanged input change.
EXPORTER_VERSION = f"{FORMAT_NAME}-2+{CONVENTION_VERSION}"
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
    import h5py

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


def label_text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def safe_name(name: str) -> str:
    """A group name from a stream, anchor or file name (no '/', not '.' or '..')."""
    cleaned = name.replace("/", "_").strip()
    return cleaned if cleaned not in ("", ".", "..") else f"_{cleaned}"


class H5Writer:
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
        import h5py

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
        import h5py

        ds = group.create_dataset(
            name, data=np.array(list(values), dtype=object), dtype=h5py.string_dtype()
        )
        self.attach(ds, dims)
        return ds

    def text(self, group: h5py.Group, name: str, text: str, **attrs: Any) -> h5py.Dataset:
        """A scalar variable-length UTF-8 string dataset."""
        import h5py

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
        import h5py

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
