"""EgoDex import: the fixture generator against the published layout, the reader's values,
the odd cases real files have, and bad input that fails one episode alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import av
import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.spatial.transform import Rotation

from ego_assets.capture.files import MARKER_FILE
from ego_assets.cli import main
from ego_assets.importers import get_importer
from ego_assets.importers.core import STAGING_DIR, import_source, open_source
from ego_assets.storage import Storage
from ego_assets.synth.egodex import write_egodex_episode
from ego_assets.trajectory.streams import SampleFlag

TASK = "train/add_remove_lid"

# The published layout (docs of the dataset), spelled out independently of our code.
PUBLISHED_BODY = ["hip"] + [f"spine{i}" for i in range(1, 8)] + [f"neck{i}" for i in range(1, 5)]
PUBLISHED_SIDE = ["Shoulder", "Arm", "Forearm", "Hand", "ThumbKnuckle", "ThumbIntermediateBase",
                  "ThumbIntermediateTip", "ThumbTip"] + [
    f"{f}Finger{p}" for f in ("Index", "Middle", "Ring", "Little")
    for p in ("Metacarpal", "Knuckle", "IntermediateBase", "IntermediateTip", "Tip")
]  # fmt: skip


def _import(src: Path, data: Path):
    importer = get_importer("egodex")
    return import_source(Storage(data), importer, open_source(str(src), importer))


def _landed(data: Path, key: str):
    from ego_assets.capture import read_checked_capture

    return read_checked_capture(key, data / "landing" / key)[0]


def test_fixture_follows_the_published_layout(tmp_path):
    hdf5, mp4 = write_egodex_episode(tmp_path / TASK, 3, frames=45, seed=1, bytes_attrs=True)
    assert (hdf5.name, mp4.name) == ("3.hdf5", "3.mp4")
    with h5py.File(hdf5) as f:
        names = set(f["transforms"])
        assert len(PUBLISHED_BODY) == 12 and len(PUBLISHED_SIDE) == 28
        want = {"camera", *PUBLISHED_BODY}
        want |= {f"{side}{j}" for side in ("left", "right") for j in PUBLISHED_SIDE}
        assert names == want and len(names) == 69
        for name in ("leftIndexFingerTip", "rightThumbKnuckle", "leftHand", "camera"):
            ds = f["transforms"][name]
            assert ds.dtype == np.float32 and ds.shape == (45, 4, 4)
            m = ds[()].astype(np.float64)
            assert np.allclose(m[:, 3], [0, 0, 0, 1])
            r = m[:, :3, :3]
            assert np.allclose(r.transpose(0, 2, 1) @ r, np.eye(3), atol=1e-5)
        assert set(f["confidences"]) == want - {"camera"}
        conf = f["confidences"]["rightHand"][()]
        assert conf.dtype == np.float32 and conf.shape == (45,)
        assert ((conf >= 0) & (conf <= 1)).all()
        k = f["camera"]["intrinsic"][()]
        assert k.dtype == np.float32 and k.shape == (3, 3)
        s = 320 / 1920  # the published 1080p intrinsic, scaled to the 320x180 video
        assert np.allclose(k, [[736.6339 * s, 0, 960 * s], [0, 736.6339 * s, 540 * s], [0, 0, 1]])
        task = f.attrs.get_id("task")
        assert task.get_type().get_size() > len(b"add_remove_lid")  # NUL padded bytes
        assert isinstance(f.attrs["task"], bytes) and f.attrs["which_llm_description"] == b"2"
        assert {"llm_description", "llm_description2", "environment", "object"} <= set(f.attrs)
    with av.open(str(mp4)) as c:
        v = c.streams.video[0]
        assert v.codec_context.name == "h264" and float(v.average_rate) == 30
        assert (v.width, v.height) == (320, 180)
        assert sum(1 for _ in c.decode(video=0)) == 45
    hdf5b, _ = write_egodex_episode(tmp_path / TASK, 4, frames=30, second_description=False,
                                   confidences=False)  # fmt: skip
    with h5py.File(hdf5b) as f:
        assert "confidences" not in f and "llm_description2" not in f.attrs
        assert isinstance(f.attrs["task"], str) and f.attrs["which_llm_description"] == 1


def test_reader_values_match_the_hdf5(tmp_path):
    src = tmp_path / "src"
    hdf5, _ = write_egodex_episode(src / TASK, 7, frames=40, seed=2, bytes_attrs=True)
    summary = _import(src, tmp_path / "data")
    assert summary.landed == ["egodex-train.add_remove_lid.7"] and not summary.failed
    t = _landed(tmp_path / "data", "egodex-train.add_remove_lid.7")
    with h5py.File(hdf5) as f:
        tr = {name: f["transforms"][name][()].astype(np.float64) for name in f["transforms"]}
        conf = f["confidences"]["rightIndexFingerTip"][()].astype(np.float64)
        k = f["camera"]["intrinsic"][()].astype(np.float64)
    hand = t.stream("hand_right_world")
    assert hand.attrs["joint_set"] == "arkit27" and hand.attrs["frame"] == "world"
    # arkit27 joint 9 = indexFingerTip, joint 0 = wrist = rightHand
    assert np.array_equal(hand.fields["position"][:, 9], tr["rightIndexFingerTip"][:, :3, 3])
    assert np.array_equal(hand.fields["position"][:, 0], tr["rightHand"][:, :3, 3])
    q = Rotation.from_quat(hand.fields["rotation"][:, 9])
    assert np.allclose(q.as_matrix(), tr["rightIndexFingerTip"][:, :3, :3], atol=1e-6)
    assert np.array_equal(hand.fields["joint_confidence"][:, 9], conf)
    assert np.isnan(hand.fields["position"][:, 25:]).all()  # forearmWrist, forearmArm
    assert not hand.fields["joint_valid"][:, 25:].any() and hand.fields["joint_valid"][:, :25].all()
    head = t.stream("head")
    assert np.array_equal(head.fields["position"], tr["camera"][:, :3, 3])
    body = t.stream("body_leftForearm")
    assert np.array_equal(body.fields["position"], tr["leftForearm"][:, :3, 3])
    assert len([s for s in t.streams if s.name.startswith("body_")]) == 18
    frames = t.stream("video_frames")
    w2c = frames.fields["world_to_camera"]
    assert np.allclose(w2c @ tr["camera"], np.eye(4), atol=1e-9)
    assert np.allclose(frames.fields["intrinsics"][5], [k[0, 0], k[1, 1], k[0, 2], k[1, 2]])
    assert frames.attrs["camera_axes"] == "arkit"
    # no timestamps in EgoDex: frame i at i / 30 s, declared as derived
    assert head.timestamp_ns[3] == 100_000_000 and head.time[30] == pytest.approx(1.0)
    assert t.info.clock == "device" and "derived" in str(head.attrs["time_source"])
    assert any("no timestamps" in q.description for q in t.quirks)
    # attributes: bytes with NUL padding -> text; which_llm_description 2 -> description 2
    assert t.info.title == "add_remove_lid" and t.info.split == "train"
    assert t.annotations.language.startswith("Pick the lid up")
    assert len(t.annotations.instructions) == 2
    assert t.annotations.instructions[1].startswith("Take the lid off")
    chars = {c.name: c.value for c in t.info.characteristics}
    assert chars["environment"] == "kitchen table" and chars["session_name"] == "session_0042"
    assert t.media_ref("video").frame_count == 40 and t.info.cameras[0].width == 320
    assert t.info.source_capture_id == "train/add_remove_lid/7.hdf5"


def test_odd_cases_real_files_have(tmp_path):
    src = tmp_path / "src"
    write_egodex_episode(src / TASK, 1, frames=20, confidences=False, second_description=False)
    write_egodex_episode(src / TASK, 2, frames=20, video_frames=22)  # video 2 frames longer
    write_egodex_episode(src / "short_task", 0, frames=12)  # shorter than 1 s
    summary = _import(src, tmp_path / "data")
    assert len(summary.landed) == 3 and not summary.failed
    no_conf = _landed(tmp_path / "data", "egodex-train.add_remove_lid.1")
    hand = no_conf.stream("hand_left_world")
    assert "joint_confidence" not in hand.fields  # absent, not 1
    assert any(q.field == "confidences" for q in no_conf.quirks)
    assert no_conf.annotations.instructions == (no_conf.annotations.language,)
    assert no_conf.annotations.language.startswith("Take the lid off")
    assert no_conf.info.split == "train"
    longer = _landed(tmp_path / "data", "egodex-train.add_remove_lid.2")
    assert any("2 frames more" in q.description for q in longer.quirks)
    short = _landed(tmp_path / "data", "egodex-short_task.0")
    assert len(short.stream("head")) == 12 and short.info.split == ""


@pytest.mark.parametrize("missing", [1, 2])
def test_video_a_frame_or_two_short_is_kept_and_flagged(tmp_path, missing):
    """EgoDex's transforms and video are known to differ by a frame or two
    (public-datasets reference): every pose frame is kept, ``video_frames`` lists the
    pictures there are, and a quirk names the pose frames without one."""
    src = tmp_path / "src"
    hdf5, _ = write_egodex_episode(src / TASK, 4, frames=20, seed=3, video_frames=20 - missing)
    assert _import(src, tmp_path / "data").landed == ["egodex-train.add_remove_lid.4"]
    t = _landed(tmp_path / "data", "egodex-train.add_remove_lid.4")
    with h5py.File(hdf5) as f:
        camera = f["transforms"]["camera"][()].astype(np.float64)
    head, frames = t.stream("head"), t.stream("video_frames")
    assert len(head) == 20 and np.array_equal(head.fields["position"], camera[:, :3, 3])
    assert len(t.stream("hand_left_world")) == 20
    assert list(frames.fields["frame_index"]) == list(range(20 - missing))
    assert np.array_equal(frames.timestamp_ns, head.timestamp_ns[: 20 - missing])
    w2c = frames.fields["world_to_camera"]
    assert np.allclose(w2c @ camera[: 20 - missing], np.eye(4), atol=1e-9)
    assert t.media_ref("video").frame_count == 20 - missing
    (quirk,) = [q for q in t.quirks if q.field == "frames"]
    assert (quirk.file, quirk.rows) == ("episode.mp4", missing)
    assert f"pose frames {21 - missing} to 20 have no picture" in quirk.description


def test_nan_samples_are_kept_and_flagged(tmp_path):
    src = tmp_path / "src"
    write_egodex_episode(src / TASK, 0, frames=20, faults=["nan_frames"])
    assert _import(src, tmp_path / "data").landed == ["egodex-train.add_remove_lid.0"]
    t = _landed(tmp_path / "data", "egodex-train.add_remove_lid.0")
    head = t.stream("head")
    assert list(np.nonzero(~head.fields["valid"])[0]) == [2]
    assert head.flags[2] & SampleFlag.NON_FINITE and not head.flags[3] & SampleFlag.NON_FINITE
    hand = t.stream("hand_right_world")
    assert list(np.nonzero(~hand.fields["joint_valid"][:, 9])[0]) == [3, 4, 5]
    assert np.isnan(hand.fields["rotation"][3:6, 9]).all() and hand.fields["hand_valid"].all()
    assert np.isnan(t.stream("video_frames").fields["world_to_camera"][2]).all()


@pytest.mark.parametrize(
    ("fault", "file", "field", "row", "words"),
    [
        ("no_camera", "1.hdf5", "transforms/camera", None, "missing"),
        ("short_joint", "1.hdf5", "transforms/leftHand", None, "has 19 frames"),
        ("non_rigid", "1.hdf5", "transforms/rightHand", 5, "not a rigid transform"),
        ("short_video", "1.mp4", "frames", None, "holds 17 frames but the transforms hold 20"),
    ],
)
def test_bad_episode_fails_alone_naming_file_dataset_field(
    tmp_path, fault, file, field, row, words
):
    src = tmp_path / "src"
    write_egodex_episode(src / TASK, 0, frames=20)
    if fault == "short_video":  # 3 short: beyond EgoDex's known "a frame or two"
        write_egodex_episode(src / TASK, 1, frames=20, video_frames=17)
    else:
        write_egodex_episode(src / TASK, 1, frames=20, faults=[fault])
    write_egodex_episode(src / TASK, 2, frames=20)
    summary = _import(src, tmp_path / "data")
    assert summary.landed == ["egodex-train.add_remove_lid.0", "egodex-train.add_remove_lid.2"]
    (err,) = summary.failed
    assert (err.dataset, err.episode) == ("egodex", f"{TASK}/1.hdf5")
    assert (err.file, err.field, err.row) == (f"{TASK}/{file}", field, row)
    assert words in err.reason
    message = str(err)
    assert "dataset 'egodex'" in message and f"field '{field}'" in message
    landing = tmp_path / "data" / "landing"
    assert not (landing / "egodex-train.add_remove_lid.1").exists()
    assert list((landing / STAGING_DIR).iterdir()) == []


def test_cli_import_limit_rerun_and_exit_codes(tmp_path, capsys):
    src = tmp_path / "src"
    for n in range(3):
        write_egodex_episode(src / TASK, n, frames=15, seed=n)
    data = tmp_path / "data"
    assert main(["import", "egodex", str(src), "--data", str(data), "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "egodex: 2 landed, 0 already there, 0 failed" in out
    assert (
        main(["import", "egodex", str(src), "--data", str(data), "--dataset-version", "1.0"]) == 0
    )
    out = capsys.readouterr().out
    assert "1 landed, 2 already there, 0 failed" in out
    prov = json.loads(
        (data / "landing/egodex-train.add_remove_lid.2/ego_provenance.json").read_text()
    )
    assert prov["dataset_version"] == "1.0" and "CC BY-NC-ND 4.0" in prov["licence"]
    (src / TASK / "0.mp4").rename(src / TASK / "9.mp4")  # 0 loses its video, 9 has no hdf5
    write_egodex_episode(src / TASK, 5, frames=15, faults=["no_camera"])
    assert main(["import", "egodex", str(src), "--data", str(tmp_path / "other")]) == 1
    captured = capsys.readouterr()
    assert "2 landed, 0 already there, 2 failed" in captured.out
    assert "file 'train/add_remove_lid/0.mp4': the episode's video is missing" in captured.err
    assert "field 'transforms/camera'" in captured.err
    # nonsense is refused before anything is written
    assert main(["import", "egodex", str(tmp_path / "nowhere"), "--data", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
    assert (data / "landing/egodex-train.add_remove_lid.0" / MARKER_FILE).is_file()


def test_catalog_episodes_carry_the_source_dataset(tmp_path):
    from ego_assets import pipeline
    from ego_assets.catalog.sources import stage_rows
    from ego_assets.catalog.warehouse import catalog_database, query, run_dbt
    from ego_assets.synth import synthesize

    src, data = tmp_path / "src", tmp_path / "data"
    write_egodex_episode(src / TASK, 0, frames=15)
    assert _import(src, data).landed == ["egodex-train.add_remove_lid.0"]
    synthesize("webxr", data / "landing" / "direct", seconds=1, seed=1, capture_id="direct")
    storage = Storage(data)
    for key in ("egodex-train.add_remove_lid.0", "direct"):
        pipeline.ingest_raw(storage, key)
    with catalog_database(storage, write=True) as db:
        stage_rows(storage, db, {})
        run_dbt(["run", "--quiet", "--select", "episodes"], db)
        rows = query(db, "select capture_key, source_dataset from episodes order by 1").to_pylist()
    assert rows == [
        {"capture_key": "direct", "source_dataset": None},
        {"capture_key": "egodex-train.add_remove_lid.0", "source_dataset": "egodex"},
    ]


@pytest.mark.parametrize("layout", [1, 2])
def test_stored_trajectory_of_an_older_layout_is_written_again_with_the_same_data_version(
    tmp_path, layout
):
    """An imported episode's trajectory in store layout 3 (one ``streams.parquet``); a store
    of layout 1 or 2 (a file per stream; the lineage of layout 1 has no ``store_layout``)
    under the same data version is written again by `normalize`, keeping that data version
    (the releases' trajectory digest), with the episode's values."""
    from ego_assets import pipeline
    from ego_assets.trajectory import store

    src, data = tmp_path / "src", tmp_path / "data"
    write_egodex_episode(src / TASK, 0, frames=40)
    key = _import(src, data).landed[0]
    storage = Storage(data)
    pipeline.ingest_raw(storage, key)
    folder = Path(storage.stage_path("trajectory", key).path)
    first = pipeline.normalize(storage, key)
    assert not first.reused
    schema = pq.read_schema(folder / "streams.parquet")
    assert schema.field("hand_left_world/position").type.value_type == pa.float64()
    new = store.read_trajectory(folder)
    assert pipeline.normalize(storage, key).reused

    # an older store (the layout's test fixture) in its place, as an earlier normalize left it
    old = Path(__file__).parent / "data" / f"trajectory-layout{layout}"
    shutil.rmtree(folder)
    shutil.copytree(old, folder)
    lineage = {"data_version": first.data_version, "raw_content_sha256": "x"}
    if layout > 1:
        lineage["store_layout"] = layout
    (folder / pipeline.LINEAGE_FILE).write_text(json.dumps(lineage))
    assert [s.name for s in store.read_trajectory(folder).streams] == [
        "camera_left_frames",
        "device_pose",
        "hand_right_world",
    ]
    again = pipeline.normalize(storage, key)
    assert (again.reused, again.data_version) == (False, first.data_version)
    assert not (folder / "streams").exists()
    lineage = json.loads((folder / pipeline.LINEAGE_FILE).read_text())
    assert lineage["store_layout"] == store.STORE_LAYOUT == 3
    back = store.read_trajectory(folder)
    assert [s.name for s in back.streams] == [s.name for s in new.streams]
    for a, b in zip(new.streams, back.streams, strict=True):
        for name, values in a.fields.items():
            np.testing.assert_array_equal(values, b.fields[name])


def test_normalize_reuses_the_landing_read_and_stores_the_same_files(tmp_path):
    """The import reads each episode to refuse a bad one; the normalize step of the same
    process takes that trajectory (the raw copy's manifest names the same bytes) instead
    of reading it again, and stores exactly what a fresh read stores."""
    import hashlib

    from ego_assets import capture, pipeline

    write_egodex_episode(tmp_path / "src" / TASK, 0, frames=40, seed=4)
    summary = _import(tmp_path / "src", tmp_path / "data")
    (key,) = summary.landed
    storage = Storage(tmp_path / "data")
    pipeline.ingest_raw(storage, key)
    from ego_assets.capture.manifest import read_manifest

    kept = (key, read_manifest(tmp_path / "data" / "raw" / key).content_sha256)
    assert kept in capture._landed  # kept for the raw copy's content
    landed = capture._landed[kept][0]
    pipeline.normalize(storage, key)
    assert kept not in capture._landed  # handed out once, to normalize
    assert not landed.streams[0].timestamp_ns.flags.writeable  # shared: read-only

    def digests(folder: Path) -> dict[str, str]:
        return {
            p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }

    reused = digests(tmp_path / "data" / "trajectory" / key)
    fresh = tmp_path / "fresh"
    stage = Storage(fresh)
    _import(tmp_path / "src", fresh)
    capture._landed.clear()  # as in a normalize run of its own process
    pipeline.ingest_raw(stage, key)
    pipeline.normalize(stage, key)
    assert digests(fresh / "trajectory" / key) == reused
    assert {"capture.json", "lineage.json", "action_sources.arrow"} <= set(reused)
