"""The HDF5 layer of the Holos writer: `H5Writer` (datasets, scales, attributes and
opaque media over one open file) on h5py's low-level API.

A file holds hundreds of attributes and about a hundred datasets. h5py's high-level
calls guess a type, build property lists and dataspaces and wrap every object anew for
each of them (about 0.1 ms an attribute, as much as HDF5's own work); here the types
and dataspaces are made once and the HDF5 calls are those h5py makes, in the same
order and with the same arguments, so the file's bytes are the same
(`test_the_low_level_calls_write_what_h5py_writes`, the export digests).

Part of the writer of `ego_assets.formats.holos_hdf5` (the format: docs/formats/holos-hdf5.md).
Imported only when writing (it loads h5py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from h5py import h5a, h5d, h5ds, h5p, h5s, h5t

from ego_assets.formats.holos_clock import Rows
from ego_assets.formats.holos_writer import (
    BLOCK_BYTES,
    DEVICE_CLOCK_COMMENT,
    FILL,
    GZIP_LEVEL,
    MEDIA_CHUNK_BYTES,
    MEDIA_GZIP_LEVEL,
    MEDIA_READ_BYTES,
    OBS_CHUNK_ROWS,
    PURE_DIM,
    TINY_BYTES,
    chunk_rows,
)

STRING = h5py.string_dtype()  # variable-length UTF-8, as h5py stores a Python str
_NUMERIC_SCALARS = (np.float64, np.float32, np.int64, np.int32, np.int16, np.int8, np.uint8)
_INT64 = (-(2**63), 2**63)


@functools.cache
def _cached_types(key: str) -> tuple[h5t.TypeID, h5t.TypeID]:
    dtype = STRING if key == "str" else np.dtype(key)
    return h5t.py_create(dtype, logical=True), h5t.py_create(dtype)


def _types(dtype: np.dtype) -> tuple[h5t.TypeID, h5t.TypeID]:
    """(file type, memory type) h5py derives for ``dtype`` (``py_create``, logical and
    bit for bit): made once for `STRING` and plain numbers."""
    if dtype is STRING:
        return _cached_types("str")
    if dtype.kind in "fiu":
        return _cached_types(dtype.str)
    return h5t.py_create(dtype, logical=True), h5t.py_create(dtype)


@functools.cache
def _scalar_space() -> h5s.SpaceID:
    return h5s.create_simple(())  # what h5py makes for a 0-d value (HDF5 copies it)


def _attr_value(value: Any) -> tuple[np.ndarray, np.dtype] | None:
    """The 0-d array h5py would write for ``value`` and its dtype; None where h5py's own
    guessing is needed (bools, sequences, arrays, integers beyond int64)."""
    kind = type(value)
    if kind is str:
        return np.array(value, dtype=STRING), STRING
    if kind is float:
        data = np.array(value, dtype=np.float64)
    elif kind is int and _INT64[0] <= value < _INT64[1]:
        data = np.array(value, dtype=np.int64)
    elif kind in _NUMERIC_SCALARS:
        data = np.asarray(value)
    else:
        return None
    return data, data.dtype


def write_attrs(obj: h5py.HLObject, items: Iterable[tuple[str, Any]]) -> None:
    """``obj.attrs[name] = value`` for each item, in order, with the same HDF5 calls
    (delete an existing one, create, write) but the types made once per dtype."""
    oid = obj.id
    for name, value in items:
        found = _attr_value(value)
        if found is None:
            obj.attrs[name] = value
            continue
        data, dtype = found
        key = name.encode("utf-8")
        if h5a.exists(oid, key):
            h5a.delete(oid, key)
        ftype, mtype = _types(dtype)
        attr = h5a.create(oid, key, ftype, _scalar_space())
        attr.write(data, mtype=mtype)
        attr.close()


def fixed_ascii_attr(obj: h5py.HLObject, name: str, text: str) -> None:
    """A NULLTERM fixed-length ASCII string attribute (what the Image spec prescribes)."""
    tid = h5t.C_S1.copy()
    tid.set_size(len(text) + 1)
    tid.set_strpad(h5t.STR_NULLTERM)
    if h5a.exists(obj.id, name.encode()):
        h5a.delete(obj.id, name.encode())
    attr = h5a.create(obj.id, name.encode(), tid, h5s.create(h5s.SCALAR))
    attr.write(np.array(text.encode("ascii"), dtype=f"S{len(text) + 1}"), mtype=tid)


class Written(h5py.Dataset):
    """A dataset this writer created: its shape is known without asking HDF5 (none of
    them is resizable)."""

    def __init__(self, bind: h5d.DatasetID, shape: tuple[int, ...]) -> None:
        super().__init__(bind)
        self._known_shape = shape

    @property
    def shape(self) -> tuple[int, ...]:
        return self._known_shape

    @property
    def ndim(self) -> int:
        return len(self._known_shape)


def _dcpl(chunks: tuple[int, ...] | None, gzip: int | None, fill: np.ndarray | None) -> Any:
    """The creation property list h5py's ``create_dataset`` builds (``fill_dcpl``, then
    the fill value, no times, untracked attribute order), filters shuffle, gzip,
    Fletcher-32 when ``gzip`` is set."""
    dcpl = h5p.create(h5p.DATASET_CREATE)
    if chunks is not None:
        dcpl.set_chunk(chunks)
        if gzip is not None:
            dcpl.set_shuffle()
            dcpl.set_deflate(gzip)
            dcpl.set_fletcher32()
    if fill is not None:
        dcpl.set_fill_value(fill)
    dcpl.set_obj_track_times(False)
    dcpl.set_attr_creation_order(0)
    return dcpl


def new_dataset(
    group: h5py.Group,
    name: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    *,
    data: np.ndarray | None = None,
    chunks: tuple[int, ...] | None = None,
    gzip: int | None = None,
    fill: float | None = None,
) -> Written:
    """``group.create_dataset(name, shape, dtype, data, chunks, compression="gzip",
    compression_opts=gzip, shuffle, fletcher32, fillvalue=fill)`` as h5py runs it.

    ``dtype`` `STRING` makes variable-length UTF-8 strings (``data``: an object array).
    """
    ftype = _types(dtype if dtype is STRING else np.dtype(dtype))[0]
    dcpl = _dcpl(chunks, gzip, None if fill is None else np.array(fill))
    space = _scalar_space() if shape == () else h5s.create_simple(shape)
    dsid = h5d.create(group.id, name.encode("utf-8"), ftype, space, dcpl=dcpl)
    if data is not None:
        dsid.write(h5s.ALL, h5s.ALL, data)
    return Written(dsid, shape)


def shifted_view(group: h5py.Group, name: str, source: str, shape: tuple, dtype: Any) -> Written:
    """A virtual dataset: the dataset ``source`` (a path in this file) one row later,
    its last row repeated; what ``h5py.VirtualLayout`` builds for
    ``layout[:n-1] = source[1:n]; layout[n-1] = source[n-1]`` with the mapping's file
    ``.`` (this file), no timestamps, fill NaN for floats and 0 otherwise."""
    dtype = np.dtype(dtype)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_layout(h5d.VIRTUAL)
    dcpl.set_obj_track_times(False)
    n = shape[0]
    if n:
        src = source.encode("utf-8")
        rest = (0,) * (len(shape) - 1)
        for dst_start, src_start, rows in ((0, 1, n - 1), (n - 1, n - 1, 1)):
            dst, src_space = h5s.create_simple(shape), h5s.create_simple(shape)
            if rows:
                dst.select_hyperslab((dst_start, *rest), (rows, *shape[1:]))
                src_space.select_hyperslab((src_start, *rest), (rows, *shape[1:]))
            else:
                dst.select_none()
                src_space.select_none()
            dcpl.set_virtual(dst, b".", src, src_space)
    dcpl.set_fill_value(np.array([FILL if dtype.kind == "f" else 0]))
    dsid = h5d.create(
        group.id,
        name.encode("utf-8"),
        h5t.py_create(dtype, logical=1),
        h5s.create_simple(shape),
        dcpl=dcpl,
    )
    return Written(dsid, shape)


def read_attr(oid: Any, name: str) -> Any:
    """``obj.attrs[name]`` of an object's low-level id, read as h5py reads it (one
    ``H5Aread``; variable-length strings decoded)."""
    attr = h5a.open(oid, name.encode("utf-8"))
    dtype = attr.dtype
    data = np.zeros(attr.shape, dtype=dtype)
    attr.read(data, mtype=h5t.py_create(dtype))
    info = h5t.check_string_dtype(dtype)
    if info is not None and info.length is None:
        text = [b.decode("utf-8", "surrogateescape") for b in data.flat]
        data = np.array(text, dtype=dtype).reshape(data.shape)
    return data[()] if data.ndim == 0 else data


def next_row_view(
    group: h5py.Group, source: h5py.Group, name: str, path: str, comment: str
) -> None:
    """``group/name``: a `shifted_view` of ``source/name`` (at ``path`` in the file) with
    its scales and its ``units``, ``long_name``, ``_FillValue`` and ``frame`` attributes,
    then ``comment``.

    The scales and attributes are read from the source just before each is attached or
    written, as ``src.dims[axis][0]`` and ``src.attrs[key]`` read them: reading
    variable-length values reorders HDF5's global heaps, so the same reads, in the same
    order, keep the same placement of what is written next (the same bytes).
    """
    src = h5d.open(source.id, name.encode("utf-8"))
    ds = shifted_view(group, name, path, src.shape, src.dtype)
    for axis in range(src.rank):
        scales: list[h5d.DatasetID] = []
        h5ds.iterate(src, axis, scales.append, 0)
        h5ds.attach_scale(ds.id, scales[0], axis)
    for key in ("units", "long_name", "_FillValue", "frame"):
        if h5a.exists(src, key.encode()):
            write_attrs(ds, [(key, read_attr(src, key))])
    write_attrs(ds, [("comment", comment)])


class H5Writer:
    """Dataset, scale and attribute helpers over one open file (deterministic layout)."""

    def __init__(self, f: h5py.File, device_clock: bool = False) -> None:
        self.f = f
        self.device_clock = device_clock
        self._groups: dict[str, h5py.Group] = {}
        self._made: set[str] = set()  # groups made, with their parents

    def group(self, path: str) -> h5py.Group:
        """The group at ``path`` (relative to the root), created with its parents when
        missing. Every group of the file is made here, so one this writer has not made
        is missing: no lookup in the file (HDF5 would refuse to make it twice)."""
        group = self._groups.get(path)
        if group is None:
            if path in self._made:
                group = self.f[path]
            else:
                group = self.f.create_group(path, track_order=False)
                parts = path.split("/")
                self._made.update("/".join(parts[:end]) for end in range(1, len(parts) + 1))
            self._groups[path] = group
        return group

    @staticmethod
    def attrs(obj: h5py.HLObject, **attrs: Any) -> None:
        """Attributes of ``obj``, in this order (`write_attrs`)."""
        write_attrs(obj, attrs.items())

    def string_scale(self, group: h5py.Group, name: str, values: Sequence[str]) -> Written:
        """A 1-D variable-length UTF-8 coordinate scale named ``name``."""
        ds = self._strings(group, name, values)
        h5ds.set_scale(ds.id, name.encode("utf-8"))
        return ds

    @staticmethod
    def _strings(group: h5py.Group, name: str, values: Sequence[str]) -> Written:
        data = np.array(list(values), dtype=STRING)
        return new_dataset(group, name, data.shape, STRING, data=data)

    def pure_dim(self, group: h5py.Group, name: str, size: int) -> Written:
        """A netCDF-4 dimension without values (no bytes stored)."""
        ds = new_dataset(group, name, (size,), np.dtype(">f4"))
        h5ds.set_scale(ds.id, f"{PURE_DIM}{size:10d}".encode())
        return ds

    def time_scale(self, group: h5py.Group, time_s: np.ndarray, units: str) -> Written:
        """``time`` float64 seconds since the capture start: the CF time coordinate."""
        ds = self._create(group, "time", np.asarray(time_s, dtype=np.float64))
        h5ds.set_scale(ds.id, b"time")
        attrs: dict[str, Any] = {
            "units": units,
            "long_name": "time since the capture start",
            "standard_name": "time",
            "axis": "T",
            "calendar": "proleptic_gregorian",
            "units_metadata": "leap_seconds: none",
        }
        if self.device_clock:
            attrs["comment"] = DEVICE_CLOCK_COMMENT
        write_attrs(ds, attrs.items())
        return ds

    def _create(
        self, group: h5py.Group, name: str, data: np.ndarray | Rows, fill: bool = False
    ) -> Written:
        """A dataset holding ``data``: time-major gzip chunks unless tiny.

        `Rows` are written in blocks of whole chunks (about `BLOCK_BYTES`), each assembled
        just before it is written, so no full-size copy of the values ever exists.
        """
        if not isinstance(data, Rows):
            data = np.ascontiguousarray(data)
        shape, dtype = data.shape, np.dtype(data.dtype)
        row_bytes = math.prod(shape[1:]) * dtype.itemsize
        rows = shape[0] if shape else 0
        chunks = None
        if row_bytes * rows >= TINY_BYTES and rows > 0:
            rows = chunk_rows(row_bytes, shape[0])
            if group.name.endswith("/obs"):  # loaders read short windows of obs
                rows = min(rows, OBS_CHUNK_ROWS)
            chunks = (rows, *shape[1:])
        gzip = GZIP_LEVEL if chunks is not None else None
        fill_value = FILL if fill else None
        if not isinstance(data, Rows):
            return new_dataset(
                group, name, shape, dtype, data=data, chunks=chunks, gzip=gzip, fill=fill_value
            )
        ds = new_dataset(group, name, shape, dtype, chunks=chunks, gzip=gzip, fill=fill_value)
        step = max(1, rows) * max(1, BLOCK_BYTES // max(1, rows * row_bytes))
        rest = (0,) * (len(shape) - 1)
        for start in range(0, shape[0], step):
            stop = min(start + step, shape[0])
            block = data.block(start, stop)
            file_space = ds.id.get_space()
            file_space.select_hyperslab((start, *rest), block.shape)
            ds.id.write(h5s.create_simple(block.shape), file_space, block)
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
    ) -> Written:
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
        head: list[tuple[str, Any]] = [("units", units), ("long_name", long_name)]
        if is_float:
            head.append(("_FillValue", np.float64(FILL)))
        write_attrs(ds, [*head, *attrs.items()])
        return ds

    def strings(
        self, group: h5py.Group, name: str, values: Sequence[str], dims: Sequence[h5py.Dataset]
    ) -> Written:
        """A variable-length UTF-8 string dataset (HDF5 cannot filter these)."""
        ds = self._strings(group, name, values)
        self.attach(ds, dims)
        return ds

    def text(self, group: h5py.Group, name: str, text: str, **attrs: Any) -> Written:
        """A scalar variable-length UTF-8 string dataset."""
        ds = new_dataset(group, name, (), STRING, data=np.array(text, dtype=STRING))
        write_attrs(ds, attrs.items())
        return ds

    @staticmethod
    def attach(ds: h5py.Dataset, dims: Sequence[h5py.Dataset]) -> None:
        """Attach ``dims[axis]`` as the scale of each axis (sizes checked)."""
        shape = ds.shape
        if len(dims) != len(shape):
            raise ValueError(f"{ds.name}: {len(shape)} axes but {len(dims)} scales")
        for axis, scale in enumerate(dims):
            if scale.shape[0] != shape[axis]:
                raise ValueError(
                    f"{ds.name}: axis {axis} has {shape[axis]} entries, "
                    f"scale {scale.name} has {scale.shape[0]}"
                )
            h5ds.attach_scale(ds.id, scale.id, axis)

    def image_attrs(self, ds: h5py.Dataset) -> None:
        """Image spec 1.2 attributes of a truecolor, pixel-interlaced picture.

        Written after the scales are attached: HDF5 refuses to attach scales to an IMAGE.
        """
        fixed_ascii_attr(ds, "CLASS", "IMAGE")
        fixed_ascii_attr(ds, "IMAGE_VERSION", "1.2")
        fixed_ascii_attr(ds, "IMAGE_SUBCLASS", "IMAGE_TRUECOLOR")
        fixed_ascii_attr(ds, "INTERLACE_MODE", "INTERLACE_PIXEL")

    def opaque(
        self, group: h5py.Group, name: str, source: Path, mime: str, dim_name: str | None
    ) -> h5py.Dataset:
        """The bytes of ``source`` as a 1-D ``H5T_OPAQUE`` dataset tagged ``mime``.

        One element per byte, 1 MiB chunks, gzip + shuffle + Fletcher-32, streamed from
        the file in blocks. The type is transient (committing it breaks h5netcdf).
        ``dim_name`` adds a pure-dimension scale for the byte axis in the same group.
        """
        size = source.stat().st_size
        tid = h5t.create(h5t.OPAQUE, 1)
        tid.set_tag(mime.encode("ascii"))
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_obj_track_times(False)
        if size >= TINY_BYTES:
            dcpl.set_chunk((min(MEDIA_CHUNK_BYTES, size),))
            dcpl.set_shuffle()
            dcpl.set_deflate(MEDIA_GZIP_LEVEL)
            dcpl.set_fletcher32()
        space = h5s.create_simple((size,))
        did = h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
        with source.open("rb") as fh:
            offset = 0
            while offset < size:
                block = fh.read(min(MEDIA_READ_BYTES, size - offset))
                if not block:
                    raise OSError(f"{source}: shorter than {size} bytes")
                arr = np.frombuffer(block, dtype="V1")
                file_space = did.get_space()
                file_space.select_hyperslab((offset,), (len(arr),))
                did.write(h5s.create_simple((len(arr),)), file_space, arr, mtype=tid)
                offset += len(arr)
        ds = Written(did, (size,))
        write_attrs(ds, [("mime_type", mime)])
        if dim_name is not None:
            self.attach(ds, [self.pure_dim(group, dim_name, size)])
        return ds
