"""The common import room: episodes land as ordinary captures, atomically and once.

The source here is a folder of synthetic mano-video clips (an existing capture kind and
reader), so the core is checked against a real reader before any new kind exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ego_assets.capture import read_checked_capture
from ego_assets.capture.files import MARKER_FILE
from ego_assets.capture.provenance import PROVENANCE_FILE
from ego_assets.fileio import file_sha256
from ego_assets.importers.core import (
    STAGING_DIR,
    EpisodeImportError,
    Importer,
    Source,
    SourceEpisode,
    episode_key,
    import_source,
    land_episode,
    open_source,
)
from ego_assets.importers.listing import iter_after, list_after
from ego_assets.landing import scan_landing
from ego_assets.storage import Storage
from ego_assets.synth import synthesize


class ClipFolders(Importer):
    """Test importer: every ``<name>/meta.json`` folder of mano-video files is an episode."""

    kind = "clip-folders"
    capture_kind = "mano_video"
    dataset = "clips"
    licence = "test licence"

    def is_anchor(self, rel: str) -> bool:
        return rel.endswith("/meta.json")

    def episode(self, source: Source, rel: str) -> SourceEpisode:
        folder = rel.rsplit("/", 1)[0]
        names = ("meta.json", "video.mp4", "frames.csv", "mano.npz", "camera.npz")
        return SourceEpisode(
            episode_key(self.dataset, folder), rel, {n: f"{folder}/{n}" for n in names}
        )


@pytest.fixture(scope="module")
def clip_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for i in range(3):
        synthesize("mano-video", src / f"clip{i}", seconds=1.0, seed=i)
        (src / f"clip{i}" / MARKER_FILE).unlink()  # a dataset has no marker of ours
    (src / "LICENSE").write_text("Licence text as the dataset gives it.\n")
    return src


def _copy_tree(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_lands_each_episode_byte_for_byte_with_provenance_and_marker(clip_source, tmp_path):
    storage = Storage(tmp_path / "data")
    importer = ClipFolders()
    source = open_source(str(clip_source), importer, dataset_version="v1")
    summary = import_source(storage, importer, source)
    assert summary.landed == ["clips-clip0", "clips-clip1", "clips-clip2"]
    assert not summary.failed and summary.last == "clip2/meta.json"
    folder = Path(storage.landing_path("clips-clip1").path)
    for name in ("video.mp4", "mano.npz", "frames.csv"):
        assert (folder / name).read_bytes() == (clip_source / "clip1" / name).read_bytes()
    prov = json.loads((folder / PROVENANCE_FILE).read_text())
    assert prov["dataset"] == "clips" and prov["dataset_version"] == "v1"
    assert prov["licence"] == "Licence text as the dataset gives it.\n"
    assert prov["original_path"] == "clip1/meta.json" and prov["source"] == str(clip_source)
    video = next(f for f in prov["files"] if f["path"] == "video.mp4")
    assert video["original"] == "clip1/video.mp4"
    assert video["sha256"] == file_sha256(clip_source / "clip1" / "video.mp4")
    # the marker declares every file, the provenance included, and the intake check passes
    marker = json.loads((folder / MARKER_FILE).read_text())
    assert marker["kind"] == "mano_video"
    assert sorted(f["path"] for f in marker["files"]) == sorted(
        ["meta.json", "video.mp4", "frames.csv", "mano.npz", "camera.npz", PROVENANCE_FILE]
    )
    trajectory, manifest = read_checked_capture("clips-clip1", folder)
    assert len(manifest.files) == 7
    assert trajectory.stream("mano_left").fields["transl"].shape[1] == 3
    # the landing sensor's scan sees the three, and no staging folder is left
    scan = scan_landing(storage, None, 10)
    assert scan.keys == ("clips-clip0", "clips-clip1", "clips-clip2") and not scan.rejected
    assert list((Path(storage.landing.path) / STAGING_DIR).iterdir()) == []


def test_rerun_lands_only_what_is_missing(clip_source, tmp_path):
    storage = Storage(tmp_path / "data")
    importer = ClipFolders()
    source = open_source(str(clip_source), importer)
    assert import_source(storage, importer, source, limit=1).landed == ["clips-clip0"]
    marker = Path(storage.landing_path("clips-clip0").path) / MARKER_FILE
    before = marker.stat().st_mtime_ns
    # a killed run's half-written folder (no marker) is replaced
    half = Path(storage.landing_path("clips-clip2").path)
    half.mkdir(parents=True)
    (half / "video.mp4").write_bytes(b"partial")
    again = import_source(storage, importer, source)
    assert again.skipped == ["clips-clip0"]
    assert again.landed == ["clips-clip1", "clips-clip2"]
    assert marker.stat().st_mtime_ns == before
    assert (half / "video.mp4").read_bytes() == (clip_source / "clip2" / "video.mp4").read_bytes()
    assert import_source(storage, importer, source).landed == []


def test_a_bad_episode_fails_alone_and_lands_nothing(clip_source, tmp_path):
    src = _copy_tree(clip_source, tmp_path / "src")
    (src / "clip1" / "camera.npz").write_bytes(b"not a zip")
    (src / "clip2" / "frames.csv").unlink()
    storage = Storage(tmp_path / "data")
    importer = ClipFolders()
    summary = import_source(storage, importer, open_source(str(src), importer))
    assert summary.landed == ["clips-clip0"]
    assert [e.episode for e in summary.failed] == ["clip1/meta.json", "clip2/meta.json"]
    bad, missing = summary.failed
    assert isinstance(bad, EpisodeImportError)
    assert bad.dataset == "clips" and bad.file == "clip1/camera.npz"
    assert str(bad).startswith(
        "dataset 'clips', episode 'clip1/meta.json', file 'clip1/camera.npz'"
    )
    assert missing.file == "clip2/frames.csv" and "missing" in missing.reason
    landing = Path(storage.landing.path)
    assert sorted(p.name for p in landing.iterdir()) == [STAGING_DIR, "clips-clip0"]
    assert list((landing / STAGING_DIR).iterdir()) == []


def test_lands_on_s3_with_the_marker_last(clip_source, tmp_path, s3_server, s3_bucket):
    storage = Storage(f"{s3_bucket}/data", storage_options=s3_server.storage_options)
    importer = ClipFolders()
    source = open_source(str(clip_source), importer)
    episode = importer.episode(source, "clip0/meta.json")
    result = land_episode(storage, importer, source, episode)
    assert result.status == "landed" and result.trajectory is not None
    keys = s3_server.keys(f"{s3_bucket}/data/landing/clips-clip0")
    assert MARKER_FILE in keys and PROVENANCE_FILE in keys and "mano.npz" in keys
    assert land_episode(storage, importer, source, episode).status == "skipped"
    assert scan_landing(storage, None, 10).keys == ("clips-clip0",)


def test_paged_listing_matches_s3_order(tmp_path, s3_server, s3_bucket):
    names = ["a-c", "a/b", "a/c/d.hdf5", "a/c/d.mp4", "b", "b0/x", "a.b/z", "z/y/x/w"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"1")
    s3_server.upload_dir(tmp_path, f"{s3_bucket}/src", last=None)
    local = Storage(tmp_path).root
    remote = Storage(f"{s3_bucket}/src", storage_options=s3_server.storage_options).root
    assert list(iter_after(local, page=3)) == sorted(names)
    assert list(iter_after(remote, page=3)) == sorted(names)
    for after in ("", "a-c", "a/", "a/c/d.hdf5", "a/c/e", "b", "z/y/x/w"):
        want = [n for n in sorted(names) if n > after][:2]
        assert list_after(local, after, 2) == want, after
        assert list_after(remote, after, 2) == want, after


def test_episode_keys_are_valid_and_distinct():
    assert episode_key("egodex", "part1/add_remove_lid/12.hdf5") == "egodex-part1.add_remove_lid.12"
    odd = episode_key("egodex", "part1/tie shoe/12.hdf5")
    assert (
        odd.startswith("egodex-part1.tie_shoe.12-")
        and len(odd) == len("egodex-part1.tie_shoe.12-") + 12
    )
    assert episode_key("x", "a b/1.h5") != episode_key("x", "a_b/1.h5")
    long = episode_key("egodex", "t" * 300 + "/1.hdf5")
    assert len(long) == 128
    assert ".." not in episode_key("x", "a/.hidden/1.hdf5")
    assert np.unique([episode_key("d", f"t/{i}.hdf5") for i in range(50)]).size == 50
