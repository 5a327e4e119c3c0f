"""CERES LeRobotDataset v3 shard writer: one immutable, self-contained shard per episode.

A shard is a complete one-episode LeRobotDataset v3.0 (``codebase_version`` "v3.0")
plus CERES sidecars, below ``shards/episode-<index:06d>/``::

    data/chunk-000/file-<index:03d>.parquet            one row per exported frame
    meta/episodes/chunk-000/file-<index:03d>.parquet   the episode row (+ its stats)
    meta/info.json  meta/stats.json  meta/tasks.parquet
    videos/observation.images.passthrough/chunk-000/file-<index:03d>.mp4   (with a camera)
    ceres/episode-metadata.json                        provenance (schema version 3)
    ceres/task-specifications/<sha256>.json            (with a task specification)
    ceres/browser-export-receipt.json                  path, SHA-256, bytes, media type

``episode_index`` is the capture's stable index (`ego_assets.exports.episode_index`); ``index``
(the dataset-global frame index) counts from 0 inside the shard. Rows and their columns
come from `ego_assets.formats.ceres_episode`; the video from
`ego_assets.formats.lerobot_video` (stream copy when the source is aligned).
``docs/formats/ceres-lerobot-v3.md`` describes every field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.fileio import compact_json_bytes, file_sha256, json_bytes, list_files
from ego_assets.formats import lerobot_video
from ego_assets.formats.ceres_episode import (
    ACTION_NAMES,
    STATE_NAMES,
    EpisodeRows,
    build_rows,
    select_camera,
)
from ego_assets.formats.ceres_metadata import TASK_SPEC_DIR, episode_metadata, task_spec_sidecar
from ego_assets.formats.lerobot_video import QUANTILES, quantile_name
from ego_assets.trajectory.model import Trajectory

FORMAT_NAME = "ceres-lerobot-v3"
# Bumped when the bytes written for the same trajectory change, so existing shards go stale
# and the stale-code sensor re-exports them (2: H.264 at lerobot's CRF 30 / GOP 2).
FORMAT_SPEC_VERSION = 2
CODE_VERSION = f"{FORMAT_NAME}-{FORMAT_SPEC_VERSION}"
CODEBASE_VERSION = "v3.0"
CAMERA_KEY = "observation.images.passthrough"
RECEIPT_SCHEMA = "ceres-browser-export-receipt"
RECEIPT_VERSION = 1
METADATA_FILE = "ceres/episode-metadata.json"
RECEIPT_FILE = "ceres/browser-export-receipt.json"
INFO_FILE = "meta/info.json"
STATS_FILE = "meta/stats.json"
TASKS_FILE = "meta/tasks.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
CHUNKS_SIZE = 1000
MB = 1024 * 1024  # the unit of the two size limits (LeRobot's MiB)
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200
SOURCE_COLUMNS = ("ceres.source_frame_index", "ceres.source_timestamp", "ceres.source_gap")
STAT_NAMES = ("min", "max", "mean", "std", "count", *(quantile_name(q) for q in QUANTILES))
MEDIA_TYPES = {
    ".parquet": "application/vnd.apache.parquet",
    ".json": "application/json",
    ".mp4": "video/mp4",
}


def shard_name(episode_index: int) -> str:
    """Folder name of a shard: ``episode-000017``."""
    return f"episode-{episode_index:06d}"


def feature_table(height: int | None, width: int | None, video_info: Mapping | None) -> dict:
    """``meta/info.json`` features (the camera only when ``video_info`` is given)."""
    scalar = {"shape": [1], "names": None}
    features: dict[str, Any] = {
        "observation.state": {
            "dtype": "float32",
            "shape": [len(STATE_NAMES)],
            "names": list(STATE_NAMES),
        },
        "action": {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)},
    }
    if video_info is not None:
        features[CAMERA_KEY] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": dict(video_info),
        }
    features.update(
        {
            "timestamp": {"dtype": "float32", **scalar},
            "frame_index": {"dtype": "int64", **scalar},
            "episode_index": {"dtype": "int64", **scalar},
            "index": {"dtype": "int64", **scalar},
            "task_index": {"dtype": "int64", **scalar},
            "ceres.source_frame_index": {"dtype": "int64", **scalar},
            "ceres.source_timestamp": {"dtype": "float64", **scalar},
            "ceres.source_gap": {"dtype": "bool", **scalar},
        }
    )
    return features


def info_json(
    features: dict, fps: int, episodes: int, frames: int, tasks: int, splits: str
) -> dict[str, Any]:
    """``meta/info.json`` with exact totals and the default path templates."""
    has_video = any(f["dtype"] == "video" for f in features.values())
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": "human",
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": DATA_FILES_SIZE_IN_MB,
        "video_files_size_in_mb": VIDEO_FILES_SIZE_IN_MB,
        "fps": fps,
        "splits": {"train": splits},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if has_video else None,
        "features": features,
    }


# --- statistics ------------------------------------------------------------------------


def column_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Population min, max, mean, std, count and quantiles of (N,) or (N, D) values.

    Scalars come back shaped (1,), vectors (D,); ``count`` is (1,) int64. One sort in
    the values' own dtype gives min, max and every quantile (numpy's ``linear`` method,
    the same numbers as `np.quantile`); mean and std accumulate in float64.
    """
    data = np.asarray(values)
    data = data.reshape(len(data), -1)
    if data.dtype == np.bool_:
        data = data.view(np.uint8)
    ordered = np.sort(data, axis=0)
    n = len(data)
    out = {
        "min": ordered[0].astype(np.float64),
        "max": ordered[-1].astype(np.float64),
        "mean": data.mean(axis=0, dtype=np.float64),
        "std": data.std(axis=0, dtype=np.float64),
        "count": np.array([n], dtype=np.int64),
    }
    position = np.asarray(QUANTILES) * (n - 1)
    lower = np.floor(position).astype(np.int64)
    upper = np.minimum(lower + 1, n - 1)
    t = (position - lower)[:, None]
    a, b = ordered[lower].astype(np.float64), ordered[upper].astype(np.float64)
    diff = b - a
    # numpy's _lerp: from the nearer end, so a quantile between equal values is exact
    qs = np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)
    for q, row in zip(QUANTILES, qs, strict=True):
        out[quantile_name(q)] = row
    return out


def stats_to_json(stats: Mapping[str, Mapping[str, np.ndarray]], dtypes: Mapping[str, str]):
    out: dict[str, dict[str, Any]] = {}
    for feature, values in stats.items():
        integer = dtypes.get(feature) == "int64"
        entry = {}
        for name in STAT_NAMES:
            arr = values[name]
            if integer and name in ("min", "max"):
                arr = arr.astype(np.int64)
            entry[name] = arr.tolist()
        out[feature] = entry
    return out


# --- files -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardSummary:
    """What `write_shard` wrote."""

    episode_index: int
    frames: int
    fps: int
    tasks: tuple[str, ...]
    video: str  # "remux", "re-encode" or "none"
    files: int
    bytes: int
    digests: Mapping[str, str] = field(default_factory=dict)  # relative path -> SHA-256


def _frame_columns(rows: EpisodeRows, episode_index: int) -> dict[str, np.ndarray]:
    n = len(rows)
    frame_index = np.arange(n, dtype=np.int64)
    return {
        "observation.state": rows.state,
        "action": rows.action,
        "timestamp": (frame_index / rows.fps).astype(np.float32),
        "frame_index": frame_index,
        "episode_index": np.full(n, episode_index, dtype=np.int64),
        "index": frame_index.copy(),
        "task_index": rows.task_index.astype(np.int64),
        "ceres.source_frame_index": rows.source_frame_index,
        "ceres.source_timestamp": rows.source_timestamp,
        "ceres.source_gap": rows.source_gap,
    }


def data_table(columns: Mapping[str, np.ndarray]) -> pa.Table:
    """Arrow table of the data parquet: vectors as fixed-size lists, scalars plain."""
    arrays, fields = [], []
    for name, values in columns.items():
        if values.ndim == 2:
            flat = pa.array(np.ascontiguousarray(values).reshape(-1))
            arr: pa.Array = pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
        else:
            arr = pa.array(values)
        arrays.append(arr)
        fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_data(table: pa.Table, path: Path, row_groups: list[int] | None = None) -> None:
    """Write a data parquet with one row group per episode (``row_groups`` = lengths)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # no dictionaries: sensor floats rarely repeat (dictionary pages only cost time here)
    with pq.ParquetWriter(path, table.schema, compression="snappy", use_dictionary=False) as writer:
        offset = 0
        for length in row_groups or [table.num_rows]:
            writer.write_table(table.slice(offset, length), row_group_size=max(length, 1))
            offset += length


def write_tasks(tasks: list[str] | tuple[str, ...], path: Path) -> None:
    """``meta/tasks.parquet``: pandas index ``task`` (the text), int64 ``task_index``."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(
        {"task_index": np.arange(len(tasks), dtype=np.int64)},
        index=pd.Index(list(tasks), name="task", dtype=object),
    )
    frame.to_parquet(path)


def episodes_table(
    rows: Sequence[dict[str, Any]], stats: Sequence[Mapping[str, Mapping]]
) -> pa.Table:
    """``meta/episodes`` rows with flattened ``stats/<feature>/<stat>`` columns
    (``stats``: each episode's, feature -> stat -> array)."""
    return episodes_table_stacked(rows, stack_stats(stats))


def stack_stats(stats: Sequence[Mapping[str, Mapping]]) -> dict[str, dict[str, np.ndarray]]:
    """Episodes' stats as one array a feature and stat, episodes along the first axis
    (features in the first episode's order; dtype promoted as `np.stack` does)."""
    return {
        feature: {
            name: np.stack([np.asarray(s[feature][name]) for s in stats]) for name in STAT_NAMES
        }
        for feature in stats[0]
    }


def episodes_table_stacked(
    rows: Sequence[dict[str, Any]], stats: Mapping[str, Mapping[str, np.ndarray]]
) -> pa.Table:
    """`episodes_table` from stacked stats (`stack_stats`): every float statistic of every
    feature goes to Arrow as one array (a column is a slice of it, wrapped in list layers
    made once a feature), not a Python list an episode or an array a column."""
    columns: dict[str, Any] = {
        k: [r[k] for r in rows] for k in rows[0] if not k.startswith("meta/")
    }
    fields = [pa.field(name, _episode_type(name, values[0])) for name, values in columns.items()]
    n = len(rows)
    floats = [name for name in STAT_NAMES if name != "count"]
    blocks, counts = [], []
    for feature, by_name in stats.items():
        for name in STAT_NAMES:
            if len(by_name[name]) != n:
                raise ValueError(f"stats/{feature}/{name}: {len(by_name[name])} episodes, {n} rows")
        # (stats, episodes, *shape): one statistic's column is a contiguous run
        blocks.append(np.stack([np.asarray(by_name[name], dtype=np.float64) for name in floats]))
        counts.append(np.asarray(by_name["count"]).reshape(n, -1).astype(np.int64))
    leaves = pa.array(
        np.concatenate([b.reshape(-1) for b in blocks]) if blocks else [], pa.float64()
    )
    count_leaves = pa.array(
        np.concatenate([c.reshape(-1) for c in counts]) if counts else [], pa.int64()
    )
    start = count_start = 0
    for feature, block, count in zip(stats, blocks, counts, strict=True):
        size = block[0].size
        layers = _list_offsets(block.shape[1:])
        for name in STAT_NAMES:
            if name == "count":
                leaf = count_leaves.slice(count_start, count.size)
                array = _wrapped(leaf, _list_offsets(count.shape))
                count_start += count.size
            else:
                array = _wrapped(leaves.slice(start, size), layers)
                start += size
            column = f"stats/{feature}/{name}"
            columns[column] = array
            fields.append(pa.field(column, array.type))
    for k in ("meta/episodes/chunk_index", "meta/episodes/file_index"):
        columns[k] = [r[k] for r in rows]
        fields.append(pa.field(k, _episode_type(k, columns[k][0])))
    return pa.Table.from_pydict(columns, schema=pa.schema(fields))


def _list_offsets(shape: tuple[int, ...]) -> list[pa.Array]:
    """The offsets of the list layers that make (episodes, d1, ..., dk) values one row an
    episode of k-deep lists, innermost first."""
    layers = []
    for depth in range(len(shape) - 1, 0, -1):
        lists = math.prod(shape[:depth])
        layers.append(pa.array(np.arange(lists + 1, dtype=np.int32) * np.int32(shape[depth])))
    return layers


def _wrapped(leaf: pa.Array, layers: list[pa.Array]) -> pa.Array:
    """``leaf`` values wrapped in the list layers `_list_offsets` made, innermost first."""
    array = leaf
    for offsets in layers:
        array = pa.ListArray.from_arrays(offsets, array)
    return array


def _episode_type(name: str, sample: Any) -> pa.DataType:
    if name == "tasks":
        return pa.list_(pa.string())
    if name.startswith("stats/"):
        if name.endswith("/count"):
            return pa.list_(pa.int64())
        depth = np.asarray(sample).ndim
        inner: pa.DataType = pa.float64()
        for _ in range(depth):
            inner = pa.list_(inner)
        return inner
    if name.endswith("_timestamp"):
        return pa.float64()
    return pa.int64()


def write_receipt(folder: Path, hashed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """List every file below ``folder`` (but the receipt) with SHA-256, size, media type;
    ``hashed``: relative path -> SHA-256 of files hashed already (not read again)."""
    artefacts = []
    hashed = hashed or {}
    for rel in list_files(folder):
        if rel == RECEIPT_FILE:
            continue
        path = folder / rel
        artefacts.append(
            {
                "path": rel,
                "sha256": hashed.get(rel) or file_sha256(path),
                "bytes": path.stat().st_size,
                "media_type": MEDIA_TYPES.get(path.suffix, "application/octet-stream"),
            }
        )
    receipt = {"schema": RECEIPT_SCHEMA, "version": RECEIPT_VERSION, "artefacts": artefacts}
    target = folder / RECEIPT_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(json_bytes(receipt, indent=2) + b"\n")
    return receipt


def receipt_digests(folder: Path, receipt: Mapping[str, Any]) -> dict[str, str]:
    """SHA-256 of every file of a shard by relative path, from its receipt (`write_receipt`)
    and the receipt file's own bytes: what a digest of the folder would read again."""
    digests = {a["path"]: a["sha256"] for a in receipt["artefacts"]}
    digests[RECEIPT_FILE] = file_sha256(folder / RECEIPT_FILE)
    return digests


def write_json(path: Path, doc: Any, *, compact: bool = False) -> None:
    """JSON file; ``compact`` (one line) for large numeric documents."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if compact:
        path.write_bytes(compact_json_bytes(doc) + b"\n")
    else:
        path.write_bytes(json_bytes(doc, indent=2) + b"\n")


# --- the shard -------------------------------------------------------------------------


def _write_video(
    rows: EpisodeRows,
    raw_dir: Path,
    folder: Path,
    loc: Mapping[str, int],
    probe: tuple[Path, Future[lerobot_video.SourceVideo]] | None,
) -> tuple[str, dict[str, Any] | None, dict[str, np.ndarray] | None]:
    """The shard's mp4 (copied when aligned, else re-encoded): mode, info block, stats.

    ``probe``: a video and its `inspect_video`, started before the rows were built.
    """
    if rows.camera is None or rows.frame_for_row is None:
        return "none", None, None
    src = raw_dir / rows.camera.path
    dst = folder / VIDEO_PATH.format(video_key=CAMERA_KEY, **loc)
    dst.parent.mkdir(parents=True, exist_ok=True)
    probed = probe is not None and probe[0] == src
    source = probe[1].result() if probe is not None and probed else lerobot_video.inspect_video(src)
    aligned = source.remuxable and np.array_equal(rows.frame_for_row, np.arange(source.frames))
    if aligned:
        result = lerobot_video.remux(src, dst, rows.fps, source)
    else:
        result = lerobot_video.reencode(src, dst, rows.fps, rows.frame_for_row, source)
    if result.frames != len(rows):
        raise ValueError(f"{src}: wrote {result.frames} video frames for {len(rows)} rows")
    mode = "remux" if result.remuxed else "re-encode"
    return mode, lerobot_video.video_info(dst), result.pixels.stats()


def write_shard(
    trajectory: Trajectory,
    raw_dir: Path,
    episode_index: int,
    folder: Path,
    *,
    rows: EpisodeRows | None = None,
) -> ShardSummary:
    """Write the shard of ``trajectory`` into the empty ``folder`` (not atomic on its own).

    Args:
        trajectory: the canonical trajectory of one capture.
        raw_dir: the capture's raw copy (video and task-specification bytes).
        episode_index: the capture's stable episode index.
        folder: existing empty folder that becomes ``shards/episode-<index>/``.
        rows: precomputed `build_rows` output (default: computed here).

    Raises:
        EpisodeError: nothing to export; ValueError: unreadable media.
    """
    folder, raw_dir = Path(folder), Path(raw_dir)
    loc = {"chunk_index": 0, "file_index": episode_index}
    # Three threads (numpy, Arrow and FFmpeg release the GIL): the camera video is probed
    # while the rows are built, then copied or decoded + encoded while the rows' parquet
    # is written and their statistics computed. Leaving the block waits for every task,
    # also when one of them raises. On one core, the tasks run in this thread in turn.
    with lerobot_video.task_pool(3, "ceres-shard") as pool:
        camera = rows.camera if rows is not None else select_camera(trajectory)
        probe = None
        if camera is not None:
            src = raw_dir / camera.path
            probe = (src, pool.submit(lerobot_video.inspect_video, src))
        rows = rows if rows is not None else build_rows(trajectory)
        video = pool.submit(_write_video, rows, raw_dir, folder, loc, probe)
        columns = _frame_columns(rows, episode_index)
        statistics = pool.submit(lambda: {k: column_stats(v) for k, v in columns.items()})
        write_data(data_table(columns), folder / DATA_PATH.format(**loc))
        stats = statistics.result()
        video_mode, video_info, camera_stats = video.result()
    n = len(rows)
    height = width = None
    if video_info is not None and camera_stats is not None:
        height, width = video_info["video.height"], video_info["video.width"]
        stats[CAMERA_KEY] = camera_stats

    features = feature_table(height, width, video_info)
    dtypes = {k: v["dtype"] for k, v in features.items()}
    ordered_stats = {k: stats[k] for k in features}
    split = f"{episode_index}:{episode_index + 1}"
    write_json(folder / INFO_FILE, info_json(features, rows.fps, 1, n, len(rows.tasks), split))
    write_json(folder / STATS_FILE, stats_to_json(ordered_stats, dtypes), compact=True)
    write_tasks(rows.tasks, folder / TASKS_FILE)
    episode = {
        "episode_index": episode_index,
        "tasks": list(rows.tasks),
        "length": n,
        "data/chunk_index": 0,
        "data/file_index": episode_index,
        "dataset_from_index": 0,
        "dataset_to_index": n,
    }
    if video_info is not None:
        prefix = f"videos/{CAMERA_KEY}"
        episode.update(
            {
                f"{prefix}/chunk_index": 0,
                f"{prefix}/file_index": episode_index,
                f"{prefix}/from_timestamp": 0.0,
                f"{prefix}/to_timestamp": n / rows.fps,
            }
        )
    episode["meta/episodes/chunk_index"] = 0
    episode["meta/episodes/file_index"] = episode_index
    table = episodes_table([episode], [ordered_stats])
    path = folder / EPISODES_PATH.format(**loc)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="snappy")

    spec = task_spec_sidecar(trajectory, raw_dir)
    if spec is not None:
        digest, data = spec
        target = folder / TASK_SPEC_DIR / f"{digest}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    metadata = episode_metadata(trajectory, rows, episode_index, video_mode, spec is not None)
    write_json(folder / METADATA_FILE, metadata)
    receipt = write_receipt(folder)
    total = sum(a["bytes"] for a in receipt["artefacts"])
    files = len(receipt["artefacts"]) + 1
    digests = receipt_digests(folder, receipt)
    return ShardSummary(episode_index, n, rows.fps, rows.tasks, video_mode, files, total, digests)
