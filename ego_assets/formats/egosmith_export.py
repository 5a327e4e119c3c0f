"""EgoSmith exports over a `Storage`: one folder per episode, one packed dataset.

Layout below the storage root::

    exports/egosmith/<capture key>/shard-000000.tar ... + episode.json (index, written last)
    exports/egosmith-dataset/shard-000000.tar ...      + manifest.json (index, written last)

`export_episode` is what the per-episode asset calls after the quality gate;
`pack_dataset` is what the unpartitioned packing asset calls. Both reuse their stored
output when its data version (code + options + inputs) is unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upath import UPath

from ego_assets.catalog.receipts import ExportReceipt, make_receipt, read_receipt, write_receipt
from ego_assets.exports.registry import EGOSMITH
from ego_assets.formats import egosmith_constants as C
from ego_assets.formats.egosmith_lowdim import NoHeadCameraError, head_camera
from ego_assets.formats.egosmith_reader import Report, raw_samples
from ego_assets.formats.egosmith_webdataset import (
    EPISODE_FILE,
    FORMAT,
    MANIFEST_FILE,
    WRITER_VERSION,
    EgoSmithOptions,
    EpisodeSummary,
    ShardWriter,
    skipped_episode,
    write_episode,
)
from ego_assets.pipeline import LINEAGE_FILE, StepResult
from ego_assets.progress import READ_TASK, report
from ego_assets.storage import Storage, raw_capture_dir
from ego_assets.trajectory.store import read_trajectory

EPISODES_FORMAT = "egosmith"
DATASET_FOLDER = "egosmith-dataset"
SPLITS = ("train", "val")
RECEIPT_FORMAT = EGOSMITH.name  # receipts/<format>/


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


def export_episode(
    storage: Storage,
    key: str,
    episode_index: int,
    options: EgoSmithOptions | None = None,
    gate_version: str | None = None,
    *,
    force: bool = False,
) -> StepResult:
    """Write ``exports/egosmith/<key>`` from the stored trajectory and raw media.

    The caller applies the quality gate first and passes its ``data_version`` as
    ``gate_version``: a written episode then gets its export receipt
    (`ego_assets.catalog.receipts`, format ``egosmith_shards``). A capture without a
    head camera is recorded as skipped (``episode.json`` with ``status == "skipped"``
    and the reason) and gets a receipt with status ``skipped`` and that reason, so the
    catalog shows it skipped rather than missing. ``force`` writes it again even when
    current.
    """
    options = options or EgoSmithOptions()
    version = episode_data_version(storage, key, episode_index, options)
    target = episode_path(storage, key)
    existing = stored_episode(storage, key)
    if not force and existing is not None and existing.data_version == version:
        if gate_version is not None:
            receipt = read_receipt(storage, RECEIPT_FORMAT, key)
            if receipt is None or receipt.input_data_version != gate_version:
                with storage.read_dir(target) as folder:
                    write_receipt(
                        storage, _receipt(storage, key, target, folder, gate_version, existing)
                    )
        return StepResult(key, version, True, _figures(existing))
    report(READ_TASK, 0, 2)
    with storage.read_dir(storage.stage_path("trajectory", key)) as folder:
        trajectory = read_trajectory(folder)
    report(READ_TASK, 1, 2)
    try:
        camera = head_camera(trajectory)
    except NoHeadCameraError as exc:
        text = skipped_episode(key, episode_index, version, str(exc))
        skipped = EpisodeSummary.from_json(text)
        skip_receipt = None
        with storage.write_to(target, index_file=EPISODE_FILE) as tmp:
            (tmp / EPISODE_FILE).write_text(text)
            if gate_version is not None:  # the skip record is what the receipt digests
                skip_receipt = _receipt(storage, key, target, tmp, gate_version, skipped)
        if skip_receipt is not None:
            write_receipt(storage, skip_receipt)
        return StepResult(key, version, False, _figures(skipped))
    raw = raw_capture_dir(storage.stage_path("raw", key))
    depth_media = next((m for m in trajectory.media if m.kind == "depth"), None)
    receipt = None
    with ExitStack() as stack:
        video = stack.enter_context(storage.read_file(raw / camera.media.path))
        depth = None
        if options.export_depth and depth_media is not None:
            depth = (stack.enter_context(storage.read_file(raw / depth_media.path)), depth_media)
        tmp = stack.enter_context(storage.write_to(target, index_file=EPISODE_FILE))
        report(READ_TASK, 2, 2)
        summary = write_episode(
            trajectory,
            camera,
            video,
            tmp,
            episode_index=episode_index,
            data_version=version,
            options=options,
            depth=depth,
        )
        if gate_version is not None:  # digest the staged copy; written once it is in place
            receipt = _receipt(storage, key, target, tmp, gate_version)
    if receipt is not None:
        write_receipt(storage, receipt)
    return StepResult(key, version, False, _figures(summary))


def _receipt(
    storage: Storage,
    key: str,
    target: UPath,
    local: Path,
    gate_version: str,
    summary: EpisodeSummary | None = None,
) -> ExportReceipt:
    """The episode's receipt; status ``skipped`` with the reason for a skipped summary."""
    skipped = summary is not None and summary.status == "skipped"
    return make_receipt(
        storage,
        export_format=RECEIPT_FORMAT,
        capture_key=key,
        location=target,
        local=local,
        code_version=WRITER_VERSION,
        input_data_version=gate_version,
        skipped_reason=summary.reason if skipped and summary is not None else "",
    )


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
    return [(ext, members[ext]) for ext in C.EXTENSIONS if ext in members]


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
            shard_episodes: dict[str, set[int]] = {}
            for summary in members:
                with storage.read_dir(episode_path(storage, summary.capture_id)) as folder:
                    for key, sample in _episode_samples(folder, summary):
                        writer.write(key, _with_split(sample, split))
                        shard_name = C.SHARD_PATTERN.format(writer.next_index - 1)
                        shard_episodes.setdefault(shard_name, set()).add(summary.episode_index)
                names = sorted(
                    name for name, eps in shard_episodes.items() if summary.episode_index in eps
                )
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
