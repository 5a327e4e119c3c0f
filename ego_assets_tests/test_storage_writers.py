"""Two writers of one local folder at once (an export asked for over the API while a
backfill exports the same capture): neither loses its staging folder, the second waits
for the first to publish, and what a killed writer left behind is cleared by the next
write of that folder or by a sweep of the data root."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from ego_assets.exports.episode_index import EpisodeIndexRegistry
from ego_assets.storage import LOCKS_DIR, Storage, find_leftovers
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


# A writer of each kind that SIGKILLs itself mid-write: a staging folder (an export),
# a temporary file (a receipt), an episode-index entry (killed after its temporary is
# written, before it is linked).
KILLED_WRITERS = """
import os, sys
from ego_assets.exports import episode_index
from ego_assets.storage import Storage

s = Storage(sys.argv[1])
kind = sys.argv[2]

def die(*args, **kwargs):
    os.kill(os.getpid(), 9)

if kind == "folder":
    with s.write_to(s.export_path("ceres-lerobot-v3", "cap-1")) as tmp:
        (tmp / "half.txt").write_text("half")
        die()
elif kind == "file":
    os.replace = die
    s.write_file(s.root / "receipts" / "holos_hdf5" / "cap-1.json", b"{}")
else:
    episode_index.os.link = die
    episode_index.EpisodeIndexRegistry(s).index_for("cap-1")
"""


def _kill_writer(root: Path, kind: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", KILLED_WRITERS, str(root), kind], cwd=REPO, timeout=CEILING_S
    )
    assert run.returncode == -9, f"the {kind} writer was not killed"


def _age(paths: list[Path]) -> None:
    """Make temporaries older than the sweep's grace for writers that have just begun."""
    old = time.time() - 60
    for path in paths:
        os.utime(path, (old, old))


def test_a_sweep_removes_dead_writers_leftovers_and_keeps_live_ones(tmp_path):
    storage = Storage(tmp_path)
    for kind in ("folder", "file", "index"):
        _kill_writer(tmp_path, kind)
    dead = find_leftovers(tmp_path)
    names = [p.relative_to(tmp_path).as_posix() for p in dead]
    assert [n.rsplit(".", 2)[0] for n in names] == [
        "exports/ceres-lerobot-v3/.cap-1",
        "receipts/holos_hdf5/.cap-1.json",
        "registry/episode-index/claims/.000000.json",
    ]
    assert (dead[0] / "half.txt").read_text() == "half"
    _age(dead)

    # live writers of each kind, mid-write while the sweep runs
    started, release = threading.Event(), threading.Event()
    live_target = storage.export_path("holos_hdf5", "cap-2")

    def live_folder() -> None:
        with storage.write_to(live_target) as tmp:
            (tmp / "part.txt").write_text("live")
            started.set()
            release.wait(CEILING_S)

    writer = threading.Thread(target=live_folder)
    writer.start()
    assert started.wait(CEILING_S), "the live writer never began staging"
    live_file = tmp_path / "receipts" / "holos_hdf5" / ".cap-2.json.abcd1234.tmp"
    with live_file.open("wb") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # as write_file_atomic holds its temporary
        _age([live_file])
        removed = storage.sweep_leftovers()
    assert sorted(removed) == dead
    release.set()
    writer.join(CEILING_S)
    left = find_leftovers(tmp_path)
    assert left == [live_file]  # the live folder writer published and cleaned up itself
    assert (Path(live_target.path) / "part.txt").read_text() == "live"
    assert storage.sweep_leftovers() == [live_file]  # its writer is gone now
    assert find_leftovers(tmp_path) == []
    # the killed writers wrote nothing under a final name; the next writes just work
    assert not (tmp_path / "exports" / "ceres-lerobot-v3" / "cap-1").exists()
    assert not (tmp_path / "receipts" / "holos_hdf5" / "cap-1.json").exists()
    assert EpisodeIndexRegistry(storage).index_for("cap-1") == 0


def test_a_young_temporary_waits_for_the_grace_period(tmp_path):
    storage = Storage(tmp_path)
    young = tmp_path / "receipts" / "holos_hdf5" / ".cap-1.json.abcd1234.tmp"
    young.parent.mkdir(parents=True)
    young.write_bytes(b"{")
    assert storage.sweep_leftovers() == []  # its writer may be about to lock it
    _age([young])
    assert storage.sweep_leftovers() == [young]


def test_a_published_folder_is_0755_like_every_other_folder(tmp_path):
    """An export, trajectory or quality folder is readable by the group and others, as the
    stage folders around it are (the staging folder mkdtemp makes is 0700)."""
    storage = Storage(tmp_path)
    target = storage.export_path("holos_hdf5", "cap-1")
    with storage.write_to(target) as tmp:
        (tmp / "episode.h5").write_bytes(b"x")
    assert (target.stat().st_mode & 0o777) == 0o755
    assert (target.parent.stat().st_mode & 0o777) == 0o755
