"""Our three formats back in: bad input, foreign layouts, and the readers users run.

Each bad source fails with one error naming the file, the dataset and the field; the
other episodes of the same source still land and nothing of the bad one reaches the
landing zone. Layout facts are checked with h5py and webdataset (what users read the
files with), not only with our own readers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from fractions import Fraction
from pathlib import Path

import av
import h5py
import numpy as np
import pytest
import webdataset as wds

from ego_assets.capture import read_capture
from ego_assets.cli import main
from ego_assets.formats.ceres_lerobot import write_shard
from ego_assets.formats.egosmith_lowdim import head_camera
from ego_assets.formats.egosmith_webdataset import EgoSmithOptions, write_episode
from ego_assets.importers import get_importer
from ego_assets.importers.core import ImportSummary, import_source, open_source
from ego_assets.storage import Storage
from ego_assets_tests.ceres_helpers import synth_capture
from ego_assets_tests.other_venvs import lerobot_python

T_NS = 1_793_000_000_000_000_000


def run_import(kind: str, src: Path, data: Path) -> tuple[ImportSummary, Storage]:
    storage = Storage(data)
    importer = get_importer(kind)
    return import_source(storage, importer, open_source(str(src), importer)), storage


def landed_folders(storage: Storage) -> list[str]:
    """Capture folders in the landing zone (staging and hidden folders excluded)."""
    root = Path(storage.landing.path)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory) -> Path:
    """A source folder of two CERES shards (WebXR, MANO video), 1 s each."""
    root = tmp_path_factory.mktemp("ceres")
    for i, kind in enumerate(("webxr", "mano-video")):
        trajectory, raw = synth_capture(root / "raw", kind, f"c-{kind}", seconds=1.0, seed=i)
        shard = root / "shards" / f"episode-{i:06d}"
        shard.mkdir(parents=True)
        write_shard(trajectory, raw, i, shard)
    return root / "shards"


def _set_state_shape(info: dict) -> None:
    info["features"]["observation.state"]["shape"] = [409]


def _set_state_dtype(info: dict) -> None:
    info["features"]["observation.state"]["dtype"] = "float64"


def _set_total_frames(info: dict) -> None:
    info["total_frames"] += 1


def _drop_a_feature(info: dict) -> None:
    del info["features"]["ceres.source_gap"]


@pytest.mark.parametrize(
    ("corrupt", "file", "field"),
    [
        (_set_state_shape, "data/chunk-000/file-001.parquet", "observation.state"),
        (_set_state_dtype, "data/chunk-000/file-001.parquet", "observation.state"),
        (_set_total_frames, "meta/info.json", "total_frames"),
        (_drop_a_feature, "data/chunk-000/file-001.parquet", "ceres.source_gap"),
    ],
)
def test_lerobot_info_json_disagreeing_with_its_parquet_fails_that_dataset_alone(
    two_shards, tmp_path, corrupt, file, field
):
    src = tmp_path / "src"
    shutil.copytree(two_shards, src)
    info_path = src / "episode-000001" / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    corrupt(info)
    info_path.write_text(json.dumps(info))

    summary, storage = run_import("lerobot-v3", src, tmp_path / "data")

    assert [e.file for e in summary.failed] == [f"episode-000001/{file}"]
    error = summary.failed[0]
    assert error.field == field and "episode-000001" in error.episode
    assert f"file 'episode-000001/{file}'" in str(error) and f"field '{field}'" in str(error)
    assert summary.landed == ["lerobot-v3-episode-000000.episode_000000"]
    assert landed_folders(storage) == summary.landed  # nothing of the bad episode


def test_cli_import_exit_code_says_an_episode_failed(two_shards, tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(two_shards, src)
    (src / "episode-000001" / "meta" / "info.json").write_text('{"codebase_version": "v2.1"}')
    code = main(["import", "lerobot-v3", str(src), "--data", str(tmp_path / "data")])
    out = capsys.readouterr()
    assert code == 1
    assert "1 landed, 0 already there, 1 failed" in out.out
    assert "episode-000001/meta/info.json" in out.err
    assert main(["import", "lerobot-v3", str(src), "--data", str(tmp_path / "data")]) == 1
    assert "0 landed, 1 already there, 1 failed" in capsys.readouterr().out


# ----------------------------------------------------------------------------- EgoSmith


@pytest.fixture(scope="module")
def egosmith_source(tmp_path_factory) -> Path:
    """Two EgoSmith episode folders (WebXR episode 3, MANO video episode 4), 1 s each."""
    root = tmp_path_factory.mktemp("egosmith")
    for i, kind in ((3, "webxr"), (4, "mano-video")):
        trajectory, raw = synth_capture(root / "raw", kind, f"e-{kind}", seconds=1.0, seed=i)
        camera = head_camera(trajectory)
        out = root / "src" / f"ep{i}"
        out.mkdir(parents=True)
        write_episode(
            trajectory, camera, raw / camera.media.path, out,
            episode_index=i, data_version="t", options=EgoSmithOptions(),
        )  # fmt: skip
    return root / "src"


@pytest.mark.parametrize("cut", ["inside a member", "at a member boundary"])
def test_truncated_tar_fails_its_episode_and_the_others_land(egosmith_source, tmp_path, cut):
    src = tmp_path / "src"
    shutil.copytree(egosmith_source, src)
    shard = src / "ep4" / "shard-000000.tar"
    with tarfile.open(shard) as tar:
        members = tar.getmembers()
    middle = members[len(members) // 2]
    size = middle.offset_data + (100 if cut == "inside a member" else 0)
    with shard.open("r+b") as fh:
        fh.truncate(size if cut == "inside a member" else middle.offset)

    summary, storage = run_import("egosmith-webdataset", src, tmp_path / "data")

    assert [e.file for e in summary.failed] == ["ep4/shard-000000.tar"]
    assert "truncated" in str(summary.failed[0]) and "ep000004" in summary.failed[0].episode
    assert summary.landed == ["egosmith-webdataset-ep3.shard-000000.tar.ego_assets_ep000003"]
    assert landed_folders(storage) == summary.landed


def test_landed_egosmith_samples_read_with_webdataset_as_the_source(egosmith_source, tmp_path):
    """The landed ``samples.tar`` is a WebDataset shard whose samples are the source's."""
    summary, storage = run_import("egosmith-webdataset", egosmith_source, tmp_path / "data")
    assert len(summary.landed) == 2 and not summary.failed
    for key in summary.landed:
        folder = Path(storage.landing_path(key).path)
        episode = key.rsplit(".", 1)[1]  # <dataset>_ep<NNNNNN>
        (source,) = [
            shard
            for shard in egosmith_source.glob("*/shard-000000.tar")
            if any(episode in name for name in _names(shard))
        ]
        ours = list(wds.WebDataset(str(folder / "samples.tar"), shardshuffle=False))
        theirs = list(wds.WebDataset(str(source), shardshuffle=False))
        assert [s["__key__"] for s in ours] == [s["__key__"] for s in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert {k: v for k, v in a.items() if not k.startswith("__")} == {
                k: v for k, v in b.items() if not k.startswith("__")
            }
        trajectory = read_capture(key, folder)
        assert len(trajectory.stream("video_frames")) == len(ours)
        assert trajectory.media[0].frame_count == len(ours)


# ----------------------------------------------------------------------------- Holos HDF5


def _names(shard: Path) -> list[str]:
    with tarfile.open(shard) as tar:
        return tar.getnames()


def _robomimic_file(path: Path, demos: int, rows: int) -> list[np.ndarray]:
    """A robomimic-layout file (no /holos): per demo obs/device_pose, actions, time axes.

    Layout from robomimic's dataset format: ``/data`` attrs ``total`` and ``env_args``
    (JSON), ``/data/demo_<i>`` attr ``num_samples`` with ``obs/*`` and ``actions``,
    ``/mask/<filter>`` listing demo names.
    """
    poses = []
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["total"] = demos * rows
        data.attrs["env_args"] = json.dumps({"env_name": "Lift", "type": 1, "env_kwargs": {}})
        for i in range(demos):
            demo = data.create_group(f"demo_{i}")
            demo.attrs["num_samples"] = rows
            pose = np.zeros((rows, 7))
            pose[:, 0] = np.linspace(0, 1, rows) + i
            pose[:, 6] = 1.0
            poses.append(pose)
            demo.create_dataset("obs/device_pose", data=pose)
            demo.create_dataset("obs/gripper", data=np.full((rows, 2), 0.5 + i))
            demo.create_dataset("actions", data=np.zeros((rows, 7)))
            demo.create_dataset("timestamp_ns", data=T_NS + np.arange(rows) * 50_000_000)
        mask = f.create_group("mask")
        mask.create_dataset("train", data=[f"demo_{i}" for i in range(demos)])
    return poses


def test_every_demo_of_a_robomimic_file_lands_from_its_obs_and_a_bad_file_alone_fails(
    tmp_path,
):
    src = tmp_path / "src"
    src.mkdir()
    poses = _robomimic_file(src / "lift.hdf5", demos=3, rows=20)
    (src / "broken.h5").write_bytes(b"not an HDF5 file at all")

    summary, storage = run_import("holos-hdf5", src, tmp_path / "data")

    assert [e.file for e in summary.failed] == ["broken.h5"]
    assert "broken.h5" in str(summary.failed[0])
    assert summary.landed == [f"holos-hdf5-lift.hdf5.data.demo_{i}" for i in range(3)]
    for i, key in enumerate(summary.landed):
        folder = Path(storage.landing_path(key).path)
        with h5py.File(folder / "capture.h5") as f:  # the demo alone, robomimic's layout kept
            assert list(f["data"]) == [f"demo_{i}"]
            assert f["data"].attrs["total"] == 20
            assert [n.decode() for n in f["mask/train"][...]] == [f"demo_{i}"]
            assert json.loads(f["data"].attrs["env_args"])["env_name"] == "Lift"
        trajectory = read_capture(key, folder)
        pose = trajectory.stream("device_pose")
        np.testing.assert_array_equal(pose.fields["position"], poses[i][:, :3])
        assert pose.fields["valid"].all() and "zero-order" not in str(pose.attrs["resampled"])
        np.testing.assert_array_equal(pose.timestamp_ns, T_NS + np.arange(20) * 50_000_000)
        gripper = trajectory.stream("gripper")
        assert gripper.kind == "vector" and json.loads(str(gripper.attrs["names"])) == [
            "gripper.0",
            "gripper.1",
        ]
        np.testing.assert_array_equal(gripper.fields["values"], np.full((20, 2), 0.5 + i))
        provenance = json.loads((folder / "ego_provenance.json").read_text())
        assert provenance["original_path"] == f"lift.hdf5/data/demo_{i}"
        assert provenance["files"][0]["original"] == "lift.hdf5"
        assert "h5py copy" in provenance["files"][0]["derived"]


def test_a_demo_without_time_fails_naming_the_dataset(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _robomimic_file(src / "a.hdf5", demos=2, rows=5)
    with h5py.File(src / "a.hdf5", "a") as f:
        del f["data/demo_1/timestamp_ns"]
    summary, storage = run_import("holos-hdf5", src, tmp_path / "data")
    assert summary.landed == ["holos-hdf5-a.hdf5.data.demo_0"]
    (error,) = summary.failed
    assert error.episode == "a.hdf5/data/demo_1" and error.field == "/data/demo_1/timestamp_ns"
    assert error.file == "a.hdf5"  # the source file, not the capture's name for it
    assert landed_folders(storage) == summary.landed


# ----------------------------------------------------------------------------- the platform


@pytest.mark.parametrize("kind", ["holos-hdf5", "lerobot-v3", "egosmith-webdataset"])
def test_an_imported_capture_goes_through_raw_trajectory_gate_and_every_export(tmp_path, kind):
    """An imported episode is an ordinary capture: raw copy, trajectory, quality report,
    Rerun recording, gate, then the three exports, each valid to its own validator."""
    from ego_assets import pipeline
    from ego_assets.exports.ceres import CeresExporter
    from ego_assets.exports.egosmith import EgoSmithExporter, episode_path
    from ego_assets.exports.holos import HolosExporter
    from ego_assets.exports.run import run_export
    from ego_assets.formats.ceres_lerobot_validate import validate_dataset
    from ego_assets.formats.egosmith_reader import validate_path
    from ego_assets.formats.holos_hdf5 import write_holos_hdf5
    from ego_assets.formats.holos_hdf5_validate import validate_file

    trajectory, raw = synth_capture(tmp_path / "raw", "webxr", "w", seconds=2.0, seed=9)
    src = tmp_path / "src"
    src.mkdir()
    if kind == "holos-hdf5":
        write_holos_hdf5(trajectory, raw, src / "w.h5")
    elif kind == "lerobot-v3":
        (src / "episode-000000").mkdir()
        write_shard(trajectory, raw, 0, src / "episode-000000")
    else:
        camera = head_camera(trajectory)
        write_episode(trajectory, camera, raw / camera.media.path, src,
                      episode_index=0, data_version="t", options=EgoSmithOptions())  # fmt: skip
    summary, storage = run_import(kind, src, tmp_path / "data")
    (key,) = summary.landed

    pipeline.ingest_raw(storage, key)
    pipeline.normalize(storage, key)
    pipeline.assess_quality(storage, key)
    gate = pipeline.stored_gate(storage, key)
    assert gate is not None and gate.passed, gate

    exports = tmp_path / "data" / "exports"
    run_export(storage, key, HolosExporter())
    (h5,) = exports.glob(f"holos_hdf5/{key}/*.h5")
    assert validate_file(h5) == []
    run_export(storage, key, CeresExporter())
    (shard,) = exports.glob(f"ceres-lerobot-v3/{key}/shards/*")
    assert validate_dataset(shard) == []
    run_export(storage, key, EgoSmithExporter())
    report = validate_path(Path(episode_path(storage, key).path))
    if kind == "lerobot-v3":  # LeRobot keeps no per-frame camera pose: nothing to sample
        assert report.samples == 0 and "no head-camera video with per-frame" in report.errors[0]
    else:
        assert report.ok, report.errors
        assert report.samples == len(trajectory.stream("camera_outward_frames"))


# ----------------------------------------------------------------------------- lerobot's own

_WRITE_WITH_LEROBOT = """
import sys
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

names = [f"j{i}" for i in range(6)]
ds = LeRobotDataset.create("local/probe", fps=10, root=sys.argv[1], robot_type="probe_bot",
    features={
        "observation.state": {"dtype": "float32", "shape": (6,), "names": names},
        "action": {"dtype": "float32", "shape": (6,), "names": names},
        "observation.images.cam": {"dtype": "video", "shape": (48, 64, 3),
                                   "names": ["height", "width", "channels"]},
    }, use_videos=True)
for ep in range(2):
    for k in range(12):
        v = np.full(6, ep * 100 + k, np.float32)
        img = np.full((48, 64, 3), 20 * k, np.uint8)
        ds.add_frame({"observation.state": v, "action": -v, "observation.images.cam": img,
                      "task": f"task {ep}"})
    ds.save_episode()
ds.finalize()
"""


@pytest.fixture(scope="module")
def lerobot_written(tmp_path_factory) -> Path:
    """Two 12-frame episodes written by lerobot itself (AV1 video, GOP 2, one mp4)."""
    python = lerobot_python()
    if python is None:
        pytest.skip("no lerobot environment (make lerobot-env)")
    root = tmp_path_factory.mktemp("lerobot")
    script = root / "write.py"
    script.write_text(_WRITE_WITH_LEROBOT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(python), str(script), str(root / "ds")], env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return root / "ds"


def test_a_dataset_lerobot_wrote_lands_each_episode_with_its_columns_and_frames(
    lerobot_written, tmp_path
):
    summary, storage = run_import("lerobot-v3", lerobot_written, tmp_path / "data")
    assert summary.failed == [] and len(summary.landed) == 2
    for ep, key in enumerate(summary.landed):
        folder = Path(storage.landing_path(key).path)
        trajectory = read_capture(key, folder)
        state = trajectory.stream("observation.state")
        assert state.kind == "vector" and json.loads(str(state.attrs["names"]))[0] == "j0"
        expected = ep * 100 + np.arange(12, dtype=np.float64)
        np.testing.assert_array_equal(state.fields["values"], np.repeat(expected[:, None], 6, 1))
        np.testing.assert_array_equal(trajectory.stream("action").fields["values"][:, 0], -expected)
        np.testing.assert_allclose(state.time, np.arange(12) / 10, atol=1e-6)
        assert trajectory.annotations.instructions == (f"task {ep}",)
        video = json.loads((folder / "ego_provenance.json").read_text())["files"]
        (cut,) = [f for f in video if f["path"].startswith("videos/")]
        assert cut["derived"].endswith("packets copied")  # each episode starts on a keyframe
        with av.open(str(folder / cut["path"])) as c:
            reds = [int(f.to_ndarray(format="rgb24")[0, 0, 0]) for f in c.decode(video=0)]
        np.testing.assert_allclose(reds, 20 * np.arange(12), atol=3)


def test_a_cut_that_starts_between_keyframes_is_re_encoded(lerobot_written, tmp_path):
    from ego_assets.importers.lerobot_v3 import cut_video

    src = next(lerobot_written.glob("videos/*/*/*.mp4"))
    assert cut_video(src, tmp_path / "a.mp4", 2, 5, 10) is True  # frame 2 is a keyframe
    assert cut_video(src, tmp_path / "b.mp4", 3, 5, 10) is False  # GOP 2: frame 3 is not
    with av.open(str(tmp_path / "b.mp4")) as c:
        stream = c.streams.video[0]
        frames = list(c.decode(stream))
        assert [f.pts * stream.time_base for f in frames] == [Fraction(k, 10) for k in range(5)]
    reds = [int(f.to_ndarray(format="rgb24")[0, 0, 0]) for f in frames]
    np.testing.assert_allclose(reds, 20 * np.arange(3, 8), atol=4)
