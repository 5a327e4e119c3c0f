"""Store layout 3: every stream of a trajectory in one Arrow table of one row.

``streams.parquet`` of a trajectory folder (`ego_assets.trajectory.store`) holds this
table. Each array of a stream is one column named ``<stream>/<array>`` whose one value is
a list of all the array's values, row-major:

* ``<stream>/timestamp_ns`` (int64) and ``<stream>/time`` (float64), left out when the
  stream has, bit for bit, the clock of a stream before it (name order): its entry names
  that stream as ``clock`` (an EgoDex episode's 22 streams share one clock);
* ``<stream>/flags`` (uint8);
* ``<stream>/<field>``: ``position`` of (N, 27, 3) is one list of N x 81 values. In a
  stream of more than ``list_max_rows`` rows, a shaped numeric field is one column per
  scalar component instead, ``<stream>/<field>.<i>[.<j>]`` (``position.3.1`` is joint 3,
  axis y): each stays smooth in time, so byte-stream-split + zstd stores values a device
  rounded up to 5x smaller than interleaved ones.

Parquet spends about 70 us per column and a file costs its footer, schema and file
system calls (creating a file is ~0.25 ms of CPU here), so one file whose columns hold
whole arrays is the least the store can write: what ``bench chain``'s floor writes.

Schema metadata: ``layout`` = ``"3"`` and ``streams``, a JSON list in column order of
``{"name", "kind", "attrs", "fields": {field: {"shape", "unit", "dtype"}}, "rows",
"clock"}`` (``clock``: the stream whose clock columns this one uses, or null).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa

from ego_assets.trajectory.streams import STREAM_KINDS, Stream

LAYOUT = "3"
CLOCK_ARRAYS = ("timestamp_ns", "time")


def component_names(name: str, shape: tuple[int, ...]) -> list[str]:
    """Column names of a shaped field, row-major (``position.0.0``, ``position.0.1``...)."""
    return [".".join([name, *map(str, idx)]) for idx in np.ndindex(*shape)]


def streams_table(streams: Sequence[Stream], list_max_rows: int) -> pa.Table:
    """The one-row table of ``streams`` (in this order; see the module docstring)."""
    names: list[str] = []
    columns: list[pa.Array] = []
    entries: list[dict[str, Any]] = []
    clocks: list[Stream] = []  # streams whose clock columns are written
    for stream in streams:
        shared = next((c for c in clocks if _same_clock(c, stream)), None)
        arrays: list[tuple[str, np.ndarray]] = []
        if shared is None:
            clocks.append(stream)
            arrays += [("timestamp_ns", stream.timestamp_ns), ("time", stream.time)]
        arrays.append(("flags", stream.flags))
        fields: dict[str, dict[str, Any]] = {}
        for spec in stream.spec.fields:
            if spec.name not in stream.fields:
                continue
            values = stream.fields[spec.name]
            shape = tuple(values.shape[1:])
            fields[spec.name] = {"shape": list(shape), "unit": spec.unit, "dtype": spec.dtype}
            if shape and spec.dtype != "str" and len(stream) > list_max_rows:
                by_component = np.ascontiguousarray(values.reshape(len(values), -1).T)
                arrays += zip(component_names(spec.name, shape), by_component, strict=True)
            else:
                arrays.append((spec.name, values))
        for array, values in arrays:
            names.append(f"{stream.name}/{array}")
            columns.append(_one_row(values))
        entries.append(
            {
                "name": stream.name,
                "kind": stream.kind,
                "attrs": dict(stream.attrs),
                "fields": fields,
                "rows": len(stream),
                "clock": None if shared is None else shared.name,
            }
        )
    schema = pa.schema(
        [pa.field(n, c.type, nullable=False) for n, c in zip(names, columns, strict=True)],
        metadata={"layout": LAYOUT, "streams": json.dumps(entries)},
    )
    return pa.Table.from_arrays(columns, schema=schema)


def _same_clock(a: Stream, b: Stream) -> bool:
    """Whether ``a`` and ``b`` have the same timestamps and times, bit for bit."""
    return (
        len(a) == len(b)
        and np.array_equal(a.timestamp_ns, b.timestamp_ns)
        and np.array_equal(a.time.view(np.int64), b.time.view(np.int64))
    )


def _one_row(values: np.ndarray) -> pa.Array:
    """A one-row list array holding all of ``values``, row-major (strings as UTF-8)."""
    if values.dtype.kind in "OU":
        flat = pa.array(values.reshape(-1).astype(object), type=pa.string())
    else:
        flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    offsets = pa.py_buffer(np.array([0, len(flat)], np.int32))
    return pa.Array.from_buffers(_list_of(flat.type), 1, [None, offsets], children=[flat])


@functools.cache
def _list_of(kind: pa.DataType) -> pa.DataType:
    """The list type of a column whose values are ``kind`` (never null)."""
    return pa.list_(pa.field("element", kind, nullable=False))


def float_paths(schema: pa.Schema) -> list[str]:
    """Parquet paths of the float values in ``schema`` (for byte-stream-split encoding)."""
    return [
        f"{f.name}.list.element"
        for f in schema
        if pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type)
    ]


def is_packed(schema: pa.Schema) -> bool:
    """Whether ``schema`` is of a layout 3 table (else a stream of layout 1 or 2)."""
    return (schema.metadata or {}).get(b"layout") == LAYOUT.encode()


def stream_entries(schema: pa.Schema) -> list[dict[str, Any]]:
    """The ``streams`` metadata of a layout 3 table, in column order."""
    entries: list[dict[str, Any]] = json.loads((schema.metadata or {})[b"streams"])
    return entries


def columns_of(schema: pa.Schema, names: Collection[str]) -> list[str]:
    """The columns that `table_streams` needs to decode the streams ``names``: theirs and
    the clock columns they share."""
    wanted = set(names)
    wanted |= {e["clock"] for e in stream_entries(schema) if e["name"] in names and e["clock"]}
    return [c for c in schema.names if c.partition("/")[0] in wanted]


def table_streams(table: pa.Table, names: Collection[str] | None = None) -> dict[str, Stream]:
    """The streams of a layout 3 ``table`` (only ``names`` when given), by name.

    Arrays are zero-copy views of the table's buffers where Arrow allows (read-only),
    booleans and components copied.
    """
    columns = dict(zip(table.column_names, table.columns, strict=True))
    out: dict[str, Stream] = {}
    for entry in stream_entries(table.schema):
        name = entry["name"]
        if names is not None and name not in names:
            continue
        clock = entry["clock"] or name
        timestamp_ns, time = (_values(columns[f"{clock}/{a}"]) for a in CLOCK_ARRAYS)
        fields: dict[str, np.ndarray] = {}
        n = entry["rows"]
        for spec in STREAM_KINDS[entry["kind"]].fields:
            meta = entry["fields"].get(spec.name)
            if meta is None:
                continue
            shape = tuple(meta["shape"])
            column = columns.get(f"{name}/{spec.name}")
            if column is not None:
                values = _values(column).astype(_dtype(spec.dtype), copy=False)
                fields[spec.name] = values.reshape((n, *shape))
            else:  # one column per component
                parts = np.empty((n, int(np.prod(shape))), dtype=spec.dtype)
                for i, part in enumerate(component_names(spec.name, shape)):
                    parts[:, i] = _values(columns[f"{name}/{part}"])
                fields[spec.name] = parts.reshape((n, *shape))
        out[name] = Stream(
            name=name,
            kind=entry["kind"],
            timestamp_ns=timestamp_ns.astype(np.int64, copy=False),
            time=time.astype(np.float64, copy=False),
            fields=MappingProxyType(fields),
            attrs=MappingProxyType(entry["attrs"]),
            flags=_values(columns[f"{name}/flags"]).astype(np.uint8, copy=False),
        )
    return out


def _dtype(name: str) -> np.dtype:
    return np.dtype(object) if name == "str" else np.dtype(name)


def _values(column: pa.ChunkedArray) -> np.ndarray:
    """The values of a one-row list column as a flat numpy array."""
    chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return chunk.flatten().to_numpy(zero_copy_only=False)
