"""Round trip per (source kind, format): capture -> export -> import -> trajectory.

Every source kind the platform reads (the four synthetic kinds and the shipped Project
Aria MPS sample) is exported to each of the three formats with the format's own writer,
imported back with ``ego_assets.importers`` and read with its capture reader; the
trajectory must equal the original within what the format keeps (the table in
docs/importers.md): exactly (Holos ``/holos/raw``), within float32 at the rows or frames
the format samples (LeRobot, EgoSmith), JPEG-close pixels, or lost (stated per test).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import av
import numpy as np
import pytest

from ego_assets.capture import read_capture
from ego_assets.capture.files import CaptureFiles
from ego_assets.capture.manifest import check_capture, write_marker
from ego_assets.fixtures import real_fixture
from ego_assets.formats.ceres_lerobot import write_shard
from ego_assets.formats.egosmith_lowdim import NoHeadCameraError, head_camera
from ego_assets.formats.egosmith_webdataset import EgoSmithOptions, write_episode
from ego_assets.formats.holos_hdf5 import write_holos_hdf5
from ego_assets.importers import get_importer
from ego_assets.importers.core import import_source, open_source
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets.synth.egodex import write_egodex_episode
from ego_assets.synth.mano_sequence import write_mano_sequence
from ego_assets.trajectory.joints import joint_map
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.streams import Stream

SOURCE_KINDS = (
    "holos-visionpro",
    "holos-iphone",
    "webxr",
    "mano-video",
    "aria-mps",
    "egodex",
    "mano-sequence",
)
IMPORTED_SOURCES = {"egodex", "mano-sequence"}  # public datasets, landed by their importers
SECONDS = 1.0
OPENCV_FROM = {"opencv": np.eye(4), "arkit": np.diag([1.0, -1.0, -1.0, 1.0])}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, tuple[Trajectory, Path]]:
    """Each source kind once: (trajectory, raw capture folder)."""
    root = tmp_path_factory.mktemp("sources")
    out = {}
    for kind in SOURCE_KINDS:
        key = f"src-{kind}"
        if kind == "aria-mps":
            folder = root / key
            shutil.copytree(real_fixture("aria_mps_hand_tracking"), folder)
            for extra in (*folder.glob("*.txt"), folder / "README.md"):
                extra.unlink()
            write_marker(folder, "aria_mps")
        elif kind in IMPORTED_SOURCES:
            src = root / f"{key}-source"
            if kind == "egodex":
                write_egodex_episode(src / "pour_water", 0, frames=30, seed=3)
            else:
                write_mano_sequence(
                    src / "Hand_Poses" / "(stir, spoon, bowl)" / "seq_01", frames=30
                )
            trajectory, folder = import_one(kind, src, root / f"{key}-data")
            out[kind] = (trajectory, folder)
            continue
        else:
            folder = synthesize(kind, root / key, seconds=SECONDS, seed=3, capture_id=key)
        out[kind] = (read_capture(key, folder), folder)
    return out


def import_all(kind: str, src: Path, data: Path) -> list[tuple[Trajectory, Path]]:
    """``ego-assets import KIND SRC --data DATA`` in-process: every episode landed (none
    may fail), each read back from the landing zone with its capture reader."""
    storage = Storage(data)
    importer = get_importer(kind)
    summary = import_source(storage, importer, open_source(str(src), importer))
    assert summary.failed == [] and summary.landed, summary
    folders = [Path(storage.landing_path(key).path) for key in summary.landed]
    return [(read_capture(f.name, f), f) for f in folders]


def import_one(kind: str, src: Path, data: Path) -> tuple[Trajectory, Path]:
    landed = import_all(kind, src, data)
    assert len(landed) == 1, landed
    return landed[0]


def nearest(stream: Stream, time: np.ndarray) -> np.ndarray:
    """Row of ``stream`` nearest each of ``time`` (seconds since the capture start)."""
    order = np.argsort(stream.time, kind="stable")
    t = stream.time[order]
    hi = np.clip(np.searchsorted(t, time), 0, len(t) - 1)
    lo = np.clip(hi - 1, 0, len(t) - 1)
    pick = np.where(np.abs(t[lo] - time) <= np.abs(t[hi] - time), lo, hi)
    return order[pick]


def decoded(path: Path, count: int) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [
            f.to_ndarray(format="rgb24")
            for _, f in zip(range(count), c.decode(video=0), strict=False)
        ]


# ----------------------------------------------------------------------------- Holos HDF5


@pytest.mark.parametrize("kind", SOURCE_KINDS)
def test_holos_hdf5_round_trip_keeps_every_raw_stream_exactly(sources, tmp_path, kind):
    original, raw = sources[kind]
    h5 = tmp_path / "src" / "export.h5"
    h5.parent.mkdir()
    write_holos_hdf5(original, raw, h5)
    imported, folder = import_one("holos-hdf5", h5.parent, tmp_path / "data")

    assert imported.info.source_kind == "holos-hdf5"
    keep = (
        "capture_id",
        "source_kind",
        "source_version",
        "source_capture_id",
        "task_specification",
    )
    for name in original.info.__slots__:
        if name not in keep:
            assert getattr(imported.info, name) == getattr(original.info, name), name
    # the recording's own id, else the platform key it was exported under
    assert imported.info.source_capture_id == (
        original.info.source_capture_id or original.info.capture_id
    )
    assert original.info.source_kind in imported.info.source_version
    spec, again_spec = original.info.task_specification, imported.info.task_specification
    if spec is not None:  # travels as /holos/metadata/task_specification, same bytes
        assert again_spec is not None and again_spec.sha256 == spec.sha256
        assert (folder / again_spec.path).read_bytes() == (raw / spec.path).read_bytes()
    for ref in original.files:  # every verbatim JSON file comes back under metadata/
        if ref.mime == "application/json" and ref.role not in ("transcript", "vlm"):
            back = next(f for f in imported.files if f.role == ref.role)
            assert (folder / back.path).read_bytes() == (raw / ref.path).read_bytes()
    assert sorted(s.name for s in imported.streams) == sorted(s.name for s in original.streams)
    for before in original.streams:
        after = imported.stream(before.name)
        assert after.kind == before.kind
        np.testing.assert_array_equal(after.timestamp_ns, before.timestamp_ns)
        np.testing.assert_array_equal(after.time, before.time)
        np.testing.assert_array_equal(after.flags, before.flags)
        arkit = before.attrs.get("joint_set") == "arkit27"
        assert {**after.attrs} == {
            **before.attrs,
            **({"missing_joints": "forearmArm"} if arkit else {}),
        }
        assert set(after.fields) == set(before.fields) | ({"joint_valid"} if arkit else set())
        for name, values in before.fields.items():
            got = after.fields[name]
            if arkit and values.ndim >= 2:  # the format leaves forearmArm (joint 26) out
                assert got.shape == values.shape
                np.testing.assert_array_equal(got[:, :26], values[:, :26])
                assert not got[:, 26].any() if got.dtype == bool else np.isnan(got[:, 26]).all()
            elif values.dtype == object:
                assert got.tolist() == values.tolist()
            else:
                np.testing.assert_array_equal(got, values)
    for media in original.media:
        again = imported.media_ref(media.role)
        assert (folder / again.path).read_bytes() == (raw / media.path).read_bytes()
        assert (again.kind, again.frames_stream, again.frame_count) == (
            media.kind,
            media.frames_stream,
            media.frame_count,
        )
    a, b = original.annotations, imported.annotations
    assert (b.transcript, b.transcript_tokens, b.procedure_steps) == (
        a.transcript,
        a.transcript_tokens,
        a.procedure_steps,
    )
    assert [(v.t_mono, v.t_wall, v.prompt, v.output) for v in b.vlm] == [
        (v.t_mono, v.t_wall, v.prompt, v.output) for v in a.vlm
    ]
    np.testing.assert_allclose([v.time for v in b.vlm], [v.time for v in a.vlm], atol=1e-9)


# ----------------------------------------------------------------------------- LeRobot v3


def _webxr_hand(trajectory: Trajectory, side: str) -> Stream | None:
    found = [
        s
        for s in trajectory.streams_of_kind("hand_joints")
        if s.attrs.get("hand") == side and s.attrs.get("frame") in ("world", "device")
    ]
    return max(found, key=lambda s: s.dims()["J"]) if found else None


@pytest.mark.parametrize("kind", SOURCE_KINDS)
def test_lerobot_round_trip_maps_the_ceres_state_back_within_float32(sources, tmp_path, kind):
    original, raw = sources[kind]
    shard = tmp_path / "shards" / "episode-000004"
    shard.mkdir(parents=True)
    summary = write_shard(original, raw, 4, shard)
    imported, folder = import_one("lerobot-v3", tmp_path / "shards", tmp_path / "data")

    slots = imported.stream("recorder_slots")
    assert len(slots) == summary.frames
    time = imported.stream("head").time
    # rows sit on the source clock: WebXR slots, a camera's frames or a grid of hand samples
    if kind == "webxr":
        src = original.stream("recorder_slots")
        np.testing.assert_array_equal(slots.fields["slot_index"], src.fields["slot_index"])
        np.testing.assert_array_equal(slots.fields["gap"], src.fields["gap"])
        np.testing.assert_allclose(time, src.time, atol=1e-9)
    for side in ("left", "right"):
        hand, source = imported.stream(f"hand_{side}"), _webxr_hand(original, side)
        assert hand.attrs["joint_set"] == "webxr25"
        if source is None or kind == "mano-video":  # MANO joints: see the lerobot MANO test
            continue
        rows = nearest(source, hand.time)
        expected, _ = joint_map(str(source.attrs["joint_set"]), "webxr25").apply(
            source.fields["position"][rows], axis=1
        )
        valid = hand.fields["joint_valid"]
        assert valid.sum() >= 20  # tracked joints to compare (Aria: few tracked rows)
        np.testing.assert_array_equal(
            hand.fields["position"][valid], expected[valid].astype(np.float32).astype(np.float64)
        )
        assert not (hand.fields["hand_valid"] & ~source.fields["hand_valid"][rows]).any()
    head = [s for s in original.streams if s.name in ("head", "device_pose")]
    if head:
        got = imported.stream("head")
        rows = nearest(head[0], got.time)
        ok = got.fields["valid"]
        assert ok.sum() > 0
        np.testing.assert_array_equal(
            got.fields["position"][ok],
            head[0].fields["position"][rows][ok].astype(np.float32).astype(np.float64),
        )
    else:
        assert not imported.stream("head").fields["valid"].any()
    if original.media and kind != "aria-mps":
        ref = imported.media[0]
        assert ref.frame_count == summary.frames
        shard_video = next(shard.glob("videos/*/*/*.mp4"))
        assert (folder / ref.path).read_bytes() == shard_video.read_bytes()


def test_lerobot_mano_source_keeps_joints_and_a_merged_dataset_cuts_each_episode(sources, tmp_path):
    """Two shards merged into one dataset: each episode lands with its own rows and its own
    frames, the video packets copied (byte-equal to the shard's), values within float32."""
    from ego_assets.formats.ceres_merge import merge_shards

    shards = []
    for i, kind in enumerate(("mano-video", "webxr")):
        trajectory, raw = sources[kind]
        folder = tmp_path / "shards" / f"episode-{i:06d}"
        folder.mkdir(parents=True)
        write_shard(trajectory, raw, i, folder)
        shards.append(folder)
    merged = tmp_path / "merged"
    merged.mkdir()
    merge_shards(shards, merged)
    landed = import_all("lerobot-v3", merged, tmp_path / "data")
    assert [t.info.source_capture_id for t, _ in landed] == [
        "src-mano-video",
        "src-webxr-ep0",
    ]
    for (imported, folder), shard in zip(landed, shards, strict=True):
        manifest = check_capture(CaptureFiles(folder.name, folder))  # raw_capture's intake check
        assert "videos/observation.images.passthrough/chunk-000/file-000.mp4" in {
            f.path for f in manifest.files
        }
        with (
            av.open(str(next(shard.glob("videos/*/*/*.mp4")))) as a,
            av.open(str(folder / imported.media[0].path)) as b,
        ):
            assert [bytes(p) for p in a.demux(video=0) if p.size] == [
                bytes(p) for p in b.demux(video=0) if p.size
            ]
    mano_imported = landed[0][0]
    original = sources["mano-video"][0]
    hand = mano_imported.stream("hand_right")
    source = original.stream("mano_right")
    rows = nearest(source, hand.time)
    expected, _ = joint_map("mano21", "webxr25").apply(source.fields["joints"][rows], axis=1)
    valid = hand.fields["joint_valid"]
    assert valid.any()
    np.testing.assert_array_equal(
        hand.fields["position"][valid], expected[valid].astype(np.float32).astype(np.float64)
    )


# ----------------------------------------------------------------------------- EgoSmith


@pytest.mark.parametrize("kind", SOURCE_KINDS)
def test_egosmith_round_trip_keeps_wrists_tips_camera_and_frames(sources, tmp_path, kind):
    original, raw = sources[kind]
    if kind == "aria-mps":  # no head-camera video: the format has nothing to hold
        with pytest.raises(NoHeadCameraError):
            head_camera(original)
        return
    camera = head_camera(original)
    out = tmp_path / "episode"
    out.mkdir()
    write_episode(
        original,
        camera,
        raw / camera.media.path,
        out,
        episode_index=7,
        data_version="t",
        options=EgoSmithOptions(),
    )
    imported, folder = import_one("egosmith-webdataset", out, tmp_path / "data")

    frames = imported.stream("video_frames")
    np.testing.assert_array_equal(frames.timestamp_ns, camera.frames.timestamp_ns)
    np.testing.assert_array_equal(frames.fields["frame_index"], camera.frames.fields["frame_index"])
    f32 = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731
    w2c = (
        OPENCV_FROM[str(camera.frames.attrs["camera_axes"])]
        @ camera.frames.fields["world_to_camera"]
    )
    ok = np.isfinite(frames.fields["world_to_camera"]).all(axis=(1, 2))
    assert ok.any()
    np.testing.assert_array_equal(frames.fields["world_to_camera"][ok], f32(w2c[ok]))
    np.testing.assert_array_equal(
        frames.fields["intrinsics"][ok], f32(camera.frames.fields["intrinsics"][ok])
    )
    assert imported.annotations.instructions == original.annotations.instructions
    for side in ("left", "right"):
        wrist = imported.stream(f"wrist_{side}")
        present = wrist.fields["hand_valid"]
        mano = [s for s in original.streams_of_kind("mano") if s.attrs["hand"] == side]
        source = mano[0] if mano else _webxr_hand(original, side)
        if source is None or not present.any():
            continue
        rows = nearest(source, wrist.time)
        if source.kind == "mano":
            joints = source.fields.get("joints")  # MANO joint 0, else transl (no MANO model)
            expected = joints[rows, 0] if joints is not None else source.fields["transl"][rows]
            params = imported.stream(f"mano_{side}").fields
            np.testing.assert_array_equal(
                params["betas"][present], f32(source.fields["betas"][rows][present])
            )
        else:
            expected, _ = joint_map(str(source.attrs["joint_set"]), "mediapipe21").apply(
                source.fields["position"][rows], axis=1
            )
            expected = expected[:, 0]
        np.testing.assert_array_equal(
            wrist.fields["wrist_position"][present], f32(expected[present])
        )
        quat = wrist.fields["wrist_rotation"][present]
        np.testing.assert_allclose(np.linalg.norm(quat, axis=1), 1.0, atol=1e-6)
    before = decoded(raw / camera.media.path, 3)
    after = decoded(folder / imported.media[0].path, 3)
    for a, b in zip(before, after, strict=True):
        assert a.shape == b.shape
        assert np.abs(a.astype(int) - b.astype(int)).mean() < 4.0  # JPEG quality 90


def test_holos_hdf5_round_trip_keeps_a_depth_map_file(tmp_path):
    raw = synthesize("mano-video", tmp_path / "d", seconds=SECONDS, seed=4, depth=True)
    original = read_capture("d", raw)
    h5 = tmp_path / "src" / "d.h5"
    h5.parent.mkdir()
    write_holos_hdf5(original, raw, h5)
    imported, folder = import_one("holos-hdf5", h5.parent, tmp_path / "data")
    depth, again = original.media_ref("depth"), imported.media_ref("depth")
    assert (again.kind, again.unit, again.path) == ("depth", "m", "media/depth.npz")
    assert (folder / again.path).read_bytes() == (raw / depth.path).read_bytes()
    assert again.frames_stream == depth.frames_stream == "depth_frames"
