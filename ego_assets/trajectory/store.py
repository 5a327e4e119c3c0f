"""On-disk form of a `Trajectory`: one Parquet file per stream plus ``capture.json``.

Layout of an episode folder::

    capture.json                 header (info, annotations, media, files, quirks) + stream index
    streams/<stream name>.parquet  timestamp_ns int64, time float64, flags uint8, then fields

A field with a per-sample shape (layout 2, schema metadata ``layout`` = ``"2"``):

* in a stream of at most `LIST_MAX_ROWS` rows, one ``fixed_size_list`` column named
  after the field, each sample's values in row-major order (``position`` of (N, 27, 3)
  is a list of 81 per row). Parquet's cost is about 70 us per column whatever its
  length, so on a short stream (a 10 s episode: 300 rows, ~700 components) the column
  count, not the bytes, sets the write and read time;
* in a longer stream, one column per scalar component, named ``<field>.<i>[.<j>]``
  (``position.3.1`` is joint 3, axis y): each column stays smooth in time, so
  byte-stream-split + zstd stores values a device rounded (6 decimals) up to 5x smaller
  than interleaved lists, and compression, not the column count, sets the time.

Layout 1 (stores written before, no ``layout`` key) is the second form for every
stream; `table_to_stream` reads both, by column. The field's shape and unit are in the
schema metadata ``fields`` and in the stream index. Writes go to a temporary sibling
folder that is renamed into place, so readers see the old episode or the new one, never
half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.trajectory.model import Trajectory, TrajectoryHeader
from ego_assets.trajectory.streams import STREAM_KINDS, Stream

CAPTURE_JSON = "capture.json"
STREAMS_DIR = "streams"
# zstd level 1 over byte-stream-split floats, no dictionaries: sensor floats rarely
# repeat; this writes ~3x faster than zstd defaults and, per component, ~4x smaller.
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1, "use_dictionary": False}
# `atomic_directory`'s hidden siblings of a target: ``.<name>.<random>.tmp`` while it is
# written, ``.<name>.old-<pid>`` (the previous version) while it is swapped in.
FOLDER_MODE = 0o755  # rwxr-xr-x: published stage folders are readable like any other
STAGING_SUFFIX = ".tmp"
OLD_MARK = ".old-"
STORE_LAYOUT = 2  # see the module docstring; 1: every shaped field one column per component
LIST_MAX_ROWS = 1024  # streams up to this many rows keep a shaped field as one list column
# `read_trajectory` keeps the last trajectories it read, up to this many bytes of arrays
READ_CACHE_BYTES = 256 * 1024 * 1024
_READ_CACHE: OrderedDict[tuple[Any, ...], tuple[Trajectory, int]] = OrderedDict()
_READ_LOCK = threading.Lock()


def component_names(name: str, shape: tuple[int, ...]) -> list[str]:
    """Column names of a shaped field, row-major (``position.0.0``, ``position.0.1``...)."""
    return [".".join([name, *map(str, idx)]) for idx in np.ndindex(*shape)]


def stream_to_table(stream: Stream) -> pa.Table:
    """Arrow table of one stream (see the module docstring for the layout)."""
    columns: list[pa.Array] = [
        pa.array(stream.timestamp_ns),
        pa.array(stream.time),
        pa.array(stream.flags),
    ]
    names = ["timestamp_ns", "time", "flags"]
    field_meta: dict[str, dict[str, Any]] = {}
    as_lists = len(stream) <= LIST_MAX_ROWS
    for spec in stream.spec.fields:
        if spec.name not in stream.fields:
            continue
        arr = stream.fields[spec.name]
        shape = tuple(arr.shape[1:])
        field_meta[spec.name] = {"shape": list(shape), "unit": spec.unit, "dtype": spec.dtype}
        if spec.dtype == "str":
            columns.append(pa.array(arr.astype(object), type=pa.string()))
            names.append(spec.name)
        elif not shape:
            columns.append(pa.array(arr))
            names.append(spec.name)
        elif as_lists:
            flat = pa.array(np.ascontiguousarray(arr).reshape(-1))
            columns.append(pa.FixedSizeListArray.from_arrays(flat, int(np.prod(shape))))
            names.append(spec.name)
        else:
            columns.extend(_component_arrays(arr.reshape(len(arr), -1)))
            names.extend(component_names(spec.name, shape))
    meta = {
        "kind": stream.kind,
        "name": stream.name,
        "attrs": json.dumps(dict(stream.attrs)),
        "fields": json.dumps(field_meta),
        "layout": str(STORE_LAYOUT),
    }
    schema = pa.schema(
        [pa.field(n, c.type, nullable=False) for n, c in zip(names, columns, strict=True)],
        metadata=meta,
    )
    return pa.Table.from_arrays(columns, schema=schema)


def _component_arrays(values: np.ndarray) -> list[pa.Array]:
    """One Arrow array per column of (N, W) ``values``: zero-copy slices of one transposed
    buffer for numbers, one array per component for booleans (Arrow packs them in bits)."""
    n, width = values.shape
    by_component = np.ascontiguousarray(values.T)
    if values.dtype == np.bool_:
        return [pa.array(row) for row in by_component]
    kind, buffer = pa.from_numpy_dtype(values.dtype), pa.py_buffer(by_component)
    return [pa.Array.from_buffers(kind, n, [None, buffer], offset=i * n) for i in range(width)]


def table_to_stream(table: pa.Table) -> Stream:
    """Inverse of `stream_to_table`."""
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    field_meta = json.loads(meta["fields"])
    fields: dict[str, np.ndarray] = {}
    n = table.num_rows
    for spec in STREAM_KINDS[meta["kind"]].fields:
        if spec.name not in field_meta:
            continue
        shape = tuple(field_meta[spec.name]["shape"])
        if spec.dtype == "str":
            fields[spec.name] = np.array(table.column(spec.name).to_pylist(), dtype=object)
        elif not shape:
            values = table.column(spec.name).to_numpy()
            fields[spec.name] = values.astype(spec.dtype, copy=False)
        elif spec.name in table.column_names:  # one fixed_size_list column
            values = table.column(spec.name).combine_chunks().flatten()
            flat = values.to_numpy(zero_copy_only=False).astype(spec.dtype)  # writable, as before
            fields[spec.name] = flat.reshape((n, *shape))
        else:  # one column per component (layout 1, and long streams of layout 2)
            out = np.empty((n, int(np.prod(shape))), dtype=spec.dtype)
            for i, name in enumerate(component_names(spec.name, shape)):
                out[:, i] = table.column(name).to_numpy()
            fields[spec.name] = out.reshape((n, *shape))
    return Stream(
        name=meta["name"],
        kind=meta["kind"],
        timestamp_ns=table.column("timestamp_ns").to_numpy().astype(np.int64, copy=False),
        time=table.column("time").to_numpy().astype(np.float64, copy=False),
        fields=MappingProxyType(fields),
        attrs=MappingProxyType(json.loads(meta["attrs"])),
        flags=table.column("flags").to_numpy().astype(np.uint8, copy=False),
    )


def _float_columns(schema: pa.Schema) -> list[str]:
    """Parquet paths of the float columns (for byte-stream-split encoding): a float column
    by its name, the values of a float list column as ``<name>.list.element``."""
    paths = []
    for f in schema:
        if pa.types.is_floating(f.type):
            paths.append(f.name)
        elif pa.types.is_fixed_size_list(f.type) and pa.types.is_floating(f.type.value_type):
            paths.append(f"{f.name}.list.element")
    return paths


def stream_file_name(name: str) -> str:
    """File name of a stream inside ``streams/`` (stream names are checked to be safe)."""
    if not name or "/" in name or name.startswith(".") or "\\" in name:
        raise ValueError(f"stream name {name!r} is not a safe file name")
    return f"{name}.parquet"


@contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary folder next to ``target`` that replaces it on success.

    On error the temporary folder is removed and ``target`` is left as it was. A killed
    process leaves it (and, mid-swap, the moved-aside old version) behind: see
    `remove_leftovers`.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(
        tempfile.mkdtemp(prefix=f".{target.name}.", suffix=STAGING_SUFFIX, dir=target.parent)
    )
    # mkdtemp makes the folder 0700; the published folder gets the usual 0755 like every
    # other folder the platform writes (the umask still applies to the files inside it)
    tmp.chmod(FOLDER_MODE)
    try:
        yield tmp
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}{OLD_MARK}{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_leftovers(target: Path) -> list[Path]:
    """Delete the hidden siblings a killed `atomic_directory` of ``target`` left behind (its
    ``.<name>.<random>.tmp`` staging folder, its ``.<name>.old-<pid>`` previous version).

    Only safe while no other writer of ``target`` runs (`Storage.write_to` calls it under
    the target's writer lock).
    """
    if not target.parent.is_dir():
        return []
    stale = sorted(
        p
        for p in target.parent.glob(f".{target.name}.*")
        if p.is_dir() and (p.name.endswith(STAGING_SUFFIX) or OLD_MARK in p.name)
    )
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def stream_index_entry(stream: Stream) -> dict[str, Any]:
    """The stream's entry in ``capture.json``: name, kind, file, rows, first and last
    time (s since the capture start), dims and attrs."""
    return {
        "name": stream.name,
        "kind": stream.kind,
        "file": f"{STREAMS_DIR}/{stream_file_name(stream.name)}",
        "rows": len(stream),
        "t_first": float(stream.time.min()) if len(stream) else None,
        "t_last": float(stream.time.max()) if len(stream) else None,
        "dims": stream.dims(),
        "attrs": dict(stream.attrs),
    }


def write_trajectory_files(trajectory: Trajectory, folder: Path) -> dict[str, pa.Table]:
    """Write ``trajectory`` into the existing, empty ``folder`` (not atomic on its own);
    returns the Arrow table written per stream name (for `remember_written`)."""
    folder = Path(folder)
    (folder / STREAMS_DIR).mkdir()
    index = []
    tables: dict[str, pa.Table] = {}
    for stream in sorted(trajectory.streams, key=lambda s: s.name):
        file_name = stream_file_name(stream.name)
        table = tables[stream.name] = stream_to_table(stream)
        pq.write_table(
            table,
            folder / STREAMS_DIR / file_name,
            write_statistics=False,
            use_byte_stream_split=_float_columns(table.schema),
            **PARQUET_OPTIONS,
        )
        index.append(stream_index_entry(stream))
    header: dict[str, Any] = trajectory.header_to_dict()
    header["streams"] = index
    header["duration_s"] = trajectory.duration_s
    (folder / CAPTURE_JSON).write_text(json.dumps(header, indent=1, sort_keys=True) + "\n")
    return tables


def write_trajectory(trajectory: Trajectory, folder: Path) -> Path:
    """Write ``trajectory`` to ``folder`` atomically; return ``folder``."""
    folder = Path(folder)
    with atomic_directory(folder) as tmp:
        write_trajectory_files(trajectory, tmp)
    return folder


def read_header(folder: Path) -> tuple[TrajectoryHeader, list[dict[str, Any]]]:
    """``capture.json`` of an episode folder: the header and the stream index."""
    data = json.loads((Path(folder) / CAPTURE_JSON).read_text())
    return TrajectoryHeader.from_dict(data), list(data["streams"])


def read_stream(folder: Path, name: str) -> Stream:
    """One stream of an episode folder."""
    return table_to_stream(pq.read_table(Path(folder) / STREAMS_DIR / stream_file_name(name)))


def _stored_identity(folder: Path) -> tuple[Any, ...] | None:
    """What names one stored version of the episode in ``folder``: the folder and its
    ``capture.json`` (device, inode, size, modification and change times; every write
    makes a new folder with a new ``capture.json``). None when there is none."""
    try:
        st = (Path(folder) / CAPTURE_JSON).stat()
    except FileNotFoundError:
        return None
    ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return (str(Path(folder).resolve()), *ident)


def read_only(trajectory: Trajectory) -> int:
    """Mark every array of ``trajectory`` read-only (it is shared); returns their bytes."""
    total = 0
    for stream in trajectory.streams:
        for values in (stream.timestamp_ns, stream.time, stream.flags, *stream.fields.values()):
            values.flags.writeable = False
            total += values.nbytes
    return total


def read_trajectory(folder: Path) -> Trajectory:
    """The whole `Trajectory` stored in ``folder``.

    The last trajectories read (at most `READ_CACHE_BYTES` of arrays) are kept in this
    process, by the stored version's identity (`_stored_identity`): the quality step and
    the three exports of one capture read its store once. Their arrays are read-only
    (every reader gets the same ones).
    """
    identity = _stored_identity(folder)
    if identity is not None:
        with _READ_LOCK:
            cached = _READ_CACHE.get(identity)
            if cached is not None:
                _READ_CACHE.move_to_end(identity)
                return cached[0]
    trajectory = _read_trajectory(folder)
    size = read_only(trajectory)
    if identity is not None:
        _keep(identity, trajectory, size)
    return trajectory


def _keep(identity: tuple[Any, ...], trajectory: Trajectory, size: int) -> None:
    """Keep ``trajectory`` (``size`` bytes of arrays) as the version ``identity`` names,
    dropping the oldest kept beyond `READ_CACHE_BYTES`."""
    if size > READ_CACHE_BYTES:
        return
    with _READ_LOCK:
        _READ_CACHE[identity] = (trajectory, size)
        while sum(n for _, n in _READ_CACHE.values()) > READ_CACHE_BYTES:
            _READ_CACHE.popitem(last=False)


def clear_read_cache() -> None:
    """Forget the trajectories `read_trajectory` keeps."""
    with _READ_LOCK:
        _READ_CACHE.clear()


def remember_written(folder: Path, tables: dict[str, pa.Table]) -> None:
    """Keep, for `read_trajectory`, the trajectory just published in ``folder`` (its final
    place) from the ``tables`` `write_trajectory_files` wrote there: what reading the
    folder would give (the Parquet files hold exactly these tables), without reading it."""
    identity = _stored_identity(folder)
    if identity is None:
        return
    trajectory = _assemble(folder, lambda name: tables[name])
    _keep(identity, trajectory, read_only(trajectory))


def _read_trajectory(folder: Path) -> Trajectory:
    return _assemble(
        folder, lambda name: pq.read_table(folder / STREAMS_DIR / stream_file_name(name))
    )


def _assemble(folder: Path, table: Callable[[str], pa.Table]) -> Trajectory:
    """The `Trajectory` of ``folder``'s header with each indexed stream's ``table(name)``."""
    header, index = read_header(folder)
    streams = tuple(table_to_stream(table(entry["name"])) for entry in index)
    return Trajectory(
        info=header.info,
        streams=streams,
        annotations=header.annotations,
        media=header.media,
        files=header.files,
        extra_files=header.extra_files,
        quirks=header.quirks,
    )
