"""The Holos HDF5 export step over a `Storage`: what the ``holos_hdf5`` asset calls.

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

from upath import UPath

from ego_assets.catalog.receipts import make_receipt, write_receipt
from ego_assets.exports.registry import HOLOS
from ego_assets.formats.holos_hdf5 import EXPORTER_VERSION, FORMAT_NAME, write_file
from ego_assets.pipeline import StepResult, require_export_gate
from ego_assets.progress import READ_TASK, report
from ego_assets.storage import Storage, raw_capture_dir
from ego_assets.trajectory.store import read_trajectory

NOTES_FILE = "export_notes.json"


def export_dir(storage: Storage, key: str) -> UPath:
    """``exports/holos_hdf5/<key>``."""
    return storage.export_path(FORMAT_NAME, key)


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


def export_holos_hdf5(
    storage: Storage, key: str, *, decode_frames: bool = False, force: bool = False
) -> StepResult:
    """Check the gate, then write (or reuse) the Holos HDF5 export of ``key``.

    ``force`` writes the file again even when the stored export is current.

    Raises:
        ExportBlockedError: the export policy blocks this episode (nothing written).
    """
    gate = require_export_gate(storage, key, HOLOS.policy_key)
    version = export_version(gate.data_version, decode_frames)
    target = export_dir(storage, key)
    notes = stored_notes(storage, key)
    if not force and notes is not None and notes.get("data_version") == version:
        return StepResult(key, version, True, _figures(target, key, notes))
    report(READ_TASK, 0, 2)
    with storage.read_dir(storage.stage_path("trajectory", key)) as folder:
        trajectory = read_trajectory(folder)
    report(READ_TASK, 1, 2)
    with (
        storage.read_dir(raw_capture_dir(storage.stage_path("raw", key))) as raw_dir,
        storage.write_to(target, index_file=NOTES_FILE) as stage,
    ):
        report(READ_TASK, 2, 2)
        local = stage / file_name(key)
        written = write_file(trajectory, raw_dir, local, decode_frames=decode_frames)
        notes = {**json.loads(written.to_json()), "data_version": version, "file": local.name}
        notes["bytes"] = local.stat().st_size
        (stage / NOTES_FILE).write_text(json.dumps(notes, indent=1, sort_keys=True) + "\n")
        receipt = make_receipt(
            storage,
            export_format=FORMAT_NAME,
            capture_key=key,
            location=target / file_name(key),
            local=local,
            code_version=EXPORTER_VERSION,
            input_data_version=gate.data_version,
        )
    write_receipt(storage, receipt)
    return StepResult(key, version, False, _figures(target, key, notes))


def _figures(target: UPath, key: str, notes: dict) -> dict[str, float | int | str]:
    return {
        "path": str(target / file_name(key)),
        "bytes": int(notes["bytes"]),
        "samples": int(notes["samples"]),
        "master_clock": str(notes["master_clock"]),
        "skipped": len(notes["skipped"]),
        "extras": len(notes["extras"]),
    }
