"""Check a CERES LeRobot v3 shard or merged dataset against the format and its receipt.

`validate_dataset` returns one line per deviation (empty: the folder conforms), each
naming the file and, where it applies, the field, episode or row. It reads what
LeRobot reads (info, tasks, episodes, data, stats, video timing) and what CERES adds
(episode metadata, task specifications, the receipt, whose every digest it recomputes).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.fileio import file_sha256
from ego_assets.formats.ceres_episode import HAND_WIDTH, SIDES, STATE_NAMES, hand_offset
from ego_assets.formats.ceres_lerobot import (
    CAMERA_KEY,
    CODEBASE_VERSION,
    DATA_PATH,
    INFO_FILE,
    METADATA_FILE,
    RECEIPT_FILE,
    STAT_NAMES,
    STATS_FILE,
    TASKS_FILE,
    VIDEO_PATH,
    feature_table,
)
from ego_assets.formats.ceres_metadata import METADATA_SCHEMA, METADATA_VERSION
from ego_assets.formats.lerobot_video import frame_times, inspect_video

MERGE_FILE = "ceres/merge.json"
FORBIDDEN_KEYS = ("user_agent", "userAgent", "camera_device_id", "deviceId")


def is_ceres_dataset(path: Path) -> bool:
    """Whether ``path`` looks like a shard or dataset folder (``meta/info.json`` inside)."""
    return Path(path).is_dir() and (Path(path) / INFO_FILE).is_file()


def validate_dataset(path: Path) -> list[str]:
    """Every deviation of the shard or dataset at ``path`` (see the module docstring)."""
    root = Path(path)
    problems: list[str] = []
    try:
        info = json.loads((root / INFO_FILE).read_text())
    except (OSError, ValueError) as exc:
        return [f"{INFO_FILE}: unreadable: {exc}"]
    problems += _check_info(info)
    tasks = _check_tasks(root, problems)
    episodes = _read_episodes(root, problems)
    if episodes is not None and tasks is not None:
        problems += _check_rows(root, info, episodes, tasks)
        if CAMERA_KEY in info.get("features", {}):
            problems += _check_video(root, info, episodes)
    problems += _check_stats(root, info)
    problems += _check_ceres(root, info)
    problems += _check_receipt(root)
    return problems


def _check_info(info: dict[str, Any]) -> list[str]:
    out = []
    where = INFO_FILE
    if info.get("codebase_version") != CODEBASE_VERSION:
        out.append(f"{where}: codebase_version {info.get('codebase_version')!r}, expected v3.0")
    fps = info.get("fps")
    if not isinstance(fps, int) or isinstance(fps, bool) or fps <= 0:
        out.append(f"{where}: fps {fps!r} must be a positive integer")
    for key in ("total_episodes", "total_frames", "total_tasks"):
        if not isinstance(info.get(key), int) or info[key] <= 0:
            out.append(f"{where}: {key} {info.get(key)!r} must be a positive integer")
    if info.get("data_path") != DATA_PATH:
        out.append(f"{where}: data_path {info.get('data_path')!r}, expected {DATA_PATH!r}")
    features = info.get("features")
    if not isinstance(features, dict):
        return [*out, f"{where}: features missing"]
    camera = features.get(CAMERA_KEY)
    shape = camera.get("shape") if isinstance(camera, dict) else None
    height, width = (shape[0], shape[1]) if isinstance(shape, list) and len(shape) == 3 else (0, 0)
    expected = feature_table(height, width, camera.get("info") if camera else None)
    for name, spec in expected.items():
        got = features.get(name)
        if got is None:
            out.append(f"{where}: features.{name} missing")
            continue
        for field in ("dtype", "shape", "names"):
            if got.get(field) != spec[field]:
                out.append(f"{where}: features.{name}.{field} is {got.get(field)!r}")
    for name in sorted(set(features) - set(expected)):
        out.append(f"{where}: features.{name} is not a CERES feature")
    if camera and info.get("video_path") != VIDEO_PATH:
        out.append(f"{where}: video_path {info.get('video_path')!r}, expected {VIDEO_PATH!r}")
    return out


def _check_tasks(root: Path, problems: list[str]) -> list[str] | None:
    try:
        frame = pd.read_parquet(root / TASKS_FILE)
    except (OSError, ValueError) as exc:
        problems.append(f"{TASKS_FILE}: unreadable: {exc}")
        return None
    if frame.index.name != "task":
        problems.append(f"{TASKS_FILE}: the index must be the task text, named 'task'")
    if "task_index" not in frame or frame["task_index"].dtype != np.int64:
        problems.append(f"{TASKS_FILE}: task_index must be an int64 column")
    elif not np.array_equal(frame["task_index"].to_numpy(), np.arange(len(frame))):
        problems.append(f"{TASKS_FILE}: task_index must equal the row number")
    return [str(t) for t in frame.index]


def _read_episodes(root: Path, problems: list[str]) -> pd.DataFrame | None:
    files = sorted(root.glob("meta/episodes/*/*.parquet"))
    if not files:
        problems.append("meta/episodes: no episodes file")
        return None
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def _column(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    if pa.types.is_fixed_size_list(column.type) or pa.types.is_list(column.type):
        values = column.flatten().to_numpy()
        return values.reshape(len(column), -1)
    return column.to_numpy(zero_copy_only=False)


def _check_rows(
    root: Path, info: dict[str, Any], episodes: pd.DataFrame, tasks: list[str]
) -> list[str]:
    out: list[str] = []
    features = info["features"]
    fps = int(info["fps"])
    columns = [n for n, f in features.items() if f["dtype"] != "video"]
    n_episodes = len(episodes)
    if n_episodes != info["total_episodes"]:
        out.append(f"meta/episodes: {n_episodes} episodes, info says {info['total_episodes']}")
    if int(episodes["length"].sum()) != info["total_frames"]:
        out.append(
            f"meta/episodes: {episodes['length'].sum()} frames, info says {info['total_frames']}"
        )
    if len(tasks) != info["total_tasks"]:
        out.append(f"{TASKS_FILE}: {len(tasks)} tasks, info says {info['total_tasks']}")
    first = int(episodes["episode_index"].iloc[0]) if n_episodes else 0
    if not np.array_equal(episodes["episode_index"].to_numpy(), first + np.arange(n_episodes)):
        out.append("meta/episodes: rows are not in consecutive episode_index order")
    offset = 0
    for ep in episodes.to_dict("records"):
        index, length = int(ep["episode_index"]), int(ep["length"])
        where = f"episode {index}"
        if (ep["dataset_from_index"], ep["dataset_to_index"]) != (offset, offset + length):
            out.append(
                f"meta/episodes: {where}: dataset index range is not [{offset}, {offset + length})"
            )
        data = root / DATA_PATH.format(
            chunk_index=int(ep["data/chunk_index"]), file_index=int(ep["data/file_index"])
        )
        if not data.exists():
            out.append(f"meta/episodes: {where}: data file {data.relative_to(root)} missing")
            offset += length
            continue
        table = pq.read_table(data)
        rel = data.relative_to(root).as_posix()
        if table.column_names != columns:
            out.append(f"{rel}: columns {table.column_names}, expected {columns}")
            offset += length
            continue
        ep_col = table.column("episode_index").to_numpy()
        rows = table.filter(pa.array(ep_col == index))
        if rows.num_rows != length:
            out.append(f"{rel}: {where}: {rows.num_rows} rows, meta/episodes says {length}")
            offset += length
            continue
        out += _check_episode_rows(rel, where, rows, offset, fps, tasks, list(ep["tasks"]))
        offset += length
    return out


def _check_episode_rows(
    rel: str, where: str, rows: pa.Table, offset: int, fps: int, tasks: list[str], listed: list
) -> list[str]:
    out = []
    n = rows.num_rows
    frame = _column(rows, "frame_index")
    if not np.array_equal(frame, np.arange(n)):
        out.append(f"{rel}: {where}: frame_index is not 0..{n - 1}")
    index = _column(rows, "index")
    if not np.array_equal(index, offset + np.arange(n)):
        bad = int(np.argmax(index != offset + np.arange(n)))
        out.append(f"{rel}: {where}: row {bad}: index {index[bad]}, expected {offset + bad}")
    stamp = _column(rows, "timestamp")
    want = (np.arange(n) / fps).astype(np.float32)
    if stamp.dtype != np.float32 or not np.array_equal(stamp, want):
        out.append(f"{rel}: {where}: timestamp is not frame_index / {fps} (float32)")
    task_index = _column(rows, "task_index")
    if len(task_index) and (task_index.min() < 0 or task_index.max() >= len(tasks)):
        out.append(f"{rel}: {where}: task_index outside meta/tasks.parquet")
    elif sorted({tasks[i] for i in task_index}) != sorted(listed):
        out.append(f"{rel}: {where}: tasks {listed} differ from the rows' tasks")
    state = _column(rows, "observation.state")
    action = _column(rows, "action")
    gap = _column(rows, "ceres.source_gap").astype(bool)
    if state.shape[1:] != (len(STATE_NAMES),) or action.shape[1:] != (2,):
        return [*out, f"{rel}: {where}: observation.state/action have the wrong width"]
    flags = state[:, [0, *(hand_offset(s) for s in SIDES)]]
    if not np.isin(flags, (0.0, 1.0)).all():
        out.append(f"{rel}: {where}: tracked flags must be 0 or 1")
    if gap.any() and (flags[gap].any() or action[gap].any()):
        row = int(np.flatnonzero(gap & (flags.any(axis=1) | action.any(axis=1)))[0])
        out.append(f"{rel}: {where}: row {row}: gap row with a tracking flag or a pinch set")
    blocks = [(0, 8), *((hand_offset(s), hand_offset(s) + HAND_WIDTH) for s in SIDES)]
    for start, end in blocks:
        untracked = state[:, start] == 0
        if untracked.any() and state[untracked, start + 1 : end].any():
            row = int(np.flatnonzero(untracked & state[:, start + 1 : end].any(axis=1))[0])
            out.append(f"{rel}: {where}: row {row}: {STATE_NAMES[start]} is 0 but values are not")
    if not np.isfinite(state).all() or not np.isfinite(action).all():
        out.append(f"{rel}: {where}: non-finite state or action values")
    return out


def _check_video(root: Path, info: dict[str, Any], episodes: pd.DataFrame) -> list[str]:
    out = []
    fps = int(info["fps"])
    height, width, _ = info["features"][CAMERA_KEY]["shape"]
    prefix = f"videos/{CAMERA_KEY}"
    files: dict[Path, list[tuple[int, int, float, float]]] = {}
    for _, ep in episodes.iterrows():
        path = root / VIDEO_PATH.format(
            video_key=CAMERA_KEY,
            chunk_index=int(ep[f"{prefix}/chunk_index"]),
            file_index=int(ep[f"{prefix}/file_index"]),
        )
        entry = (
            int(ep["episode_index"]),
            int(ep["length"]),
            float(ep[f"{prefix}/from_timestamp"]),
            float(ep[f"{prefix}/to_timestamp"]),
        )
        files.setdefault(path, []).append(entry)
    for path, members in files.items():
        rel = path.relative_to(root).as_posix()
        if not path.exists():
            out.append(f"{rel}: missing (episodes {[m[0] for m in members]})")
            continue
        source = inspect_video(path)
        if (source.width, source.height) != (width, height) or source.pix_fmt != "yuv420p":
            out.append(
                f"{rel}: {source.width}x{source.height} {source.pix_fmt}, "
                f"expected {width}x{height} yuv420p"
            )
        times = frame_times(path)
        if not np.allclose(times, np.arange(len(times)) / fps, atol=1e-6, rtol=0):
            out.append(f"{rel}: frame k is not at k / {fps} s")
        start = 0
        for index, length, t0, t1 in sorted(members, key=lambda m: m[2]):
            if abs(t0 - start / fps) > 1e-9 or abs(t1 - (start + length) / fps) > 1e-9:
                out.append(
                    f"{rel}: episode {index}: from/to_timestamp {t0}/{t1}, "
                    f"expected {start / fps}/{(start + length) / fps}"
                )
            start += length
        if start != len(times):
            out.append(f"{rel}: {len(times)} frames, its episodes have {start} rows")
    return out


def _check_stats(root: Path, info: dict[str, Any]) -> list[str]:
    try:
        stats = json.loads((root / STATS_FILE).read_text())
    except (OSError, ValueError) as exc:
        return [f"{STATS_FILE}: unreadable: {exc}"]
    out = []
    for name, feature in info.get("features", {}).items():
        entry = stats.get(name)
        if entry is None:
            out.append(f"{STATS_FILE}: {name} missing")
            continue
        missing = [s for s in STAT_NAMES if s not in entry]
        if missing:
            out.append(f"{STATS_FILE}: {name}: missing {missing}")
            continue
        shape = [3, 1, 1] if feature["dtype"] == "video" else list(feature["shape"])
        for stat in STAT_NAMES:
            got = list(np.asarray(entry[stat]).shape)
            if got != ([1] if stat == "count" else shape):
                out.append(f"{STATS_FILE}: {name}.{stat} has shape {got}")
        if feature["dtype"] == "video":
            values = np.concatenate([np.ravel(entry[s]) for s in STAT_NAMES if s != "count"])
            if values.min() < 0 or values.max() > 1:
                out.append(f"{STATS_FILE}: {name}: camera stats must lie in [0, 1]")
    return out


def _check_ceres(root: Path, info: dict[str, Any]) -> list[str]:
    out = []
    for path in sorted(root.glob("ceres/**/*.json")):
        text = path.read_text(errors="replace")
        rel = path.relative_to(root).as_posix()
        if any(f'"{key}"' in text for key in FORBIDDEN_KEYS) or "Mozilla/" in text:
            out.append(f"{rel}: carries a device identifier or user-agent string")
    metadata_file = root / METADATA_FILE
    if metadata_file.exists():
        md = json.loads(metadata_file.read_text())
        if (md.get("schema"), md.get("version")) != (METADATA_SCHEMA, METADATA_VERSION):
            out.append(
                f"{METADATA_FILE}: schema/version {md.get('schema')!r}/{md.get('version')!r}"
            )
        for key in (
            "episode",
            "camera",
            "capture",
            "study",
            "calibration",
            "segments",
            "task_specification",
        ):
            if key not in md:
                out.append(f"{METADATA_FILE}: {key} missing")
        spec = md.get("task_specification")
        if spec:
            sidecar = root / spec["path"]
            if not sidecar.exists():
                out.append(f"{METADATA_FILE}: task specification {spec['path']} missing")
            elif file_sha256(sidecar) != spec["sha256"]:
                out.append(f"{spec['path']}: SHA-256 differs from the metadata's")
        frames = md.get("episode", {}).get("frames")
        if frames is not None and frames != info.get("total_frames"):
            out.append(
                f"{METADATA_FILE}: episode.frames {frames}, info says {info.get('total_frames')}"
            )
    elif not (root / MERGE_FILE).exists():
        out.append(f"{METADATA_FILE}: missing (and no {MERGE_FILE})")
    return out


def _check_receipt(root: Path) -> list[str]:
    try:
        receipt = json.loads((root / RECEIPT_FILE).read_text())
    except (OSError, ValueError) as exc:
        return [f"{RECEIPT_FILE}: unreadable: {exc}"]
    out = []
    listed = {}
    for entry in receipt.get("artefacts", []):
        listed[entry["path"]] = entry
        path = root / entry["path"]
        if not path.is_file():
            out.append(f"{RECEIPT_FILE}: {entry['path']} is listed but missing")
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != entry["sha256"]:
            out.append(
                f"{entry['path']}: SHA-256 {digest} differs from the receipt's {entry['sha256']}"
            )
        if path.stat().st_size != entry["bytes"]:
            out.append(
                f"{entry['path']}: {path.stat().st_size} bytes, the receipt says {entry['bytes']}"
            )
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {
        RECEIPT_FILE
    }
    for rel in sorted(present - set(listed)):
        out.append(f"{rel}: not listed in {RECEIPT_FILE}")
    return out
