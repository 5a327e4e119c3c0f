"""A release's packed LeRobot v3 datasets: ``lerobot/<split>/``, one per split.

Each split is a LeRobotDataset v3 of its own (``meta/info.json``'s ``splits`` is
``{"<split>": "0:<episodes>"}``), so training on a split is opening its folder. The
episodes' CERES shards (``exports/ceres-lerobot-v3/<key>/shards/episode-<i>/``) are
merged with the CERES merge (`ego_assets.formats.ceres_merge.merge_shards`: many episodes
per data and video file up to LeRobot's size limits, videos joined by stream copy, stats
aggregated from the per-episode stats) in part order (`layout`), each part starting new
data and video files; a split of `apart.PROCESS_MIN_EPISODES` episodes or more has its
videos merged in a process of its own (`run_apart`), beside the rows. Files are numbered
across parts, so the leading parts a version keeps at the same place
(``PartPlan.prefix``) keep their data and video files: they are hard-linked from the
previous version; appended episodes land in new files. The merge leaves out shards
whose fps or camera shape differ from the most common one; those are listed under
``excluded`` (capture keys) in the manifest.

With a derived action space (``[actions]``), each frame's ``observation.state`` and
``action`` are the `derived` vectors at that frame's source-clock time, with one name
per component in ``meta/info.json`` and their stats (NaN left out), and every frame has
lerobot 0.6's ``language_persistent`` (the episode's segments as subtasks) and
``language_events`` columns (`ego_assets.formats.lerobot_language`); everything else is
the merge's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ego_assets.actions import ActionSpace
from ego_assets.formats.ceres_lerobot import RECEIPT_FILE
from ego_assets.formats.ceres_merge import MERGE_FILE, Replacement, Reuse, merge_shards
from ego_assets.releases.apart import PROCESS_MIN_EPISODES, run_apart
from ego_assets.releases.derived import CERES_READS, LeRobotActions, SourceNotes
from ego_assets.releases.layout import PartPlan
from ego_assets.releases.select import ReleaseEpisode

FOLDER = "lerobot"
EXPORT_NAME = "ceres_episode"


def pack_lerobot(
    root: Path,
    episodes: Sequence[ReleaseEpisode],
    splits: Sequence[str],
    out: Path,
    data_version: str,
    plan: PartPlan | None = None,
    space: ActionSpace | None = None,
    notes: SourceNotes | None = None,
) -> dict[str, Any]:
    """Write ``out/lerobot/<split>/`` from the episodes' CERES shards below the data root
    ``root`` (``plan``: the parts; default one part ``v1`` in the given order; ``space``:
    the declared action space, default ``source``).

    Returns:
        ``{"root", "datasets": {split: {"root", "episodes"}}, "episodes": {capture key:
        episode index in its split's dataset}, "excluded": [capture keys]}``.
    """
    plan = plan or PartPlan([{"name": "v1", "episodes": [e.capture_key for e in episodes]}])
    part_of = plan.part_of()
    leading = {p["name"] for p in plan.parts[: plan.prefix]}
    datasets: dict[str, Any] = {}
    index: dict[str, int] = {}
    excluded: list[str] = []
    replace = None
    if space is not None and space.derived and episodes:
        actions = LeRobotActions(Path(root), space, notes)
        features = actions.features(space.state_names(), space.action_names())
        replace = Replacement(features, CERES_READS, actions.columns)
    for split in splits:
        ordered = [e for e in plan.ordered(episodes) if e.split == split]
        if not ordered:
            continue
        parts = [part_of[e.capture_key] for e in ordered]
        breaks = [i for i in range(1, len(parts)) if parts[i] != parts[i - 1]]
        target = Path(out) / FOLDER / split
        reuse = None
        kept = sum(1 for p in parts if p in leading)
        earlier = plan.previous / FOLDER / split if plan.previous else None
        if kept and earlier is not None and (earlier / MERGE_FILE).is_file():
            reuse = Reuse(earlier, kept)
        shards = [Path(root) / e.exports[EXPORT_NAME]["path"] for e in ordered]
        merge_shards(
            shards,
            target,
            data_version=data_version,
            breaks=breaks,
            reuse=reuse,
            split=split,
            replace=replace,
            language=replace is not None,
            video_runner=run_apart if len(ordered) >= PROCESS_MIN_EPISODES else None,
        )
        merged = json.loads((target / MERGE_FILE).read_text())["episodes"]
        got = {m["capture_key"]: int(m["episode_index"]) for m in merged}
        index.update(got)
        excluded += [e.capture_key for e in ordered if e.capture_key not in got]
        datasets[split] = {"root": f"{FOLDER}/{split}", "episodes": len(got)}
    return {"root": FOLDER, "datasets": datasets, "episodes": index, "excluded": excluded}


def receipt_digests(out: Path, packed: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Path below ``out`` -> (bytes, SHA-256) of every file the split datasets' receipts
    list (``packed``: what `pack_lerobot` returned): hashed once, for the receipt."""
    digests: dict[str, tuple[int, str]] = {}
    for dataset in packed["datasets"].values():
        receipt = json.loads((Path(out) / dataset["root"] / RECEIPT_FILE).read_text())
        for artefact in receipt["artefacts"]:
            path = f"{dataset['root']}/{artefact['path']}"
            digests[path] = (int(artefact["bytes"]), artefact["sha256"])
    return digests
