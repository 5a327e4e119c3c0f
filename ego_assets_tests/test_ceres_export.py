"""The CERES export steps over a storage: stable indices, reuse, gate, merge, S3, Dagster."""

from __future__ import annotations

import json
from pathlib import Path

import av
import dagster as dg
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ego_assets import pipeline
from ego_assets.catalog.receipts import folder_digest, read_receipt
from ego_assets.defs.datasets import ceres_dataset
from ego_assets.defs.export_assets import build_export_asset
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.partitions import SET0
from ego_assets.defs.quality import quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import ceres as ceres_export
from ego_assets.exports.episode_index import EpisodeIndexRegistry
from ego_assets.exports.registry import CERES
from ego_assets.exports.run import run_export
from ego_assets.formats.ceres_lerobot import CAMERA_KEY
from ego_assets.quality.gate import ExportBlockedError
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.ceres_helpers import data_rows

ceres_episode = build_export_asset(SET0, CERES)

# (key, kind, seed, faults): two clean WebXR captures, an iPhone one, one the gate blocks
CAPTURES = (
    ("c-webxr-a", "webxr", 21, ("retried_segment",)),
    ("c-iphone", "holos-iphone", 22, ()),
    ("c-webxr-b", "webxr", 23, ()),
    ("c-lost", "webxr", 24, ("hand_never_seen",)),
)


def _decode(path: Path) -> np.ndarray:
    with av.open(str(path)) as inp:
        return np.stack([f.to_ndarray(format="rgb24") for f in inp.decode(video=0)])


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    root = tmp_path_factory.mktemp("ceres-landing")
    for key, kind, seed, faults in CAPTURES:
        synthesize(kind, root / key, seconds=2, seed=seed, faults=faults, capture_id=key)
    return root


def _export(storage: Storage, key: str) -> pipeline.StepResult:
    """What the asset does for one capture: gate, stable index, export."""
    return run_export(storage, key, ceres_export.CeresExporter())


def _prepare(storage: Storage, keys) -> None:
    for key in keys:
        pipeline.ingest_raw(storage, key)
        pipeline.normalize(storage, key)
        pipeline.assess_quality(storage, key)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, landing):
    """Every capture through the steps, exported in the order c-webxr-a, c-iphone, c-webxr-b."""
    root = tmp_path_factory.mktemp("ceres-store")
    storage = Storage(root, landing=landing)
    _prepare(storage, [c[0] for c in CAPTURES])
    results = {key: _export(storage, key) for key, *_ in CAPTURES[:3]}
    return storage, results


def test_indices_are_stable_and_a_rerun_reuses_the_shard(exported):
    storage, results = exported
    assert [r.figures["episode_index"] for r in results.values()] == [0, 1, 2]
    assert not any(r.reused for r in results.values())
    lineage = ceres_export.stored_lineage(storage, "c-iphone")
    shard = ceres_export.export_root(storage, "c-iphone") / lineage["shard"]
    receipt = (shard / "ceres/browser-export-receipt.json").read_bytes()
    again = _export(storage, "c-iphone")
    assert again.reused and again.figures["episode_index"] == 1
    assert (shard / "ceres/browser-export-receipt.json").read_bytes() == receipt
    assert EpisodeIndexRegistry(storage).lookup("c-webxr-b") == 2
    assert results["c-webxr-a"].figures["video"] == "re-encode"
    assert results["c-webxr-b"].figures["video"] == "remux"
    receipt = read_receipt(storage, "ceres_episode", "c-iphone")
    assert (
        receipt is not None
        and receipt.path == "exports/ceres-lerobot-v3/c-iphone/shards/episode-000001"
    )
    assert receipt.input_data_version == pipeline.stored_gate(storage, "c-iphone").data_version
    assert (receipt.bytes, receipt.files) == folder_digest(Path(shard.path))[:2]


def test_blocked_capture_gets_no_shard(exported):
    storage, _ = exported
    with pytest.raises(ExportBlockedError, match="c-lost"):
        _export(storage, "c-lost")
    assert ceres_export.stored_lineage(storage, "c-lost") is None


def test_merged_dataset_has_every_shard_in_index_order(exported):
    storage, _ = exported
    summary = ceres_export.merge_dataset(storage)
    assert (summary.episodes, summary.tasks, summary.reused) == (3, 2, False)
    again = ceres_export.merge_dataset(storage)
    assert again.reused and (again.episodes, again.frames) == (3, summary.frames)
    out = Path(summary.uri)
    info = json.loads((out / "meta/info.json").read_text())
    shards = {
        key: ceres_export.export_root(storage, key)
        / ceres_export.stored_lineage(storage, key)["shard"]
        for key in ("c-webxr-a", "c-iphone", "c-webxr-b")
    }
    lengths = [len(data_rows(Path(s.path))["index"]) for s in shards.values()]
    assert info["total_frames"] == sum(lengths) == summary.frames
    assert (info["total_episodes"], info["total_tasks"]) == (3, 2)
    rows = data_rows(out)
    np.testing.assert_array_equal(rows["index"], np.arange(sum(lengths)))
    np.testing.assert_array_equal(rows["episode_index"], np.repeat([0, 1, 2], lengths))
    frame_index = np.concatenate([np.arange(n) for n in lengths])
    np.testing.assert_array_equal(rows["frame_index"], frame_index)
    tasks = pd.read_parquet(out / "meta/tasks.parquet")
    assert tasks.index.name == "task" and list(tasks["task_index"]) == [0, 1]
    first = data_rows(Path(shards["c-iphone"].path))
    np.testing.assert_array_equal(
        rows["observation.state"][lengths[0] : lengths[0] + lengths[1]], first["observation.state"]
    )
    episodes = pq.read_table(next((out / "meta/episodes").glob("*/*.parquet"))).to_pylist()
    assert [e["episode_index"] for e in episodes] == [0, 1, 2]
    assert [e["dataset_from_index"] for e in episodes] == [0, lengths[0], lengths[0] + lengths[1]]
    merge = json.loads((out / "ceres/merge.json").read_text())
    assert [e["capture_key"] for e in merge["episodes"]] == ["c-webxr-a", "c-iphone", "c-webxr-b"]
    # video: the episodes' frames back to back, each episode at from_timestamp
    videos = sorted(out.glob(f"videos/{CAMERA_KEY}/*/*.mp4"))
    decoded = {v.name: _decode(v) for v in videos}
    for episode, shard in zip(episodes, shards.values(), strict=True):
        name = f"file-{episode[f'videos/{CAMERA_KEY}/file_index']:03d}.mp4"
        start = round(episode[f"videos/{CAMERA_KEY}/from_timestamp"] * 30)
        own = _decode(next(Path(shard.path).glob("videos/*/*/*.mp4")))
        np.testing.assert_array_equal(decoded[name][start : start + len(own)], own)
        assert episode[f"videos/{CAMERA_KEY}/to_timestamp"] * 30 == pytest.approx(start + len(own))
    assert sum(len(v) for v in decoded.values()) == sum(lengths)
    stats = json.loads((out / "meta/stats.json").read_text())
    assert stats["index"]["max"] == [sum(lengths) - 1]
    assert stats["observation.state"]["count"] == [sum(lengths)]
    np.testing.assert_allclose(
        stats["action"]["mean"], rows["action"].astype(np.float64).mean(axis=0), rtol=1e-6
    )


def test_s3_export_and_merge(s3_server, s3_bucket, landing):
    storage = Storage(
        f"{s3_bucket}/ego", landing=landing, storage_options=s3_server.storage_options
    )
    _prepare(storage, ["c-webxr-b"])
    result = _export(storage, "c-webxr-b")
    assert result.figures["episode_index"] == 0
    keys = s3_server.keys(f"{s3_bucket}/ego")
    prefix = "exports/ceres-lerobot-v3/c-webxr-b/"
    assert f"{prefix}lineage.json" in keys
    assert f"{prefix}shards/episode-000000/ceres/browser-export-receipt.json" in keys
    assert "registry/episode-index/keys/c-webxr-b.json" in keys
    assert _export(storage, "c-webxr-b").reused
    summary = ceres_export.merge_dataset(storage)
    assert summary.episodes == 1
    assert "exports/ceres-lerobot-v3-dataset/meta/info.json" in s3_server.keys(f"{s3_bucket}/ego")


def test_dagster_assets_export_and_merge(tmp_path, landing):
    import shutil

    shutil.copytree(landing / "c-webxr-b", tmp_path / "landing" / "c-webxr-b")
    resources = {"storage": StorageResource(root=str(tmp_path))}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["c-webxr-b"])
        result = dg.materialize(
            [raw_capture, trajectory, quality_report, ceres_episode],
            instance=instance,
            resources=resources,
            partition_key="c-webxr-b",
        )
        assert result.success
        (event,) = [
            e
            for e in result.get_asset_materialization_events()
            if e.asset_key.path[-1] == "ceres_episode"
        ]
        metadata = event.materialization.metadata
        assert metadata["episode_index"].value == 0 and metadata["video"].value == "remux"
        merged = dg.materialize([ceres_dataset], instance=instance, resources=resources)
        assert merged.success
    info = json.loads((tmp_path / "exports/ceres-lerobot-v3-dataset/meta/info.json").read_text())
    assert info["total_episodes"] == 1 and info["total_frames"] == 60
