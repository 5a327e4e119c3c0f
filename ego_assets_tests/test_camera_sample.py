"""The sample behind CERES's camera statistics, counted by EgoSmith's decode and taken by the
remux (`ego_assets.formats.camera_sample`): the same numbers as the remux's own decode,
taken only for the same file and frames, at most `MAX_SHARED` videos kept."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from ego_assets.capture import read_capture, read_checked_capture
from ego_assets.formats import camera_sample, lerobot_video
from ego_assets.formats.camera_sample import SampledFrames
from ego_assets.formats.ceres_episode import select_camera
from ego_assets.formats.egosmith_lowdim import head_camera
from ego_assets.formats.egosmith_webdataset import EgoSmithOptions, write_episode
from ego_assets.importers import get_importer
from ego_assets.importers.core import import_source, open_source
from ego_assets.storage import Storage
from ego_assets.synth import KINDS, synthesize
from ego_assets.synth.egodex import write_egodex_episode

SECONDS = 4.0  # 120 frames: 100 of them sampled, 20 not


@pytest.fixture(autouse=True)
def _no_shared_sample():
    camera_sample.clear_shared()
    yield
    camera_sample.clear_shared()


def _capture(tmp_path: Path, kind: str, seed: int = 3):
    """(capture folder, trajectory) of a synthetic capture of ``kind`` (``egodex``: an
    EgoDex episode at 640x360, imported as the bench's is)."""
    if kind != "egodex":
        folder = synthesize(kind, tmp_path / kind, seconds=SECONDS, seed=seed, capture_id=kind)
        return folder, read_capture(kind, folder)
    frames = round(SECONDS * 30)
    write_egodex_episode(tmp_path / "src/train/task", 0, frames=frames, seed=seed, size=(640, 360))
    importer = get_importer("egodex")
    storage = Storage(tmp_path / "data")
    (key,) = import_source(storage, importer, open_source(str(tmp_path / "src"), importer)).landed
    folder = tmp_path / "data" / "landing" / key
    return folder, read_checked_capture(key, folder)[0]


def _egosmith(trajectory, video: Path, out: Path) -> None:
    """EgoSmith's export of ``trajectory`` from ``video`` (its decode counts the sample)."""
    out.mkdir()
    camera = head_camera(trajectory)
    options = EgoSmithOptions()
    write_episode(
        trajectory, camera, video, out, episode_index=0, data_version="v", options=options
    )


def _counting_decodes(monkeypatch) -> list[int]:
    """Calls of the remux's per-frame count (one a sampled frame it decodes)."""
    calls: list[int] = []
    count = lerobot_video.frame_histogram

    def counted(frame, reformatter):
        calls.append(1)
        return count(frame, reformatter)

    monkeypatch.setattr(lerobot_video, "frame_histogram", counted)
    return calls


def _assert_same_stats(a: lerobot_video.PixelStats, b: lerobot_video.PixelStats) -> None:
    assert a.images == b.images
    np.testing.assert_array_equal(a.histogram, b.histogram)
    ours, theirs = a.stats(), b.stats()
    assert ours.keys() == theirs.keys()
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


@pytest.mark.parametrize("kind", [*KINDS, "egodex"])
def test_egosmith_s_decode_gives_the_camera_statistics_the_remux_s_own_decode_gives(
    tmp_path, kind, monkeypatch
):
    """Every synthetic kind with a video (H.264 with reordered B-frames) and an imported
    EgoDex episode (640x360): EgoSmith's
    frame-threaded decode, counted on its encode workers, gives the remux's sample of the
    same file exactly; the remux then decodes nothing and copies the same packets."""
    folder, trajectory = _capture(tmp_path, kind)
    camera = select_camera(trajectory)
    assert camera is not None and camera.path == head_camera(trajectory).media.path
    video = folder / camera.path
    info = lerobot_video.inspect_video(video)
    assert info.remuxable and info.frames == round(SECONDS * 30)
    own = lerobot_video.remux(video, tmp_path / "own.mp4", 30, info)
    assert own.pixels.images == camera_sample.STATS_SAMPLES

    _egosmith(trajectory, video, tmp_path / "egosmith")
    found = camera_sample.shared(video)
    assert found is not None and found.frames == info.frames
    decodes = _counting_decodes(monkeypatch)
    taken = lerobot_video.remux(video, tmp_path / "taken.mp4", 30, info)
    assert decodes == []  # no sampled frame decoded
    _assert_same_stats(taken.pixels, own.pixels)
    assert (tmp_path / "taken.mp4").read_bytes() == (tmp_path / "own.mp4").read_bytes()


def test_a_rewritten_or_replaced_video_is_decoded_again(tmp_path, monkeypatch):
    """A sample is the file version's it was counted from: once the file is touched or
    another file takes its name, the remux decodes (and gets the new file's numbers)."""
    folder, trajectory = _capture(tmp_path, "webxr")
    video = folder / head_camera(trajectory).media.path
    _egosmith(trajectory, video, tmp_path / "egosmith")
    assert camera_sample.shared(video) is not None
    decodes = _counting_decodes(monkeypatch)

    stat = video.stat()
    os.utime(video, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert camera_sample.shared(video) is None
    lerobot_video.remux(video, tmp_path / "touched.mp4", 30)
    assert len(decodes) == camera_sample.STATS_SAMPLES

    _egosmith(trajectory, video, tmp_path / "egosmith-again")
    assert camera_sample.shared(video) is not None
    other, _ = _capture(tmp_path, "holos-iphone", seed=9)
    replacement = next(other.rglob("*.mov"))
    shutil.copyfile(replacement, video.with_name("new.tmp"))
    os.replace(video.with_name("new.tmp"), video)
    assert camera_sample.shared(video) is None
    decodes.clear()
    replaced = lerobot_video.remux(video, tmp_path / "replaced.mp4", 30)
    assert len(decodes) == camera_sample.STATS_SAMPLES
    camera_sample.clear_shared()
    fresh = lerobot_video.remux(replacement, tmp_path / "fresh.mp4", 30)
    _assert_same_stats(replaced.pixels, fresh.pixels)


def test_a_sample_of_other_frames_is_not_taken(tmp_path):
    """A kept sample whose frame count or sampled timestamps differ from the remux's own
    is ignored (the remux decodes); one that agrees is taken as it is."""
    folder, trajectory = _capture(tmp_path, "holos-iphone")
    video = folder / head_camera(trajectory).media.path
    info = lerobot_video.inspect_video(video)
    own = lerobot_video.remux(video, tmp_path / "own.mp4", 30, info)
    picks = camera_sample.sample_indices(info.frames)
    pts = info.pts[picks]
    marked = np.full((3, 256), 7, dtype=np.int64)  # no decode counts this
    identity = camera_sample.file_identity(video)

    def remux_with(sample: SampledFrames) -> lerobot_video.PixelStats:
        camera_sample.publish(identity, sample)
        return lerobot_video.remux(video, tmp_path / "out.mp4", 30, info).pixels

    fewer = SampledFrames(info.frames - 1, pts, marked, len(pts))
    _assert_same_stats(remux_with(fewer), own.pixels)
    shifted = SampledFrames(info.frames, np.roll(pts, 1), marked, len(pts))
    _assert_same_stats(remux_with(shifted), own.pixels)
    agreeing = remux_with(SampledFrames(info.frames, pts.copy(), marked, len(pts)))
    np.testing.assert_array_equal(agreeing.histogram, marked)


def test_a_pass_that_missed_a_sampled_frame_leaves_nothing():
    """`FrameSampler.result` is None unless every sampled frame of a pass over that many
    frames was counted; then it holds their timestamps, counts and number."""
    import av

    frames = []
    for k in range(5):
        frame = av.VideoFrame.from_ndarray(np.full((8, 8, 3), 40 * k, np.uint8), format="rgb24")
        frame.pts = 10 * k
        frames.append(frame.reformat(format="yuv420p"))
    sampler = camera_sample.FrameSampler(5)
    for k in (0, 1, 2, 4):
        sampler.observe(k, frames[k])
    assert sampler.result(5) is None  # frame 3 was not counted
    sampler.observe(3, frames[3])
    assert sampler.result(6) is None  # a pass of 6 frames samples frame 5 too
    done = sampler.result(5)
    assert done is not None and (done.frames, done.images) == (5, 5)
    assert done.pts.tolist() == [0, 10, 20, 30, 40]
    np.testing.assert_array_equal(done.histogram.sum(axis=1), [5 * 64] * 3)  # 8x8, unscaled


def test_a_long_video_s_decode_counts_nothing(tmp_path):
    """Beyond `SHORT_VIDEO_FRAMES` the remux samples keyframes, so EgoSmith's pass counts
    no frame for it and leaves nothing."""
    long = camera_sample.SHORT_VIDEO_FRAMES + 1
    video = tmp_path / "v.mp4"
    video.write_bytes(b"x")
    sampler = camera_sample.FrameSampler(long, video)
    assert sampler.wanted == frozenset()
    sampler.publish(long)
    assert camera_sample.shared(video) is None
    assert camera_sample.FrameSampler(camera_sample.SHORT_VIDEO_FRAMES).wanted


def test_the_shared_samples_are_bounded_oldest_dropped_first(tmp_path, monkeypatch):
    monkeypatch.setattr(camera_sample, "MAX_SHARED", 3)
    paths = []
    for i in range(5):
        path = tmp_path / f"v{i}.mp4"
        path.write_bytes(bytes([i]))
        paths.append(path)
        sample = SampledFrames(i, np.zeros(0, np.int64), np.zeros((3, 256), np.int64), 0)
        camera_sample.publish(camera_sample.file_identity(path), sample)
    kept = [camera_sample.shared(p) for p in paths]
    assert [k.frames if k else None for k in kept] == [None, None, 2, 3, 4]


def test_a_decode_outside_sharing_counts_nothing_and_the_remux_decodes_itself(
    tmp_path, monkeypatch
):
    """Where no later export of the same file runs in this process (`sharing(False)`:
    steps in processes of their own), EgoSmith's decode counts no frame."""
    folder, trajectory = _capture(tmp_path, "webxr")
    video = folder / head_camera(trajectory).media.path
    with camera_sample.sharing(False):
        assert camera_sample.FrameSampler(120, video).wanted == frozenset()
        _egosmith(trajectory, video, tmp_path / "egosmith")
    assert camera_sample.shared(video) is None
    assert camera_sample.FrameSampler(120, video).wanted  # on again after the block
    decodes = _counting_decodes(monkeypatch)
    lerobot_video.remux(video, tmp_path / "out.mp4", 30)
    assert len(decodes) == camera_sample.STATS_SAMPLES


def test_a_frame_s_histogram_counts_each_channel_s_values_of_the_scaled_picture(tmp_path):
    """`frame_histogram` (Pillow's one-pass band histogram) against numpy's count of each
    channel of the same scaled RGB picture, over every frame of a synthetic video."""
    import av
    import av.video.reformatter

    folder, trajectory = _capture(tmp_path, "webxr")
    video = folder / head_camera(trajectory).media.path
    reformatter = av.video.reformatter.VideoReformatter()
    checked = 0
    with av.open(str(video)) as container:
        for frame in container.decode(video=0):
            counts = camera_sample.frame_histogram(frame, reformatter)
            scale = camera_sample.STATS_LONG_SIDE / max(frame.width, frame.height)
            size = (
                max(2, round(frame.width * min(scale, 1.0))),
                max(2, round(frame.height * min(scale, 1.0))),
            )
            rgb = frame.reformat(width=size[0], height=size[1], format="rgb24").to_ndarray()
            expected = np.stack([np.bincount(rgb[..., c].ravel(), minlength=256) for c in range(3)])
            assert counts.dtype == np.int64 and counts.shape == (3, 256)
            np.testing.assert_array_equal(counts, expected)
            assert counts.sum() == 3 * size[0] * size[1]
            checked += 1
    assert checked == round(SECONDS * 30)
