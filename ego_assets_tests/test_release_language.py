"""Language in every packing of a release, checked with values.

Two episodes: a WebXR capture whose three task segments say three different things (the
recorder's ``segments.json``, edited before upload), and an EgoDex import with its two
LLM descriptions. Released in the ``eef_pose_gripper`` space, each segment's text must be
the LeRobot task of exactly its frames, robomimic's demo attributes must carry the task,
the instructions and each segment's sample range, and every WebDataset sample's meta the
instructions as EgoSmith writes them.
"""

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import webdataset as wds

from ego_assets.capture.manifest import write_marker
from ego_assets.importers import get_importer
from ego_assets.importers.core import import_source, open_source
from ego_assets.releases.build import build_release
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets.synth.egodex import write_egodex_episode
from ego_assets_tests.test_releases import _build_catalog, _write_spec, carry_through

STEPS = ["pick up the bracket", "place it on the rail", "fasten the two screws"]
EGODEX = "egodex-train.add_remove_lid.3"
SPEC = """
[release]
licence = "CC-BY-4.0"
formats = ["webdataset", "robomimic", "lerobot"]
[split]
fractions = { train = 1.0 }
[actions]
space = "eef_pose_gripper"
frame = "head"
"""


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    root = tmp_path_factory.mktemp("language-root")
    landing = root / "landing" / "lang-xr"
    synthesize("webxr", landing, seconds=2, seed=0, capture_id="lang-xr")
    doc = json.loads((landing / "segments.json").read_text())
    assert len(doc["segments"]) == len(STEPS)
    for segment, text in zip(doc["segments"], STEPS, strict=True):
        segment["task"] = text
    (landing / "segments.json").write_text(json.dumps(doc, indent=2))
    (landing / "ego_capture.json").unlink()
    write_marker(landing, "webxr")
    write_egodex_episode(root / "src" / "train/add_remove_lid", 3, frames=60, seed=2)
    importer = get_importer("egodex")
    assert import_source(
        Storage(root), importer, open_source(str(root / "src"), importer)
    ).landed == [EGODEX]
    storage = Storage(root)
    for index, key in enumerate(["lang-xr", EGODEX]):
        carry_through(storage, key, episode_index=index)
    _build_catalog(storage)
    _write_spec(root, "lang", SPEC)
    result = build_release(root, "lang")
    kept = sorted(e["capture_key"] for e in result.manifest["episodes"])
    assert kept == sorted(["lang-xr", EGODEX]), result.manifest["left_out"]
    return root, result


@pytest.fixture(scope="module")
def lerobot_apart(released):
    """One release per episode for LeRobot (a LeRobot dataset holds one camera shape:
    the merge leaves the EgoDex episode out of a dataset with the WebXR one)."""
    root, _ = released
    out = {}
    for name, select in (
        ("lang-xr", 'source_kinds = ["webxr"]'),
        ("lang-dex", 'source_datasets = ["egodex"]'),
    ):
        _write_spec(root, name, SPEC.replace("[split]", f"[select]\n{select}\n[split]"))
        out[name] = build_release(root, name)
    return out


def _segments(root: Path, key: str) -> list[dict]:
    return json.loads((root / "trajectory" / key / "capture.json").read_text())["annotations"][
        "segments"
    ]


def _frame_tasks(result) -> tuple[pd.DataFrame, dict[int, str]]:
    dataset = result.path / "lerobot" / "train"
    tasks = pq.read_table(dataset / "meta" / "tasks.parquet").to_pandas()
    text_of = dict(zip(tasks["task_index"], tasks.index, strict=True))
    table = pq.read_table(
        dataset / "data" / "chunk-000" / "file-000.parquet",
        columns=["episode_index", "task_index", "ceres.source_frame_index"],
    ).to_pandas()
    return table, text_of


def test_each_segment_is_the_lerobot_task_of_exactly_its_frames(released, lerobot_apart):
    root, _ = released
    rows, text_of = _frame_tasks(lerobot_apart["lang-xr"])
    slot = rows["ceres.source_frame_index"].to_numpy()
    frame_task = np.array([text_of[i] for i in rows["task_index"]])
    segments = _segments(root, "lang-xr")
    assert [s["task"] for s in segments] == STEPS
    covered = np.zeros(len(slot), dtype=bool)
    for segment in segments:
        inside = (slot >= segment["start_slot"]) & (slot < segment["end_slot"])
        assert inside.sum() > 10
        assert (frame_task[inside] == segment["task"]).all()
        covered |= inside
    assert covered.all()  # every frame of this recording lies in one of its segments
    # lerobot 0.6's language_persistent: the segments as subtasks on every frame; the one
    # in force at a frame (latest timestamp <= the frame's) is that frame's task
    dataset = lerobot_apart["lang-xr"].path / "lerobot" / "train"
    info = json.loads((dataset / "meta" / "info.json").read_text())
    assert info["features"]["language_persistent"]["dtype"] == "language"
    data = pq.read_table(
        dataset / "data" / "chunk-000" / "file-000.parquet",
        columns=["timestamp", "language_persistent", "language_events"],
    ).to_pylist()
    fps = info["fps"]
    for frame, task in zip(data, frame_task, strict=True):
        subtasks = frame["language_persistent"]
        assert [r["content"] for r in subtasks] == STEPS and frame["language_events"] == []
        assert {(r["role"], r["style"], r["camera"]) for r in subtasks} == {
            ("user", "subtask", None)
        }
        assert [round(r["timestamp"] * fps) for r in subtasks] == [
            s["start_slot"] for s in segments
        ]
        active = max(
            (r for r in subtasks if r["timestamp"] <= frame["timestamp"] + 1e-6),
            key=lambda r: r["timestamp"],
        )
        assert active["content"] == task
    # the EgoDex episode (no segments): one task over all its frames, from its descriptions
    egodex, text_of = _frame_tasks(lerobot_apart["lang-dex"])
    texts = {text_of[i] for i in egodex["task_index"]}
    assert len(egodex) > 0 and len(texts) == 1
    assert next(iter(texts)).startswith("Pick the lid up")


def test_robomimic_demos_carry_task_instructions_and_segment_ranges(released):
    root, result = released
    demos = result.manifest["formats"]["robomimic"]["demos"]
    with h5py.File(result.path / "robomimic" / "release.hdf5") as f:
        xr = f["data"][demos["lang-xr"]]
        attrs = dict(xr.attrs)
        times = xr["timestamp_ns"][:]
        egodex = dict(f["data"][demos[EGODEX]].attrs)
    assert attrs["ego_task"] == "assemble the bracket"
    assert json.loads(attrs["ego_instructions"]) == [
        "Pick up the bracket.",
        "Place it on the rail.",
        "Fasten the two screws.",
    ]
    ranges = json.loads(attrs["ego_segments"])
    assert [r["task"] for r in ranges] == STEPS
    for r, segment in zip(ranges, _segments(root, "lang-xr"), strict=True):
        inside = np.flatnonzero((times >= segment["start_ns"]) & (times < segment["end_ns"]))
        assert (r["start"], r["end"]) == (int(inside[0]), int(inside[-1]) + 1)
    # EgoDex: the chosen LLM description is the language and the first instruction
    instructions = json.loads(egodex["ego_instructions"])
    assert len(instructions) == 2 and instructions[0].startswith("Pick the lid up")
    assert egodex["ego_task"] == instructions[0]
    assert instructions[1].startswith("Take the lid off")
    assert json.loads(egodex["ego_segments"]) == []


def test_webdataset_meta_carries_the_instructions_as_egosmith_writes_them(released):
    _, result = released
    index = json.loads((result.path / "webdataset" / "index.json").read_text())
    urls = [str(result.path / "webdataset" / p) for p in index["splits"]["train"]["shards"]]
    metas = [json.loads(s["meta.json"]) for s in wds.WebDataset(urls, shardshuffle=False)]
    by_capture: dict[str, list[dict]] = {}
    for meta in metas:
        by_capture.setdefault(meta["capture_id"], []).append(meta)
    assert sorted(by_capture) == sorted(["lang-xr", EGODEX])
    for meta in by_capture["lang-xr"]:
        assert meta["instruction"] == [
            "Pick up the bracket.",
            "Place it on the rail.",
            "Fasten the two screws.",
        ]
        assert meta["instruction_num"] == 3 and meta["language"] == "Fasten the two screws."
    for meta in by_capture[EGODEX]:
        assert meta["instruction_num"] == 2
        assert meta["instruction"][0].startswith("Pick the lid up")
        assert meta["instruction"][1].startswith("Take the lid off")
        # EgoSmith's language is the last instruction (its spec's example does the same)
        assert meta["language"] == meta["instruction"][-1]


def test_ceres_segments_come_through_a_lerobot_import_into_a_release(
    released, lerobot_apart, tmp_path
):
    """The WebXR episode's CERES shard imported back (``lerobot-v3``), carried through
    and released: its segments' texts are again the tasks of exactly their frames."""
    root, _ = released
    src = tmp_path / "shards"
    shutil.copytree(root / "exports" / "ceres-lerobot-v3" / "lang-xr" / "shards", src)
    storage = Storage(root)
    importer = get_importer("lerobot-v3")
    summary = import_source(storage, importer, open_source(str(src), importer))
    assert summary.failed == [] and len(summary.landed) == 1
    key = summary.landed[0]
    carry_through(storage, key, episode_index=7)
    _build_catalog(storage)
    assert [s["task"] for s in _segments(root, key)] == STEPS
    select = f"[select]\nwhere = \"capture_key = '{key}'\"\n[split]"
    # LeRobot only: a LeRobot import has no per-frame camera pose, so no EgoSmith export
    spec = SPEC.replace("[split]", select).replace('"webdataset", "robomimic", ', "")
    _write_spec(root, "lang-import", spec)
    rows, text_of = _frame_tasks(build_release(root, "lang-import"))
    original, original_text = _frame_tasks(lerobot_apart["lang-xr"])
    tasks = [text_of[i] for i in rows["task_index"]]
    # frame by frame, the same segment texts over the same frames as the recording's
    assert tasks == [original_text[i] for i in original["task_index"]]
    assert [t for i, t in enumerate(tasks) if i == 0 or t != tasks[i - 1]] == STEPS
