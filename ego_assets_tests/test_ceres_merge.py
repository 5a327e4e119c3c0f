"""`formats.ceres_merge` and its video side (`ceres_merge_video`): where a shard's files
are found, which task specifications travel, where each episode's frames land, and a
shard whose info and rows disagree."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ego_assets.formats.ceres_lerobot import (
    CAMERA_KEY,
    DATA_PATH,
    EPISODES_PATH,
    INFO_FILE,
    METADATA_FILE,
    VIDEO_PATH,
    shard_name,
    write_json,
    write_shard,
)
from ego_assets.formats.ceres_merge import merge_shards
from ego_assets.formats.ceres_merge_video import VideoStep, merge_videos
from ego_assets.formats.ceres_metadata import TASK_SPEC_DIR
from ego_assets_tests.ceres_helpers import data_rows, synth_capture


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("ceres-merge")
    out = []
    for i in range(2):
        trajectory, raw = synth_capture(root, "webxr", f"m-{i}", seed=60 + i)
        shard = root / "shards" / shard_name(3 + i)
        shard.mkdir(parents=True)
        write_shard(trajectory, raw, 3 + i, shard)
        out.append(shard)
    return out


def _merged(shards: list[Path], out: Path) -> Path:
    out.mkdir()
    merge_shards(shards, out)
    return out


def _episodes(folder: Path) -> list[dict]:
    return pq.read_table(folder / EPISODES_PATH.format(chunk_index=0, file_index=0)).to_pylist()


def test_a_shards_files_are_those_its_episode_index_names(shards: list[Path]) -> None:
    for i, shard in enumerate(shards):
        metadata = json.loads((shard / METADATA_FILE).read_text())
        assert metadata["episode"]["index"] == 3 + i
        assert (shard / DATA_PATH.format(chunk_index=0, file_index=3 + i)).is_file()
        assert (
            shard / VIDEO_PATH.format(video_key=CAMERA_KEY, chunk_index=0, file_index=3 + i)
        ).is_file()


def test_files_elsewhere_in_a_shard_are_found_and_merged_alike(
    shards: list[Path], tmp_path: Path
) -> None:
    """A shard whose data and video files sit at another file index (an older layout)
    is found by listing its folders: the merged rows and videos are the same bytes."""
    moved = tmp_path / "moved" / shards[1].name
    shutil.copytree(shards[1], moved)
    for template in (DATA_PATH, VIDEO_PATH):
        old = moved / template.format(video_key=CAMERA_KEY, chunk_index=0, file_index=4)
        old.rename(old.with_name("file-017" + old.suffix))
    direct = _merged(shards, tmp_path / "direct")
    listed = _merged([shards[0], moved], tmp_path / "listed")
    for template in (DATA_PATH, VIDEO_PATH):
        relative = template.format(video_key=CAMERA_KEY, chunk_index=0, file_index=0)
        assert (direct / relative).read_bytes() == (listed / relative).read_bytes()
    assert data_rows(listed)["index"].tolist() == list(range(len(data_rows(direct)["index"])))


def test_a_shard_with_two_data_files_and_none_at_its_place_is_refused(
    shards: list[Path], tmp_path: Path
) -> None:
    odd = tmp_path / "odd" / shards[0].name
    shutil.copytree(shards[0], odd)
    data = odd / DATA_PATH.format(chunk_index=0, file_index=3)
    shutil.copyfile(data, data.with_name("file-008.parquet"))
    data.rename(data.with_name("file-009.parquet"))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match=r"expected one data/\*/\*\.parquet, found 2"):
        merge_shards([odd], out)


def test_the_task_specification_the_metadata_names_is_copied(
    shards: list[Path], tmp_path: Path
) -> None:
    spec = json.loads((shards[0] / METADATA_FILE).read_text())["task_specification"]
    assert spec is not None and spec["path"].startswith(TASK_SPEC_DIR)
    # a stray file in the folder is not the episode's specification: it stays behind
    (shards[0] / TASK_SPEC_DIR / "stray.json").write_text("{}")
    try:
        merged = _merged(shards, tmp_path / "merged")
    finally:
        (shards[0] / TASK_SPEC_DIR / "stray.json").unlink()
    names = sorted(p.name for p in (merged / TASK_SPEC_DIR).iterdir())
    assert names == [Path(spec["path"]).name]
    assert (merged / spec["path"]).read_bytes() == (shards[0] / spec["path"]).read_bytes()


def test_metadata_without_the_field_copies_the_folders_specifications(
    shards: list[Path], tmp_path: Path
) -> None:
    old = tmp_path / "old" / shards[0].name
    shutil.copytree(shards[0], old)
    metadata = json.loads((old / METADATA_FILE).read_text())
    named = metadata.pop("task_specification")
    write_json(old / METADATA_FILE, metadata)
    (old / TASK_SPEC_DIR / "extra.json").write_text('{"task": "extra"}')
    merged = _merged([old], tmp_path / "merged")
    names = sorted(p.name for p in (merged / TASK_SPEC_DIR).iterdir())
    assert names == sorted([Path(named["path"]).name, "extra.json"])


def test_each_episodes_frames_follow_the_one_before_in_its_video_file(
    shards: list[Path], tmp_path: Path
) -> None:
    merged = _merged(shards, tmp_path / "merged")
    rows = _episodes(merged)
    fps = json.loads((merged / INFO_FILE).read_text())["fps"]
    prefix = f"videos/{CAMERA_KEY}"
    first, second = rows
    assert first[f"{prefix}/from_timestamp"] == 0.0
    assert first[f"{prefix}/to_timestamp"] == first["length"] / fps
    assert second[f"{prefix}/from_timestamp"] == first["length"] / fps
    assert second[f"{prefix}/to_timestamp"] == (first["length"] + second["length"]) / fps
    assert {r[f"{prefix}/file_index"] for r in rows} == {0}


def test_merge_videos_starts_a_new_file_where_a_step_says_so(
    shards: list[Path], tmp_path: Path
) -> None:
    frames = [json.loads((s / INFO_FILE).read_text())["total_frames"] for s in shards]
    steps = [VideoStep(shards[0], frames[0]), VideoStep(shards[1], frames[1], new_file=True)]
    placed, digests = merge_videos(tmp_path, 30, steps)
    assert [(p.chunk, p.file, p.start) for p in placed] == [(0, 0, 0), (0, 1, 0)]
    assert sorted(digests) == [
        VIDEO_PATH.format(video_key=CAMERA_KEY, chunk_index=0, file_index=i) for i in (0, 1)
    ]


def test_a_shard_whose_info_and_rows_disagree_is_named(shards: list[Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad" / shards[1].name
    shutil.copytree(shards[1], bad)
    info = json.loads((bad / INFO_FILE).read_text())
    info["total_frames"] += 1
    write_json(bad / INFO_FILE, info)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match=rf"shard {bad}: meta/info.json says \d+ frames"):
        merge_shards([shards[0], bad], out)
