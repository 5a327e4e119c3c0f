"""On-disk form of a `Trajectory`: one Parquet file per stream plus ``capture.json``.

Layout of an episode folder::

    capture.json                 header (info, annotations, media, files, quirks) + stream index
    streams/<stream name>.parquet  timestamp_ns int64, time float64, flags uint8, then fields

A field with a per-sample shape is stored as a fixed-size list of its flattened values
(row-major); its shape is in the Arrow field metadata ``shape`` and in the stream index.
Writes go to a temporary sibling folder that is renamed into place, so readers see the
old episode or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
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
# repeat, and this writes ~3x faster than zstd defaults at a similar size on real-like data.
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1, "use_dictionary": False}


def _field_to_arrow(arr: np.ndarray) -> pa.Array:
    if arr.dtype == object or arr.dtype.kind == "U":
        return pa.array(arr.astype(object), type=pa.string())
    if arr.ndim == 1:
        return pa.array(arr)
    width = int(np.prod(arr.shape[1:]))
    flat = pa.array(np.ascontiguousarray(arr).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, width)


def stream_to_table(stream: Stream) -> pa.Table:
    """Arrow table of one stream (see the module docstring for the layout)."""
    columns: list[pa.Array] = [
        pa.array(stream.timestamp_ns),
        pa.array(stream.time),
        pa.array(stream.flags),
    ]
    fields = [
        pa.field("timestamp_ns", pa.int64(), nullable=False),
        pa.field("time", pa.float64(), nullable=False),
        pa.field("flags", pa.uint8(), nullable=False),
    ]
    for spec in stream.spec.fields:
        if spec.name not in stream.fields:
            continue
        arr = stream.fields[spec.name]
        col = _field_to_arrow(arr)
        meta = {"shape": json.dumps(list(arr.shape[1:])), "unit": spec.unit}
        fields.append(pa.field(spec.name, col.type, metadata=meta))
        columns.append(col)
    meta = {"kind": stream.kind, "name": stream.name, "attrs": json.dumps(dict(stream.attrs))}
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=meta))


def table_to_stream(table: pa.Table) -> Stream:
    """Inverse of `stream_to_table`."""
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    kind = STREAM_KINDS[meta["kind"]]
    fields: dict[str, np.ndarray] = {}
    for spec in kind.fields:
        if spec.name not in table.column_names:
            continue
        col = table.column(spec.name).combine_chunks()
        field_meta = table.schema.field(spec.name).metadata or {}
        shape = tuple(json.loads(field_meta.get(b"shape", b"[]")))
        if spec.dtype == "str":
            fields[spec.name] = np.array(col.to_pylist(), dtype=object)
        elif shape:
            values = col.flatten().to_numpy(zero_copy_only=False)
            fields[spec.name] = values.reshape((len(col), *shape)).astype(spec.dtype, copy=False)
        else:
            fields[spec.name] = col.to_numpy(zero_copy_only=False).astype(spec.dtype, copy=False)
    return Stream(
        name=meta["name"],
        kind=meta["kind"],
        timestamp_ns=table.column("timestamp_ns").to_numpy().astype(np.int64, copy=False),
        time=table.column("time").to_numpy().astype(np.float64, copy=False),
        fields=MappingProxyType(fields),
        attrs=MappingProxyType(json.loads(meta["attrs"])),
        flags=table.column("flags").to_numpy().astype(np.uint8, copy=False),
    )


def _float_leaf_columns(schema: pa.Schema) -> list[str]:
    """Parquet leaf paths of the float columns (for byte-stream-split encoding)."""
    leaves = []
    for f in schema:
        if pa.types.is_fixed_size_list(f.type) and pa.types.is_floating(f.type.value_type):
            leaves.append(f"{f.name}.list.element")
        elif pa.types.is_floating(f.type):
            leaves.append(f.name)
    return leaves


def stream_file_name(name: str) -> str:
    """File name of a stream inside ``streams/`` (stream names are checked to be safe)."""
    if not name or "/" in name or name.startswith(".") or "\\" in name:
        raise ValueError(f"stream name {name!r} is not a safe file name")
    return f"{name}.parquet"


@contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary folder next to ``target`` that replaces it on success.

    On error the temporary folder is removed and ``target`` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_trajectory_files(trajectory: Trajectory, folder: Path) -> None:
    """Write ``trajectory`` into the existing, empty ``folder`` (not atomic on its own)."""
    folder = Path(folder)
    (folder / STREAMS_DIR).mkdir()
    index = []
    for stream in sorted(trajectory.streams, key=lambda s: s.name):
        file_name = stream_file_name(stream.name)
        table = stream_to_table(stream)
        pq.write_table(
            table,
            folder / STREAMS_DIR / file_name,
            write_statistics=False,
            use_byte_stream_split=_float_leaf_columns(table.schema),
            **PARQUET_OPTIONS,
        )
        index.append(
            {
                "name": stream.name,
                "kind": stream.kind,
                "file": f"{STREAMS_DIR}/{file_name}",
                "rows": len(stream),
                "t_first": float(stream.time.min()) if len(stream) else None,
                "t_last": float(stream.time.max()) if len(stream) else None,
                "dims": stream.dims(),
                "attrs": dict(stream.attrs),
            }
        )
    header: dict[str, Any] = trajectory.header_to_dict()
    header["streams"] = index
    header["duration_s"] = trajectory.duration_s
    (folder / CAPTURE_JSON).write_text(json.dumps(header, indent=1, sort_keys=True) + "\n")


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


def read_trajectory(folder: Path) -> Trajectory:
    """The whole `Trajectory` stored in ``folder``."""
    header, index = read_header(folder)
    streams = tuple(read_stream(folder, entry["name"]) for entry in index)
    return Trajectory(
        info=header.info,
        streams=streams,
        annotations=header.annotations,
        media=header.media,
        files=header.files,
        extra_files=header.extra_files,
        quirks=header.quirks,
    )
