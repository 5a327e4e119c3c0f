"""On-disk form of a `Trajectory`: ``capture.json`` and the streams' arrays in Parquet.

Layout of an episode folder (store layout 3, `STORE_LAYOUT`)::

    capture.json       header (info, annotations, media, files, quirks) + stream index
    streams.parquet    every stream: one row, one list column per array (`packed`)

Parquet's cost is per file (footer, schema, the file system's calls) and per column
(about 70 us whatever its length), so on a short trajectory (a 10 s EgoDex episode: 22
streams of 300 rows) the file and column counts, not the bytes, set the write and read
time: one file of whole arrays is what the store needs least (`ego_assets.trajectory.packed`
says how long streams keep one column per component).

Stores written before are read as they are, by the index's ``file`` of each stream:

* layout 2 (schema metadata ``layout`` = ``"2"``): ``streams/<stream name>.parquet``, one
  file per stream: ``timestamp_ns`` int64, ``time`` float64, ``flags`` uint8, then the
  fields; a shaped field of a stream of at most 1,024 rows one ``fixed_size_list``
  column named after the field, each sample's values row-major, in a longer stream one
  column per scalar component ``<field>.<i>[.<j>]``;
* layout 1 (no ``layout`` key): the same files, every shaped field one column per
  component.

`table_to_stream` reads a file of layout 1 or 2 (by the columns it finds; the field's
shape and unit are in the schema metadata ``fields``). Writes go to a temporary sibling
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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.trajectory.model import Trajectory, TrajectoryHeader
from ego_assets.trajectory.packed import (
    columns_of,
    component_names,
    float_paths,
    is_packed,
    streams_table,
    table_streams,
)
from ego_assets.trajectory.streams import STREAM_KINDS, Stream

CAPTURE_JSON = "capture.json"
STREAMS_FILE = "streams.parquet"  # layout 3: every stream
STREAMS_DIR = "streams"  # layouts 1 and 2: one file per stream
# zstd level 1 over byte-stream-split floats, no dictionaries: sensor floats rarely
# repeat; this writes ~3x faster than zstd defaults and, per component, ~4x smaller.
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1, "use_dictionary": False}
# `atomic_directory`'s hidden siblings of a target: ``.<name>.<random>.tmp`` while it is
# written, ``.<name>.old-<pid>`` (the previous version) while it is swapped in.
FOLDER_MODE = 0o755  # rwxr-xr-x: published stage folders are readable like any other
STAGING_SUFFIX = ".tmp"
OLD_MARK = ".old-"
STORE_LAYOUT = 3  # see the module docstring (1 and 2: a file per stream)
LIST_MAX_ROWS = 1024  # streams up to this many rows keep a shaped field as one list column
# `read_trajectory` keeps the last trajectories it read, up to this many bytes of arrays
READ_CACHE_BYTES = 256 * 1024 * 1024
_READ_CACHE: OrderedDict[tuple[Any, ...], tuple[Trajectory, int]] = OrderedDict()
_READ_LOCK = threading.Lock()


def table_to_stream(table: pa.Table) -> Stream:
    """The stream of a file of store layout 1 or 2 (see the module docstring)."""
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


def stream_file_name(name: str) -> str:
    """File name of a stream inside ``streams/`` in layouts 1 and 2 (stream names are
    checked to be safe: `stream_index_entry` calls it)."""
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
    """The stream's entry in ``capture.json``: name, kind, file (`STREAMS_FILE`), rows,
    first and last time (s since the capture start), dims and attrs."""
    stream_file_name(stream.name)  # a name the layouts of one file per stream could store
    return {
        "name": stream.name,
        "kind": stream.kind,
        "file": STREAMS_FILE,
        "rows": len(stream),
        "t_first": float(stream.time.min()) if len(stream) else None,
        "t_last": float(stream.time.max()) if len(stream) else None,
        "dims": stream.dims(),
        "attrs": dict(stream.attrs),
    }


def write_trajectory_files(trajectory: Trajectory, folder: Path) -> pa.Table:
    """Write ``trajectory`` into the existing, empty ``folder`` (not atomic on its own);
    returns the Arrow table written to `STREAMS_FILE` (for `remember_written`)."""
    folder = Path(folder)
    streams = sorted(trajectory.streams, key=lambda s: s.name)
    index = [stream_index_entry(stream) for stream in streams]
    table = streams_table(streams, LIST_MAX_ROWS)
    pq.write_table(
        table,
        folder / STREAMS_FILE,
        write_statistics=False,
        use_byte_stream_split=float_paths(table.schema),
        **PARQUET_OPTIONS,
    )
    header: dict[str, Any] = trajectory.header_to_dict()
    header["streams"] = index
    header["duration_s"] = trajectory.duration_s
    (folder / CAPTURE_JSON).write_text(json.dumps(header, indent=1, sort_keys=True) + "\n")
    return table


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
    _, index = read_header(folder)
    entry = next((e for e in index if e["name"] == name), None)
    if entry is None:
        raise KeyError(f"{folder}: no stream {name!r} in {CAPTURE_JSON}")
    return read_streams(folder, [entry])[0]


def read_streams(folder: Path, entries: Iterable[dict[str, Any]]) -> tuple[Stream, ...]:
    """The streams the ``capture.json`` index ``entries`` name, in their order, from the
    files of any store layout (each file read once, only the columns these streams need)."""
    entries = list(entries)
    wanted: dict[str, list[str]] = {}
    for entry in entries:
        wanted.setdefault(entry["file"], []).append(entry["name"])
    found: dict[str, Stream] = {}
    for file, names in wanted.items():
        # the stored name, never a path out of the folder: layout 3's one file, else
        # ``streams/<name>.parquet``
        path = STREAMS_FILE if file == STREAMS_FILE else f"{STREAMS_DIR}/{Path(file).name}"
        found.update(_file_streams(Path(folder) / path, names))
    return tuple(found[entry["name"]] for entry in entries)


def _file_streams(path: Path, names: list[str]) -> dict[str, Stream]:
    """The streams ``names`` of one stored Parquet file, decoded on this thread (no
    read-ahead or thread pool: the files are small, and their fixed costs dominate)."""
    parquet = pq.ParquetFile(pa.memory_map(str(path)), pre_buffer=False)
    schema = parquet.schema_arrow
    if not is_packed(schema):  # layouts 1 and 2: one stream
        stream = table_to_stream(parquet.read(use_threads=False))
        return {stream.name: stream}
    columns = columns_of(schema, names)
    return table_streams(parquet.read(columns, use_threads=False), names)


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


def remember_written(folder: Path, table: pa.Table) -> None:
    """Keep, for `read_trajectory`, the trajectory just published in ``folder`` (its final
    place) from the ``table`` `write_trajectory_files` wrote there: what reading the
    folder would give (`STREAMS_FILE` holds exactly this table), without reading it."""
    identity = _stored_identity(folder)
    if identity is None:
        return
    header, index = read_header(folder)
    streams = table_streams(table)
    trajectory = _trajectory(header, tuple(streams[entry["name"]] for entry in index))
    _keep(identity, trajectory, read_only(trajectory))


def _read_trajectory(folder: Path) -> Trajectory:
    header, index = read_header(folder)
    return _trajectory(header, read_streams(folder, index))


def _trajectory(header: TrajectoryHeader, streams: tuple[Stream, ...]) -> Trajectory:
    return Trajectory(
        info=header.info,
        streams=streams,
        annotations=header.annotations,
        media=header.media,
        files=header.files,
        extra_files=header.extra_files,
        quirks=header.quirks,
    )
