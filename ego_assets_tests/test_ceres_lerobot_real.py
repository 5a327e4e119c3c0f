"""The real lerobot loads our CERES exports: a merged dataset and single shards.

lerobot runs in its own virtualenv (``make lerobot-env``: its torch pins fight ours),
found through ``EGO_LEROBOT_PYTHON`` (``make test`` sets it) or at ``.venv-lerobot``; the
test is skipped when neither exists, and fails when ``EGO_LEROBOT_PYTHON`` names a
missing interpreter. ``HF_HUB_OFFLINE=1``: any Hub call would fail the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pytest

from ego_assets.formats import lerobot_video
from ego_assets.formats.ceres_episode import build_rows
from ego_assets.formats.ceres_lerobot import CAMERA_KEY, shard_name, write_shard
from ego_assets.formats.ceres_merge import merge_shards
from ego_assets_tests.ceres_helpers import data_rows, shifted_copy, synth_capture
from ego_assets_tests.other_venvs import lerobot_python, venv_env

REPO = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("lerobot_probe.py")
FPS = 30
# (key, kind, seconds, seed, faults, episode index): the indices are not 0..n-1 on
# purpose; the retried WebXR capture is long enough (675 rows) to be re-encoded in two
# parts on a machine with two cores or more
CAPTURES = (
    ("r-webxr-retry", "webxr", 30.0, 31, ("retried_segment",), 4),
    ("r-iphone", "holos-iphone", 2.0, 32, (), 9),
    ("r-mano", "mano-video", 2.0, 33, (), 12),
)


def _decode(path: Path) -> np.ndarray:
    with av.open(str(path)) as inp:
        return np.stack([f.to_ndarray(format="rgb24") for f in inp.decode(video=0)])


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    python = lerobot_python()
    if python is None:
        pytest.skip("no lerobot environment (make lerobot-env)")
    root = tmp_path_factory.mktemp("lerobot-real")
    shards, sources, boundaries = {}, {}, []
    for key, kind, seconds, seed, faults, index in CAPTURES:
        trajectory, raw = synth_capture(
            root / "raw", kind, key, seconds=seconds, seed=seed, faults=faults
        )
        shard = root / "shards" / shard_name(index)
        shard.mkdir(parents=True)
        write_shard(trajectory, raw, index, shard)
        shards[key] = shard
        camera = next(m for m in trajectory.media if m.kind == "video")
        sources[key] = _decode(raw / camera.path)
        if "retried_segment" in faults:  # its video went through `reencode`, in parts
            starts = lerobot_video.part_starts(
                build_rows(trajectory).frame_for_row,
                lerobot_video.inspect_video(raw / camera.path),
                lerobot_video.available_cores(),
            )
            assert len(starts) == min(2, lerobot_video.available_cores())
            boundaries = [i for start in starts[1:] for i in (start - 1, start)]
    merged = root / "merged"
    merged.mkdir()
    merge_shards(list(shards.values()), merged)
    views = {
        "merged": merged,
        "webxr": shifted_copy(shards["r-webxr-retry"], root / "view-webxr"),
        "mano": shifted_copy(shards["r-mano"], root / "view-mano"),
    }
    # the webxr view also reads the rows either side of each part boundary
    request = [
        {"name": name, "root": str(path), "fps": FPS, "camera": CAMERA_KEY}
        | ({"frames": boundaries} if name == "webxr" else {})
        for name, path in views.items()
    ]
    (root / "request.json").write_text(json.dumps(request))
    env = venv_env(hf_home=root)
    run = subprocess.run(
        [
            str(python),
            str(PROBE),
            str(root / "request.json"),
            str(root / "result.json"),
            str(root / "frames.npz"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if run.returncode != 0:
        sys.stderr.write(run.stderr[-4000:])
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads((root / "result.json").read_text())
    frames = dict(np.load(root / "frames.npz"))
    return views, shards, sources, result, frames


def _expected(view: Path) -> tuple[dict[str, np.ndarray], list[tuple[int, int]], list[str]]:
    rows = data_rows(view)
    episodes = pd.read_parquet(next((view / "meta/episodes").glob("*/*.parquet")))
    bounds = list(zip(episodes["dataset_from_index"], episodes["dataset_to_index"], strict=True))
    tasks = list(pd.read_parquet(view / "meta/tasks.parquet").index)
    return rows, bounds, tasks


def test_real_lerobot_reads_the_merged_dataset_and_single_shards(loaded):
    """One test (one lerobot process): under pytest-xdist a module fixture would run once
    per worker that gets one of several tests."""
    for name in ("merged", "webxr", "mano"):
        _check_frames_and_episodes(loaded, name)
        _check_images(loaded, name)
    _check_stats(loaded)


def _check_frames_and_episodes(loaded, name: str) -> None:
    views, _, _, result, _ = loaded
    info = json.loads((views[name] / "meta/info.json").read_text())
    rows, bounds, tasks = _expected(views[name])
    got = result[name]
    assert got["len"] == info["total_frames"] == len(rows["index"])
    assert got["num_episodes"] == info["total_episodes"] == len(bounds)
    for e, ((start, end), (first, last)) in enumerate(zip(bounds, got["episodes"], strict=True)):
        for item, i in ((first, start), (last, end - 1)):
            assert item["episode_index"] == e
            assert item["index"] == i
            assert item["frame_index"] == i - start
            assert item["timestamp"] == pytest.approx((i - start) / FPS, abs=1e-6)
            assert item["task"] == tasks[rows["task_index"][i]]
            np.testing.assert_array_equal(
                np.asarray(item["state"], dtype=np.float32), rows["observation.state"][i]
            )
        # delta_timestamps pads before the first and after the last frame of the episode
        assert first["camera_is_pad"] == [True, False]
        assert first["action_is_pad"] == [False, False]
        assert last["action_is_pad"] == [False, True]
        assert last["camera_is_pad"] == [False, False]


def _check_images(loaded, name: str) -> None:
    views, _, sources, result, frames = loaded
    rows = data_rows(views[name])
    merge = views[name] / "ceres/merge.json"
    keys = (
        [e["capture_key"] for e in json.loads(merge.read_text())["episodes"]]
        if merge.exists()
        else [{"webxr": "r-webxr-retry", "mano": "r-mano"}[name]]
    )
    for e, items in enumerate(result[name]["episodes"]):
        source = sources[keys[e]]
        for item in items:
            i = item["i"]
            image = frames[f"{name}/{i}"].astype(np.float64)
            want = source[rows["ceres.source_frame_index"][i]].astype(np.float64)
            assert image.shape == want.shape
            assert np.abs(image - want).mean() / 255 < 0.02, (name, i)
    if name == "webxr":  # one episode, from index 0: the frames around each part boundary
        boundaries = [int(k.split("/")[1]) for k in frames if k.startswith("webxr/")]
        assert len(boundaries) == 2 + 2 * (min(2, lerobot_video.available_cores()) - 1)
        for i in boundaries:
            image = frames[f"webxr/{i}"].astype(np.float64)
            want = sources["r-webxr-retry"][rows["ceres.source_frame_index"][i]].astype(float)
            assert np.abs(image - want).mean() / 255 < 0.02, i


def _check_stats(loaded) -> None:
    views, _, _, result, _ = loaded
    for name in views:
        stats = result[name]["stats"]
        info = json.loads((views[name] / "meta/info.json").read_text())
        assert set(stats) == set(info["features"])
        for feature, shapes in stats.items():
            assert {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"} <= set(
                shapes
            ), feature
        assert stats[CAMERA_KEY]["q01"] == [3, 1, 1]
        assert stats["observation.state"]["q99"] == [410]
