"""A release's declared action space, derived for each packing from the trajectory store.

With ``[actions] space`` other than ``source``, every packing writes the state and
action vectors of `ego_assets.actions.derive_actions` on its own frames' timestamps
(source-clock ns): LeRobot on the CERES shard's rows, robomimic on the Holos demo's
``timestamp_ns``, WebDataset on each EgoSmith sample's ``timestamp_ns``. Only the
trajectory store is read, never a capture: ``trajectory/<key>/action_sources.arrow``
(`ego_assets.actions.stored`, written by the normalize step: the hands, the head and the
recorder slots, read once), or where it is missing or of another version, ``capture.json``
and the streams the derivation uses (poses, hands, camera frame poses, recorder slots).
The CPU seconds spent reading and deriving are counted (`derivation_cpu_s`, processes of
`run_apart` included): what ``bench release`` reports as ``actions_share``.

How a CERES row maps to the source clock: a recorder-slot capture's row is a slot
(``ceres.source_frame_index`` = the ``recorder_slots`` stream's ``slot_index``, whose
``timestamp_ns`` it takes); any other row's ``ceres.source_timestamp`` is seconds since
the capture start (``start_ns + round(seconds * 1e9)``).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ego_assets.actions import ActionSpace, ActionSpaceError, ActionTable
from ego_assets.actions.derive import derive_from_sources
from ego_assets.actions.sources import ActionSources, action_sources
from ego_assets.actions.stored import read_sources
from ego_assets.fileio import json_loads
from ego_assets.keys import validate_capture_key
from ego_assets.storage import Storage
from ego_assets.trajectory.model import CaptureInfo, MediaRef, Trajectory
from ego_assets.trajectory.records import from_jsonable
from ego_assets.trajectory.store import CAPTURE_JSON, read_streams

# Stream kinds the derivation reads (IMU, objects and other vectors are left unread);
# camera frame poses only when no pose stream gives the head, recorder slots on request.
HAND_AND_HEAD_KINDS = frozenset({"pose", "hand_joints", "wrist_palm", "mano"})
CERES_READS = ("ceres.source_frame_index", "ceres.source_timestamp")
STATE_FEATURE, ACTION_FEATURE = "observation.state", "action"
# episodes whose sources are read and derived together (`derive_many`)
DERIVE_CHUNK = 64


class ActionsError(ValueError):
    """An episode whose declared state and actions cannot be derived (names the capture)."""


def trajectory_folder(root: Path, key: str) -> Path:
    """``<root>/trajectory/<key>/`` (a local data root, ``key`` validated)."""
    return _trajectory_stage(str(root)) / validate_capture_key(key)


@functools.lru_cache(maxsize=8)
def _trajectory_stage(root: str) -> Path:
    """``<root>/trajectory`` as `Storage` resolves it (once per root: it is not cheap)."""
    return Path(Storage(root).root.path) / "trajectory"


def load_trajectory(root: Path, key: str, slots: bool = False) -> Trajectory:
    """What the derivation reads of ``key``'s trajectory: ``capture.json``'s info and
    media, the hand and head streams (`HAND_AND_HEAD_KINDS`), the camera frame streams
    when no pose stream is there, the ``recorder_slots`` stream with ``slots``."""
    folder = trajectory_folder(root, key)
    try:
        data = json_loads((folder / CAPTURE_JSON).read_bytes())
        index = data["streams"]
        kinds = set(HAND_AND_HEAD_KINDS)
        if not any(entry["kind"] == "pose" for entry in index):
            kinds.add("media_frames")
        if slots:
            kinds.add("recorder_slots")
        streams = read_streams(folder, (entry for entry in index if entry["kind"] in kinds))
        names = {s.name for s in streams}
        media = tuple(
            m
            for m in (from_jsonable(MediaRef, item) for item in data.get("media", []))
            if m.frames_stream is None or m.frames_stream in names
        )
        return Trajectory(
            info=from_jsonable(CaptureInfo, data["info"]), streams=streams, media=media
        )
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise ActionsError(f"capture {key}: trajectory {folder}: {exc}") from None


def load_sources(root: Path, key: str) -> ActionSources:
    """``key``'s `ActionSources`: its ``action_sources.arrow``, else (missing, another
    version) read from its streams (`load_trajectory`)."""
    try:
        stored = read_sources(trajectory_folder(root, key))
    except FileNotFoundError:
        stored = None
    except OSError as exc:
        raise ActionsError(f"capture {key}: {exc}") from None
    if stored is not None:
        return stored
    trajectory = load_trajectory(root, key, slots=True)
    try:
        return action_sources(trajectory)
    except (KeyError, ValueError) as exc:
        raise _refused(root, key, ValueError(str(exc))) from None


_spent_lock = threading.Lock()
_spent = [0.0]


def derivation_cpu_s() -> float:
    """CPU seconds this process (and the `run_apart` processes it waited for) spent in
    `derive_many` (every packing's): reading the sources and deriving."""
    with _spent_lock:
        return _spent[0]


def add_derivation_cpu_s(seconds: float) -> None:
    """Count ``seconds`` of derivation (a `run_apart` process's own count)."""
    with _spent_lock:
        _spent[0] += seconds


def derive(
    root: Path,
    key: str,
    space: ActionSpace,
    sample_ns: np.ndarray,
    notes: SourceNotes | None = None,
) -> ActionTable:
    """`derive_many` of the one episode ``key`` on ``sample_ns`` (ns)."""
    ns = np.asarray(sample_ns, dtype=np.int64)
    return derive_many(root, [key], space, lambda _key, _sources: ns, notes)[0]


def derive_many(
    root: Path,
    keys: Sequence[str],
    space: ActionSpace,
    clock: Callable[[str, ActionSources], np.ndarray],
    notes: SourceNotes | None = None,
) -> list[ActionTable]:
    """`derive_from_sources` of each of ``keys`` on ``clock(key, its sources)`` (ns),
    ActionsError naming the capture when one cannot give the declared space, the
    sources' notes to ``notes``: every episode's sources read first, then every table
    derived, each in one tight loop. A packing calls it for a run of episodes
    (`DERIVE_CHUNK`) before writing them: at 60 samples an episode, the same small reads
    and array calls made one by one between the writes cost 3-4 times as much (the CPU
    caches are cold each time). The thread's CPU time is counted (`derivation_cpu_s`)."""
    started = time.thread_time()
    try:
        every = [load_sources(root, key) for key in keys]
        tables = []
        for key, sources in zip(keys, every, strict=True):
            try:
                ns = np.asarray(clock(key, sources), dtype=np.int64)
                tables.append(derive_from_sources(sources, space, ns))
            except ValueError as exc:
                raise _refused(root, key, exc) from None
    finally:
        add_derivation_cpu_s(time.thread_time() - started)
    if notes is not None:
        for key, table in zip(keys, tables, strict=True):
            notes.add(key, table.info)
    return tables


def derive_in_runs(
    root: Path,
    keys: Sequence[str],
    space: ActionSpace,
    clocks: Mapping[str, np.ndarray],
    notes: SourceNotes | None = None,
) -> Iterator[ActionTable]:
    """The tables of ``keys`` in order on their ``clocks`` (ns), derived `DERIVE_CHUNK`
    at a time (`derive_many`)."""
    for start in range(0, len(keys), DERIVE_CHUNK):
        yield from derive_many(
            root, keys[start : start + DERIVE_CHUNK], space, lambda k, _: clocks[k], notes
        )


def _refused(root: Path, key: str, exc: ValueError) -> ActionsError:
    """One line naming the capture, its trajectory and the setting it cannot give."""
    if isinstance(exc, ActionSpaceError):
        message = re.sub(r"^capture '[^']*': ", "", exc.message)
        what = f"actions.{exc.key}: {message}"
    else:
        what = f"actions: {exc}"
    return ActionsError(f"capture {key}: {trajectory_folder(root, key)}: {what}")


def ceres_sample_ns(
    trajectory_start_ns: int, slots: tuple[np.ndarray, np.ndarray] | None, rows: pa.Table
) -> np.ndarray:
    """Source-clock ns of CERES rows (see the module docstring); ``slots``: the
    ``recorder_slots`` stream's (slot_index, timestamp_ns), or None."""
    if slots is not None:
        index = rows.column("ceres.source_frame_index").to_numpy()
        slot = np.asarray(slots[0], dtype=np.int64)
        order = np.argsort(slot, kind="stable")
        at = np.clip(np.searchsorted(slot[order], index), 0, len(slot) - 1)
        if not (slot[order][at] == index).all():
            raise ValueError("a row's slot is not in recorder_slots")
        return np.asarray(slots[1], dtype=np.int64)[order][at]
    seconds = rows.column("ceres.source_timestamp").to_numpy()
    return trajectory_start_ns + np.round(seconds * 1e9).astype(np.int64)


@dataclass(frozen=True, slots=True)
class LeRobotActions:
    """The CERES merge's `Replacement` columns for ``space``: ``observation.state`` and
    ``action`` of each shard's rows, derived from the trajectory of its capture."""

    root: Path
    space: ActionSpace
    notes: SourceNotes | None = None

    def features(self, state_names: tuple[str, ...], action_names: tuple[str, ...]) -> dict:
        return {
            STATE_FEATURE: {
                "dtype": "float32",
                "shape": [len(state_names)],
                "names": list(state_names),
            },
            ACTION_FEATURE: {
                "dtype": "float32",
                "shape": [len(action_names)],
                "names": list(action_names),
            },
        }

    def columns(
        self, metadatas: list[dict[str, Any]], rows: list[pa.Table]
    ) -> list[Mapping[str, np.ndarray]]:
        """The new columns of a run of shards (`Replacement.columns`), derived together
        (`derive_many`)."""
        by_key = {m["episode"]["capture_key"]: r for m, r in zip(metadatas, rows, strict=True)}

        def clock(key: str, sources: ActionSources) -> np.ndarray:
            return ceres_sample_ns(sources.start_ns, sources.recorder_slots, by_key[key])

        tables = derive_many(self.root, list(by_key), self.space, clock, self.notes)
        return [{STATE_FEATURE: t.state, ACTION_FEATURE: t.action} for t in tables]


def obs_groups(state_names: tuple[str, ...]) -> dict[str, list[int]]:
    """robomimic obs key -> state columns: ``<hand>.eef.*`` -> ``eef_pose_<hand>``,
    ``<hand>.<name>`` -> ``<name>_<hand>`` (``grasp_aperture_left``,
    ``gripper_closed_left``), ``<hand>.<finger>_tip.*`` -> ``fingertips_<hand>``."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(state_names):
        hand, part = name.split(".", 2)[:2]
        if part == "eef":
            key = f"eef_pose_{hand}"
        elif part.endswith("_tip"):
            key = f"fingertips_{hand}"
        else:
            key = f"{part}_{hand}"
        groups.setdefault(key, []).append(i)
    return groups


def describe_json(space: ActionSpace, table: ActionTable | None = None) -> dict[str, Any]:
    """What a packing's index says of its vectors: the space, and (given a derivation)
    the state and action names."""
    out: dict[str, Any] = {"space": space.to_json(), "describe": space.describe()}
    if table is not None:
        out["state_names"] = list(table.state_names)
        out["action_names"] = list(table.action_names)
    return out


class SourceNotes:
    """What the episodes' joint sets give of the declared space: joint set -> component
    -> the derivation's note (``exact: ...``, ``approximate: ...``, ``absent: ...``) and
    how many episode hands had it; the frames' axes and how each head pose reached
    them. Packing threads add to one."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._seen: set[tuple[str, str]] = set()
        self.sets: dict[str, dict[str, Any]] = {}
        self.frame_axes: set[str] = set()
        self.head_axes_from: set[str] = set()

    def add(self, key: str, info: Mapping[str, Any]) -> None:
        """The `ActionTable.info` of capture ``key`` (each capture counted once)."""
        with self._lock:
            if info.get("frame_axes"):
                self.frame_axes.add(str(info["frame_axes"]))
            if info.get("head_axes_from"):
                self.head_axes_from.add(str(info["head_axes_from"]))
            for side, hand in info.get("hands", {}).items():
                if (key, side) in self._seen:
                    continue
                self._seen.add((key, side))
                entry = self.sets.setdefault(
                    str(hand.get("joint_set") or "none"), {"hands": 0, "components": {}}
                )
                entry["hands"] += 1
                entry["components"].update(hand.get("components", {}))

    def merge(self, other: Mapping[str, Any]) -> None:
        """Add a `to_json` made elsewhere (the WebDataset packing's own process)."""
        with self._lock:
            self.frame_axes.update(other.get("frame_axes", []))
            self.head_axes_from.update(other.get("head_axes_from", []))
            for name, entry in other.get("joint_sets", {}).items():
                mine = self.sets.setdefault(name, {"hands": 0, "components": {}})
                mine["hands"] = max(mine["hands"], entry["hands"])
                mine["components"].update(entry["components"])

    def to_json(self) -> dict[str, Any]:
        return {
            "joint_sets": {k: self.sets[k] for k in sorted(self.sets)},
            "frame_axes": sorted(self.frame_axes),
            "head_axes_from": sorted(self.head_axes_from),
        }
