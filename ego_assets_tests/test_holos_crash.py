"""A SIGKILLed Holos HDF5 export never leaves a file that looks finished; the rerun completes.

A child process runs the export step and kills itself with SIGKILL at a chosen point
(after some datasets are written, while media bytes stream in, before the notes file,
at the folder swap). The parent checks that what is under the final name is either
nothing or the previous complete export, reruns the step in-process and validates it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ego_assets import pipeline
from ego_assets.exports import holos as holos_export
from ego_assets.exports.run import run_export
from ego_assets.fileio import remove_temporaries
from ego_assets.formats.holos_hdf5 import write_holos_hdf5
from ego_assets.formats.holos_hdf5_validate import validate_file
from ego_assets.storage import Storage, raw_capture_dir
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import read_trajectory

KEY = "phone"

CHILD = r"""
import os, signal, sys
import h5py
from ego_assets.exports import holos as holos_export
from ego_assets.exports.run import run_export
from ego_assets.formats import holos_h5 as hh, holos_hdf5 as h
from ego_assets.storage import Storage

root, point, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = [0]

def die(flush=None):
    if flush is not None:
        flush.flush()
    os.kill(os.getpid(), signal.SIGKILL)

if point == "dataset":  # after `count` datasets, flushed to disk
    data = hh.H5Writer.data
    def counting(self, *args, **kwargs):
        ds = data(self, *args, **kwargs)
        seen[0] += 1
        if seen[0] == count:
            die(self.f)
        return ds
    hh.H5Writer.data = counting
elif point == "media":  # inside the first media file's byte stream
    hh.MEDIA_READ_BYTES = 4096
    frombuffer = h.np.frombuffer
    def dying(buffer, dtype=float, *args, **kwargs):
        if dtype == "V1":
            seen[0] += 1
            if seen[0] == count:
                die()
        return frombuffer(buffer, dtype, *args, **kwargs)
    h.np.frombuffer = dying
elif point == "notes":  # the file is complete, its notes (the index) not written
    h.ExportNotes.to_json = lambda self: die()
elif point == "rename":  # at the swap of the finished folder into place
    replace = os.replace
    def swapping(src, dst):
        if ".tmp" in str(src):
            die()
        replace(src, dst)
    os.replace = swapping
run_export(Storage(root), "phone", holos_export.HolosExporter(decode_frames=(point != "notes")))
"""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A storage root with the raw copy, trajectory and passing gate of one capture."""
    root = tmp_path_factory.mktemp("holos_crash")
    synthesize("holos-iphone", root / "landing" / KEY, seconds=2, seed=5, capture_id=KEY)
    storage = Storage(root)
    pipeline.ingest_raw(storage, KEY)
    pipeline.normalize(storage, KEY)
    pipeline.assess_quality(storage, KEY)
    return root


def _kill(root: Path, point: str, count: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), point, str(count)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == -9, run.stderr[-2000:]


def _finished(root: Path) -> list[Path]:
    """What a reader takes for finished: the export folder with its notes, and its file."""
    folder = root / "exports" / "holos_hdf5" / KEY
    if not (folder / holos_export.NOTES_FILE).exists():
        assert not (folder / f"{KEY}.h5").exists(), "a file without its notes"
        return []
    return [folder / f"{KEY}.h5"]


@pytest.mark.parametrize(
    ("point", "count"), [("dataset", 12), ("media", 3), ("notes", 0), ("rename", 0)]
)
def test_killed_export_leaves_nothing_finished_and_the_rerun_completes(
    prepared, tmp_path, point, count
):
    root = tmp_path / "data"
    shutil.copytree(prepared, root)
    storage = Storage(root)
    _kill(root, point, count)
    assert _finished(root) == []
    assert holos_export.stored_notes(storage, KEY) is None
    leftovers = list((root / "exports" / "holos_hdf5").glob(f".{KEY}.*"))
    assert leftovers, "the killed run left its hidden staging folder"
    result = run_export(storage, KEY, holos_export.HolosExporter())
    assert not result.reused
    (path,) = _finished(root)
    assert validate_file(path) == []
    assert not list((root / "exports" / "holos_hdf5").glob(f".{KEY}.*"))


def test_killed_reexport_keeps_the_previous_export(prepared, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(prepared, root)
    storage = Storage(root)
    run_export(storage, KEY, holos_export.HolosExporter())
    before = (root / "exports/holos_hdf5" / KEY / f"{KEY}.h5").read_bytes()
    notes = holos_export.stored_notes(storage, KEY)
    _kill(root, "dataset", 20)  # a decode_frames re-export: new version, killed midway
    (path,) = _finished(root)
    assert path.read_bytes() == before
    assert holos_export.stored_notes(storage, KEY) == notes


def test_killed_library_write_leaves_only_a_hidden_temporary(prepared, tmp_path):
    storage = Storage(prepared)
    trajectory = read_trajectory(Path(storage.stage_path("trajectory", KEY).path))
    out = tmp_path / "capture.h5"
    child = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from ego_assets.formats import holos_hdf5 as h, holos_raw\n"
        "from ego_assets.trajectory.store import read_trajectory\n"
        "holos_raw.RawSection.write = lambda self: os.kill(os.getpid(), signal.SIGKILL)\n"
        "t = read_trajectory(Path(sys.argv[1]))\n"
        "h.write_holos_hdf5(t, Path(sys.argv[2]), Path(sys.argv[3]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            child,
            storage.stage_path("trajectory", KEY).path,
            raw_capture_dir(storage.stage_path("raw", KEY)).path,
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == -9, run.stderr[-2000:]
    assert not out.exists()
    stale = remove_temporaries(out)
    assert len(stale) == 1 and stale[0].name.startswith(".capture.h5.")
    notes = write_holos_hdf5(
        trajectory, Path(raw_capture_dir(storage.stage_path("raw", KEY)).path), out
    )
    assert validate_file(out) == [] and json.loads(notes.to_json())["samples"] > 0
