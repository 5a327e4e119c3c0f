"""`ActionSources` kept beside the trajectory: ``trajectory/<key>/action_sources.arrow``.

A release with a declared action space derives each episode three times (one clock per
packing), often in three processes. Reading the hand and head streams each time costs
several Parquet files and the joint-set work an episode; the normalize step writes what
that work gives (`action_sources`) once, as one Arrow IPC file: one row, one binary
column ``arrays`` holding every array's bytes (C order, each at an offset that is a
multiple of 8), their dtypes, shapes and offsets and every other field in the schema's
metadata as JSON, with the SHA-256 of the ``capture.json`` it was derived with.
`read_sources` gives the same `ActionSources`, array for array, or None when the file was
written by another `SOURCES_VERSION` or beside another ``capture.json`` (the caller reads
the streams then). The file is derived data: the trajectory's data version does not
cover it and no export reads it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ego_assets.actions.sources import ActionSources, HandSource, HeadSource
from ego_assets.fileio import file_sha256

SOURCES_FILE = "action_sources.arrow"
HEADER_FILE = "capture.json"  # the trajectory store's header, beside it
# bump when `action_sources` gives other values or this layout changes
SOURCES_VERSION = "action-sources-1"
_HAND_ARRAYS = ("timestamp_ns", "tracked", "wrist", "rotation", "tips")
_HEAD_ARRAYS = ("timestamp_ns", "position", "rotation", "valid")


def _header_sha256(folder: Path) -> str:
    return file_sha256(Path(folder) / HEADER_FILE)


def sources_table(sources: ActionSources, header_sha256: str) -> pa.Table:
    """The one-row Arrow table of ``sources`` (module docstring)."""
    arrays: dict[str, np.ndarray] = {}
    hands: dict[str, Any] = {}
    for side, hand in sources.hands.items():
        if hand is None:
            hands[side] = None
            continue
        hands[side] = {
            "streams": list(hand.streams),
            "joint_set": hand.joint_set,
            "frame": hand.frame,
            "components": dict(hand.components),
        }
        for name in _HAND_ARRAYS:
            value = getattr(hand, name)
            if value is not None:
                arrays[f"{side}.{name}"] = value
    head = None
    if sources.head is not None:
        head = {"stream": sources.head.stream, "conversion": sources.head.conversion}
        for name in _HEAD_ARRAYS:
            arrays[f"head.{name}"] = getattr(sources.head, name)
    if sources.recorder_slots is not None:
        arrays["slots.slot_index"], arrays["slots.timestamp_ns"] = sources.recorder_slots
    layout: dict[str, list[Any]] = {}  # name -> [dtype, shape, offset in the blob]
    blob = bytearray()
    for name, value in arrays.items():
        data = np.ascontiguousarray(value).tobytes()
        layout[name] = [np.asarray(value).dtype.str, list(np.shape(value)), len(blob)]
        blob += data + bytes(-len(data) % 8)
    meta = {
        "version": SOURCES_VERSION,
        "capture_json_sha256": header_sha256,
        "capture_id": sources.capture_id,
        "start_ns": sources.start_ns,
        "world_frame": sources.world_frame,
        "dominant": list(sources.dominant) if sources.dominant else None,
        "head_error": sources.head_error,
        "hands": hands,
        "head": head,
        "arrays": layout,
    }
    schema = pa.schema([pa.field("arrays", pa.binary())], metadata={"sources": json.dumps(meta)})
    return pa.Table.from_arrays([pa.array([bytes(blob)], pa.binary())], schema=schema)


def write_sources(sources: ActionSources, folder: Path) -> Path:
    """Write ``sources`` to ``folder/action_sources.arrow``, beside the ``capture.json``
    it was derived with (inside a folder published atomically, as the trajectory's stage
    is)."""
    path = Path(folder) / SOURCES_FILE
    table = sources_table(sources, _header_sha256(folder))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def read_sources(folder: Path) -> ActionSources | None:
    """The `ActionSources` in ``folder/action_sources.arrow``; None when it was written by
    another `SOURCES_VERSION` or beside another ``capture.json``. OSError when it cannot
    be read (missing: FileNotFoundError)."""
    path = Path(folder) / SOURCES_FILE
    data = path.read_bytes()
    try:
        reader = pa.ipc.open_file(pa.BufferReader(data))
        meta = json.loads(reader.schema.metadata[b"sources"])
        if meta.get("version") != SOURCES_VERSION:
            return None
        if meta.get("capture_json_sha256") != _header_sha256(folder):
            return None
        blob = reader.get_batch(0).column(0)[0].as_buffer()
        arrays = {
            name: np.frombuffer(blob, dtype=dtype, count=math.prod(shape), offset=offset).reshape(
                shape
            )
            for name, (dtype, shape, offset) in meta["arrays"].items()
        }
    except (pa.ArrowInvalid, KeyError, ValueError, IndexError) as exc:
        raise OSError(f"{path}: not an action sources file ({exc})") from None
    hands = {side: _hand(side, entry, arrays) for side, entry in meta["hands"].items()}
    head = None
    if meta["head"] is not None:
        head = HeadSource(
            stream=meta["head"]["stream"],
            conversion=meta["head"]["conversion"],
            **{name: arrays[f"head.{name}"] for name in _HEAD_ARRAYS},
        )
    slots = None
    if "slots.slot_index" in arrays:
        slots = (arrays["slots.slot_index"], arrays["slots.timestamp_ns"])
    return ActionSources(
        capture_id=meta["capture_id"],
        start_ns=int(meta["start_ns"]),
        world_frame=meta["world_frame"],
        dominant=(meta["dominant"][0], meta["dominant"][1]) if meta["dominant"] else None,
        hands=hands,
        head=head,
        head_error=meta["head_error"],
        recorder_slots=slots,
    )


def _hand(
    side: str, entry: Mapping[str, Any] | None, arrays: dict[str, np.ndarray]
) -> HandSource | None:
    if entry is None:
        return None
    return HandSource(
        side=side,
        streams=tuple(entry["streams"]),
        joint_set=entry["joint_set"],
        frame=entry["frame"],
        components=dict(entry["components"]),
        timestamp_ns=arrays[f"{side}.timestamp_ns"],
        tracked=arrays[f"{side}.tracked"],
        wrist=arrays[f"{side}.wrist"],
        rotation=arrays.get(f"{side}.rotation"),
        tips=arrays.get(f"{side}.tips"),
    )
