"""EgoSmith exports over a `Storage`: one folder per episode, one packed dataset.

Layout below the storage root::

    exports/egosmith/<capture key>/shard-000000.tar ... + episode.json (index, written last)
    exports/egosmith-dataset/shard-000000.tar ...      + manifest.json (index, written last)

`EgoSmithExporter` writes one episode folder (run by `ego_assets.exports.run.run_export`);
`pack_dataset` is what the unpartitioned packing asset calls. Both reuse their stored
output when its data version (code + options + inputs) is unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from upath import UPath

from ego_assets.exports.registry import EGOSMITH, ExportFormat, ExportOption
from ego_assets.exports.run import WHOLE_FOLDER, Written
from ego_assets.formats import egosmith_constants
from ego_assets.formats.egosmith_lowdim import NoHeadCameraError, head_camera
from ego_assets.formats.egosmith_tar import ShardWriter
from ego_assets.formats.egosmith_webdataset import (
    EPISODE_FILE,
    FORMAT,
    MANIFEST_FILE,
    WRITER_VERSION,
    EgoSmithOptions,
    EpisodeSummary,
    skipped_episode,
    write_episode,
)
from ego_assets.pipeline import LINEAGE_FILE
from ego_assets.progress import READ_TASK, report
from ego_assets.storage import Storage, raw_capture_dir
from ego_assets.trajectory.store import read_trajectory

EPISODES_FORMAT = "egosmith"
DATASET_FOLDER = "egosmith-dataset"
SPLITS = ("train", "val")
_DEFAULTS = EgoSmithOptions()


def episode_path(storage: Storage, key: str) -> UPath:
    """``exports/egosmith/<key>``."""
    return storage.export_path(EPISODES_FORMAT, key)


def dataset_path(storage: Storage) -> UPath:
    """``exports/egosmith-dataset``: the packed dataset."""
    return storage.root / "exports" / DATASET_FOLDER


def episode_data_version(
    storage: Storage, key: str, episode_index: int, options: EgoSmithOptions
) -> str:
    """Writer version + options + episode number + the trajectory's data version."""
    lineage = json.loads((storage.stage_path("trajectory", key) / LINEAGE_FILE).read_text())
    return f"{WRITER_VERSION}:{options.version()}:ep{episode_index}:{lineage['data_version']}"


def stored_episode(storage: Storage, key: str) -> EpisodeSummary | None:
    """The finished episode folder's summary, or None (no index file = not finished)."""
    path = episode_path(storage, key) / EPISODE_FILE
    if not path.exists():
        return None
    return EpisodeSummary.from_json(path.read_text())


def _figures(summary: EpisodeSummary) -> dict[str, float | int | str]:
    figures: dict[str, float | int | str] = {
        "status": summary.status,
        "episode_index": summary.episode_index,
        "samples": summary.samples,
        "shards": len(summary.shards),
        "bytes": sum(int(s["bytes"]) for s in summary.shards),
    }
    if summary.status == "skipped":
        figures["skip_reason"] = summary.reason
    else:
        figures["camera"] = summary.camera
        figures["both_hands_frames"] = summary.presence_counts.get("3", 0)
    return figures


@dataclass(frozen=True, slots=True)
class EgoSmithExporter:
    """The episode folder ``exports/egosmith/<key>``: tar shards and ``episode.json``.

    A capture without a head camera is recorded as skipped (``episode.json`` with
    ``status == "skipped"`` and the reason, and a receipt with status ``skipped``), so
    the catalog shows it skipped rather than missing.
    """

    options: EgoSmithOptions = field(default_factory=EgoSmithOptions)
    format: ExportFormat = EGOSMITH
    index_file: str = EPISODE_FILE
    uses_episode_index: bool = True

    # `EgoSmithOptions`, field by field (also the packing asset's config)
    OPTIONS: ClassVar[tuple[ExportOption, ...]] = (
        ExportOption(
            "dataset_name", _DEFAULTS.dataset_name, "sample key prefix; empty: the capture's"
        ),
        ExportOption("shard_bytes", _DEFAULTS.shard_bytes, "target shard size"),
        ExportOption("jpeg_quality", _DEFAULTS.jpeg_quality, "1-100"),
        ExportOption("export_depth", _DEFAULTS.export_depth, "write depth.npy when there is depth"),
        ExportOption("val_fraction", _DEFAULTS.val_fraction, "share of episodes in the val split"),
    )

    @classmethod
    def from_options(cls, values: Mapping[str, Any]) -> EgoSmithExporter:
        return cls(EgoSmithOptions(**{option.name: values[option.name] for option in cls.OPTIONS}))

    def details(self, storage: Storage, key: str) -> dict[str, Any]:
        return {}

    def target(self, storage: Storage, key: str) -> UPath:
        return episode_path(storage, key)

    def data_version(
        self, storage: Storage, key: str, gate_version: str | None, episode_index: int
    ) -> str:
        return episode_data_version(storage, key, episode_index, self.options)

    def stored(self, storage: Storage, key: str) -> EpisodeSummary | None:
        return stored_episode(storage, key)

    def is_current(self, record: EpisodeSummary, version: str, episode_index: int) -> bool:
        return record.data_version == version

    def artefact(self, key: str, record: EpisodeSummary) -> str:
        return WHOLE_FOLDER

    def skipped(self, record: EpisodeSummary) -> str:
        return record.reason if record.status == "skipped" else ""

    def write(
        self, storage: Storage, key: str, stage: Path, version: str, episode_index: int
    ) -> Written:
        report(READ_TASK, 0, 2)
        with storage.read_dir(storage.stage_path("trajectory", key)) as folder:
            trajectory = read_trajectory(folder)
        report(READ_TASK, 1, 2)
        try:
            camera = head_camera(trajectory)
        except NoHeadCameraError as exc:
            text = skipped_episode(key, episode_index, version, str(exc))
            (stage / EPISODE_FILE).write_text(text)
            skipped = EpisodeSummary.from_json(text)
            return Written(skipped, WHOLE_FOLDER, skipped.reason)
        raw = raw_capture_dir(storage.stage_path("raw", key))
        depth_media = next((m for m in trajectory.media if m.kind == "depth"), None)
        with ExitStack() as stack:
            video = stack.enter_context(storage.read_file(raw / camera.media.path))
            depth = None
            if self.options.export_depth and depth_media is not None:
                depth_file = stack.enter_context(storage.read_file(raw / depth_media.path))
                depth = (depth_file, depth_media)
            report(READ_TASK, 2, 2)
            summary = write_episode(
                trajectory,
                camera,
                video,
                stage,
                episode_index=episode_index,
                data_version=version,
                options=self.options,
                depth=depth,
            )
        # the shards were hashed as they were written: the receipt does not read them again
        return Written(summary, digests={s["name"]: s["sha256"] for s in summary.shards})

    def figures(
        self, storage: Storage, key: str, record: EpisodeSummary
    ) -> dict[str, float | int | str]:
        return _figures(record)


# ---------------------------------------------------------------------------------------
# packing


@dataclass(frozen=True, slots=True)
class PackResult:
    """What `pack_dataset` did: the manifest (as a dict) and whether it was reused."""

    manifest: dict[str, Any]
    reused: bool

    @property
    def uri(self) -> str:
        return str(self.manifest.get("uri", ""))


def finished_episodes(storage: Storage) -> list[EpisodeSummary]:
    """Every finished episode folder's summary (written or skipped), by capture key.

    Folders without ``episode.json`` (a write in progress or killed) are ignored.
    """
    root = storage.root / "exports" / EPISODES_FORMAT
    if not root.exists():
        return []
    out = []
    for child in sorted(root.iterdir(), key=lambda p: p.name):
        if child.name.startswith(".") or not (child / EPISODE_FILE).exists():
            continue
        out.append(EpisodeSummary.from_json((child / EPISODE_FILE).read_text()))
    return out


def _bucket(capture_id: str) -> float:
    """A stable number in [0, 1) per capture (same split on every run and machine)."""
    digest = hashlib.sha256(capture_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_splits(episodes: list[EpisodeSummary], val_fraction: float) -> dict[str, str]:
    """capture id -> ``train`` / ``val``; whole episodes only.

    An episode whose capture declares ``train``/``val`` keeps it; the others go to ``val``
    when their stable hash bucket is below ``val_fraction``. When that leaves ``val``
    empty (few episodes) and ``val_fraction > 0`` with at least two episodes, the
    undeclared episode with the lowest bucket goes to ``val``.
    """
    splits: dict[str, str] = {}
    free = []
    for ep in episodes:
        if ep.split in SPLITS:
            splits[ep.capture_id] = ep.split
        else:
            free.append(ep.capture_id)
            splits[ep.capture_id] = "val" if _bucket(ep.capture_id) < val_fraction else "train"
    if val_fraction > 0 and len(episodes) >= 2 and "val" not in splits.values() and free:
        splits[min(free, key=_bucket)] = "val"
    return splits


def _episode_samples(folder: Path, summary: EpisodeSummary) -> Iterator[tuple[str, dict]]:
    """(key, {extension: bytes}) of every sample of an episode folder, in order."""
    from ego_assets.formats.egosmith_reader import Report, raw_samples  # packing only

    for shard in summary.shards:
        report = Report(str(folder / shard["name"]))
        yield from raw_samples(folder / shard["name"], report)
        if report.errors:
            raise ValueError(f"episode {summary.capture_id!r}: {report.errors[0]}")


def _with_split(members: dict[str, bytes], split: str) -> list[tuple[str, bytes]]:
    """The sample's members in writing order, its meta.json carrying ``split``."""
    meta = json.loads(members["meta.json"])
    meta["split"] = split
    members = {**members, "meta.json": json.dumps(meta, sort_keys=True).encode()}
    return [(ext, members[ext]) for ext in egosmith_constants.EXTENSIONS if ext in members]


def _pack_split(
    storage: Storage,
    writer: ShardWriter,
    members: list[EpisodeSummary],
    split: str,
    shards: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Write the samples of ``members`` (one split, in order) through ``writer``; append
    its shards' manifest entries to ``shards`` and return the episodes' entries."""
    episodes = []
    shard_episodes: dict[str, set[int]] = {}
    for summary in members:
        with storage.read_dir(episode_path(storage, summary.capture_id)) as folder:
            for key, sample in _episode_samples(folder, summary):
                writer.write(key, _with_split(sample, split))
                shard_name = egosmith_constants.SHARD_PATTERN.format(writer.next_index - 1)
                shard_episodes.setdefault(shard_name, set()).add(summary.episode_index)
        names = sorted(name for name, eps in shard_episodes.items() if summary.episode_index in eps)
        episodes.append(
            {
                "episode_index": summary.episode_index,
                "capture_id": summary.capture_id,
                "clip_id": summary.clip_id,
                "dataset_name": summary.dataset_name,
                "split": split,
                "samples": summary.samples,
                "shards": names,
                "data_version": summary.data_version,
            }
        )
    for info in writer.close():
        shards.append(
            {
                "name": info.name,
                "split": split,
                "samples": info.samples,
                "bytes": info.bytes,
                "sha256": info.sha256,
                "episodes": sorted(shard_episodes.get(info.name, set())),
            }
        )
    return episodes


def pack_dataset(storage: Storage, options: EgoSmithOptions | None = None) -> PackResult:
    """Pack every written episode into ``exports/egosmith-dataset`` (see the module docstring).

    Shards hold one split each (train shards first, then val), episodes in episode-index
    order; each sample's ``meta.json`` gets its episode's split. Shuffling (shards and
    samples) is left to the loader, as WebDataset recommends.
    """
    options = options or EgoSmithOptions()
    summaries = finished_episodes(storage)
    written = [s for s in summaries if s.status == "written"]
    skipped = [
        {"capture_id": s.capture_id, "reason": s.reason} for s in summaries if s.status == "skipped"
    ]
    splits = assign_splits(written, options.val_fraction)
    inputs = sorted(f"{s.capture_id}={s.data_version}" for s in written)
    version = hashlib.sha256(
        "\n".join([WRITER_VERSION, options.version(), str(options.val_fraction), *inputs]).encode()
    ).hexdigest()
    target = dataset_path(storage)
    manifest_path = target / MANIFEST_FILE
    if manifest_path.exists():
        stored = json.loads(manifest_path.read_text())
        if stored.get("data_version") == version:
            return PackResult(stored, True)
    numbers = [s.episode_index for s in written]
    if len(set(numbers)) != len(numbers):
        dup = sorted({n for n in numbers if numbers.count(n) > 1})
        raise ValueError(f"episode numbers used by more than one capture: {dup}")
    shards: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []
    with storage.write_to(target, index_file=MANIFEST_FILE) as tmp:
        next_shard = 0
        for split in SPLITS:
            members = sorted(
                (s for s in written if splits[s.capture_id] == split),
                key=lambda s: s.episode_index,
            )
            writer = ShardWriter(tmp, options.shard_bytes, first=next_shard)
            episodes += _pack_split(storage, writer, members, split, shards)
            next_shard = writer.next_index
        manifest = {
            "format": FORMAT,
            "writer_version": WRITER_VERSION,
            "data_version": version,
            "uri": str(target),
            "samples": sum(s["samples"] for s in shards),
            "episodes": episodes,
            "shards": shards,
            "splits": {
                split: {
                    "shards": [s["name"] for s in shards if s["split"] == split],
                    "episodes": sum(1 for e in episodes if e["split"] == split),
                    "samples": sum(s["samples"] for s in shards if s["split"] == split),
                }
                for split in SPLITS
            },
            "skipped": skipped,
        }
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return PackResult(manifest, False)


def egosmith_rows(storage: Storage, keys: Sequence[str]) -> list[tuple[str, ...]]:
    """Table rows for `make demo` beside the receipts: skipped captures, the packed dataset."""
    rows: list[tuple[str, ...]] = [("egosmith", "")]
    for key in sorted(keys):
        summary = stored_episode(storage, key)
        if summary is not None and summary.status == "skipped":
            rows.append((key, f"skipped: {summary.reason}"))
    manifest = dataset_path(storage) / MANIFEST_FILE
    if manifest.exists():
        packed = json.loads(manifest.read_text())
        splits = packed["splits"]
        rows.append(
            (
                "packed dataset",
                f"{len(packed['shards'])} shards, {packed['samples']} samples, "
                f"{splits['train']['episodes']} train / {splits['val']['episodes']} val "
                f"episodes: {dataset_path(storage).path}",
            )
        )
    else:
        rows.append(("packed dataset", "not packed yet"))
    return rows
