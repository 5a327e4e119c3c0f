"""The Holos HDF5 exporter: `HolosExporter`, run by `ego_assets.exports.run.run_export`.

Layout: ``exports/holos_hdf5/<key>/<key>.h5`` with ``export_notes.json`` beside it (what
was written, skipped and embedded; the data version), and the catalog's receipt at
``receipts/holos_hdf5/<key>.json``. The folder is published whole (`Storage.write_to`):
locally a hidden temporary folder renamed into place, on S3 with the notes uploaded
last (the index file: a folder without it is unfinished). A run killed at any point
leaves the previous export or nothing under the final name; the hidden leftovers of a
killed local run are removed by the next write (`Storage.write_to`, under the folder's
writer lock).

The export is current while its data version is: exporter code version + options + the
episode's gate data version (quality code + trajectory + raw content). An edited
transcript in the raw capture or a new exporter version makes the next run write a
fresh file; an unchanged one is reused after reading only the notes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from upath import UPath

from ego_assets.exports.registry import HOLOS, ExportFormat, ExportOption
from ego_assets.exports.run import Written
from ego_assets.formats.holos_writer import EXPORTER_VERSION
from ego_assets.progress import READ_TASK, report
from ego_assets.storage import Storage, raw_capture_dir
from ego_assets.trajectory.store import read_trajectory

NOTES_FILE = "export_notes.json"


def export_dir(storage: Storage, key: str) -> UPath:
    """``exports/holos_hdf5/<key>``."""
    return storage.export_path(HOLOS.folder, key)


def file_name(key: str) -> str:
    return f"{key}.h5"


def export_version(gate_version: str, decode_frames: bool) -> str:
    """Data version of an export: exporter version, options, the gate's data version."""
    options = "+frames" if decode_frames else ""
    return f"{EXPORTER_VERSION}{options}:{gate_version}"


def stored_notes(storage: Storage, key: str) -> dict | None:
    """The notes of the finished export of ``key`` (None when there is none)."""
    path = export_dir(storage, key) / NOTES_FILE
    if not path.exists():
        return None
    return json.loads(path.read_text())


@dataclass(frozen=True, slots=True)
class HolosExporter:
    """One ``<key>.h5`` and its notes; ``decode_frames`` also writes decoded frames."""

    decode_frames: bool = False
    format: ExportFormat = HOLOS
    index_file: str = NOTES_FILE
    uses_episode_index: bool = False

    OPTIONS: ClassVar[tuple[ExportOption, ...]] = (
        ExportOption(
            "decode_frames",
            False,
            "also write decoded video frames (uint8, one per chunk) and frame indices",
        ),
    )

    @classmethod
    def from_options(cls, values: Mapping[str, Any]) -> HolosExporter:
        return cls(decode_frames=bool(values["decode_frames"]))

    def target(self, storage: Storage, key: str) -> UPath:
        return export_dir(storage, key)

    def data_version(
        self, storage: Storage, key: str, gate_version: str | None, episode_index: int
    ) -> str:
        return export_version(str(gate_version), self.decode_frames)

    def stored(self, storage: Storage, key: str) -> dict | None:
        return stored_notes(storage, key)

    def is_current(self, record: dict, version: str, episode_index: int) -> bool:
        return record.get("data_version") == version

    def artefact(self, key: str, record: dict) -> str:
        return file_name(key)

    def skipped(self, record: dict) -> str:
        return ""

    def write(
        self, storage: Storage, key: str, stage: Path, version: str, episode_index: int
    ) -> Written:
        from ego_assets.formats.holos_hdf5 import write_file  # the writer: only when writing

        report(READ_TASK, 0, 2)
        with storage.read_dir(storage.stage_path("trajectory", key)) as folder:
            trajectory = read_trajectory(folder)
        report(READ_TASK, 1, 2)
        with storage.read_dir(raw_capture_dir(storage.stage_path("raw", key))) as raw_dir:
            report(READ_TASK, 2, 2)
            local = stage / file_name(key)
            written = write_file(trajectory, raw_dir, local, decode_frames=self.decode_frames)
        notes: dict[str, Any] = {
            **json.loads(written.to_json()),
            "data_version": version,
            "file": local.name,
        }
        notes["bytes"] = local.stat().st_size
        (stage / NOTES_FILE).write_text(json.dumps(notes, indent=1, sort_keys=True) + "\n")
        return Written(notes, file_name(key))

    def figures(self, storage: Storage, key: str, record: dict) -> dict[str, float | int | str]:
        return {
            "path": str(export_dir(storage, key) / file_name(key)),
            "bytes": int(record["bytes"]),
            "samples": int(record["samples"]),
            "master_clock": str(record["master_clock"]),
            "skipped": len(record["skipped"]),
            "extras": len(record["extras"]),
        }

    def details(self, storage: Storage, key: str) -> dict[str, Any]:
        """The file, what was skipped and what was embedded verbatim (the notes)."""
        notes = stored_notes(storage, key) or {}
        return {
            "file": export_dir(storage, key) / file_name(key),
            "skipped_items": notes.get("skipped", []),
            "embedded_files": notes.get("extras", []),
        }
