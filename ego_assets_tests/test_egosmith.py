"""EgoSmith WebDataset export: every source kind, read back with the webdataset library.

One small synthetic capture per kind (2 s, 60 frames) and the real Aria MPS sample go
through ingest and normalize once per module; each test then checks what the export wrote
against the stored trajectory, computed here independently of the writer.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import threading
from pathlib import Path

import av
import numpy as np
import pytest
import simplejpeg
import webdataset as wds
from PIL import Image
from scipy.spatial.transform import Rotation

from ego_assets import pipeline
from ego_assets.capture.manifest import write_marker
from ego_assets.catalog.receipts import read_receipt
from ego_assets.cli import main
from ego_assets.defs.demo import aria_fixture_dir
from ego_assets.exports.egosmith import (
    EgoSmithExporter,
    dataset_path,
    episode_path,
    pack_dataset,
    stored_episode,
)
from ego_assets.exports.run import export_capture
from ego_assets.formats import egosmith_constants
from ego_assets.formats.egosmith_loader import split_shards, window_dataset
from ego_assets.formats.egosmith_reader import is_egosmith_path, iter_shard, validate_path
from ego_assets.formats.egosmith_tar import ShardWriter, ustar_header
from ego_assets.formats.egosmith_webdataset import (
    CHROMA_STRETCH,
    LUMA_STRETCH,
    EgoSmithOptions,
    encode_jpeg,
    full_range,
    full_range_420,
    meta_json,
    npy_bytes,
    ordered_map,
    parse_key,
)
from ego_assets.storage import Storage, raw_capture_dir
from ego_assets.synth import synthesize
from ego_assets.synth.video import WRIST_RGB
from ego_assets.trajectory.joints import FINGERTIPS
from ego_assets.trajectory.store import read_trajectory

# capture key -> (kind, faults); episode numbers are assigned in this order.
CAPTURES = {
    "xr": ("webxr", ()),
    "mano": ("mano-video", ()),
    "vp": ("holos-visionpro", ()),
    "phone": ("holos-iphone", ()),
    "xr-dropout": ("webxr", ("dropout", "dropped_video_frames")),
}
EPISODES = {key: 10 + i for i, key in enumerate([*CAPTURES, "aria"])}
OPTIONS = EgoSmithOptions(shard_bytes=400_000, export_depth=True, val_fraction=0.3)
TOL = dict(rtol=1e-6, atol=2e-6)  # float32 rounding of metre-scale values


def export_episode(storage, key, episode_index, options, gate_version=None):
    """One episode through `export_capture` (no gate check; a receipt with a gate version)."""
    exporter = EgoSmithExporter(options)
    return export_capture(
        storage, key, exporter, episode_index=episode_index, gate_version=gate_version
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Storage:
    root = tmp_path_factory.mktemp("egosmith")
    storage = Storage(root)
    for seed, (key, (kind, faults)) in enumerate(CAPTURES.items()):
        synthesize(
            kind,
            storage.landing / key,
            seconds=2,
            seed=seed,
            faults=faults,
            capture_id=key,
            depth=kind == "mano-video",
        )
    shutil.copytree(aria_fixture_dir(), root / "landing" / "aria")
    write_marker(root / "landing" / "aria", "aria_mps")
    for key in EPISODES:
        pipeline.ingest_raw(storage, key)
        pipeline.normalize(storage, key)
        export_episode(storage, key, EPISODES[key], OPTIONS)
    return storage


def _folder(store: Storage, key: str) -> Path:
    return Path(episode_path(store, key).path)


def _shards(store: Storage, key: str) -> list[str]:
    return [str(p) for p in sorted(_folder(store, key).glob("shard-*.tar"))]


def _trajectory(store: Storage, key: str):
    return read_trajectory(Path(store.stage_path("trajectory", key).path))


def _wds_samples(urls: list[str]) -> list[dict]:
    return list(wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode())


def _nearest(source_time: np.ndarray, target_time: np.ndarray) -> np.ndarray:
    return np.abs(source_time[None, :] - target_time[:, None]).argmin(axis=1)


@pytest.mark.parametrize("key", list(CAPTURES))
def test_webdataset_reads_every_sample_of_every_shard(store, key):
    frames = next(s for s in _trajectory(store, key).streams if s.name.endswith("frames"))
    summary = stored_episode(store, key)
    assert summary is not None and summary.status == "written"
    samples = _wds_samples(_shards(store, key))
    assert len(samples) == summary.samples == len(frames)
    assert len(summary.shards) >= 2  # 60 frames do not fit one 400 kB shard
    for sample in samples:
        assert {"image.jpg", "lowdim.npy", "mano.npy", "meta.json"} <= set(sample)
        dataset, _, frame = parse_key(sample["__key__"])
        meta = sample["meta.json"]
        assert set(egosmith_constants.META_FIELDS) <= set(meta)
        assert (meta["dataset_name"], meta["episode_index"], meta["frame_index"]) == (
            dataset,
            EPISODES[key],
            frame,
        )
        assert sample["lowdim.npy"].dtype == np.float32 and sample["lowdim.npy"].shape == (116,)
        assert meta["lowdim_schema"] == "hawor_wrist_world_v2"
        assert meta["wrist_translation_semantics"] == "mano_joint_0_world"
        assert meta["camera_extrinsic_convention"] == "w2c"
        assert meta["instruction_num"] == len(meta["instruction"]) > 0
        assert meta["language"] == meta["instruction"][-1]
    frame_numbers = [parse_key(s["__key__"])[2] for s in samples]
    np.testing.assert_array_equal(frame_numbers, frames.fields["frame_index"])
    assert validate_path(_folder(store, key)).ok


def test_tar_members_are_plain_files_with_safe_names(store):
    for key in CAPTURES:
        for shard in _shards(store, key):
            with tarfile.open(shard) as tar:
                for info in tar.getmembers():
                    assert info.isfile() and not info.issym() and not info.islnk()
                    assert "/" not in info.name and not info.name.startswith(".")
                    assert ".." not in info.name and info.mode == 0o444
                    stem, _, ext = info.name.partition(".")
                    parse_key(stem)
                    assert ext in egosmith_constants.EXTENSIONS


def test_mano_source_lowdim_and_mano_equal_the_trajectory(store):
    traj = _trajectory(store, "mano")
    frames = traj.stream("video_frames")
    samples = _wds_samples(_shards(store, "mano"))
    lowdim = np.stack([s["lowdim.npy"] for s in samples])
    presence = np.array([s["meta.json"]["presence"] for s in samples])
    for h, side in enumerate(egosmith_constants.HANDS):
        mano = traj.stream(f"mano_{side}")
        rows = _nearest(mano.time, frames.time)
        present = mano.fields["valid_detected"][rows]
        assert present.any()
        bit = (
            egosmith_constants.PRESENCE_LEFT
            if side == "left"
            else egosmith_constants.PRESENCE_RIGHT
        )
        np.testing.assert_array_equal((presence & bit) > 0, present)
        trans = egosmith_constants.LEFT_TRANS if side == "left" else egosmith_constants.RIGHT_TRANS
        rot = egosmith_constants.LEFT_ROT6D if side == "left" else egosmith_constants.RIGHT_ROT6D
        tips = egosmith_constants.LEFT_TIPS if side == "left" else egosmith_constants.RIGHT_TIPS
        joints = mano.fields["joints"][rows]
        matrix = Rotation.from_rotvec(mano.fields["global_orient"][rows]).as_matrix()
        want_rot6d = np.concatenate([matrix[:, :, 0], matrix[:, :, 1]], axis=1)
        want_tips = joints[:, list(FINGERTIPS["mano21"])].reshape(-1, 15)
        ws = lowdim[:, egosmith_constants.WRIST_STATE]
        np.testing.assert_allclose(ws[present, trans], joints[present, 0], **TOL)
        np.testing.assert_allclose(ws[present, rot], want_rot6d[present], **TOL)
        np.testing.assert_allclose(
            lowdim[present, egosmith_constants.HAND_STATE][:, tips], want_tips[present], **TOL
        )
        mano_rows = np.stack([s["mano.npy"] for s in samples])[:, h]
        want = np.concatenate(
            [
                mano.fields["transl"][rows],
                mano.fields["global_orient"][rows],
                mano.fields["hand_pose"][rows],
                mano.fields["betas"][rows],
            ],
            axis=1,
        )
        np.testing.assert_allclose(mano_rows, want, **TOL)
    np.testing.assert_allclose(
        lowdim[:, egosmith_constants.EXTRINSIC],
        frames.fields["world_to_camera"].reshape(-1, 16),
        **TOL,
    )
    np.testing.assert_allclose(
        lowdim[:, egosmith_constants.INTRINSIC], frames.fields["intrinsics"], **TOL
    )
    assert samples[0]["meta.json"]["mano_source"] == "mano"


@pytest.mark.parametrize(
    ("key", "stream", "joint_set"),
    [
        ("xr", "hand_{side}", "webxr25"),
        ("vp", "hand_{side}_world", "arkit27"),
        ("phone", "hand_{side}_landmarks_3d", "vision21"),
    ],
)
def test_skeleton_wrist_and_fingertips_equal_the_trajectory(store, key, stream, joint_set):
    traj = _trajectory(store, key)
    frames = next(s for s in traj.streams if s.kind == "media_frames")
    samples = _wds_samples(_shards(store, key))
    lowdim = np.stack([s["lowdim.npy"] for s in samples])
    presence = np.array([s["meta.json"]["presence"] for s in samples])
    for side in egosmith_constants.HANDS:
        hand = traj.stream(stream.format(side=side))
        rows = _nearest(hand.time, frames.time)
        bit = (
            egosmith_constants.PRESENCE_LEFT
            if side == "left"
            else egosmith_constants.PRESENCE_RIGHT
        )
        present = (presence & bit) > 0
        assert present.mean() > 0.8
        assert hand.fields["hand_valid"][rows][present].all()
        pos = hand.fields["position"][rows]
        trans = egosmith_constants.LEFT_TRANS if side == "left" else egosmith_constants.RIGHT_TRANS
        tips = egosmith_constants.LEFT_TIPS if side == "left" else egosmith_constants.RIGHT_TIPS
        np.testing.assert_allclose(
            lowdim[present, egosmith_constants.WRIST_STATE][:, trans], pos[present, 0], **TOL
        )
        want_tips = pos[:, list(FINGERTIPS[joint_set])].reshape(-1, 15)
        np.testing.assert_allclose(
            lowdim[present, egosmith_constants.HAND_STATE][:, tips], want_tips[present], **TOL
        )
        rot = lowdim[present, egosmith_constants.WRIST_STATE][
            :, egosmith_constants.LEFT_ROT6D if side == "left" else egosmith_constants.RIGHT_ROT6D
        ]
        x, y = rot[:, :3], rot[:, 3:]
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(np.sum(x * y, axis=1), 0.0, atol=1e-5)
        if "rotation" in hand.fields:  # the knuckle frame agrees with the recorded wrist axes
            recorded = Rotation.from_quat(hand.fields["rotation"][rows][present, 0]).as_matrix()
            derived = np.stack([x, y, np.cross(x, y)], axis=-1)
            angle = Rotation.from_matrix(np.einsum("nji,njk->nik", recorded, derived)).magnitude()
            assert np.degrees(angle).max() < 25


def test_absent_hands_are_zero_and_actions_are_next_states(store):
    samples = _wds_samples(_shards(store, "xr-dropout"))
    lowdim = np.stack([s["lowdim.npy"] for s in samples])
    presence = np.array([s["meta.json"]["presence"] for s in samples])
    assert (presence != 3).any() and (presence == 3).any()
    left_absent = (presence & egosmith_constants.PRESENCE_LEFT) == 0
    assert not lowdim[left_absent, egosmith_constants.WRIST_STATE][
        :, egosmith_constants.LEFT_TRANS
    ].any()
    np.testing.assert_array_equal(
        lowdim[:-1, egosmith_constants.ACTION], lowdim[1:, egosmith_constants.STATE]
    )
    np.testing.assert_array_equal(
        lowdim[-1, egosmith_constants.ACTION], lowdim[-1, egosmith_constants.STATE]
    )
    assert [s["meta.json"]["last_frame"] for s in samples].count(True) == 1
    frames = [parse_key(s["__key__"])[2] for s in samples]
    assert np.diff(frames).max() > 1  # dropped frames keep their own numbers


def _decoded_video(store: Storage, key: str, rel: str) -> np.ndarray:
    path = raw_capture_dir(Path(store.stage_path("raw", key).path)) / rel
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


@pytest.mark.parametrize(("key", "video"), [("mano", "video.mp4"), ("vp", "media/camera_left.mov")])
def test_images_show_the_frame_they_claim(store, key, video):
    decoded = _decoded_video(store, key, video).astype(np.int16)
    samples = _wds_samples(_shards(store, key))
    for i, sample in enumerate(samples[::7]):
        image = simplejpeg.decode_jpeg(sample["image.jpg"])
        errors = np.abs(decoded - image.astype(np.int16)).mean(axis=(1, 2, 3))
        assert errors.argmin() == i * 7 and errors.min() < 3.0
        # the wrist drawn in the video sits where lowdim's camera puts the exported wrist
        lowdim, presence = sample["lowdim.npy"], sample["meta.json"]["presence"]
        w2c = lowdim[egosmith_constants.EXTRINSIC].reshape(4, 4).astype(np.float64)
        fx, fy, cx, cy = lowdim[egosmith_constants.INTRINSIC]
        for bit, side, trans in (
            (egosmith_constants.PRESENCE_LEFT, "left", egosmith_constants.LEFT_TRANS),
            (egosmith_constants.PRESENCE_RIGHT, "right", egosmith_constants.RIGHT_TRANS),
        ):
            if not presence & bit:
                continue
            cam = w2c[:3, :3] @ lowdim[egosmith_constants.WRIST_STATE][trans] + w2c[:3, 3]
            u, v = round(fx * cam[0] / cam[2] + cx), round(fy * cam[1] / cam[2] + cy)
            if 2 <= u < image.shape[1] - 2 and 2 <= v < image.shape[0] - 2 and cam[2] > 0:
                colour = image[v - 1 : v + 2, u - 1 : u + 2].reshape(-1, 3).mean(axis=0)
                assert np.abs(colour - WRIST_RGB[side]).max() < 40, (i, side, colour)


def test_depth_is_written_in_metres_with_its_schema(store):
    samples = list(iter_shard(Path(_shards(store, "mano")[0])))
    with np.load(raw_capture_dir(Path(store.stage_path("raw", "mano").path)) / "depth.npz") as npz:
        depth = npz["depth"]
    for i, sample in enumerate(samples):
        assert sample.meta["depth_schema"] == egosmith_constants.DEPTH_SCHEMA
        assert sample.meta["depth_encoding"] == egosmith_constants.DEPTH_ENCODING
        np.testing.assert_array_equal(sample.depth, depth[i].astype(np.float32))
    xr = next(iter_shard(Path(_shards(store, "xr")[0])))
    assert xr.depth is None and "depth_schema" not in xr.meta


def test_capture_without_head_camera_is_recorded_as_skipped(store):
    summary = stored_episode(store, "aria")
    assert summary is not None and summary.status == "skipped"
    assert "no head-camera video" in summary.reason
    assert _shards(store, "aria") == []


def test_a_skipped_episode_gets_a_skipped_receipt_with_its_reason(store):
    assert read_receipt(store, "egosmith_shards", "aria") is None  # exported without a gate
    result = export_episode(store, "aria", EPISODES["aria"], OPTIONS, gate_version="gate-1")
    assert result.reused  # the skip record stands; only its receipt is new
    receipt = read_receipt(store, "egosmith_shards", "aria")
    assert receipt is not None
    assert (receipt.status, receipt.input_data_version) == ("skipped", "gate-1")
    assert receipt.reason == stored_episode(store, "aria").reason
    assert "no head-camera video" in receipt.reason
    assert receipt.path == "exports/egosmith/aria" and receipt.files == 1  # episode.json


def test_rerun_reuses_a_finished_episode(store):
    before = (_folder(store, "xr") / "episode.json").stat().st_mtime_ns
    result = export_episode(store, "xr", EPISODES["xr"], OPTIONS)
    assert result.reused
    assert (_folder(store, "xr") / "episode.json").stat().st_mtime_ns == before


def test_validator_finds_a_changed_shard(store, tmp_path):
    copy = tmp_path / "xr"
    shutil.copytree(_folder(store, "xr"), copy)
    shard = sorted(copy.glob("shard-*.tar"))[0]
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF  # inside the first member's bytes
    shard.write_bytes(bytes(data))
    report = validate_path(copy)
    assert not report.ok
    assert any("SHA-256" in e for e in report.errors)


def test_packed_dataset_splits_by_episode_and_lists_every_shard(store):
    result = pack_dataset(store, OPTIONS)
    manifest = result.manifest
    folder = Path(dataset_path(store).path)
    assert json.loads((folder / "manifest.json").read_text()) == manifest
    written = [k for k in CAPTURES]
    assert {e["capture_id"] for e in manifest["episodes"]} == set(written)
    assert manifest["skipped"] == [
        {"capture_id": "aria", "reason": stored_episode(store, "aria").reason}
    ]
    assert manifest["splits"]["val"]["episodes"] >= 1
    assert manifest["samples"] == sum(stored_episode(store, k).samples for k in written)
    by_split: dict[str, set[int]] = {"train": set(), "val": set()}
    for split in ("train", "val"):
        for sample in _wds_samples(split_shards(folder, split)):
            assert sample["meta.json"]["split"] == split
            by_split[split].add(sample["meta.json"]["episode_index"])
    assert by_split["train"] and by_split["val"] and not by_split["train"] & by_split["val"]
    report = validate_path(folder)
    assert report.ok, report.errors
    assert report.samples == manifest["samples"]
    again = pack_dataset(store, OPTIONS)
    assert again.reused


def test_loader_windows_never_cross_episodes(store):
    urls = [s for k in ("xr", "mano") for s in _shards(store, k)]
    windows = list(window_dataset(urls, state_horizon=2, action_horizon=4, images=True))
    states = {
        parse_key(s["__key__"])[1:]: s["lowdim.npy"][egosmith_constants.STATE]
        for s in _wds_samples(urls)
    }
    # per episode: N frames give N - (2 + 4 - 1) + 1 windows
    assert len(windows) == 2 * (60 - 5 + 1)
    for w in windows:
        assert w["state"].shape == (2, 48) and w["action"].shape == (4, 48)
        assert w["image"].shape == (2, 240, 320, 3)
        assert (np.diff(w["frame_index"]) == 1).all()
        _, episode, frame = parse_key(w["__key__"])
        assert episode == w["episode_index"] and frame == w["frame_index"][1]
        np.testing.assert_array_equal(w["state"][1], states[(episode, frame)])
        last = max(f for e, f in states if e == episode)
        for j in range(4):  # action j = state of frame t + 1 + j (the last frame holds)
            want = states[(episode, min(frame + 1 + j, last))]
            np.testing.assert_array_equal(w["action"][j], want)


def test_cli_inspect_and_validate_report_counts_and_problems(store, tmp_path, capsys):
    folder = _folder(store, "mano")
    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"episode {EPISODES['mano']:06d}: 60 samples" in out and "valid" in out
    assert main(["validate", _shards(store, "mano")[0]]) == 0
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    with tarfile.open(broken / "extra.tar", "w") as tar:  # a shard with a path and a link
        info = tarfile.TarInfo("../escape.image.jpg")
        info.size = 0
        tar.addfile(info)
        link = tarfile.TarInfo("link.meta.json")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    assert main(["validate", str(broken / "extra.tar")]) == 1
    out = capsys.readouterr().out
    assert "unsafe name" in out and "not a regular file" in out


def test_export_and_packing_on_s3(s3_server, s3_bucket, tmp_path):
    storage = Storage(s3_bucket, storage_options=s3_server.storage_options)
    local = tmp_path / "xr"
    synthesize("webxr", local, seconds=1, seed=9, capture_id="xr")
    s3_server.upload_dir(local, f"{s3_bucket}/landing/xr")
    pipeline.ingest_raw(storage, "xr")
    pipeline.normalize(storage, "xr")
    written = export_episode(storage, "xr", 4, OPTIONS, gate_version="gate-v1")
    assert written.figures["samples"] == 30 and not written.reused
    assert export_episode(storage, "xr", 4, OPTIONS, gate_version="gate-v1").reused
    keys = s3_server.keys(f"{s3_bucket}/exports/egosmith/xr")
    assert "episode.json" in keys and any(k.startswith("shard-") for k in keys)
    pack_dataset(storage, EgoSmithOptions(val_fraction=0.0))
    with storage.read_dir(dataset_path(storage)) as folder:
        report = validate_path(folder)
        assert report.ok and report.samples == 30, report.errors
    receipt = s3_server.keys(f"{s3_bucket}/receipts/egosmith_shards")
    assert receipt == ["xr.json"]


def test_only_egosmith_folders_are_taken_for_egosmith(store):
    assert is_egosmith_path(_folder(store, "xr"))
    assert is_egosmith_path(Path(_shards(store, "xr")[0]))
    assert not is_egosmith_path(Path(store.stage_path("raw", "xr").path))  # its manifest.json
    assert not is_egosmith_path(Path(store.stage_path("trajectory", "xr").path))


def test_limited_range_stretch_is_within_one_level_of_bt601():
    levels = np.arange(256, dtype=np.uint8).reshape(16, 16)
    exact_luma = np.clip(np.round((levels - 16.0) * 255 / 219), 0, 255)
    exact_chroma = np.clip(np.round((levels - 128.0) * 255 / 224 + 128), 0, 255)
    luma = full_range(levels[:, ::2])  # a strided view, like a padded decoder plane
    assert luma.flags.c_contiguous and luma.dtype == np.uint8
    assert np.abs(luma - exact_luma[:, ::2]).max() <= 1
    assert np.abs(full_range(levels, CHROMA_STRETCH) - exact_chroma).max() <= 1
    ends = np.array([[0, 16, 128, 235, 240, 255]], dtype=np.uint8)  # black, grey, white
    assert full_range(ends).tolist() == [[0, 0, 130, 255, 255, 255]]
    assert full_range(ends, CHROMA_STRETCH)[0, [0, 1, 2, 4, 5]].tolist() == [0, 0, 128, 255, 255]


@pytest.mark.parametrize("stretch", [LUMA_STRETCH, CHROMA_STRETCH])
def test_the_stretch_is_its_fixed_point_formula_at_every_level(stretch):
    lo, hi, mul, add = stretch
    levels = np.arange(256, dtype=np.uint8).reshape(16, 16)
    formula = ((np.clip(levels.astype(np.int64), lo, hi) - lo) * mul + add) >> 8
    out, work = np.full((16, 16), 7, np.uint8), np.full((16, 16), 7, np.uint16)
    assert full_range(levels, stretch, out, work) is out
    assert out.tolist() == formula.tolist() == full_range(levels, stretch).tolist()


def test_a_frames_three_planes_stretched_at_once_are_each_planes_stretch():
    rng = np.random.default_rng(5)
    h, w = 6, 8
    # padded decoder rows: strided views of wider buffers, every level present
    y = rng.integers(0, 256, (h, w + 4), dtype=np.uint8)[:, :w]
    y[0, :] = [0, 15, 16, 17, 128, 234, 235, 255]
    u = rng.integers(0, 256, (h // 2, w // 2 + 2), dtype=np.uint8)[:, : w // 2]
    v = rng.integers(0, 256, (h // 2, w // 2 + 2), dtype=np.uint8)[:, : w // 2]
    u[0, :] = [0, 16, 239, 240]
    v[0, :] = [241, 255, 128, 1]
    out = np.full(h * w * 3 // 2, 7, np.uint8)
    work = np.full(h * w * 3 // 2, 7, np.uint16)
    luma, chroma = h * w, h * w // 4
    views = (
        out[:luma].reshape(h, w),
        out[luma : luma + chroma].reshape(h // 2, w // 2),
        out[luma + chroma :].reshape(h // 2, w // 2),
    )
    full_range_420((y, u, v), views, out, work)
    want = np.concatenate(
        [
            full_range(y).ravel(),
            full_range(u, CHROMA_STRETCH).ravel(),
            full_range(v, CHROMA_STRETCH).ravel(),
        ]
    )
    assert out.tolist() == want.tolist()


@pytest.mark.parametrize("workers", [1, 2])
def test_ordered_map_keeps_the_order_and_runs_inline_on_one_worker(workers):
    def work(i):
        return i * i, threading.get_ident()

    out = list(ordered_map(work, ((i,) for i in range(50)), workers=workers))
    assert [v for v, _ in out] == [i * i for i in range(50)]
    inline = {t for _, t in out} == {threading.get_ident()}
    assert inline == (workers == 1)


def test_meta_text_is_json_dumps_of_the_frame_meta():
    base = {
        "instruction": ["Pick up the brück€t.", 'say "hi"\n'],
        "wrist_rotation_source": {"right": "skeleton", "left": None},
        "presence": "overridden by the frame's",
        "ratio": 0.1,
        "zz_last": [],
        "aa_first": {},
    }
    frames = [
        {"presence": 3, "frame_index": 0, "last_frame": False, "extrinsic_valid": True},
        {"presence": 0, "frame_index": 2**62, "last_frame": True, "extrinsic_valid": False},
    ]
    text = meta_json(base, dict.fromkeys(frames[0], 0))
    for frame in frames:
        assert text(**frame) == json.dumps({**base, **frame}, sort_keys=True)


def _tarfile_header(name, size):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o444, 0
    return info.tobuf(tarfile.USTAR_FORMAT)


@pytest.mark.parametrize("length", [0, 1, 37, 99, 100, 101])
@pytest.mark.parametrize("size", [0, 1, 511, 512, 513, 10**9, 8**11 - 1, 8**11])
def test_member_headers_are_tarfiles(length, size):
    """`ustar_header` fills a template; tarfile's own header for every name and size
    (too long a name or too large a size: tarfile's refusal)."""
    for name in (("ds_ep000001_f000002.image.jpg" * 4)[:length], "é" * length):
        try:
            expected = _tarfile_header(name, size)
        except ValueError:
            with pytest.raises(ValueError):
                ustar_header(name, size)
            continue
        assert ustar_header(name, size) == expected


@pytest.mark.parametrize("pix_fmt", ["yuv420p", "yuvj420p"])
@pytest.mark.parametrize(("width", "height"), [(320, 240), (330, 242)])  # 330: padded rows
def test_jpeg_of_a_decoded_frame_is_its_rgb_picture(pix_fmt, width, height):
    rows, cols = np.mgrid[0:height, 0:width]
    rgb = np.stack([cols * 255 // width, rows * 255 // height, (rows + cols) % 256], axis=-1)
    rgb = rgb.astype(np.uint8)
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=pix_fmt)
    expected = frame.to_ndarray(format="rgb24").astype(np.int16)  # FFmpeg's own conversion
    jpeg = encode_jpeg(frame, 95)
    with Image.open(io.BytesIO(jpeg)) as image:  # PIL, as webdataset decodes it
        assert image.format == "JPEG" and image.size == (width, height)
        pil = np.asarray(image.convert("RGB")).astype(np.int16)
    assert np.abs(pil - expected).mean() < 2.0
    assert np.abs(pil - rgb).mean() < 3.0


def test_shard_bytes_are_what_tarfile_writes(tmp_path):
    members = [
        ("image.jpg", bytes(range(256)) * 3),
        ("lowdim.npy", npy_bytes(np.arange(116, dtype=np.float32))),
        ("meta.json", b'{"presence": 3}'),
    ]
    keys = [f"ds_ep000001_f{i:06d}" for i in range(7)]
    writer = ShardWriter(tmp_path / "out", shard_bytes=9000)  # 4096 bytes a sample
    (tmp_path / "out").mkdir()
    for key in keys:
        writer.write(key, members)
    shards = writer.close()
    assert [s.samples for s in shards] == [2, 2, 2, 1]
    written = iter(keys)
    for shard in shards:
        reference = tmp_path / f"ref-{shard.name}"
        with tarfile.open(reference, "w", format=tarfile.USTAR_FORMAT) as tar:
            for key in [next(written) for _ in range(shard.samples)]:
                for ext, data in members:
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size, info.mode, info.mtime = len(data), 0o444, 0
                    tar.addfile(info, io.BytesIO(data))
        data = (tmp_path / "out" / shard.name).read_bytes()
        assert data == reference.read_bytes()
        assert shard.bytes == len(data) and shard.sha256 == hashlib.sha256(data).hexdigest()


def test_webdatasets_pil_decoder_reads_the_images(store):
    urls = _shards(store, "vp")
    raw = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
    pil = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("rgb8")
    count = 0
    for plain, decoded in zip(raw, pil, strict=True):
        reference = simplejpeg.decode_jpeg(plain["image.jpg"]).astype(np.int16)
        assert decoded["image.jpg"].dtype == np.uint8
        assert np.abs(decoded["image.jpg"] - reference).mean() < 1.0
        count += 1
    assert count == stored_episode(store, "vp").samples
