"""Exports as Rerun recordings: LeRobot datasets (CERES) and HDF5 files (Holos).

Rerun's own `LeRobotReader` turns one episode into chunks exactly as the format carries
it: ``observation.state`` and ``action`` as scalars, the task as text, the camera as a
video stream, on the ``frame_index`` timeline. It leaves out what it cannot interpret;
this module adds, from the dataset's own metadata (``meta/info.json`` feature names):

* ``skeleton/<side>``: the hand skeletons unpacked from the state vector (every
  ``<side>_hand.<webxr joint>.position.<axis>`` column, drawn while
  ``<side>_hand.tracked`` is 1), as line strips of the WebXR bones;
* ``ceres.source_gap``: the gap flag of every row (1 on a recorder gap slot), which the
  reader skips (boolean feature).

No knowledge of the exporter's code is used: only the names the dataset declares. What
the readers print while they read (Rust log lines on the standard error, such as "feature
of dtype Int64 not yet implemented") is returned as plain notes instead.

An HDF5 file goes through Rerun's `Hdf5Reader`, one stream per clock of the file (every
group with its own ``time`` dataset), plus ``skeleton/<side>`` line strips from the
Holos world skeleton groups.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import rerun as rr
from rerun.chunk import Chunk, IndexColumn, LazyChunkStream
from rerun.experimental import Hdf5Reader, LeRobotReader

from ego_assets.fileio import atomic_output
from ego_assets.trajectory.joints import JOINT_SETS
from ego_assets.viewer import APPLICATION_ID
from ego_assets.viewer.rerun_log import ArrowBatch
from ego_assets.viewer.skeleton import skeleton_strips

INFO_JSON = "meta/info.json"
STATE = "observation.state"
GAP = "ceres.source_gap"
FRAME = "frame_index"
HOLOS_WORLD_SKELETONS = "/holos/raw/hand_pose_world"
HAND_RGB = {"left": 0x2866FFFF, "right": 0xEB3C28FF}
# A Rust log line: colour codes, then "<timestamp> <LEVEL> <target>: <message>".
COLOUR_CODE = re.compile(r"\x1b\[[0-9;]*m")
RUST_LOG_PREFIX = re.compile(r"^\S+Z\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s+[\w:]+:\s*")


@contextmanager
def reader_notes() -> Iterator[list[str]]:
    """Collect what is written to the standard error (file descriptor 2, where Rerun's
    Rust code logs) inside the block; the yielded list holds its lines afterwards, without
    colour codes, timestamp, level or logger name. When the block fails they are printed
    to the standard error, so nothing that explains the failure is lost."""
    notes: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    failed = False
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield notes
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode(errors="replace").splitlines():
                plain = RUST_LOG_PREFIX.sub("", COLOUR_CODE.sub("", line)).strip()
                if plain:
                    notes.append(plain)
            if failed and notes:
                print("\n".join(notes), file=sys.stderr)


def is_lerobot_dataset(path: Path) -> bool:
    """Whether ``path`` is a LeRobot dataset folder (``meta/info.json``)."""
    return (Path(path) / INFO_JSON).is_file()


def _episode_rows(folder: Path, episode: int) -> dict[str, np.ndarray]:
    """frame_index, state (N, D) and gap flags of one episode from ``data/**.parquet``."""
    tables = []
    for file in sorted((folder / "data").rglob("*.parquet")):
        table = pq.read_table(file)
        tables.append(table.filter(pc.equal(table["episode_index"], episode)))
    rows = {FRAME: np.concatenate([t[FRAME].to_numpy() for t in tables])}
    rows[STATE] = np.concatenate(
        [np.stack(t[STATE].to_numpy(zero_copy_only=False)) for t in tables if t.num_rows]
    )
    if all(GAP in t.column_names for t in tables):
        rows[GAP] = np.concatenate([t[GAP].to_numpy(zero_copy_only=False) for t in tables])
    return rows


def _added_chunks(folder: Path, episode: int) -> list[Chunk]:
    info = json.loads((folder / INFO_JSON).read_text())
    names = list(info["features"][STATE].get("names") or [])
    rows = _episode_rows(folder, episode)
    index = {FRAME: rows[FRAME]}
    chunks: list[Chunk] = []
    joints = JOINT_SETS["webxr25"]
    for side in ("left", "right"):
        columns = [f"{side}_hand.{j}.position.{a}" for j in joints for a in "xyz"]
        if f"{side}_hand.tracked" not in names or not set(columns) <= set(names):
            continue
        state = rows[STATE]
        positions = state[:, [names.index(c) for c in columns]].reshape(len(state), -1, 3)
        tracked = state[:, names.index(f"{side}_hand.tracked")] > 0.5
        strips = skeleton_strips(
            positions.astype(np.float64), np.repeat(tracked[:, None], len(joints), 1), "webxr25"
        )
        column = rr.ComponentColumn(
            rr.LineStrips3D.descriptor_strips(), ArrowBatch(strips.strips), offsets=strips.offsets
        )
        chunks.append(
            Chunk.from_columns(
                f"skeleton/{side}",
                indexes=[rr.TimeColumn(FRAME, sequence=index[FRAME])],
                columns=[column],
            )
        )
        chunks.append(
            Chunk.from_columns(
                f"skeleton/{side}",
                indexes=[],
                columns=rr.LineStrips3D.columns(colors=[HAND_RGB[side]]),
            )
        )
    if GAP in rows:
        chunks.append(
            Chunk.from_columns(
                GAP,
                indexes=[rr.TimeColumn(FRAME, sequence=index[FRAME])],
                columns=rr.Scalars.columns(scalars=rows[GAP].astype(np.float64)),
            )
        )
    return chunks


def lerobot_recording(
    folder: Path, out: Path, episode: int | None = None
) -> tuple[Path, list[str]]:
    """Write one episode of the LeRobot dataset ``folder`` to ``out`` (.rrd).

    ``episode`` defaults to the first episode of the dataset. Returns ``out`` and the
    reader's notes (features it skipped; the gap flag it skips is added here).
    """
    folder = Path(folder)
    reader = LeRobotReader(folder)
    episodes = reader.episodes()
    chosen = episodes[0] if episode is None else episode
    if chosen not in episodes:
        raise ValueError(f"{folder}: no episode {chosen}; episodes: {episodes}")
    added = LazyChunkStream.from_iter(_added_chunks(folder, chosen))
    recording_id = f"{folder.name}-episode-{chosen}"
    with reader_notes() as notes, atomic_output(out) as tmp:
        stream = LazyChunkStream.merge(reader.stream(chosen), added)
        stream.write_rrd(str(tmp), application_id=APPLICATION_ID, recording_id=recording_id)
    return Path(out), [n for n in notes if f"({GAP})" not in n]


def is_hdf5_file(path: Path) -> bool:
    """Whether ``path`` is an HDF5 file (by its signature)."""
    path = Path(path)
    return path.is_file() and path.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"


def _virtual_datasets(path: Path) -> set[str]:
    """Paths of the virtual (VDS) datasets of an HDF5 file: `Hdf5Reader` cannot read them
    (Holos ``next_obs/*`` are virtual views of ``obs/*``, shown there already)."""
    found: set[str] = set()

    def visit(name: str, obj: object) -> None:
        if isinstance(obj, h5py.Dataset) and obj.is_virtual:
            found.add("/" + name)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return found


def _timed_groups(reader: Hdf5Reader, virtual: set[str]) -> list[tuple[str, list[str]]]:
    """(group, datasets to ignore in its subtree) for every group with a 1-D ``time``.

    Each such group is one clock (the demo clock, every raw stream). Its stream holds
    the datasets below it whose first dimension is that clock's length, except those of
    a deeper group with a clock of its own; dimension scales and other clocks are left
    out (they would not align).
    """

    def parent(path: str) -> str:
        return path.rsplit("/", 1)[0] or "/"

    clocks: dict[str, int] = {}
    for group in ["/", *reader.groups("/")]:
        for d in reader.datasets(group):
            if (
                parent(d.path) == group.rstrip("/")
                and d.path.endswith("/time")
                and len(d.shape) == 1
            ):
                clocks[group.rstrip("/") or "/"] = d.shape[0]
    out = []
    for group, rows in sorted(clocks.items()):
        prefix = "" if group == "/" else group
        ignore = []
        for d in reader.datasets(group):
            owner = parent(d.path)
            while owner not in clocks and owner != "/":
                owner = parent(owner)
            if owner != group or not d.shape or d.shape[0] != rows or d.path in virtual:
                ignore.append(d.path[len(prefix) :])
        out.append((group, ignore))
    return out


def hdf5_recording(path: Path, out: Path) -> tuple[Path, list[str]]:
    """Write the HDF5 export ``path`` to ``out`` (.rrd) with Rerun's `Hdf5Reader`.

    Every group with its own ``time`` dataset (seconds since capture start) is streamed
    on the ``time`` timeline at its own entity path, so each clock of the file keeps its
    own rows; the file's attributes come along as static properties. Returns ``out`` and
    the reader's notes.
    """
    reader = Hdf5Reader(path)
    streams = [
        reader.stream(
            root_group=group,
            entity_path_prefix=group,
            index_column=IndexColumn.duration("/time", input_unit="s"),
            ignore_datasets=ignore,
        )
        for group, ignore in _timed_groups(reader, _virtual_datasets(Path(path)))
    ]
    if not streams:
        raise ValueError(f"{path}: no group with a 1-D 'time' dataset")
    streams.append(LazyChunkStream.from_iter(_hdf5_skeletons(Path(path))))
    with reader_notes() as notes, atomic_output(out) as tmp:
        LazyChunkStream.merge(*streams).write_rrd(
            str(tmp), application_id=APPLICATION_ID, recording_id=Path(path).stem
        )
    return Path(out), notes


def _hdf5_skeletons(path: Path) -> list[Chunk]:
    """``skeleton/<side>`` line strips from each world skeleton group of a Holos file.

    A group ``/holos/raw/hand_pose_world/<side>`` holds ``joints`` (N, J, 7: position
    xyz then quaternion, ARKit order without ``forearmArm``), ``hand_valid``, optional
    ``joint_valid`` and its own ``time`` (s).
    """
    chunks: list[Chunk] = []
    with h5py.File(path, "r") as f:
        parent = f.get(HOLOS_WORLD_SKELETONS)
        if not isinstance(parent, h5py.Group):
            return chunks
        for side in ("left", "right"):
            group = parent.get(side)
            if not isinstance(group, h5py.Group) or "joints" not in group:
                continue
            joints = np.asarray(group["joints"][()], np.float64)[..., :3]
            n, count = joints.shape[:2]
            arkit = len(JOINT_SETS["arkit27"])
            positions = np.full((n, arkit, 3), np.nan)
            positions[:, :count] = joints
            tracked = np.zeros((n, arkit), bool)
            tracked[:, :count] = np.asarray(group["hand_valid"][()], bool)[:, None]
            if "joint_valid" in group:
                tracked[:, :count] &= np.asarray(group["joint_valid"][()], bool)
            tracked &= np.isfinite(positions).all(axis=2)
            strips = skeleton_strips(positions, tracked, "arkit27")
            time_ns = np.round(np.asarray(group["time"][()], np.float64) * 1e9)
            column = rr.ComponentColumn(
                rr.LineStrips3D.descriptor_strips(),
                ArrowBatch(strips.strips),
                offsets=strips.offsets,
            )
            index = rr.TimeColumn("time", duration=time_ns.astype("timedelta64[ns]"))
            chunks.append(Chunk.from_columns(f"skeleton/{side}", indexes=[index], columns=[column]))
            chunks.append(
                Chunk.from_columns(
                    f"skeleton/{side}",
                    indexes=[],
                    columns=rr.LineStrips3D.columns(colors=[HAND_RGB[side]]),
                )
            )
    return chunks
