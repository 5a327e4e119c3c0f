"""A release's robomimic-style HDF5: ``robomimic/release.hdf5`` over one file per episode.

The file robomimic opens, ``release.hdf5``, holds ``/data/demo_<i>`` per episode (``i``
from 0 over the parts in order, each part's episodes in its order: capture-key order in a
version of one part), ``/data``'s ``total`` (samples over every demo) and the first
episode's ``env_args``, ``/mask/<split>``: the split's demo names as fixed-length byte
strings, as robomimic's ``filter_by_attribute`` reads them, and ``/ego/capture_keys``:
demo ``i``'s capture key at row ``i``.

Each ``demo_<i>`` is an HDF5 external link (followed by h5py and so by robomimic,
relative to ``release.hdf5``'s folder) to ``/data/demo_0`` of
``episodes/<capture key>.hdf5``: the episode's per-episode Holos HDF5 export itself,
hard-linked (copied across file systems): exports are written whole and renamed into
place, never written through, so the link keeps the bytes the manifest lists. Nothing of
an episode is rewritten: its demo is the export's, with its chunks, filters, attributes
and dimension scales as they are. A new version rewrites only ``release.hdf5`` (links,
masks, keys: a few kB per thousand episodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ego_assets.fileio import link_or_copy
from ego_assets.releases.layout import PartPlan
from ego_assets.releases.select import ReleaseEpisode

FOLDER = "robomimic"
FILE = "release.hdf5"
EPISODES = "episodes"
EXPORT_NAME = "holos_hdf5"
SOURCE_DEMO = "/data/demo_0"


def pack_robomimic(
    root: Path,
    episodes: Sequence[ReleaseEpisode],
    splits: Sequence[str],
    out: Path,
    plan: PartPlan | None = None,
) -> dict[str, Any]:
    """Write ``out/robomimic/`` from the episodes' Holos HDF5 exports below the data root
    ``root``, demos in ``plan``'s order (default: one part ``v1`` in the given order).

    Returns:
        ``{"file", "total", "demos": {capture key: demo name}, "splits": {split: count}}``.
    """
    plan = plan or PartPlan([{"name": "v1", "episodes": [e.capture_key for e in episodes]}])
    folder = Path(out) / FOLDER
    ordered = plan.ordered(episodes)
    demos: dict[str, str] = {}
    total = 0
    env_args = None
    for i, episode in enumerate(ordered):
        source = Path(root) / episode.exports[EXPORT_NAME]["path"]
        target = folder / EPISODES / f"{episode.capture_key}.hdf5"
        try:
            link_or_copy(source, target)
            with h5py.File(target, "r") as f:
                total += int(f[SOURCE_DEMO].attrs["num_samples"])
                if env_args is None:
                    env_args = f["data"].attrs["env_args"]
        except (OSError, KeyError) as exc:
            raise ValueError(f"capture {episode.capture_key}: {source}: {exc}") from None
        demos[episode.capture_key] = f"demo_{i}"
    with h5py.File(folder / FILE, "w", track_order=True) as f:
        data = f.create_group("data")
        for key, name in demos.items():
            data[name] = h5py.ExternalLink(f"{EPISODES}/{key}.hdf5", SOURCE_DEMO)
        data.attrs["env_args"] = env_args
        data.attrs["total"] = np.int64(total)
        f.create_dataset("ego/capture_keys", data=np.array(list(demos), dtype="S"))
        mask = f.create_group("mask")
        counts = {}
        for split in splits:
            names = [demos[e.capture_key] for e in ordered if e.split == split]
            mask.create_dataset(split, data=np.array(names, dtype="S"))
            counts[split] = len(names)
    return {"file": f"{FOLDER}/{FILE}", "total": total, "demos": demos, "splits": counts}
