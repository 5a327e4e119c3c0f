"""CERES LeRobotDataset v3 shards: layout, columns and values, retries, every source kind."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ego_assets.capture import read_capture
from ego_assets.capture.files import CaptureFiles
from ego_assets.capture.manifest import write_marker
from ego_assets.capture.media import probe_video
from ego_assets.fixtures import real_fixture
from ego_assets.formats import camera_sample, lerobot_video
from ego_assets.formats.ceres_episode import (
    ACTION_NAMES,
    STATE_NAMES,
    build_rows,
    hand_offset,
)
from ego_assets.formats.ceres_lerobot import CAMERA_KEY, STAT_NAMES, shard_name, write_shard
from ego_assets.formats.ceres_metadata import demonstrator_designator
from ego_assets.formats.lerobot_video import frame_times
from ego_assets.trajectory.joints import WEBXR25
from ego_assets_tests.ceres_helpers import data_rows, synth_capture

INDEX = 17


@pytest.fixture(scope="module")
def webxr(tmp_path_factory):
    """A clean 2 s WebXR capture (video aligned: remuxed) and its shard."""
    root = tmp_path_factory.mktemp("ceres-webxr")
    trajectory, raw = synth_capture(root, "webxr", "wx-clean", seed=3)
    shard = root / "shards" / shard_name(INDEX)
    shard.mkdir(parents=True)
    summary = write_shard(trajectory, raw, INDEX, shard)
    return trajectory, raw, shard, summary


@pytest.fixture(scope="module")
def retried(tmp_path_factory):
    """A WebXR capture with a retried segment (cut out: video re-encoded)."""
    root = tmp_path_factory.mktemp("ceres-retry")
    trajectory, raw = synth_capture(root, "webxr", "wx-retry", seed=4, faults=["retried_segment"])
    shard = root / shard_name(5)
    shard.mkdir()
    summary = write_shard(trajectory, raw, 5, shard)
    return trajectory, raw, shard, summary


def _decode(path: Path) -> np.ndarray:
    with av.open(str(path)) as inp:
        return np.stack([f.to_ndarray(format="rgb24") for f in inp.decode(video=0)])


def test_state_has_410_named_values_in_spec_order():
    assert len(STATE_NAMES) == 410
    assert STATE_NAMES[:8] == (
        "head.tracked",
        "head.position.x",
        "head.position.y",
        "head.position.z",
        "head.rotation.x",
        "head.rotation.y",
        "head.rotation.z",
        "head.rotation.w",
    )
    assert STATE_NAMES[8] == "left_hand.tracked"
    assert STATE_NAMES[9:17] == tuple(
        f"left_hand.wrist.{p}"
        for p in (
            *("position.x", "position.y", "position.z"),
            *("rotation.x", "rotation.y", "rotation.z", "rotation.w", "radius"),
        )
    )
    assert STATE_NAMES[209] == "right_hand.tracked"
    assert STATE_NAMES[-1] == "right_hand.pinky-finger-tip.radius"
    assert ACTION_NAMES == ("left_hand.pinch_distance", "right_hand.pinch_distance")


def test_shard_has_exactly_the_spec_layout(webxr):
    trajectory, _, shard, summary = webxr
    files = sorted(p.relative_to(shard).as_posix() for p in shard.rglob("*") if p.is_file())
    spec_sha = trajectory.info.task_specification.sha256
    assert files == sorted(
        [
            "data/chunk-000/file-017.parquet",
            "meta/episodes/chunk-000/file-017.parquet",
            "meta/info.json",
            "meta/stats.json",
            "meta/tasks.parquet",
            f"videos/{CAMERA_KEY}/chunk-000/file-017.mp4",
            "ceres/episode-metadata.json",
            f"ceres/task-specifications/{spec_sha}.json",
            "ceres/browser-export-receipt.json",
        ]
    )
    assert summary.video == "remux" and summary.frames == 60


def test_info_json_declares_every_feature(webxr):
    _, _, shard, _ = webxr
    info = json.loads((shard / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert (info["fps"], info["total_episodes"], info["total_frames"], info["total_tasks"]) == (
        30,
        1,
        60,
        1,
    )
    features = info["features"]
    assert features["observation.state"] == {
        "dtype": "float32",
        "shape": [410],
        "names": list(STATE_NAMES),
    }
    assert features["action"]["shape"] == [2] and features["action"]["dtype"] == "float32"
    camera = features[CAMERA_KEY]
    assert camera["dtype"] == "video" and camera["shape"] == [240, 320, 3]
    assert camera["names"] == ["height", "width", "channels"]
    assert camera["info"]["video.codec"] == "h264" and camera["info"]["video.fps"] == 30
    assert camera["info"]["video.pix_fmt"] == "yuv420p" and camera["info"]["has_audio"] is False
    scalars = {
        "timestamp": "float32",
        "frame_index": "int64",
        "episode_index": "int64",
        "index": "int64",
        "task_index": "int64",
        "ceres.source_frame_index": "int64",
        "ceres.source_timestamp": "float64",
        "ceres.source_gap": "bool",
    }
    for name, dtype in scalars.items():
        assert features[name] == {"dtype": dtype, "shape": [1], "names": None}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["splits"] == {"train": "17:18"}


def test_rows_carry_the_source_values(webxr):
    trajectory, _, shard, _ = webxr
    table = pq.read_table(shard / "data/chunk-000/file-017.parquet")
    assert table.column_names == [
        "observation.state",
        "action",
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
        "ceres.source_frame_index",
        "ceres.source_timestamp",
        "ceres.source_gap",
    ]
    state_type = table.schema.field("observation.state").type
    assert (state_type.list_size, str(state_type.value_type)) == (410, "float")
    rows = data_rows(shard)
    n = 60
    np.testing.assert_array_equal(rows["frame_index"], np.arange(n))
    np.testing.assert_array_equal(rows["index"], np.arange(n))
    np.testing.assert_array_equal(rows["episode_index"], np.full(n, INDEX))
    assert rows["timestamp"].dtype == np.float32
    np.testing.assert_array_equal(rows["timestamp"], (np.arange(n) / 30).astype(np.float32))
    slots = trajectory.stream("recorder_slots")
    np.testing.assert_array_equal(rows["ceres.source_frame_index"], slots.fields["slot_index"])
    np.testing.assert_allclose(rows["ceres.source_timestamp"], slots.fields["source_time"])
    np.testing.assert_array_equal(rows["ceres.source_gap"], slots.fields["gap"])
    state, action = rows["observation.state"], rows["action"]
    hand = trajectory.stream("hand_left")
    head = trajectory.stream("head")
    k = int(np.flatnonzero(hand.fields["hand_valid"] & ~slots.fields["gap"])[3])
    left = hand_offset("left")
    joint = WEBXR25.index("index-finger-tip")
    at = left + 1 + joint * 8
    f32 = np.float32
    np.testing.assert_array_equal(
        state[k, at : at + 3], hand.fields["position"][k, joint].astype(f32)
    )
    np.testing.assert_array_equal(
        state[k, at + 3 : at + 7], hand.fields["rotation"][k, joint].astype(f32)
    )
    assert state[k, at + 7] == np.float32(hand.fields["radius"][k, joint])
    assert state[k, left] == 1.0 and state[k, 0] == 1.0
    np.testing.assert_array_equal(state[k, 1:4], head.fields["position"][k].astype(np.float32))
    pinch = trajectory.stream("pinch")
    assert action[k, 0] == np.float32(pinch.fields["left"][k])
    assert action[k, 1] == np.float32(pinch.fields["right"][k])


def test_gap_rows_clear_every_flag_and_both_actions(webxr):
    _, _, shard, _ = webxr
    rows = data_rows(shard)
    gap = rows["ceres.source_gap"]
    assert gap.sum() == 2
    flags = [0, hand_offset("left"), hand_offset("right")]
    assert (rows["observation.state"][gap] == 0).all()
    assert (rows["observation.state"][~gap][:, flags] == 1).all()
    assert (rows["action"][gap] == 0).all()


def test_untracked_hand_is_zero_with_its_flag_cleared(tmp_path):
    trajectory, _ = synth_capture(tmp_path, "webxr", "wx-lost", faults=["hand_never_seen"])
    rows = build_rows(trajectory)
    left = hand_offset("left")
    assert (rows.state[:, left : left + 201] == 0).all()
    assert (rows.action[:, 0] == 0).all()
    right = hand_offset("right")
    assert rows.state[~rows.source_gap, right].all()


def test_tasks_episode_row_and_stats(webxr):
    _, _, shard, _ = webxr
    tasks = pd.read_parquet(shard / "meta/tasks.parquet")
    assert tasks.index.name == "task"
    assert list(tasks.index) == ["assemble the bracket"]
    assert tasks["task_index"].dtype == np.int64 and list(tasks["task_index"]) == [0]
    meta = pq.read_schema(shard / "meta/tasks.parquet").pandas_metadata
    assert meta["index_columns"] == ["task"]
    episode = pq.read_table(shard / "meta/episodes/chunk-000/file-017.parquet").to_pylist()[0]
    assert episode["episode_index"] == INDEX and episode["length"] == 60
    assert episode["tasks"] == ["assemble the bracket"]
    assert (episode["dataset_from_index"], episode["dataset_to_index"]) == (0, 60)
    assert (episode["data/chunk_index"], episode["data/file_index"]) == (0, INDEX)
    assert episode[f"videos/{CAMERA_KEY}/file_index"] == INDEX
    assert episode[f"videos/{CAMERA_KEY}/from_timestamp"] == 0.0
    assert episode[f"videos/{CAMERA_KEY}/to_timestamp"] == 2.0
    assert episode["stats/frame_index/max"] == [59.0]
    assert np.asarray(episode[f"stats/{CAMERA_KEY}/mean"]).shape == (3, 1, 1)
    stats = json.loads((shard / "meta/stats.json").read_text())
    info = json.loads((shard / "meta/info.json").read_text())
    assert set(stats) == set(info["features"])
    for feature, entry in stats.items():
        assert set(entry) == set(STAT_NAMES), feature
    state = data_rows(shard)["observation.state"].astype(np.float64)
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(axis=0))
    np.testing.assert_allclose(stats["observation.state"]["q50"], np.quantile(state, 0.5, axis=0))
    assert stats["observation.state"]["count"] == [60]
    assert stats["index"]["min"] == [0] and stats["index"]["max"] == [59]
    camera = stats[CAMERA_KEY]
    assert np.asarray(camera["mean"]).shape == (3, 1, 1)
    for name in ("min", "max", "mean", "q01", "q99"):
        values = np.asarray(camera[name])
        assert ((values >= 0) & (values <= 1)).all()
    frames = _decode(shard / f"videos/{CAMERA_KEY}/chunk-000/file-017.mp4") / 255.0
    np.testing.assert_allclose(
        np.asarray(camera["mean"]).ravel(), frames.mean(axis=(0, 1, 2)), atol=0.01
    )


def test_aligned_video_is_copied_bit_exact(webxr):
    _, raw, shard, _ = webxr
    out = shard / f"videos/{CAMERA_KEY}/chunk-000/file-017.mp4"
    np.testing.assert_allclose(frame_times(out), np.arange(60) / 30, atol=1e-9)
    np.testing.assert_array_equal(_decode(out), _decode(raw / "camera/outward.mp4"))
    with av.open(str(out)) as inp:
        assert not inp.streams.audio


def test_receipt_lists_every_artefact_with_its_digest(webxr):
    _, _, shard, _ = webxr
    receipt = json.loads((shard / "ceres/browser-export-receipt.json").read_text())
    listed = {a["path"]: a for a in receipt["artefacts"]}
    files = {
        p.relative_to(shard).as_posix()
        for p in shard.rglob("*")
        if p.is_file() and p.name != "browser-export-receipt.json"
    }
    assert set(listed) == files
    for rel, entry in listed.items():
        data = (shard / rel).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["bytes"] == len(data)
    assert listed["meta/info.json"]["media_type"] == "application/json"
    assert listed["data/chunk-000/file-017.parquet"]["media_type"].endswith("parquet")
    assert listed[f"videos/{CAMERA_KEY}/chunk-000/file-017.mp4"]["media_type"] == "video/mp4"


def test_episode_metadata_items(webxr):
    trajectory, raw, shard, _ = webxr
    md = json.loads((shard / "ceres/episode-metadata.json").read_text())
    assert (md["schema"], md["version"]) == ("ceres-episode-export-metadata", 3)
    assert md["episode"]["id"] == trajectory.info.source_capture_id
    assert md["episode"]["index"] == INDEX
    assert md["camera"]["selected"] == "camera_outward"
    assert (md["camera"]["width"], md["camera"]["height"], md["camera"]["fps"]) == (320, 240, 30.0)
    chars = md["capture"]["characteristics"]
    assert chars["lighting"] == {"status": "unknown"}
    assert chars["eye_tracking"] == {"status": "unavailable"}
    assert chars["frame_rate_hz"] == {"status": "known", "value": 30}
    assert md["capture"]["recorder_rate_hz"] == {"status": "known", "value": 30.0}
    assert md["study"]["demonstrator_id"] == "demo-007"
    assert md["study"]["consent_document_id"] == "consent-v3"
    assert md["study"]["raw_audio_retained"] is False
    cal = md["calibration"]
    assert cal["model"] == "pinhole-radtan5" and cal["intrinsics"]["fx"] == 230.0
    assert cal["distortion"] == [-0.05, 0.01, 0.0005, -0.0003, 0.0]
    assert (cal["rms_error_px"], cal["sample_count"]) == (0.31, 42)
    assert cal["captured_at"] == "2026-10-30T09:12:00.000000Z"
    seg = md["segments"][0]
    assert {
        "cycle",
        "repetition",
        "take",
        "annotations",
        "outcome",
        "frame_count",
        "gap_count",
        "source_start_s",
        "source_end_s",
    } <= set(seg)
    assert sum(s["frame_count"] for s in md["segments"]) == 60
    assert sum(s["gap_count"] for s in md["segments"]) == 2
    spec = md["task_specification"]
    assert spec["version"] == "1.0.0"
    sidecar = (shard / spec["path"]).read_bytes()
    assert sidecar == (raw / "task-specification.json").read_bytes()
    assert hashlib.sha256(sidecar).hexdigest() == spec["sha256"]
    text = "".join(p.read_text(errors="ignore") for p in shard.rglob("*.json"))
    session = json.loads((raw / "session.json").read_text())
    assert session["user_agent"] not in text and session["camera_device_id"] not in text
    assert "Mozilla" not in text


def test_blank_demonstrator_gets_a_readable_designator():
    one = demonstrator_designator("hs-synthetic-01", "episode-a")
    assert one == demonstrator_designator("hs-synthetic-01", "episode-a")
    family, empty, animal, material = one.split(",")
    assert empty == "" and family.count("-") == 1 and animal and material
    # the family pair comes from the headset id's last two bytes only
    other = demonstrator_designator("another-headset-01", "episode-b")
    assert other.split(",")[0] == family
    assert demonstrator_designator("hs-02", "episode-a").split(",")[0] != family


def test_retried_segment_is_cut_from_rows_and_video(retried):
    trajectory, raw, shard, summary = retried
    retry = next(s for s in trajectory.annotations.segments if s.outcome == "retry")
    rows = data_rows(shard)
    slots = rows["ceres.source_frame_index"]
    assert summary.video == "re-encode"
    assert len(slots) == 60 - (retry.end_slot - retry.start_slot)
    assert not ((slots >= retry.start_slot) & (slots < retry.end_slot)).any()
    np.testing.assert_array_equal(rows["frame_index"], np.arange(len(slots)))
    video = shard / f"videos/{CAMERA_KEY}/chunk-000/file-005.mp4"
    np.testing.assert_allclose(frame_times(video), np.arange(len(slots)) / 30, atol=1e-9)
    source = _decode(raw / "camera/outward.mp4").astype(np.int16)
    out = _decode(video).astype(np.int16)
    assert len(out) == len(slots)
    k = retry.start_slot  # first row after the cut shows the first slot after the retry
    assert np.abs(out[k] - source[retry.end_slot]).mean() < 2.0
    assert (
        np.abs(out[k] - source[retry.start_slot]).mean()
        > np.abs(out[k] - source[retry.end_slot]).mean()
    )
    md = json.loads((shard / "ceres/episode-metadata.json").read_text())
    assert all(s["outcome"] != "retry" for s in md["segments"])
    takes = [(s["repetition"], s["take"]) for s in md["segments"] if s["cycle"] == 1]
    assert (2, 2) in takes and (2, 1) not in takes


def test_dropped_video_frames_are_held(tmp_path):
    trajectory, raw = synth_capture(tmp_path, "webxr", "wx-drop", faults=["dropped_video_frames"])
    rows = build_rows(trajectory)
    frames = trajectory.stream("camera_outward_frames")
    assert len(frames) < len(rows)
    assert rows.frame_for_row is not None and (np.diff(rows.frame_for_row) >= 0).all()
    shard = tmp_path / "shard"
    shard.mkdir()
    summary = write_shard(trajectory, raw, 0, shard, rows=rows)
    assert summary.video == "re-encode" and summary.frames == len(rows)


def _aria(tmp_path: Path):
    root = tmp_path / "aria-1"
    shutil.copytree(real_fixture("aria_mps_hand_tracking"), root)
    for extra in root.glob("*.txt"):
        extra.unlink()
    (root / "README.md").unlink()
    write_marker(root, "aria_mps")
    return read_capture("aria-1", root), root


@pytest.mark.parametrize("kind", ["holos-visionpro", "holos-iphone", "mano-video", "aria-mps"])
def test_every_source_kind_exports(tmp_path, kind):
    if kind == "aria-mps":
        trajectory, raw = _aria(tmp_path)
    else:
        trajectory, raw = synth_capture(tmp_path, kind, f"k-{kind}", seed=5)
    shard = tmp_path / "shard"
    shard.mkdir()
    summary = write_shard(trajectory, raw, 2, shard)
    rows = data_rows(shard)
    state = rows["observation.state"]
    right = hand_offset("right")
    tracked = state[:, right] == 1
    assert tracked.any()
    joints = state[:, right + 1 : right + 201].reshape(-1, 25, 8)
    wrist = joints[tracked, 0]
    assert (np.abs(wrist[:, :3]).sum(axis=1) > 0).all()
    assert (rows["action"][tracked, 1] > 0).all()  # pinch, recorded or computed
    assert (rows["action"][~tracked, 1] == 0).all()
    md = json.loads((shard / "ceres/episode-metadata.json").read_text())
    sources = md["state_sources"]
    if kind == "holos-visionpro":
        assert sources["right_hand"]["joint_set"] == "arkit27"
        assert summary.video == "remux" and md["camera"]["selected"] == "camera_left"
        quat = joints[tracked, :, 3:7]
        np.testing.assert_allclose(np.linalg.norm(quat, axis=-1), 1.0, atol=1e-5)
        assert (joints[:, :, 7] == 0).all()  # ARKit has no radius
    elif kind == "holos-iphone":
        assert sources["right_hand"]["joint_set"] == "vision21"
        metacarpal = WEBXR25.index("index-finger-metacarpal")
        assert (joints[:, metacarpal] == 0).all()  # Vision has no finger metacarpals
        assert (joints[:, :, 3:] == 0).all()  # nor orientations or radii
        assert state[:, 0].all()  # device pose
    elif kind == "mano-video":
        assert sources["right_hand"]["joint_set"] == "mano21"
        assert (state[:, 0] == 0).all()  # no head pose
        assert md["camera"]["selected"] == "video" and summary.video == "remux"
    else:
        assert summary.video == "none" and md["camera"]["selected"] is None
        assert sources["right_hand"]["frame"] == "device"
        info = json.loads((shard / "meta/info.json").read_text())
        assert CAMERA_KEY not in info["features"] and info["video_path"] is None
        assert not (shard / "videos").exists()


def _gray_video(path: Path, frames: int, x264_params: str) -> None:
    """H.264 with B-frames and a keyframe every 10 frames; frame i is gray level 2 * i."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.options = {"crf": "10", "x264-params": x264_params}
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 2 * i, np.uint8), "rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


@pytest.mark.parametrize("open_gop", [False, True])
def test_reencode_skips_unused_groups_of_pictures(tmp_path, open_gop):
    src = tmp_path / "source.mp4"
    params = "keyint=10:min-keyint=10:scenecut=0:bframes=3:b-pyramid=0"
    _gray_video(src, 100, params + (":open-gop=1" if open_gop else ""))
    source = lerobot_video.inspect_video(src)
    assert source.frames == 100 and len(source.keyframes) == 10
    assert (source.packet_frames != np.arange(100)).any()  # B-frames: decode order differs
    # rows: 0..24, a cut, 65 held three times, 66..79 (the last 20 frames unused)
    rows = np.concatenate([np.arange(25), [65, 65], np.arange(65, 80)])
    needed = lerobot_video.needed_packets(source, rows)
    assert needed is not None
    assert np.isin(rows, source.packet_frames[needed]).all()
    groups = source.packet_frames[needed & source.packet_keys].tolist()
    leading = source.packet_frames[np.flatnonzero(source.packet_keys)[-2] + 1] < 80
    assert leading == open_gop  # an open GOP shows 77..79 before its keyframe 80
    # closed GOPs: 30..59 and 80..99 not decoded; open: the group of 80 holds 77..79
    assert groups == ([0, 10, 20, 60, 70, 80] if open_gop else [0, 10, 20, 60, 70])
    skipping = lerobot_video.reencode(src, tmp_path / "skip.mp4", 30, rows, source)
    plain = lerobot_video.reencode(src, tmp_path / "plain.mp4", 30, rows)
    assert skipping.frames == plain.frames == len(rows)
    np.testing.assert_array_equal(skipping.pixels.histogram, plain.pixels.histogram)
    out = _decode(tmp_path / "skip.mp4")
    np.testing.assert_array_equal(out, _decode(tmp_path / "plain.mp4"))
    levels = out.reshape(len(out), -1).mean(axis=1)
    np.testing.assert_allclose(levels, 2 * rows, atol=1.5)
    np.testing.assert_allclose(frame_times(tmp_path / "skip.mp4"), np.arange(len(rows)) / 30)


def test_reencode_in_parts_matches_one_part(tmp_path):
    """Parts encoded at once and joined: every row's frame at k / fps, a keyframe at every
    even frame as in one part, pixels within codec tolerance of one part's, the same
    camera statistics, and no scratch file left."""
    src = tmp_path / "source.mp4"
    # 1,200 frames (gray level 2 * (i % 100)), a keyframe every 50 frames (B-frames)
    with av.open(str(src), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.options = {"crf": "10", "x264-params": "keyint=50:min-keyint=50:scenecut=0"}
        for i in range(1200):
            level = 2 * (i % 100)
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), level, np.uint8), "rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    source = lerobot_video.inspect_video(src)
    # rows: frames 0..329, a cut (retried take), 560..1199 with frame 700 held twice
    rows = np.concatenate([np.arange(330), np.arange(560, 701), [700], np.arange(701, 1200)])
    # near a third (323): the cut; near two thirds (647): the row of keyframe 900 (671),
    # made even
    assert lerobot_video.part_starts(rows, source, 3) == [0, 330, 672]
    whole = lerobot_video.reencode(src, tmp_path / "whole.mp4", 30, rows, source, parts=1)
    joined = lerobot_video.reencode(src, tmp_path / "joined.mp4", 30, rows, source, parts=3)
    assert whole.frames == joined.frames == len(rows) == 971
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joined.mp4", "source.mp4", "whole.mp4"]
    np.testing.assert_array_equal(joined.pixels.histogram, whole.pixels.histogram)
    assert joined.pixels.images == whole.pixels.images == camera_sample.STATS_SAMPLES
    np.testing.assert_allclose(frame_times(tmp_path / "joined.mp4"), np.arange(971) / 30)
    with av.open(str(tmp_path / "joined.mp4")) as inp:
        keys = [p.is_keyframe for p in inp.demux(video=0) if p.size]
    assert keys == [k % 2 == 0 for k in range(971)]
    out = _decode(tmp_path / "joined.mp4").astype(np.int16)
    levels = out.reshape(len(out), -1).mean(axis=1)
    np.testing.assert_allclose(levels, 2 * (rows % 100), atol=1.5)
    assert np.abs(out - _decode(tmp_path / "whole.mp4")).max() <= 2
    # a part that fails (rows past the source's end) fails the call and leaves no scratch
    with pytest.raises(ValueError, match="has 1200 frames"):
        lerobot_video.reencode(src, tmp_path / "bad.mp4", 30, np.arange(1300), source, parts=2)
    assert not list(tmp_path.glob(".*.nut"))


# 12 frames of 64x48 flat grey (level 20*i), SVT-AV1 with keyint=8, made once with PyAV.
# Stored rather than encoded in the test: SVT-AV1, run as root, switches its process to
# SCHED_FIFO 99, and a real-time pytest worker (with every browser it starts) starves the
# rest of the suite on a 2-core machine.
AV1_CLIP = Path(__file__).parent / "data" / "av1-64x48-12f.mp4"


def test_av1_source_is_remuxable_by_its_codec_name(tmp_path):
    """FFmpeg decodes AV1 with ``libdav1d``: the codec is still ``av1``, so an AV1 clip
    is copied packet for packet (it was re-encoded when the decoder's name was compared)."""
    src = tmp_path / "av1.mp4"
    shutil.copyfile(AV1_CLIP, src)
    with av.open(str(src)) as inp:
        assert inp.streams.video[0].codec_context.name == "libdav1d"  # the decoder
    info = lerobot_video.inspect_video(src)
    assert (info.codec, info.pix_fmt, info.frames, info.remuxable) == ("av1", "yuv420p", 12, True)
    result = lerobot_video.remux(src, tmp_path / "copy.mp4", 30, info)
    assert (result.frames, result.remuxed) == (12, True)

    def packets(path: Path) -> list[bytes]:
        with av.open(str(path)) as inp:
            return [bytes(p) for p in inp.demux(inp.streams.video[0]) if p.size]

    assert packets(tmp_path / "copy.mp4") == packets(src)
    files = CaptureFiles("k", tmp_path)
    assert probe_video(files, "av1.mp4").codec == "av1"


def test_remux_statistics_skip_only_frames_nothing_refers_to(tmp_path: Path) -> None:
    """A short video's camera statistics are those of its sampled frames decoded in full,
    although the unsampled frames no other frame refers to are not decoded."""
    src = tmp_path / "bframes.mp4"
    rng = np.random.default_rng(3)
    with av.open(str(src), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 96, 64, "yuv420p"
        stream.options = {"preset": "veryfast", "bf": "3", "b-pyramid": "none"}  # non-ref Bs
        base = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
        for k in range(90):
            image = np.roll(base, 2 * k, axis=1)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p")
            frame.pts = k
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    sampled = set(camera_sample.sample_indices(90, camera_sample.STATS_SAMPLES // 2).tolist())
    expected = np.zeros((3, 256), np.int64)
    with av.open(str(src)) as inp:  # every frame decoded, sampled by output order
        for k, frame in enumerate(inp.decode(video=0)):
            if k in sampled:  # a scaler of its own a frame (96x64: under 160, not scaled)
                rgb = frame.reformat(width=96, height=64, format="rgb24").to_ndarray()
                expected += np.stack(
                    [np.bincount(rgb[..., c].ravel(), minlength=256) for c in range(3)]
                )
    skipped = lerobot_video.inspect_video(src)
    assert skipped.frames == 90 and skipped.remuxable
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(camera_sample, "STATS_SAMPLES", camera_sample.STATS_SAMPLES // 2)
        result = lerobot_video.remux(src, tmp_path / "out.mp4", 30)
    assert result.remuxed and result.frames == 90
    assert result.pixels.images == len(sampled) == 50
    np.testing.assert_array_equal(result.pixels.histogram, expected)


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("kind, faults", [("webxr", []), ("webxr", ["retried_segment"])])
def test_a_shard_written_on_one_core_is_the_threaded_ones_bytes(
    tmp_path, monkeypatch, kind, faults
):
    """On one core the shard's tasks run in the calling thread (`task_pool`): the same
    files, byte for byte, for a remuxed and a re-encoded video."""
    trajectory, raw = synth_capture(tmp_path, kind, "one-core", seed=6, faults=faults)
    shards = {}
    for cores in (2, 1):
        monkeypatch.setattr(lerobot_video, "available_cores", lambda cores=cores: cores)
        shard = tmp_path / f"cores-{cores}" / shard_name(3)
        shard.mkdir(parents=True)
        summary = write_shard(trajectory, raw, 3, shard)
        shards[cores] = (_tree(shard), summary.video)
    assert shards[1][1] == shards[2][1] == ("re-encode" if faults else "remux")
    assert shards[1][0].keys() == shards[2][0].keys()
    assert shards[1][0] == shards[2][0]


def test_task_pool_runs_tasks_in_the_calling_thread_on_one_core(monkeypatch):
    import threading

    monkeypatch.setattr(lerobot_video, "available_cores", lambda: 1)
    ran: list[str] = []
    with lerobot_video.task_pool(3, "test") as pool:
        ok = pool.submit(lambda: ran.append(threading.current_thread().name) or 7)
        bad = pool.submit(lambda: 1 / 0)
        assert ran == [threading.current_thread().name]  # run at submit, in this thread
    assert ok.result() == 7
    with pytest.raises(ZeroDivisionError):
        bad.result()
    monkeypatch.setattr(lerobot_video, "available_cores", lambda: 2)
    with lerobot_video.task_pool(2, "test-pool") as pool:
        name = pool.submit(lambda: threading.current_thread().name).result()
    assert name.startswith("test-pool")
