"""Two writers of one local folder at once (an export asked for over the API while a
backfill exports the same capture): neither loses its staging folder, the second waits
for the first to publish, and what a killed writer left behind is cleared by the next."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from ego_assets.storage import LOCKS_DIR, Storage
from ego_assets_tests.waiting import CEILING_S

REPO = Path(__file__).resolve().parents[1]


def _write(storage: Storage, text: str, started: threading.Event, release: threading.Event):
    target = storage.export_path("holos_hdf5", "cap-1")
    with storage.write_to(target) as tmp:
        (tmp / "part-1.txt").write_text(text)
        started.set()
        release.wait(CEILING_S)
        (tmp / "part-2.txt").write_text(text)  # the staging folder is still there


def test_a_second_writer_waits_and_keeps_the_first_writers_staging_folder(tmp_path):
    storage = Storage(tmp_path)
    first_in, first_go = threading.Event(), threading.Event()
    second_in, second_go = threading.Event(), threading.Event()
    second_go.set()
    errors: list[BaseException] = []

    def run(text, started, release):
        try:
            _write(storage, text, started, release)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    first = threading.Thread(target=run, args=("first", first_in, first_go))
    first.start()
    assert first_in.wait(CEILING_S)
    second = threading.Thread(target=run, args=("second", second_in, second_go))
    second.start()
    time.sleep(0.5)
    assert not second_in.is_set(), "the second writer entered while the first was writing"
    first_go.set()
    first.join(CEILING_S)
    second.join(CEILING_S)
    assert errors == []
    folder = tmp_path / "exports" / "holos_hdf5" / "cap-1"
    assert (folder / "part-1.txt").read_text() == "second"
    assert (folder / "part-2.txt").read_text() == "second"
    # no staging or old folder is left beside it; the lock lives under <root>/.locks
    assert sorted(p.name for p in folder.parent.iterdir()) == ["cap-1"]
    assert (tmp_path / LOCKS_DIR / "exports" / "holos_hdf5" / "cap-1.lock").is_file()


def test_a_killed_writers_leftovers_are_cleared_by_the_next_write(tmp_path):
    storage = Storage(tmp_path)
    target = storage.export_path("holos_hdf5", "cap-1")
    child = (
        "import os, sys\n"
        "from ego_assets.storage import Storage\n"
        "s = Storage(sys.argv[1])\n"
        "with s.write_to(s.export_path('holos_hdf5', 'cap-1')) as tmp:\n"
        "    (tmp / 'half.txt').write_text('half')\n"
        "    os.kill(os.getpid(), 9)\n"
    )
    run = subprocess.run([sys.executable, "-c", child, str(tmp_path)], cwd=REPO, timeout=CEILING_S)
    assert run.returncode == -9
    parent = tmp_path / "exports" / "holos_hdf5"
    leftovers = [p.name for p in parent.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".cap-1.")
    assert leftovers[0].endswith(".tmp")
    # the dead process's lock went with it: the next write does not wait, and clears
    with storage.write_to(target) as tmp:
        (tmp / "whole.txt").write_text("whole")
    assert sorted(p.name for p in parent.iterdir()) == ["cap-1"]
    assert (parent / "cap-1" / "whole.txt").read_text() == "whole"
