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

With a derived action space (``[actions]``), ``demo_<i>`` is a group of ``release.hdf5``
instead (`_derived_demo`): the demo's attributes copied, each of its datasets and
groups an external link into the episode file as before (its ``actions`` as
``source_actions``), ``obs`` and ``next_obs`` groups of links plus the derived obs
(`derived.obs_groups`: ``eef_pose_<hand>``, ``grasp_aperture_<hand>``,
``gripper_closed_<hand>``, ``fingertips_<hand>``, ``valid_<hand>``; ``next_obs`` one
sample later, the last row repeated), ``actions`` (T, A) with its ``action_component``
names as a dimension scale, and ``actions_valid``. Every value comes from
`derived.derive_many` on the demo's own ``timestamp_ns``; the episode files stay as exported.
``/data``'s ``ego_actions`` attribute holds the space and the names as JSON. Such a
demo also carries its language (`language.demo_attrs`): ``ego_task``,
``ego_instructions`` (JSON list) and ``ego_segments`` (JSON: each retained segment's
text and sample range ``[start, end)`` on the demo's clock). A linked demo has only the
export's attributes (a link cannot carry any): the Holos export writes no language.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ego_assets.actions import ActionSpace
from ego_assets.fileio import json_bytes, link_or_copy
from ego_assets.releases.derived import (
    SourceNotes,
    derive_in_runs,
    describe_json,
    obs_groups,
)
from ego_assets.releases.language import demo_attrs, read_language
from ego_assets.releases.layout import PartPlan
from ego_assets.releases.select import ReleaseEpisode

FOLDER = "robomimic"
FILE = "release.hdf5"
EPISODES = "episodes"
EXPORT_NAME = "holos_hdf5"
SOURCE_DEMO = "/data/demo_0"


def linked_export_digests(
    root: Path, episodes: Sequence[ReleaseEpisode], out: Path
) -> dict[str, tuple[int, str]]:
    """Path below ``out/robomimic/`` -> (bytes, SHA-256) of each episode file that is a
    hard link to its Holos export (the same inode, the export's size): the export's own
    digest from the selection (its receipt's, taken when it was written whole; an export
    is never written through), not the file read again. A copy is left out (hashed)."""
    digests: dict[str, tuple[int, str]] = {}
    for episode in episodes:
        export = episode.exports[EXPORT_NAME]
        relative = f"{EPISODES}/{episode.capture_key}.hdf5"
        try:
            linked = os.stat(Path(out) / FOLDER / relative)
            source = os.stat(Path(root) / export["path"])
        except FileNotFoundError:
            continue
        same = (linked.st_ino, linked.st_dev) == (source.st_ino, source.st_dev)
        if same and linked.st_size == int(export["bytes"]):
            digests[relative] = (linked.st_size, str(export["sha256"]))
    return digests


def pack_robomimic(
    root: Path,
    episodes: Sequence[ReleaseEpisode],
    splits: Sequence[str],
    out: Path,
    plan: PartPlan | None = None,
    space: ActionSpace | None = None,
    notes: SourceNotes | None = None,
) -> dict[str, Any]:
    """Write ``out/robomimic/`` from the episodes' Holos HDF5 exports below the data root
    ``root``, demos in ``plan``'s order (default: one part ``v1`` in the given order),
    in the declared action ``space`` (default ``source``: each demo a link).

    Returns:
        ``{"file", "total", "demos": {capture key: demo name}, "splits": {split: count}}``.
    """
    plan = plan or PartPlan([{"name": "v1", "episodes": [e.capture_key for e in episodes]}])
    folder = Path(out) / FOLDER
    ordered = plan.ordered(episodes)
    demos: dict[str, str] = {}
    total = 0
    env_args = None
    derived = space is not None and space.derived
    clocks: dict[str, np.ndarray] = {}
    layouts: dict[str, tuple[dict[str, Any], dict[str, list[str] | None]]] = {}
    tasks = {e.capture_key: e.task for e in ordered}
    for i, episode in enumerate(ordered):
        source = Path(root) / episode.exports[EXPORT_NAME]["path"]
        target = folder / EPISODES / f"{episode.capture_key}.hdf5"
        try:
            link_or_copy(source, target)
            with h5py.File(target, "r") as f:
                total += int(f[SOURCE_DEMO].attrs["num_samples"])
                if env_args is None:
                    env_args = f["data"].attrs["env_args"]
                if derived:
                    demo = f[SOURCE_DEMO]
                    clocks[episode.capture_key] = demo["timestamp_ns"][...]
                    layouts[episode.capture_key] = _layout(demo)
        except (OSError, KeyError) as exc:
            raise ValueError(f"capture {episode.capture_key}: {source}: {exc}") from None
        demos[episode.capture_key] = f"demo_{i}"
    with h5py.File(folder / FILE, "w", track_order=True) as f:
        data = f.create_group("data")
        first = None
        tables = (
            derive_in_runs(Path(root), list(demos), space, clocks, notes)
            if space is not None and derived
            else None
        )
        for key, name in demos.items():
            if tables is not None:
                table = next(tables)
                first = first or table
                _derived_demo(data, name, key, layouts[key], table)
                language = read_language(Path(root), key, tasks[key])
                data[name].attrs.update(demo_attrs(language, table.sample_ns))
            else:
                data[name] = h5py.ExternalLink(f"{EPISODES}/{key}.hdf5", SOURCE_DEMO)
        if space is not None and derived:
            described = describe_json(space, first)
            if first is not None:
                described["obs"] = {
                    k: [first.state_names[c] for c in columns]
                    for k, columns in obs_groups(first.state_names).items()
                }
            data.attrs["ego_actions"] = json_bytes(described).decode()
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


def _layout(demo: h5py.Group) -> tuple[dict[str, Any], dict[str, list[str] | None]]:
    """A source demo's attributes and children (a group's: its member names)."""
    children: dict[str, list[str] | None] = {}
    for child, item in demo.items():
        children[child] = list(item) if isinstance(item, h5py.Group) else None
    return dict(demo.attrs), children


def _derived_demo(
    data: h5py.Group,
    name: str,
    key: str,
    layout: tuple[dict[str, Any], dict[str, list[str] | None]],
    table: Any,
) -> None:
    """``data/<name>`` as a group over the episode file (``layout``: its demo's attributes
    and children) with the derived obs and actions of ``table`` (`ActionTable`; see the
    module docstring)."""
    target = f"{EPISODES}/{key}.hdf5"
    demo = data.create_group(name, track_order=True)
    attrs, children = layout
    for attr, value in attrs.items():
        demo.attrs[attr] = value
    for child, members in children.items():
        if child in ("obs", "next_obs"):
            group = demo.create_group(child, track_order=True)
            for member in sorted(members or ()):
                group[member] = h5py.ExternalLink(target, f"{SOURCE_DEMO}/{child}/{member}")
        elif child != "action_component":  # the source actions' own scale: ours replaces it
            demo["source_actions" if child == "actions" else child] = h5py.ExternalLink(
                target, f"{SOURCE_DEMO}/{child}"
            )
    obs = demo.require_group("obs")
    next_obs = demo.require_group("next_obs")
    n = len(table.sample_ns)
    later = np.minimum(np.arange(n) + 1, max(n - 1, 0))
    for obs_key, columns in obs_groups(table.state_names).items():
        values = np.ascontiguousarray(table.state[:, columns], dtype=np.float32)
        obs.create_dataset(obs_key, data=values)
        next_obs.create_dataset(obs_key, data=values[later])
    for hand in sorted(k for k in table.valid if k != "action"):
        if f"valid_{hand}" in obs or not any(n_.startswith(f"{hand}.") for n_ in table.state_names):
            continue
        flag = table.valid[hand].astype(np.float32)[:, None]
        obs.create_dataset(f"valid_{hand}", data=flag)
        next_obs.create_dataset(f"valid_{hand}", data=flag[later])
    scale = demo.create_dataset(
        "action_component",
        data=np.array(list(table.action_names), dtype=object),
        dtype=h5py.string_dtype(),
    )
    scale.make_scale("action_component")
    actions = demo.create_dataset("actions", data=np.asarray(table.action, dtype=np.float32))
    actions.dims[1].attach_scale(scale)
    demo.create_dataset("actions_valid", data=table.valid["action"].astype(np.uint8))
