"""Merge CERES shards into one multi-episode LeRobotDataset v3 (local folders in and out).

* Episodes in shard-index order, renumbered ``0..M-1`` (LeRobot finds an episode's
  row by its position); ``index`` runs over the whole dataset; tasks are the union of
  the shards' tasks in order of first use, ``task_index`` remapped.
* Data: many episodes per parquet file, one row group per episode, a new file when
  the current one would pass `DATA_FILES_SIZE_IN_MB`; an episode is never split.
* Video: episodes are appended to the current mp4 by stream copy (frame ``k`` of the
  file at ``k / fps``, ``from_timestamp`` = frames before the episode / fps); a new
  file starts when the next episode's codec parameters differ or the file would pass
  `VIDEO_FILES_SIZE_IN_MB`. Data and video files roll over independently.
* ``meta/stats.json`` aggregates the episodes' stats: min of minima, max of maxima,
  count-weighted mean, pooled standard deviation, count-weighted mean of each quantile
  (what LeRobot 0.6.1 does; exact quantiles would need every row in memory).
* Every dataset has one fps and one camera shape: shards whose (fps, camera shape)
  differ from the most common one are left out and listed in ``ceres/merge.json``.
* ``breaks``: shard positions where new data and video files start (the release's parts:
  a part's episodes never share a file with another part's). ``reuse``: the first
  shards are the same shards, in the same order, at the same breaks, as those of an
  earlier merge (``reuse.folder``): their data and video files are hard-linked from it
  (copied across file systems), nothing of them is rewritten; only their rows and stats
  are read.
* ``replace`` (`Replacement`): vector columns (a release's declared ``observation.state``
  and ``action``) computed from each shard's rows and metadata (for a chunk of shards
  read ahead together, in one call) replace the shard's own;
  their features (one name per component), per-episode stats and dataset stats are
  computed from the new values, NaN left out (`nan_column_stats`), every other column
  and the videos as without it.
* ``language``: lerobot 0.6's ``language_persistent`` / ``language_events`` frame columns
  are added (`lerobot_language`: each shard's retained segments as subtask rows).
* ``ceres/episodes/episode-<shard index>.json`` keeps each shard's episode metadata (a
  hard link to the shard's file when that holds the bytes `write_json` would write: the
  exporter's do; creating a file costs several times a link on some file systems),
  ``ceres/task-specifications/`` their task specifications, and
  ``ceres/browser-export-receipt.json`` lists every file with its SHA-256.
"""

from __future__ import annotations

import shutil
from collections import Counter, deque
from collections.abc import Callable, Collection, Generator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.fileio import json_bytes, json_loads, link_or_copy
from ego_assets.formats.ceres_lerobot import (
    CAMERA_KEY,
    DATA_FILES_SIZE_IN_MB,
    DATA_PATH,
    EPISODES_PATH,
    INFO_FILE,
    MB,
    METADATA_FILE,
    STAT_NAMES,
    STATS_FILE,
    TASKS_FILE,
    VIDEO_PATH,
    column_stats,
    episodes_table_stacked,
    info_json,
    shard_name,
    stats_to_json,
    write_json,
    write_receipt,
    write_tasks,
)
from ego_assets.formats.ceres_merge_video import (
    FileHashes,
    VideoPlace,
    VideoStep,
    advance,
    merge_videos,
    shard_file,
    visible_names,
)
from ego_assets.formats.ceres_metadata import TASK_SPEC_DIR
from ego_assets.formats.lerobot_language import FEATURES as LANGUAGE_FEATURES
from ego_assets.formats.lerobot_language import language_columns
from ego_assets.formats.lerobot_video import QUANTILES, quantile_name, video_info

MERGE_FILE = "ceres/merge.json"
MERGE_VERSION = "ceres-lerobot-v3-merge-1"  # bump when the merged output changes
EPISODE_METADATA_DIR = "ceres/episodes"
RENUMBERED = ("episode_index", "index", "task_index")
# shards read ahead together (`_chunks`): at most this many, and this many frames
CHUNK_SHARDS, CHUNK_FRAMES = 32, 20_000
# how `merge_shards` runs `merge_videos` with its arguments, returning what it returns
VideoRunner = Callable[..., Any]
VIDEO_COLUMNS = tuple(
    f"videos/{CAMERA_KEY}/{name}"
    for name in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
)


@dataclass(frozen=True, slots=True)
class Reuse:
    """The first ``shards`` input shards were merged into ``folder`` exactly as now."""

    folder: Path
    shards: int


@dataclass(frozen=True, slots=True)
class Replacement:
    """Vector columns that replace the shards' own (see the module docstring).

    ``features``: feature name -> its ``meta/info.json`` entry (float32, shape, names);
    ``reads``: the shard columns ``columns`` needs; ``columns(metadatas, rows)``: for
    each of a run of shards (their episode metadata and their rows, those columns at
    least), the new (rows, D) float32 values of every feature.
    """

    features: Mapping[str, dict[str, Any]]
    reads: tuple[str, ...]
    columns: Callable[[list[dict[str, Any]], list[pa.Table]], list[Mapping[str, np.ndarray]]]


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What `merge_shards` wrote."""

    episodes: int
    frames: int
    tasks: int
    excluded: dict[str, str]


def _signature(info: dict[str, Any]) -> tuple[int, tuple[int, ...] | None]:
    camera = info["features"].get(CAMERA_KEY)
    return int(info["fps"]), tuple(camera["shape"]) if camera else None


def aggregate_stats(stacked: dict[str, dict[str, np.ndarray]]) -> dict:
    """Dataset stats from the episodes' stats, stacked (feature -> stat -> array with
    episodes first, `ceres_lerobot.stack_stats`); see the module docstring."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for feature, items in stacked.items():
        count = np.asarray(items["count"])
        counts = count.reshape(len(count), -1)[:, 0].astype(np.float64)
        total = counts.sum()
        means = np.asarray(items["mean"], dtype=np.float64)
        weights = (counts / total).reshape((-1,) + (1,) * (means.ndim - 1))
        stds = np.asarray(items["std"], dtype=np.float64)
        mean = (weights * means).sum(axis=0)
        var = (weights * (stds**2 + (means - mean) ** 2)).sum(axis=0)
        agg = {
            "min": np.min(items["min"], axis=0),
            "max": np.max(items["max"], axis=0),
            "mean": mean,
            "std": np.sqrt(var),
            "count": np.array([int(total)], dtype=np.int64),
        }
        for name in STAT_NAMES:
            if name.startswith("q"):
                agg[name] = (weights * np.asarray(items[name], dtype=np.float64)).sum(axis=0)
        out[feature] = agg
    return out


def nan_column_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """`column_stats` of (N, D) floats with NaN left out, per component: a component with
    no finite value has NaN stats; ``count`` is the rows (N,), as LeRobot counts frames."""
    data = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    finite = np.isfinite(data)
    if finite.all():
        return column_stats(data)
    out = {
        "min": np.full(data.shape[1], np.nan),
        "max": np.full(data.shape[1], np.nan),
        "mean": np.full(data.shape[1], np.nan),
        "std": np.full(data.shape[1], np.nan),
        "count": np.array([len(data)], dtype=np.int64),
    }
    for q in QUANTILES:
        out[quantile_name(q)] = np.full(data.shape[1], np.nan)
    some = finite.any(axis=0)
    if some.any():
        kept = data[:, some]
        out["min"][some] = np.nanmin(kept, axis=0)
        out["max"][some] = np.nanmax(kept, axis=0)
        out["mean"][some] = np.nanmean(kept, axis=0)
        out["std"][some] = np.nanstd(kept, axis=0)
        for q, row in zip(QUANTILES, np.nanquantile(kept, QUANTILES, axis=0), strict=True):
            out[quantile_name(q)][some] = row
    return out


def run_stats(firsts: np.ndarray, lengths: np.ndarray, step: int) -> dict[str, np.ndarray]:
    """`column_stats` of every episode's run ``first + step * arange(length)`` at once
    (``step`` 0: a constant, 1: consecutive integers), each stat (episodes, 1), bit for
    bit what `column_stats` gives: the runs are integers, so every sum it takes is exact
    in float64 whatever its order (lengths up to 2**20, values below 2**40)."""
    first = np.asarray(firsts, dtype=np.int64)
    n = np.asarray(lengths, dtype=np.int64)
    if step not in (0, 1) or n.min(initial=1) < 1 or n.max(initial=1) > 2**20:
        raise ValueError("run_stats: step 0 or 1, lengths 1 to 2**20")
    last = first + step * (n - 1)
    mean = (n * first + step * (n * (n - 1) // 2)).astype(np.float64) / n
    # sum of squared deviations from the mean of 0..n-1: (n**3 - n) / 12, a multiple of 1/2
    squares = ((n**3 - n) // 6).astype(np.float64) / 2 if step else np.zeros(len(n))
    position = np.asarray(QUANTILES) * (n[:, None] - 1)
    lower = np.floor(position).astype(np.int64)
    upper = np.minimum(lower + 1, n[:, None] - 1)
    t = position - lower
    a = (first[:, None] + step * lower).astype(np.float64)
    b = (first[:, None] + step * upper).astype(np.float64)
    diff = b - a
    qs = np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)
    out = {
        "min": first.astype(np.float64)[:, None],
        "max": last.astype(np.float64)[:, None],
        "mean": mean[:, None],
        "std": np.sqrt(squares / n)[:, None],
        "count": n[:, None],
    }
    for i, q in enumerate(QUANTILES):
        out[quantile_name(q)] = qs[:, i : i + 1]
    return out


class _StatsStack:
    """Episodes' stats from their JSON, stacked a batch of episodes at a time (one numpy
    conversion a feature and stat for the batch, not one an episode, and no more than a
    batch of Python floats alive)."""

    BATCH = 256

    def __init__(self, features: list[str]) -> None:
        self.features = features
        self.pending: list[dict[str, Any]] = []
        self.chunks: dict[str, dict[str, list[np.ndarray]]] = {
            f: {name: [] for name in STAT_NAMES} for f in features
        }

    def add(self, stats: dict[str, Any]) -> None:
        self.pending.append(stats)
        if len(self.pending) >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            for feature in self.features:
                for name in STAT_NAMES:
                    rows = [s[feature][name] for s in self.pending]
                    self.chunks[feature][name].append(np.array(rows))
        self.pending = []

    def stacked(self) -> dict[str, dict[str, np.ndarray]]:
        self._flush()
        return {
            f: {name: np.concatenate(c) for name, c in by_name.items()}
            for f, by_name in self.chunks.items()
        }


class _DataFiles:
    """The current merged data file and its (chunk, file) index; each written file is
    hashed (for the receipt) once it is closed (`FileHashes`)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.loc = (0, 0)
        self.writer: pq.ParquetWriter | None = None
        self.path: Path | None = None
        self.bytes = 0
        self.open = False  # a data file is current (written or linked)
        self.linked_from: Path | None = None  # set: files are hard-linked from this merge
        self.hashes = FileHashes(out)

    def new_file(self) -> None:
        """Close the current data file: the next episode's rows start a new one."""
        if self.open:
            self._close_writer()
            self.open = False
            self.loc = advance(*self.loc)

    def _close_writer(self) -> None:
        if self.writer is not None:
            self.writer.close()
            assert self.path is not None  # a file was written
            self.hashes.add(self.path)
        self.writer = None

    def write(self, table: pa.Table, size: int) -> tuple[int, int]:
        """Append one episode's rows (one row group; ``size``: its shard file's bytes,
        what the file size limit counts); return the file's (chunk, file)."""
        if self.open and self.bytes + size >= DATA_FILES_SIZE_IN_MB * MB:
            self.new_file()
        if not self.open:
            chunk, file = self.loc
            relative = DATA_PATH.format(chunk_index=chunk, file_index=file)
            path = self.path = self.out / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            if self.linked_from is not None:
                link_or_copy(self.linked_from / relative, path)
            else:
                self.writer = pq.ParquetWriter(
                    path, table.schema, compression="snappy", use_dictionary=False
                )
            self.bytes, self.open = 0, True
        if self.writer is not None:
            self.writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self.bytes += size
        return self.loc

    def close(self) -> None:
        """Close the current file (hashed too); the hashing thread ends once it is done."""
        try:
            self._close_writer()
        finally:
            self.hashes.shutdown()


def _json_names(folder: Path) -> list[str]:
    """Sorted ``*.json`` names in ``folder`` (none when it is missing; hidden left out)."""
    return sorted(name for name in visible_names(folder) if name.endswith(".json"))


def _task_specs(shard: Path, metadata: dict[str, Any]) -> list[str]:
    """The names of the shard's task specification files: the one its episode metadata
    names (``task_specification.path``; none when that is null), or, for metadata without
    the field, the ``*.json`` files of its folder."""
    if "task_specification" not in metadata:
        return _json_names(shard / TASK_SPEC_DIR)
    named = metadata["task_specification"]
    return [] if named is None else [Path(named["path"]).name]


def _read_parquet(raw: bytes, columns: list[str] | None = None) -> pa.Table:
    """The small Parquet file ``raw`` decoded on this thread (``ParquetFile`` skips
    read_table's dataset set-up, ~1 ms; for an episode's 90 kB, Arrow's thread pool and
    read-ahead cost more than they save: 0.2 against 0.37 ms)."""
    source = pa.BufferReader(raw)
    return pq.ParquetFile(source, pre_buffer=False).read(columns=columns, use_threads=False)


@dataclass
class _Episode:
    """What the merge reads of one shard, read ahead of it (`_read_ahead`)."""

    table: pa.Table
    data_bytes: int
    tasks: bytes
    stats: dict[str, Any]
    metadata_raw: bytes
    metadata: dict[str, Any]
    replaced: Mapping[str, np.ndarray] | None = None  # `Replacement.columns` of the shard


def _read_episode(shard: Path, linked: bool, reads: tuple[str, ...]) -> _Episode:
    """Read shard ``shard`` for the merge: its rows (only ``task_index`` and ``reads``
    when ``linked``), tasks file, stats and episode metadata."""
    metadata_raw = (shard / METADATA_FILE).read_bytes()
    metadata = dict(json_loads(metadata_raw))
    episode = int(metadata["episode"]["index"])
    raw = shard_file(shard, DATA_PATH, episode, "data", ".parquet").read_bytes()
    return _Episode(
        table=_read_parquet(raw, ["task_index", *reads] if linked else None),
        data_bytes=len(raw),
        tasks=(shard / TASKS_FILE).read_bytes(),
        stats=json_loads((shard / STATS_FILE).read_bytes()),
        metadata_raw=metadata_raw,
        metadata=metadata,
    )


def _read_chunk(jobs: list[tuple[Path, bool]], replace: Replacement | None) -> list[_Episode]:
    """`_read_episode` of each (shard, linked), then the columns ``replace`` computes for
    all of them in one call."""
    episodes = [
        _read_episode(shard, linked, replace.reads if replace is not None else ())
        for shard, linked in jobs
    ]
    if replace is not None:
        replaced = replace.columns([e.metadata for e in episodes], [e.table for e in episodes])
        for episode, columns in zip(episodes, replaced, strict=True):
            episode.replaced = columns
    return episodes


def _chunks(
    jobs: list[tuple[Path, bool]], frames: list[int]
) -> Generator[list[tuple[Path, bool]], None, None]:
    """``jobs`` in order, in runs of at most `CHUNK_SHARDS` shards and (past the first
    shard of each) `CHUNK_FRAMES` frames (``frames``: each shard's ``total_frames``)."""
    start = 0
    while start < len(jobs):
        end, rows = start + 1, frames[start]
        while end < len(jobs) and end - start < CHUNK_SHARDS and rows + frames[end] <= CHUNK_FRAMES:
            rows += frames[end]
            end += 1
        yield jobs[start:end]
        start = end


def _read_ahead(
    jobs: list[tuple[Path, bool]],
    frames: list[int],
    replace: Replacement | None = None,
) -> Generator[_Episode, None, None]:
    """The shards' `_Episode` in order, read in chunks (`_chunks`, `_read_chunk`) one
    chunk ahead on a thread of its own: its Parquet decoding and file reads release the
    GIL and overlap the writing; a chunk's replacement columns are computed back to back,
    in one call (small calls between the writes cost several times as much: the caches
    are cold)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="merge-read") as pool:
        pending: deque[Future[list[_Episode]]] = deque()
        current: deque[_Episode] = deque()  # read, not yet handed out
        try:
            for chunk in [*_chunks(jobs, frames), None]:  # None: no chunk left to submit
                if chunk is not None:
                    pending.append(pool.submit(_read_chunk, chunk, replace))
                while pending and (chunk is None or len(pending) > 1):
                    current.extend(pending.popleft().result())
                    while current:
                        yield current.popleft()
        finally:  # an error or an early stop: nothing more is read
            for future in pending:
                future.cancel()


def _metadata(shard: Path) -> dict[str, Any]:
    return dict(json_loads((shard / METADATA_FILE).read_bytes()))


class _Tasks:
    """The merged task list and each shard's tasks, a shard's ``meta/tasks.parquet``
    parsed once for each distinct content (episodes of one task share it)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.index: dict[str, int] = {}
        self.parsed: dict[bytes, list[str]] = {}

    def remap(self, raw: bytes) -> np.ndarray:
        """Shard task index -> merged task index for the tasks file of bytes ``raw``."""
        local = self.parsed.get(raw)
        if local is None:
            # the pandas index ``task`` is the column ``task`` (pyarrow alone: no pandas)
            table = pq.ParquetFile(pa.BufferReader(raw)).read(columns=["task"])
            local = self.parsed[raw] = table["task"].to_pylist()
        for text in local:
            if text not in self.index:
                self.index[text] = len(self.texts)
                self.texts.append(text)
        return np.array([self.index[t] for t in local], dtype=np.int64)


def merge_shards(
    shards: list[Path],
    out: Path,
    data_version: str = "",
    *,
    breaks: Collection[int] = (),
    reuse: Reuse | None = None,
    split: str = "train",
    replace: Replacement | None = None,
    language: bool = False,
    video_runner: VideoRunner | None = None,
) -> MergeResult:
    """Merge shard folders (in the given order) into the empty folder ``out``.

    ``data_version`` (what the caller derived the inputs' identity from) is recorded in
    ``ceres/merge.json``; ``split`` names the episode range in ``meta/info.json``;
    ``breaks`` and ``reuse``: see the module docstring (``reuse`` is ignored when the
    earlier merge chose another fps or camera shape), ``replace``: see the module
    docstring; ``language``: every frame also gets lerobot's ``language_persistent``
    (the episode's segments as subtasks) and ``language_events`` columns
    (`lerobot_language`); ``video_runner(merge_videos, *args)``: how the video side
    (`ceres_merge_video.merge_videos`) is run beside the rows, which wait for it at the
    end (default: called on a thread; a caller may run it in a process of its own).
    """
    fps, camera_shape, included, excluded = _choose_shards(shards)
    if reuse is not None:
        earlier = json_loads((reuse.folder / INFO_FILE).read_bytes())
        reuse = reuse if _signature(earlier) == (fps, camera_shape) else None
    merge = _Merge(out, fps, camera_shape, included[0][2]["features"], replace, language)
    data = merge.data
    linked_from = [
        reuse.folder if reuse is not None and position < reuse.shards else None
        for position, _, _ in included
    ]
    # new data and video files at the breaks and where linked files end
    starts = set(breaks)
    new_files = [
        position in starts or (i > 0 and linked_from[i - 1] is not None and not linked)
        for i, ((position, _, _), linked) in enumerate(zip(included, linked_from, strict=True))
    ]
    frames = [int(info["total_frames"]) for _, _, info in included]
    videos: Future[tuple[list[VideoPlace], dict[str, str]]] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="merge-video") as pool:
        if camera_shape is not None:
            steps = [
                VideoStep(shard, n, new, linked)
                for (_, shard, _), n, new, linked in zip(
                    included, frames, new_files, linked_from, strict=True
                )
            ]
            run = video_runner or _call
            videos = pool.submit(run, merge_videos, out, fps, steps)
        jobs = [
            (shard, linked is not None)
            for (_, shard, _), linked in zip(included, linked_from, strict=True)
        ]
        read = _read_ahead(jobs, frames, replace=replace)
        try:
            for new_index, ((_, shard, _), episode) in enumerate(zip(included, read, strict=True)):
                if new_files[new_index]:
                    data.new_file()
                data.linked_from = linked_from[new_index]
                merge.add(new_index, shard, episode, data.linked_from is not None)
        finally:
            read.close()
            data.close()
        if videos is not None:  # the rows' error first; then the video side's
            merge.set_videos(*videos.result())
    for (_, shard, _), rows, n in zip(included, merge.lengths, frames, strict=True):
        if rows != n:
            raise ValueError(f"shard {shard}: {INFO_FILE} says {n} frames, its data {rows} rows")
    merge.finish(data_version, split, excluded)
    return MergeResult(len(included), merge.offset, len(merge.tasks.texts), excluded)


def _call(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)


def _choose_shards(
    shards: list[Path],
) -> tuple[Any, Any, list[tuple[int, Path, dict[str, Any]]], dict[str, str]]:
    """The dataset's (fps, camera shape): the most shards' (the first on a tie); the
    shards that have it (position, folder, info.json) and why each other one is left out
    (shard name -> reason)."""
    infos = [json_loads((s / INFO_FILE).read_bytes()) for s in shards]
    if not shards:
        raise ValueError("no shards to merge")
    signatures = [_signature(i) for i in infos]
    counts = Counter(signatures)
    chosen = max(counts, key=lambda sig: (counts[sig], -signatures.index(sig)))
    fps, camera_shape = chosen
    excluded: dict[str, str] = {}
    included: list[tuple[int, Path, dict[str, Any]]] = []
    for position, (shard, info, sig) in enumerate(zip(shards, infos, signatures, strict=True)):
        if sig == chosen:
            included.append((position, shard, info))
        else:
            name = shard_name(int(_metadata(shard)["episode"]["index"]))
            excluded[name] = (
                f"fps {sig[0]}, camera {sig[1]}; dataset: fps {fps}, camera {camera_shape}"
            )
    if not included:
        raise ValueError("no shard to merge")
    return fps, camera_shape, included, excluded


class _Merge:
    """What `merge_shards` gathers episode by episode (`add`) and writes at the end
    (`finish`: ``meta/``, the stats, ``ceres/merge.json``, the receipt)."""

    def __init__(
        self,
        out: Path,
        fps: Any,
        camera_shape: Any,
        features: dict[str, Any],
        replace: Replacement | None,
        language: bool,
    ) -> None:
        self.out, self.fps, self.camera_shape, self.language = out, fps, camera_shape, language
        self.features_info = features
        self.tasks = _Tasks()
        self.data = _DataFiles(out)
        self.video_digests: dict[str, str] = {}
        self.episode_rows: list[dict[str, Any]] = []
        self.features = list(features)
        renumbered = [f for f in RENUMBERED if f in self.features]
        self.replaced = _Replaced(replace)
        self.stats = _StatsStack(
            [f for f in self.features if f not in renumbered and f not in self.replaced]
        )
        self.lengths: list[int] = []
        self.first_task: list[int] = []
        self.varying_tasks: dict[int, dict[str, np.ndarray]] = {}  # episodes of several tasks
        self.merged: list[dict[str, Any]] = []
        self.copied_specs: set[str] = set()
        self.offset = 0

    def add(self, new_index: int, shard: Path, episode: _Episode, linked: bool) -> None:
        """Episode ``new_index`` (read from ``shard``; ``linked``: its rows are the earlier
        merge's): its rows, episode row (its video's place: `set_videos`), metadata and
        task specs."""
        table = episode.table
        n = table.num_rows
        task_index = self.tasks.remap(episode.tasks)[table.column("task_index").to_numpy()]
        table = self.replaced.apply(episode, table, linked)
        if not linked:
            table = _renumbered(table, new_index, self.offset, task_index)
            if self.language:
                for name, column in language_columns(episode.metadata, n).items():
                    table = table.append_column(name, column)
        chunk, file = self.data.write(table, episode.data_bytes)
        self.stats.add(episode.stats)
        self.lengths.append(n)
        self.first_task.append(int(task_index[0]) if n else 0)
        if n and task_index.min() != task_index.max():
            self.varying_tasks[new_index] = column_stats(task_index)
        row: dict[str, Any] = {
            "episode_index": new_index,
            "tasks": [self.tasks.texts[i] for i in dict.fromkeys(task_index.tolist())],
            "length": n,
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": self.offset,
            "dataset_to_index": self.offset + n,
        }
        if self.camera_shape is not None:  # filled in by `set_videos`, in this order
            row.update(dict.fromkeys(VIDEO_COLUMNS))
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = 0
        self.episode_rows.append(row)
        self.offset += n
        self._copy_metadata(new_index, shard, episode)

    def _copy_metadata(self, new_index: int, shard: Path, episode: _Episode) -> None:
        """The episode's metadata (a link when unchanged) and its task specs (each once)."""
        out = self.out
        raw, metadata = episode.metadata_raw, episode.metadata
        shard_index = int(metadata["episode"]["index"])
        written = f"{EPISODE_METADATA_DIR}/{shard_name(shard_index)}.json"
        if self.data.linked_from is not None:
            link_or_copy(self.data.linked_from / written, out / written)
        elif raw == json_bytes(metadata, indent=2) + b"\n":  # as `write_json` writes it
            link_or_copy(shard / METADATA_FILE, out / written)  # a link, no new file
        else:
            write_json(out / written, metadata)
        for spec in _task_specs(shard, metadata):
            if spec not in self.copied_specs:  # named by its SHA-256
                (out / TASK_SPEC_DIR).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shard / TASK_SPEC_DIR / spec, out / TASK_SPEC_DIR / spec)
                self.copied_specs.add(spec)
        self.merged.append(
            {
                "episode_index": new_index,
                "shard_episode_index": shard_index,
                "shard": shard_name(shard_index),
                "capture_key": metadata["episode"]["capture_key"],
                "episode_id": metadata["episode"]["id"],
            }
        )

    def set_videos(self, placed: list[VideoPlace], digests: dict[str, str]) -> None:
        """Each episode row's video file and time range (`merge_videos`' places, one an
        episode in order), and the digests of the video files written."""
        for row, place, n in zip(self.episode_rows, placed, self.lengths, strict=True):
            start = place.start / self.fps
            values = (place.chunk, place.file, start, (place.start + n) / self.fps)
            row.update(zip(VIDEO_COLUMNS, values, strict=True))
        self.video_digests = digests

    def finish(self, data_version: str, split: str, excluded: dict[str, str]) -> None:
        """``meta/`` (episodes, tasks, info, stats), ``ceres/merge.json``, the receipt."""
        out, replaced = self.out, self.replaced
        stacked = {**self.stats.stacked(), **replaced.stacked()}
        episode_stats = _episode_stats(
            stacked, self.features, self.lengths, self.first_task, self.varying_tasks
        )
        features_info = {**self.features_info, **replaced.features}
        if self.language:
            features_info = {**features_info, **LANGUAGE_FEATURES}
        if self.camera_shape is not None:
            first_video = out / VIDEO_PATH.format(video_key=CAMERA_KEY, chunk_index=0, file_index=0)
            features_info = {
                **features_info,
                CAMERA_KEY: {**features_info[CAMERA_KEY], "info": video_info(first_video)},
            }
        episodes_path = out / EPISODES_PATH.format(chunk_index=0, file_index=0)
        episodes_path.parent.mkdir(parents=True, exist_ok=True)
        table = episodes_table_stacked(self.episode_rows, episode_stats)
        pq.write_table(table, episodes_path, compression="snappy")
        write_tasks(self.tasks.texts, out / TASKS_FILE)
        m = len(self.episode_rows)
        texts = len(self.tasks.texts)
        info = info_json(features_info, self.fps, m, self.offset, texts, f"0:{m}")
        info["splits"] = {split: f"0:{m}"}
        write_json(out / INFO_FILE, info)
        dtypes = {k: v["dtype"] for k, v in features_info.items()}
        dataset_stats = {**aggregate_stats(episode_stats), **replaced.dataset_stats()}
        write_json(out / STATS_FILE, stats_to_json(dataset_stats, dtypes), compact=True)
        write_json(
            out / MERGE_FILE,
            {"data_version": data_version, "episodes": self.merged, "excluded": excluded},
        )
        write_receipt(out, {**self.data.hashes.result(), **self.video_digests})


class _Replaced:
    """The merge's side of a `Replacement` (none: every method a no-op): the new columns
    set into each episode's rows, their stats per episode and over the dataset."""

    def __init__(self, replace: Replacement | None) -> None:
        self.replace = replace
        self.features: dict[str, dict[str, Any]] = dict(replace.features) if replace else {}
        self.values: dict[str, list[np.ndarray]] = {f: [] for f in self.features}
        self.per_episode: dict[str, list[dict[str, np.ndarray]]] = {f: [] for f in self.features}

    def __contains__(self, feature: str) -> bool:
        return feature in self.features

    def apply(self, episode: _Episode, table: pa.Table, linked: bool) -> pa.Table:
        """``table`` with ``episode``'s new columns, computed as it was read ahead (a
        linked episode's rows are not written: only their values and stats are kept)."""
        if self.replace is None or episode.replaced is None:
            return table
        metadata, new = episode.metadata, episode.replaced
        for feature in self.features:
            values = np.ascontiguousarray(new[feature], dtype=np.float32)
            width = self.features[feature]["shape"][0]
            if values.shape != (table.num_rows, width):
                raise ValueError(
                    f"capture {metadata['episode']['capture_key']}: {feature}: "
                    f"{values.shape} values for {table.num_rows} rows of width {width}"
                )
            self.values[feature].append(values)
            self.per_episode[feature].append(nan_column_stats(values))
            if not linked:
                column = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), width)
                table = table.set_column(table.schema.get_field_index(feature), feature, column)
        return table

    def stacked(self) -> dict[str, dict[str, np.ndarray]]:
        return {
            f: {name: np.stack([s[name] for s in episodes]) for name in STAT_NAMES}
            for f, episodes in self.per_episode.items()
        }

    def dataset_stats(self) -> dict[str, dict[str, np.ndarray]]:
        """Stats over every row of the dataset (exact quantiles: the values are small)."""
        return {f: nan_column_stats(np.concatenate(v)) for f, v in self.values.items() if v}


def _renumbered(table: pa.Table, episode: int, offset: int, task_index: np.ndarray) -> pa.Table:
    """An episode's rows with its merged ``episode_index``, ``index`` (from ``offset``) and
    ``task_index``: one new table (``set_column`` validates the whole table each call,
    30 times the cost)."""
    n = table.num_rows
    values = {
        "episode_index": np.full(n, episode, dtype=np.int64),
        "index": offset + np.arange(n, dtype=np.int64),
        "task_index": task_index,
    }
    columns = [
        pa.array(values[f.name]) if f.name in values else table.column(i)
        for i, f in enumerate(table.schema)
    ]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _episode_stats(
    stacked: dict[str, dict[str, np.ndarray]],
    features: list[str],
    lengths: list[int],
    first_task: list[int],
    varying_tasks: dict[int, dict[str, np.ndarray]],
) -> dict[str, dict[str, np.ndarray]]:
    """Every episode's stats, stacked, in ``features`` order: the shards' own, and those
    of the renumbered columns (``episode_index``, ``index``, ``task_index``) as
    `column_stats` gives them for the merged values."""
    n = np.asarray(lengths, dtype=np.int64)
    episodes = np.arange(len(n), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
    runs = {
        "episode_index": run_stats(episodes, n, 0),
        "index": run_stats(starts, n, 1),
        "task_index": run_stats(np.asarray(first_task, dtype=np.int64), n, 0),
    }
    for episode, own in varying_tasks.items():
        for name, values in own.items():
            runs["task_index"][name][episode] = values
    return {f: runs[f] if f in runs else stacked[f] for f in features}
