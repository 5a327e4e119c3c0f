"""A release's WebDataset: ``webdataset/<split>/shard-NNNNNN.tar`` plus ``webdataset/index.json``.

Built from the per-episode EgoSmith exports (``exports/egosmith/<key>/``): every sample's
members are copied byte for byte (no image or array is decoded or re-encoded) into the
release's shards of the episode's split, episodes in capture-key order, with the EgoSmith
shard writer (deterministic USTAR members, a sample never straddles two shards). Each
sample's ``meta.json`` is the episode export's own; the release split is the shard's
folder (and the index), not ``meta.json``'s ``split`` field.

``index.json`` lets a loader shuffle shards and resume: per split its shards, episodes and
samples; per shard its path, split, sample count, bytes, SHA-256 and the byte offset of
every sample's first tar header; per episode its split, first shard and offset, samples.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ego_assets.formats import egosmith_constants as C
from ego_assets.formats.egosmith_reader import Report, raw_samples
from ego_assets.formats.egosmith_webdataset import (
    DEFAULT_SHARD_BYTES,
    EPISODE_FILE,
    EpisodeSummary,
    ShardWriter,
    tar_sample,
)
from ego_assets.releases.select import ReleaseEpisode

FOLDER = "webdataset"
INDEX_FILE = "index.json"
EXPORT_NAME = "egosmith_shards"


class PackError(ValueError):
    """A per-episode export could not be packed; the message names capture and file."""


def _episode_samples(folder: Path, key: str) -> Any:
    """(sample key, [(extension, bytes)...]) of one EgoSmith episode folder, in order."""
    index = folder / EPISODE_FILE
    if not index.is_file():
        raise PackError(f"capture {key}: {index}: no episode.json (export not finished)")
    summary = EpisodeSummary.from_json(index.read_text())
    for shard in summary.shards:
        report = Report(str(folder / shard["name"]))
        for sample, members in raw_samples(folder / shard["name"], report):
            yield sample, [(ext, members[ext]) for ext in C.EXTENSIONS if ext in members]
        if report.errors:
            raise PackError(f"capture {key}: {folder / shard['name']}: {report.errors[0]}")


def pack_webdataset(
    root: Path,
    episodes: Sequence[ReleaseEpisode],
    splits: Sequence[str],
    out: Path,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> dict[str, Any]:
    """Write ``out/webdataset/`` for ``episodes`` (exports below the data root ``root``).

    Returns:
        The content of ``index.json`` (also written, last).
    """
    target = Path(out) / FOLDER
    shards: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    for split in splits:
        members = [e for e in episodes if e.split == split]
        if not members:
            continue
        (target / split).mkdir(parents=True, exist_ok=True)
        writer = ShardWriter(target / split, shard_bytes)
        offsets: dict[str, list[int]] = {}
        for episode in members:
            folder = Path(root) / episode.exports[EXPORT_NAME]["path"]
            first: tuple[str, int] | None = None
            count = 0
            for sample, data in _episode_samples(folder, episode.capture_key):
                writer.write_sample(tar_sample(sample, data))
                offsets.setdefault(writer.last_sample[0], []).append(writer.last_sample[1])
                first = first or writer.last_sample
                count += 1
            entries.append(
                {
                    "capture_key": episode.capture_key,
                    "split": split,
                    "samples": count,
                    "shard": f"{split}/{first[0]}" if first else None,
                    "offset": first[1] if first else None,
                }
            )
        for info in writer.close():
            shards.append(
                {
                    "path": f"{split}/{info.name}",
                    "split": split,
                    "samples": info.samples,
                    "bytes": info.bytes,
                    "sha256": info.sha256,
                    "offsets": offsets[info.name],
                }
            )
    index = {
        "format": "webdataset",
        "samples": sum(s["samples"] for s in shards),
        "splits": {
            split: {
                "shards": [s["path"] for s in shards if s["split"] == split],
                "episodes": sum(1 for e in entries if e["split"] == split),
                "samples": sum(s["samples"] for s in shards if s["split"] == split),
            }
            for split in splits
        },
        "shards": shards,
        "episodes": entries,
    }
    target.mkdir(parents=True, exist_ok=True)
    (target / INDEX_FILE).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return index
