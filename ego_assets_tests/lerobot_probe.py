"""Load datasets with the real ``lerobot`` and report what it sees (run in the lerobot venv).

Usage: ``python lerobot_probe.py REQUEST.json RESULT.json FRAMES.npz``. The request lists
``{"name", "root", "fps", "camera"}`` entries. For each dataset the result holds
``len``, ``num_episodes``, the first and last item of every episode (indices, timestamp,
task), the ``_is_pad`` masks of a ``delta_timestamps`` load at those items, and the stats
that ``meta.stats`` carries; the decoded camera frames of those items go to FRAMES.npz
as uint8 HWC arrays named ``<name>/<dataset index>``, with those of the entry's optional
``"frames"`` (more dataset indices).

This file must not import ego_assets: it runs beside lerobot's own pins, not ours.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def _scalar(value):
    return value.item() if hasattr(value, "item") else value


def probe(entry: dict) -> tuple[dict, dict[str, np.ndarray]]:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    name, root, fps, camera = entry["name"], entry["root"], entry["fps"], entry["camera"]
    ds = LeRobotDataset(f"ceres/{name}", root=root, video_backend="torchcodec")
    episodes = ds.meta.episodes
    out: dict = {"len": len(ds), "num_episodes": ds.num_episodes, "episodes": []}
    frames: dict[str, np.ndarray] = {}
    delta = LeRobotDataset(
        f"ceres/{name}",
        root=root,
        video_backend="torchcodec",
        delta_timestamps={camera: [-1 / fps, 0.0], "action": [0.0, 1 / fps]},
    )
    for e in range(ds.num_episodes):
        start = int(episodes[e]["dataset_from_index"])
        end = int(episodes[e]["dataset_to_index"]) - 1
        items = []
        for i in (start, end):
            item = ds[i]
            image = item[camera].numpy().transpose(1, 2, 0)
            frames[f"{name}/{i}"] = np.round(image * 255).astype(np.uint8)
            padded = delta[i]
            items.append(
                {
                    "i": i,
                    "episode_index": _scalar(item["episode_index"]),
                    "frame_index": _scalar(item["frame_index"]),
                    "index": _scalar(item["index"]),
                    "timestamp": _scalar(item["timestamp"]),
                    "task": item["task"],
                    "state": item["observation.state"].numpy().tolist(),
                    "camera_is_pad": padded[f"{camera}_is_pad"].numpy().tolist(),
                    "action_is_pad": padded["action_is_pad"].numpy().tolist(),
                }
            )
        out["episodes"].append(items)
    for i in entry.get("frames", []):
        image = ds[i][camera].numpy().transpose(1, 2, 0)
        frames[f"{name}/{i}"] = np.round(image * 255).astype(np.uint8)
    out["stats"] = {
        feature: {k: list(np.asarray(v).shape) for k, v in stats.items()}
        for feature, stats in (ds.meta.stats or {}).items()
    }
    out["features"] = sorted(ds.meta.features)
    return out, frames


def main(argv: list[str]) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with open(argv[0]) as fh:
        request = json.load(fh)
    results, frames = {}, {}
    for entry in request:
        results[entry["name"]], own = probe(entry)
        frames.update(own)
    with open(argv[1], "w") as fh:
        json.dump(results, fh)
    np.savez(argv[2], **frames)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
