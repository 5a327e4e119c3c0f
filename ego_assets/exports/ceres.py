"""The CERES LeRobot v3 exporter and the merged dataset.

* `CeresExporter` (run by `ego_assets.exports.run.run_export`): trajectory + raw
  media -> the capture's shard, below
  ``exports/ceres-lerobot-v3/<key>/shards/episode-<index:06d>/`` with ``lineage.json``
  beside ``shards/`` (its index file on S3, written last), then the export receipt
  (``receipts/ceres_episode/<key>.json``). The index comes from the shared
  `EpisodeIndexRegistry`. A shard whose lineage names the same exporter version, gate
  data version and index is reused as it is, never rewritten.
* `merge_dataset`: every current shard (its capture's gate still allows the ``lerobot``
  export) -> one multi-episode dataset at ``exports/ceres-lerobot-v3-dataset/``.

Crash safety: the shard folder is written in a temporary sibling and renamed into
place (local), or uploaded with ``lineage.json`` last (S3), so a killed export leaves
no folder that carries a lineage file; readers (the merge, the next run) only take
folders that do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from upath import UPath

from ego_assets.exports.registry import CERES, ExportFormat, ExportOption
from ego_assets.exports.run import Written
from ego_assets.formats.ceres_lerobot import CODE_VERSION, FORMAT_NAME, shard_name, write_shard
from ego_assets.formats.ceres_merge import MERGE_FILE, MERGE_VERSION, merge_shards
from ego_assets.pipeline import LINEAGE_FILE, stored_gate
from ego_assets.progress import READ_TASK, WRITE_TASK, report
from ego_assets.storage import Storage, raw_capture_dir
from ego_assets.trajectory.store import read_trajectory

SHARDS_DIR = "shards"
DATASET_FOLDER = f"{FORMAT_NAME}-dataset"


def export_root(storage: Storage, key: str) -> UPath:
    """``exports/ceres-lerobot-v3/<key>``: the shard and its lineage."""
    return storage.export_path(FORMAT_NAME, key)


def stored_lineage(storage: Storage, key: str) -> dict[str, Any] | None:
    """The export lineage of ``key`` (None when no finished shard exists)."""
    path = export_root(storage, key) / LINEAGE_FILE
    if not path.exists():
        return None
    return json.loads(path.read_text())


@dataclass(frozen=True, slots=True)
class CeresExporter:
    """The capture's shard ``shards/episode-<index>/`` and ``lineage.json`` beside it."""

    format: ExportFormat = CERES
    index_file: str = LINEAGE_FILE
    uses_episode_index: bool = True

    OPTIONS: ClassVar[tuple[ExportOption, ...]] = ()

    @classmethod
    def from_options(cls, values: Mapping[str, Any]) -> CeresExporter:
        return cls()

    def details(self, storage: Storage, key: str) -> dict[str, Any]:
        return {}

    def target(self, storage: Storage, key: str) -> UPath:
        return export_root(storage, key)

    def data_version(
        self, storage: Storage, key: str, gate_version: str | None, episode_index: int
    ) -> str:
        return f"{CODE_VERSION}:{gate_version}"

    def stored(self, storage: Storage, key: str) -> dict[str, Any] | None:
        return stored_lineage(storage, key)

    def is_current(self, record: dict[str, Any], version: str, episode_index: int) -> bool:
        return record["data_version"] == version and record["episode_index"] == episode_index

    def artefact(self, key: str, record: dict[str, Any]) -> str:
        return str(record["shard"])

    def skipped(self, record: dict[str, Any]) -> str:
        return ""

    def write(
        self, storage: Storage, key: str, stage: Path, version: str, episode_index: int
    ) -> Written:
        shard = f"{SHARDS_DIR}/{shard_name(episode_index)}"
        report(READ_TASK, 0, 1)
        with (
            storage.read_dir(storage.stage_path("trajectory", key)) as trajectory_dir,
            storage.read_dir(raw_capture_dir(storage.stage_path("raw", key))) as raw_dir,
        ):
            trajectory = read_trajectory(trajectory_dir)
            report(READ_TASK, 1, 1)
            folder = stage / shard
            folder.mkdir(parents=True)
            report(WRITE_TASK, 0, 1)
            summary = write_shard(trajectory, raw_dir, episode_index, folder)
            report(WRITE_TASK, 1, 1)
        lineage = {
            "data_version": version,
            "episode_index": episode_index,
            "shard": shard,
            "frames": summary.frames,
            "fps": summary.fps,
            "video": summary.video,
            "bytes": summary.bytes,
        }
        (stage / LINEAGE_FILE).write_text(json.dumps(lineage, sort_keys=True) + "\n")
        return Written(lineage, shard, digests=summary.digests)

    def figures(
        self, storage: Storage, key: str, record: dict[str, Any]
    ) -> dict[str, float | int | str]:
        return {
            "episode_index": int(record["episode_index"]),
            "frames": int(record["frames"]),
            "fps": int(record["fps"]),
            "video": str(record["video"]),
            "bytes": int(record["bytes"]),
        }


@dataclass(frozen=True, slots=True)
class CurrentShard:
    """A finished shard whose capture's export gate passes."""

    key: str
    episode_index: int
    location: UPath
    data_version: str


def current_shards(storage: Storage) -> list[CurrentShard]:
    """Every finished shard whose capture still passes its gate, in episode-index order."""
    exports = storage.root / "exports" / FORMAT_NAME
    if not exports.exists():
        return []
    out = []
    for entry in exports.iterdir():
        key = entry.name
        if key.startswith(".") or not entry.is_dir():
            continue
        lineage = stored_lineage(storage, key)
        gate = stored_gate(storage, key) if lineage else None
        if lineage is None or gate is None or not gate.allows(CERES.policy_key):
            continue
        location = export_root(storage, key) / lineage["shard"]
        index = int(lineage["episode_index"])
        out.append(CurrentShard(key, index, location, str(lineage["data_version"])))
    return sorted(out, key=lambda s: s.episode_index)


@dataclass(frozen=True, slots=True)
class MergeSummary:
    """What `merge_dataset` wrote."""

    uri: str
    episodes: int
    frames: int
    tasks: int
    excluded: dict[str, str]
    reused: bool


def dataset_location(storage: Storage) -> UPath:
    """``exports/ceres-lerobot-v3-dataset``: the merged dataset."""
    return storage.root / "exports" / DATASET_FOLDER


def merge_dataset(storage: Storage) -> MergeSummary:
    """Merge every current shard into `dataset_location` (replaced as a whole).

    On S3 the shards are downloaded first and ``meta/info.json`` is uploaded last. With
    no current shard nothing is written (a LeRobot dataset needs an episode) and the
    summary counts 0 episodes. The stored dataset is reused when its ``ceres/merge.json``
    names the same merge version and the same shards (key, index, shard data version).
    """
    shards = current_shards(storage)
    target = dataset_location(storage)
    if not shards:
        return MergeSummary(str(target), 0, 0, 0, {}, False)
    inputs = [f"{s.key}={s.episode_index}:{s.data_version}" for s in shards]
    version = hashlib.sha256("\n".join([MERGE_VERSION, *inputs]).encode()).hexdigest()
    merge_file = target / MERGE_FILE
    if (target / "meta/info.json").exists() and merge_file.exists():
        stored = json.loads(merge_file.read_text())
        if stored.get("data_version") == version:
            info = json.loads((target / "meta/info.json").read_text())
            return MergeSummary(
                str(target),
                info["total_episodes"],
                info["total_frames"],
                info["total_tasks"],
                stored["excluded"],
                True,
            )
    with ExitStack() as stack:
        folders = [
            Path(shard.location.path)
            if storage.is_local
            else stack.enter_context(storage.read_dir(shard.location))
            for shard in shards
        ]
        with storage.write_to(target, index_file="meta/info.json") as stage:
            result = merge_shards(folders, stage, data_version=version)
    return MergeSummary(
        str(target), result.episodes, result.frames, result.tasks, result.excluded, False
    )
