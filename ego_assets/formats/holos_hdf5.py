"""Holos HDF5 export: one self-contained ``.h5`` file per capture (HolosCapture-1.0).

The layout is robomimic's (``/data/demo_0``, ``/mask/all``) with HDF5 dimension scales
on every axis, CF-1.11 attributes, Image spec 1.2 pictures, MIME-tagged opaque media
and everything Holos-specific under ``/holos`` and ``/media``; docs/formats/holos-hdf5.md
describes every group, dataset and attribute. Reads only the canonical `Trajectory`
plus the raw bytes of the files it embeds (media, verbatim JSON, the thumbnail, files
with no typed home), never a capture reader.

Units are SI (m, s, ns, m s-2, rad s-1), poses are ``x y z qx qy qz qw`` (metres, unit
quaternion xyzw) in the capture's world frame (ARKit world for Holos: +Y up,
right-handed) unless a dataset's ``frame`` attribute says otherwise.

Writes go to a temporary sibling that is renamed into place (`write_holos_hdf5`): a
reader or a later run never sees a half-written file under the final name. The same
trajectory and raw bytes give the same file bytes, except the time in ``history``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ego_assets.fileio import atomic_output
from ego_assets.formats.holos_demo import (
    DemoSection,
    write_robomimic_groups,
    write_root_attrs,
    write_root_scales,
)
from ego_assets.formats.holos_h5 import H5Writer
from ego_assets.formats.holos_media import write_decoded_frames, write_files, write_media
from ego_assets.formats.holos_raw import RawSection, write_annotations
from ego_assets.formats.holos_tracks import sort_tracks
from ego_assets.formats.holos_writer import ExportNotes
from ego_assets.progress import WRITE_TASK, report
from ego_assets.trajectory.model import Trajectory

if TYPE_CHECKING:
    import h5py  # imported where used: a code location defining assets loads no h5py

# ---------------------------------------------------------------------------- entry


def write_file(
    trajectory: Trajectory,
    raw_dir: Path,
    out: Path,
    *,
    decode_frames: bool = False,
    history_time: str | None = None,
) -> ExportNotes:
    """Write the export of ``trajectory`` to ``out`` (not atomic: see `write_holos_hdf5`).

    Args:
        trajectory: the canonical capture.
        raw_dir: the raw capture folder (media, verbatim files and extras are read here).
        out: the file to create (overwritten).
        decode_frames: also write decoded video frames and ``obs/<camera>_frame_index``.
        history_time: ISO-8601 time for ``history`` (default: now, UTC).
    """
    import h5py

    raw_dir = Path(raw_dir)
    notes = ExportNotes(trajectory.info.capture_id, trajectory.info.source_kind)
    notes.decode_frames = decode_frames
    history_time = history_time or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tracks = sort_tracks(trajectory)
    sections = 7 + int(decode_frames)  # reported as WRITE_TASK progress, one unit each
    with h5py.File(out, "w", track_order=False) as f:
        report(WRITE_TASK, 0, sections)
        writer = H5Writer(f, device_clock=trajectory.info.clock == "device")
        write_root_attrs(f, trajectory, history_time)
        scales = write_root_scales(writer, tracks)
        demo = DemoSection(writer, trajectory, tracks, scales, notes)
        notes.samples = len(demo.ns)
        notes.master_clock = demo.master.description
        write_robomimic_groups(writer, trajectory, notes.samples)
        report(WRITE_TASK, 1, sections)
        demo.write()
        report(WRITE_TASK, 2, sections)
        placed = RawSection(writer, trajectory, tracks, scales, notes).write()
        report(WRITE_TASK, 3, sections)
        write_annotations(writer, trajectory, demo.time_s, notes)
        write_files(writer, trajectory, raw_dir, notes)
        report(WRITE_TASK, 4, sections)
        write_media(writer, trajectory, raw_dir, notes)
        report(WRITE_TASK, 5, sections)
        if decode_frames:
            write_decoded_frames(writer, trajectory, raw_dir, placed, demo, notes)
            report(WRITE_TASK, 6, sections)
        demo.next_obs()
    report(WRITE_TASK, sections, sections)
    return notes


def write_holos_hdf5(
    trajectory: Trajectory,
    raw_dir: Path,
    out: Path,
    *,
    decode_frames: bool = False,
    history_time: str | None = None,
) -> ExportNotes:
    """Write the export atomically: a temporary sibling renamed onto ``out``
    (`fileio.atomic_output`; a killed run's temporary is cleared by
    `fileio.remove_temporaries`).

    See `write_file` for the arguments. Returns the export notes (also what the JSON
    sidecar holds).
    """
    with atomic_output(Path(out), fsync=True, lock=False) as tmp:  # HDF5 locks it
        return write_file(
            trajectory, raw_dir, tmp, decode_frames=decode_frames, history_time=history_time
        )


def notes_bytes(notes: ExportNotes) -> bytes:
    return notes.to_json().encode("utf-8")


def read_opaque(ds: h5py.Dataset) -> tuple[str, bytes]:
    """(MIME tag, bytes) of a tagged opaque dataset (h5py cannot slice these)."""
    import h5py

    tid = ds.id.get_type()
    buf = np.empty(ds.shape, dtype=f"V{tid.get_size()}")
    if ds.size:
        ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=tid)
    return tid.get_tag().decode("ascii"), buf.tobytes()
