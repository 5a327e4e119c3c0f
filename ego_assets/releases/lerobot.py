"""A release's packed LeRobot v3 dataset: ``lerobot/``.

The episodes' CERES shards (``exports/ceres-lerobot-v3/<key>/shards/episode-<i>/``) are
merged with the CERES merge (`ego_assets.formats.ceres_merge.merge_shards`: many episodes
per data and video file up to LeRobot's size limits, videos joined by stream copy, stats
aggregated from the per-episode stats), in split order (the spec's order) and capture-key
order within a split, so that each split is one contiguous range of episode indices,
written to ``meta/info.json``'s ``splits`` (``"train": "0:7"``) as LeRobot records
splits. The merge leaves out shards whose fps or camera shape differ from the most common
one; those are listed under ``excluded`` (capture keys) in the manifest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ego_assets.formats.ceres_lerobot import INFO_FILE, write_json, write_receipt
from ego_assets.formats.ceres_merge import MERGE_FILE, merge_shards
from ego_assets.releases.select import ReleaseEpisode

FOLDER = "lerobot"
EXPORT_NAME = "ceres_episode"


def pack_lerobot(
    root: Path,
    episodes: Sequence[ReleaseEpisode],
    splits: Sequence[str],
    out: Path,
    data_version: str,
) -> dict[str, Any]:
    """Write ``out/lerobot/`` from the episodes' CERES shards below the data root ``root``.

    Returns:
        ``{"root", "episodes": {capture key: episode index}, "splits": {split: "a:b"},
        "excluded": [capture keys]}``.
    """
    order = {split: i for i, split in enumerate(splits)}
    ordered = sorted(episodes, key=lambda e: (order[e.split], e.capture_key))
    shards = [Path(root) / e.exports[EXPORT_NAME]["path"] for e in ordered]
    target = Path(out) / FOLDER
    merge_shards(shards, target, data_version=data_version)
    merged = json.loads((target / MERGE_FILE).read_text())["episodes"]
    index = {m["capture_key"]: int(m["episode_index"]) for m in merged}
    split_of = {e.capture_key: e.split for e in episodes}
    ranges: dict[str, str] = {}
    for split in splits:
        held = [i for key, i in index.items() if split_of[key] == split]
        if held:
            ranges[split] = f"{min(held)}:{max(held) + 1}"
    info = json.loads((target / INFO_FILE).read_text())
    info["splits"] = ranges
    write_json(target / INFO_FILE, info)
    write_receipt(target)  # again: info.json changed
    return {
        "root": FOLDER,
        "episodes": index,
        "splits": ranges,
        "excluded": [e.capture_key for e in ordered if e.capture_key not in index],
    }
