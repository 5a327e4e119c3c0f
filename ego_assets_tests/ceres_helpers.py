"""Test helpers for the CERES LeRobot export: synthetic trajectories and shard readers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.capture import read_capture
from ego_assets.formats.ceres_lerobot import (
    CAMERA_KEY,
    DATA_PATH,
    EPISODES_PATH,
    INFO_FILE,
    VIDEO_PATH,
)
from ego_assets.synth import synthesize
from ego_assets.trajectory.model import Trajectory


def synth_capture(
    root: Path, kind: str, key: str, *, seconds: float = 2.0, seed: int = 0, faults=()
) -> tuple[Trajectory, Path]:
    """Synthesize a raw capture below ``root/key`` and read it: (trajectory, raw folder)."""
    raw = synthesize(kind, root / key, seconds=seconds, seed=seed, faults=faults, capture_id=key)
    return read_capture(key, raw), raw


def data_rows(folder: Path) -> dict[str, np.ndarray]:
    """Every column of a shard's (or dataset's) data parquet files, in file order."""
    table = pa.concat_tables(pq.read_table(f) for f in sorted(folder.glob("data/*/*.parquet")))
    out: dict[str, np.ndarray] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_fixed_size_list(column.type):
            width = column.type.list_size
            out[name] = column.flatten().to_numpy().reshape(-1, width)
        else:
            out[name] = column.to_numpy(zero_copy_only=False)
    return out


def shifted_copy(shard: Path, out: Path) -> Path:
    """A copy of a one-episode shard with its episode renumbered to 0 (files too).

    LeRobot finds an episode's metadata row by position, so a lone shard whose episode
    index is not 0 loads only through such a copy. The shard itself is never changed.
    """
    info = json.loads((shard / INFO_FILE).read_text())
    episode = pq.read_table(next(shard.glob("meta/episodes/*/*.parquet")))
    index = int(episode.column("episode_index")[0].as_py())
    shutil.copytree(shard, out)
    loc_old = {"chunk_index": 0, "file_index": index}
    loc_new = {"chunk_index": 0, "file_index": 0}
    moves = [(DATA_PATH, {}), (EPISODES_PATH, {})]
    if CAMERA_KEY in info["features"]:
        moves.append((VIDEO_PATH, {"video_key": CAMERA_KEY}))
    for template, extra in moves:
        src = out / template.format(**loc_old, **extra)
        dst = out / template.format(**loc_new, **extra)
        if src != dst:
            src.rename(dst)
    data_file = out / DATA_PATH.format(**loc_new)
    table = pq.read_table(data_file)
    col = table.schema.get_field_index("episode_index")
    zeros = pa.array(np.zeros(table.num_rows, dtype=np.int64))
    pq.write_table(table.set_column(col, "episode_index", zeros), data_file)
    episodes_file = out / EPISODES_PATH.format(**loc_new)
    ep = pq.read_table(episodes_file)
    for name in ("episode_index", "data/file_index", "meta/episodes/file_index") + (
        (f"videos/{CAMERA_KEY}/file_index",) if CAMERA_KEY in info["features"] else ()
    ):
        i = ep.schema.get_field_index(name)
        ep = ep.set_column(i, name, pa.array([0], type=pa.int64()))
    pq.write_table(ep, episodes_file)
    info["splits"] = {"train": "0:1"}
    (out / INFO_FILE).write_text(json.dumps(info, indent=2))
    return out
