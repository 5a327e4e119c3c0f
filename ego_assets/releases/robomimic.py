"""A release's robomimic-style HDF5: ``robomimic/release.hdf5`` and its parts.

The file robomimic opens, ``release.hdf5``, holds ``/data/demo_<i>`` per episode (``i``
from 0 over the parts in order, each part's episodes in its order: capture-key order in a
version of one part), ``/data``'s ``total`` (samples over every demo) and the first
episode's ``env_args``, and ``/mask/<split>``: the split's demo names as fixed-length
byte strings, as robomimic's ``filter_by_attribute`` reads them. Each ``demo_<i>`` is an
HDF5 external link (followed by h5py and so by robomimic, relative to ``release.hdf5``'s
folder) to ``parts/<part>.hdf5``'s ``/data/demo_<j>`` (``j`` from 0 in the part), so a
new version rewrites only ``release.hdf5`` (links and masks, a few kB) and the parts of
new episodes; a kept part's file is hard-linked from the previous version.

A part file's ``/data/demo_<j>`` is the per-episode Holos HDF5's ``/data/demo_0`` copied
with h5py's object copy (data, chunks and filters as they are, attributes included; the
group gets the attribute ``ego_capture_key``).

HDF5 object references do not survive a copy into another file, so the dimension-scale
attachments (``DIMENSION_LIST``/``REFERENCE_LIST``) are dropped after the copy and made
again: to the demo's own scales (its ``time`` axes) and to the label scales of the part
file's root (``/joint``, ``/axis_xyz``...: copied once from the first episode that has
them).
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
PARTS = "parts"
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


def _pack_part(root: Path, members: Sequence[ReleaseEpisode], target: Path) -> list[int]:
    """Write one part file: ``/data/demo_<j>`` per episode; each demo's ``num_samples``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    samples = []
    with h5py.File(target, "w", track_order=True) as f:
        f.create_group("data")
        for j, episode in enumerate(members):
            source = Path(root) / episode.exports[EXPORT_NAME]["path"]
            try:
                with h5py.File(source, "r") as src:
                    samples.append(_copy_demo(src, f, f"demo_{j}"))
                    if j == 0:
                        f["data"].attrs["env_args"] = src["data"].attrs["env_args"]
            except (OSError, KeyError) as exc:
                raise ValueError(f"capture {episode.capture_key}: {source}: {exc}") from None
            f["data"][f"demo_{j}"].attrs["ego_capture_key"] = episode.capture_key
    return samples


def pack_robomimic(
    root: Path,
    episodes: Sequence[ReleaseEpisode],
    splits: Sequence[str],
    out: Path,
    plan: PartPlan | None = None,
) -> dict[str, Any]:
    """Write ``out/robomimic/`` from the episodes' Holos HDF5 exports below the data root
    ``root``, part by part (``plan``; default: one part ``v1`` in the given order).

    Returns:
        ``{"file", "total", "demos": {capture key: demo name}, "splits": {split: count}}``.
    """
    plan = plan or PartPlan([{"name": "v1", "episodes": [e.capture_key for e in episodes]}])
    folder = Path(out) / FOLDER
    by_key = {e.capture_key: e for e in episodes}
    demos: dict[str, str] = {}
    links: list[tuple[str, str, str]] = []  # (demo name, part file, path in the part)
    total = 0
    for part in plan.parts:
        members = [by_key[k] for k in part["episodes"]]
        relative = f"{PARTS}/{part['name']}.hdf5"
        previous = plan.reusable(part["name"])
        if previous is not None:
            link_or_copy(previous / FOLDER / relative, folder / relative)
            with h5py.File(folder / relative, "r") as f:
                samples = [
                    int(f[f"data/demo_{j}"].attrs["num_samples"]) for j in range(len(members))
                ]
        else:
            samples = _pack_part(root, members, folder / relative)
        total += sum(samples)
        for j, episode in enumerate(members):
            name = f"demo_{len(demos)}"
            demos[episode.capture_key] = name
            links.append((name, relative, f"/data/demo_{j}"))
    with h5py.File(folder / FILE, "w", track_order=True) as f:
        data = f.create_group("data")
        for name, relative, path in links:
            data[name] = h5py.ExternalLink(relative, path)
        with h5py.File(folder / links[0][1], "r") as part:
            data.attrs["env_args"] = part["data"].attrs["env_args"]
        data.attrs["total"] = np.int64(total)
        mask = f.create_group("mask")
        counts = {}
        for split in splits:
            names = [demos[e.capture_key] for e in plan.ordered(episodes) if e.split == split]
            mask.create_dataset(split, data=np.array(names, dtype="S"))
            counts[split] = len(names)
    return {"file": f"{FOLDER}/{FILE}", "total": total, "demos": demos, "splits": counts}
