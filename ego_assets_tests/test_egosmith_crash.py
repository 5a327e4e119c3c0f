"""A SIGKILLed EgoSmith export never leaves output that looks finished; the rerun completes.

A child process runs the export and kills itself with SIGKILL at a chosen point (inside a
shard, between shards, just before the index file, at the final rename, inside packing).
The parent then checks that no folder a reader would take as finished exists, reruns
the export in-process and validates what it wrote.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ego_assets import pipeline
from ego_assets.exports.egosmith import (
    EgoSmithExporter,
    dataset_path,
    episode_path,
    finished_episodes,
    pack_dataset,
)
from ego_assets.exports.run import export_capture
from ego_assets.formats.egosmith_reader import validate_path
from ego_assets.formats.egosmith_webdataset import EgoSmithOptions
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.waiting import CEILING_S

OPTIONS = EgoSmithOptions(shard_bytes=300_000, val_fraction=0.0)
KEY = "xr"


def export_episode(storage, key, episode_index, options, gate_version=None):
    """One episode through `export_capture` (no gate check; a receipt with a gate version)."""
    exporter = EgoSmithExporter(options)
    return export_capture(
        storage, key, exporter, episode_index=episode_index, gate_version=gate_version
    )


CHILD = r"""
import os, signal, sys
from ego_assets.formats import egosmith_webdataset as w
from ego_assets.exports import egosmith as x
from ego_assets.exports.run import export_capture
from ego_assets.storage import Storage

root, job, point, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
seen = [0]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if point == "sample":  # after `count` samples went into a shard (data flushed to disk)
    write = w.ShardWriter.write_sample
    def counting(self, data):
        write(self, data)
        seen[0] += 1
        if seen[0] == count:
            self._raw.flush()
            die()
    w.ShardWriter.write_sample = counting
elif point == "index":  # every shard closed, index file not written
    w.EpisodeSummary.to_json = lambda self: die()
elif point == "rename":  # the `count`-th os.replace of the folder swap
    replace = os.replace
    def dying(src, dst):
        seen[0] += 1
        if seen[0] == count:
            die()
        replace(src, dst)
    os.replace = dying

options = w.EgoSmithOptions(shard_bytes=300_000, val_fraction=0.0, jpeg_quality=int(sys.argv[5]))
storage = Storage(root)
if job == "episode":
    export_capture(storage, "xr", x.EgoSmithExporter(options), episode_index=7, gate_version=None)
else:
    x.pack_dataset(storage, options)
raise SystemExit(3)  # not reached when the kill point is hit
"""


@pytest.fixture
def store(tmp_path) -> Storage:
    storage = Storage(tmp_path)
    synthesize("webxr", storage.landing / KEY, seconds=2, seed=5, capture_id=KEY)
    pipeline.ingest_raw(storage, KEY)
    pipeline.normalize(storage, KEY)
    return storage


def _kill_during(store: Storage, job: str, point: str, count: int = 1, quality: int = 90) -> None:
    args = [sys.executable, "-c", CHILD, str(store.root), job, point, str(count), str(quality)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=CEILING_S)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize(("point", "count"), [("sample", 3), ("sample", 40), ("index", 1)])
def test_killed_episode_export_leaves_nothing_finished(store, point, count):
    _kill_during(store, "episode", point, count)
    episodes = Path(store.root.path) / "exports" / "egosmith"
    assert _visible(episodes) == []  # only the hidden temporary folder remains
    assert finished_episodes(store) == []
    result = export_episode(store, KEY, 7, OPTIONS)
    assert not result.reused and result.figures["status"] == "written"
    assert sorted(p.name for p in episodes.iterdir()) == [KEY]  # leftovers removed
    report = validate_path(Path(episode_path(store, KEY).path))
    assert report.ok, report.errors
    assert report.samples == 60


@pytest.mark.parametrize("count", [1, 2])
def test_killed_re_export_keeps_the_old_episode_or_none(store, count):
    export_episode(store, KEY, 7, OPTIONS)
    folder = Path(episode_path(store, KEY).path)
    before = (folder / "episode.json").read_text()
    # another JPEG quality = another data version: the episode is rewritten and killed
    # at the first rename (old still in place) or the second (old moved aside)
    _kill_during(store, "episode", "rename", count, quality=80)
    found = finished_episodes(store)
    if found:
        assert (folder / "episode.json").read_text() == before
        assert validate_path(folder).ok
    else:
        assert not folder.exists()
    rerun = EgoSmithOptions(shard_bytes=300_000, val_fraction=0.0, jpeg_quality=80)
    assert export_episode(store, KEY, 7, rerun).figures["status"] == "written"
    assert validate_path(folder).ok


def test_killed_packing_leaves_no_dataset(store):
    export_episode(store, KEY, 7, OPTIONS)
    _kill_during(store, "pack", "sample", 30)
    target = Path(dataset_path(store).path)
    assert not target.exists() and not (target / "manifest.json").exists()
    leftovers = [p for p in target.parent.iterdir() if p.name.startswith(".")]
    assert leftovers  # the killed run's staging folder
    result = pack_dataset(store, OPTIONS)
    assert not result.reused and result.manifest["samples"] == 60
    assert not any(p.exists() for p in leftovers)
    report = validate_path(target)
    assert report.ok, report.errors
    assert os.listdir(target).count("manifest.json") == 1
