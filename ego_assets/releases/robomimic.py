"""A release's robomimic-style HDF5: ``robomimic/release.hdf5``.

One file: ``/data/demo_<i>`` per episode (``i`` from 0 in the manifest's capture-key
order), each the per-episode Holos HDF5's ``/data/demo_0`` copied with h5py's object copy
(data, chunks and filters as they are, attributes included; the group gets the attribute
``ego_capture_key``); ``/data`` has ``total`` (samples over every demo) and the first
episode's ``env_args``; ``/mask/<split>`` lists the split's demo names as fixed-length
byte strings, as robomimic's ``filter_by_attribute`` reads them.

HDF5 object references do not survive a copy into another file, so the dimension-scale
attachments (``DIMENSION_LIST``/``REFERENCE_LIST``) are dropped after the copy and made
again: to the demo's own scales (its ``time`` axes) and to the label scales of the file
root (``/joint``, ``/axis_xyz``...: copied once from the first episode that has them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ego_assets.releases.select import ReleaseEpisode

FOLDER = "robomimic"
FILE = "release.hdf5"
EXPORT_NAME = "holos_hdf5"
SOURCE_DEMO = "data/demo_0"
REFERENCE_ATTRS = ("DIMENSION_LIST", "REFERENCE_LIST")


def _scale_links(demo: h5py.Group) -> list[tuple[str, int, str]]:
    """(dataset path relative to ``demo``, axis, scale's absolute path) of every attached
    dimension scale below ``demo``."""
    links: list[tuple[str, int, str]] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            for axis, dim in enumerate(obj.dims):
                links.extend((name, axis, scale.name) for scale in dim.values())

    demo.visititems(visit)
    return links


def _drop_references(group: h5py.Group | h5py.Dataset) -> None:
    """Remove the dimension-scale reference attributes of ``group`` and everything below."""
    objects = [group]
    if isinstance(group, h5py.Group):
        group.visititems(lambda _name, obj: objects.append(obj))
    for obj in objects:
        for attr in REFERENCE_ATTRS:
            if attr in obj.attrs:
                del obj.attrs[attr]


def _copy_demo(src: h5py.File, out: h5py.File, name: str) -> int:
    """Copy ``src``'s demo into ``out`` as ``data/<name>``; its ``num_samples``."""
    demo = src[SOURCE_DEMO]
    links = _scale_links(demo)
    src.copy(demo, out["data"], name=name)
    copied = out["data"][name]
    _drop_references(copied)
    for path, axis, scale_path in links:
        if scale_path.startswith(f"/{SOURCE_DEMO}/"):
            scale = copied[scale_path.removeprefix(f"/{SOURCE_DEMO}/")]
        elif scale_path.startswith("/data/") or scale_path == "/demo":
            continue  # another demo's axis or the one-demo label scale: nothing to point to
        else:
            if scale_path not in out:
                src.copy(src[scale_path], out, name=scale_path.lstrip("/"))
                _drop_references(out[scale_path])
            scale = out[scale_path]
        copied[path].dims[axis].attach_scale(scale)
    return int(demo.attrs["num_samples"])


def pack_robomimic(
    root: Path, episodes: Sequence[ReleaseEpisode], splits: Sequence[str], out: Path
) -> dict[str, Any]:
    """Write ``out/robomimic/release.hdf5`` from the episodes' Holos HDF5 exports below the
    data root ``root``.

    Returns:
        ``{"file", "total", "demos": {capture key: demo name}, "splits": {split: count}}``.
    """
    target = Path(out) / FOLDER / FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    demos: dict[str, str] = {}
    total = 0
    with h5py.File(target, "w", track_order=True) as f:
        data = f.create_group("data")
        for i, episode in enumerate(episodes):
            source = Path(root) / episode.exports[EXPORT_NAME]["path"]
            name = f"demo_{i}"
            try:
                with h5py.File(source, "r") as src:
                    total += _copy_demo(src, f, name)
                    if i == 0:
                        data.attrs["env_args"] = src["data"].attrs["env_args"]
            except (OSError, KeyError) as exc:
                raise ValueError(f"capture {episode.capture_key}: {source}: {exc}") from None
            data[name].attrs["ego_capture_key"] = episode.capture_key
            demos[episode.capture_key] = name
        data.attrs["total"] = np.int64(total)
        mask = f.create_group("mask")
        counts = {}
        for split in splits:
            names = [demos[e.capture_key] for e in episodes if e.split == split]
            mask.create_dataset(split, data=np.array(names, dtype="S"))
            counts[split] = len(names)
    return {"file": f"{FOLDER}/{FILE}", "total": total, "demos": demos, "splits": counts}
