"""`ego_assets.releases.apart`: a function run in an interpreter of its own, and a release
whose WebDataset copy and LeRobot video merge ran there holding the same bytes as one
packed in threads."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest

from ego_assets.releases import build
from ego_assets.releases import lerobot as lerobot_packing
from ego_assets.releases.apart import ApartError, run_apart
from ego_assets_tests.test_releases import WEBXR_ONLY, _tree, _write_spec, make_release_root


def test_the_result_comes_back_from_the_other_process() -> None:
    assert run_apart(math.factorial, 20) == 2432902008176640000
    assert run_apart(os.getpid) != os.getpid()


def test_its_exception_is_raised_here_with_its_message() -> None:
    with pytest.raises(ValueError, match=r"factorial.*negative"):
        run_apart(math.factorial, -1)


def test_a_process_that_dies_without_an_answer_says_so() -> None:
    with pytest.raises(ApartError, match=r"_exit in its own process: exit 3 without an answer"):
        run_apart(os._exit, 3)


def _threaded_then_apart(
    root: Path, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, bytes], dict[str, bytes], list[str]]:
    """Release ``name`` v1 packed in threads, then again with every large-release packing
    apart: (threaded files, apart files, the functions run apart)."""
    assert build.build_release(root, name, shard_bytes=250_000).written
    folder = root / "releases" / name / "v1"
    threaded = _tree(folder)
    shutil.move(folder, tmp_path / "threaded")
    calls: list[str] = []
    for module in (build, lerobot_packing):
        monkeypatch.setattr(module, "PROCESS_MIN_EPISODES", 0)
        monkeypatch.setattr(
            module, "run_apart", lambda fn, *args: calls.append(fn.__name__) or run_apart(fn, *args)
        )
    assert build.build_release(root, name, shard_bytes=250_000).written
    return threaded, _tree(folder), calls


def test_a_release_packed_apart_has_the_bytes_of_one_packed_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_release_root(tmp_path / "data")
    _write_spec(root, "all", WEBXR_ONLY)  # all three formats
    threaded, apart, calls = _threaded_then_apart(root, "all", tmp_path, monkeypatch)
    assert any(name.startswith("webdataset/") and name.endswith(".tar") for name in threaded)
    # the LeRobot video merge: once a split dataset
    splits = {name.split("/")[1] for name in threaded if name.startswith("lerobot/")}
    want = ["_pack_robomimic_hashed", "pack_webdataset", *["merge_videos"] * len(splits)]
    assert sorted(calls) == sorted(want)
    assert any(name.startswith("lerobot/") and name.endswith(".mp4") for name in apart)
    assert apart == threaded


def test_a_derived_release_packed_apart_has_the_bytes_of_one_packed_in_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a derived action space too (robomimic's derivation is Python work an
    episode)."""
    root = make_release_root(tmp_path / "data")
    _write_spec(root, "eef", WEBXR_ONLY + '\n[actions]\nspace = "eef_pose_gripper"\n')
    threaded, apart, calls = _threaded_then_apart(root, "eef", tmp_path, monkeypatch)
    splits = {name.split("/")[1] for name in threaded if name.startswith("lerobot/")}
    want = ["_pack_robomimic_hashed", "pack_webdataset", *["merge_videos"] * len(splits)]
    assert sorted(calls) == sorted(want)
    assert apart == threaded
