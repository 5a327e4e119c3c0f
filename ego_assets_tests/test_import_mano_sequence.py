"""TACO-style MANO sequences: the layout, MANO parameters as the mano-video path keeps
them (EgoSmith's mano.npy), the restricted unpickler and bad sequences failing alone."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from ego_assets import pipeline
from ego_assets.capture import read_checked_capture
from ego_assets.exports.egosmith import EgoSmithExporter, episode_path
from ego_assets.exports.run import export_capture
from ego_assets.formats.egosmith_reader import iter_shard
from ego_assets.importers import get_importer
from ego_assets.importers.core import STAGING_DIR, import_source, open_source
from ego_assets.storage import Storage
from ego_assets.synth.mano_sequence import write_mano_sequence

SEQ = "Hand_Poses/(stir, spoon, bowl)/20231105_0{:02d}"


def _import(src: Path, data: Path):
    importer = get_importer("mano-sequence")
    return import_source(Storage(data), importer, open_source(str(src), importer))


def _read(data: Path, key: str):
    return read_checked_capture(key, data / "landing" / key)[0]


class Hostile:
    """Unpickling this runs ``os.system``: a file appears if the pickle is ever run."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


@pytest.fixture(scope="module")
def taco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("taco")
    write_mano_sequence(src / SEQ.format(1), frames=30, seed=1)
    write_mano_sequence(src / SEQ.format(2), frames=30, seed=2, pca=12)
    return src


def test_layout_is_taco_s(taco):
    folder = taco / SEQ.format(1)
    frames = pickle.loads((folder / "right_hand.pkl").read_bytes())
    assert isinstance(frames, dict) and len(frames) == 30
    first = frames["00000"]
    assert np.asarray(first["hand_pose"]).shape == (48,)  # global orient + 15 joints, axis-angle
    assert np.asarray(first["hand_trans"]).shape == (3,)
    assert np.asarray(pickle.loads((folder / "left_hand_shape.pkl").read_bytes())).shape == (10,)
    assert np.loadtxt(folder / "egocentric_intrinsic.txt").shape == (3, 3)
    assert np.load(folder / "egocentric_frame_extrinsic.npy").shape == (30, 4, 4)


def test_mano_parameters_land_as_the_mano_video_path_keeps_them(taco, tmp_path):
    data = tmp_path / "data"
    summary = _import(taco, data)
    assert len(summary.landed) == 2 and not summary.failed
    key = summary.landed[0]
    assert key.startswith("taco-Hand_Poses._stir__spoon__bowl_.20231105_001-")
    t = _read(data, key)
    folder = taco / SEQ.format(1)
    frames = pickle.loads((folder / "right_hand.pkl").read_bytes())
    pose = np.stack([np.asarray(frames[f"{i:05d}"]["hand_pose"], np.float64) for i in range(30)])
    trans = np.stack([np.asarray(frames[f"{i:05d}"]["hand_trans"], np.float64) for i in range(30)])
    right = t.stream("mano_right")
    assert right.kind == "mano" and right.attrs["mano_pose_space"] == "axis_angle"
    assert np.array_equal(right.fields["transl"], trans)
    assert np.array_equal(right.fields["global_orient"], pose[:, :3])
    assert np.array_equal(right.fields["hand_pose"], pose[:, 3:]) and right.dims()["P"] == 45
    betas = np.asarray(pickle.loads((folder / "right_hand_shape.pkl").read_bytes()), np.float64)
    assert np.array_equal(right.fields["betas"][17], betas)
    assert right.fields["valid_detected"].all() and "joints" not in right.fields
    extrinsic = np.load(folder / "egocentric_frame_extrinsic.npy").astype(np.float64)
    frames_stream = t.stream("video_frames")
    assert np.array_equal(frames_stream.fields["world_to_camera"], extrinsic)
    assert frames_stream.attrs["camera_axes"] == "opencv"
    assert frames_stream.fields["intrinsics"][0].tolist() == [210.0, 210.0, 159.5, 119.5]
    assert right.timestamp_ns[3] == 100_000_000 and "derived" in str(right.attrs["time_source"])
    assert t.info.dataset_name == "taco" and t.info.title == "(stir, spoon, bowl)"
    pca = _read(data, summary.landed[1]).stream("mano_left")
    assert pca.attrs["mano_pose_space"] == "pca" and pca.dims()["P"] == 12
    # EgoSmith's mano.npy: rows left, right = transl | global_orient | hand_pose | betas
    storage = Storage(data)
    for step in (pipeline.ingest_raw, pipeline.normalize, pipeline.assess_quality):
        step(storage, key)
    gate = pipeline.stored_gate(storage, key)
    assert gate is not None
    exporter = EgoSmithExporter()
    export_capture(storage, key, exporter, episode_index=0, gate_version=gate.data_version)
    shard = next(Path(episode_path(storage, key).path).rglob("*.tar"))
    sample = next(s for s in iter_shard(shard) if s.frame == 5)
    want = np.concatenate([trans[5], pose[5, :3], pose[5, 3:], betas]).astype(np.float32)
    assert sample.mano.shape == (2, 61) and np.array_equal(sample.mano[1], want)
    assert sample.meta["presence"] == 3


def test_a_hostile_pickle_is_refused_and_runs_nothing(taco, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(taco, src)
    target = tmp_path / "pwned"
    evil = pickle.dumps({"00000": Hostile(target)})
    pickle.loads(evil)  # the plain unpickler runs it: the file appears
    assert target.exists()
    target.unlink()
    (src / SEQ.format(1) / "left_hand.pkl").write_bytes(evil)
    summary = _import(src, tmp_path / "data")
    assert not target.exists()
    assert len(summary.landed) == 1 and summary.landed[0].startswith(
        "taco-Hand_Poses._stir__spoon__bowl_.20231105_002"
    )
    (err,) = summary.failed
    assert err.dataset == "taco" and err.file == SEQ.format(1) + "/left_hand.pkl"
    assert err.field == "posix.system" and "nothing in the file was run" in err.reason
    landing = tmp_path / "data" / "landing"
    assert sorted(p.name for p in landing.iterdir() if p.name != STAGING_DIR) == summary.landed


def test_bad_sequences_fail_alone(taco, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(taco, src)
    one = src / SEQ.format(1)
    frames = pickle.loads((one / "right_hand.pkl").read_bytes())
    frames.pop("00029")
    (one / "right_hand.pkl").write_bytes(pickle.dumps(frames))
    two = src / SEQ.format(2)
    frames = pickle.loads((two / "left_hand.pkl").read_bytes())
    frames["00004"] = None  # no hand that frame: kept, not valid
    (two / "left_hand.pkl").write_bytes(pickle.dumps(frames))
    three = src / SEQ.format(3)
    write_mano_sequence(three, frames=10, seed=3)
    (three / "egocentric_frame_extrinsic.npy").write_bytes(b"\x93NUMPY garbage")
    summary = _import(src, tmp_path / "data")
    assert len(summary.landed) == 1
    by_file = {e.file.rsplit("/", 1)[-1]: e for e in summary.failed}
    assert set(by_file) == {"right_hand.pkl", "egocentric_frame_extrinsic.npy"}
    assert "has 29 frames" in by_file["right_hand.pkl"].reason
    assert by_file["right_hand.pkl"].field == "hand_pose"
    left = _read(tmp_path / "data", summary.landed[0]).stream("mano_left")
    assert list(np.nonzero(~left.fields["valid_detected"])[0]) == [4]
