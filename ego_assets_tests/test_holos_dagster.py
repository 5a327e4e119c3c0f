"""The holos_hdf5 asset: gated per episode, reused while current, stale when inputs change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import h5py
import pytest
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

from ego_assets.capture.manifest import write_marker
from ego_assets.catalog.receipts import read_receipt
from ego_assets.defs.export_assets import build_export_asset
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.partitions import SET0
from ego_assets.defs.quality import quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import holos as holos_export
from ego_assets.exports.registry import HOLOS
from ego_assets.formats.holos_hdf5_validate import validate_file
from ego_assets.formats.holos_writer import EXPORTER_VERSION
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.factories import synth_blocked_capture

holos_hdf5 = build_export_asset(SET0, HOLOS)

ASSETS = [raw_capture, trajectory, quality_report, holos_hdf5]
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
KEYS = ["a-vp", "b-lost"]


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("holos_landing")
    synthesize("holos-visionpro", root / "a-vp", seconds=1.5, seed=3, capture_id="a-vp")
    synth_blocked_capture(root / "b-lost", "b-lost")
    return root


def _run(root: Path, instance, **kwargs):
    return dg.materialize(
        ASSETS,
        instance=instance,
        resources={"storage": StorageResource(root=str(root))},
        raise_on_error=False,
        **kwargs,
    )


def _export(root: Path, key: str) -> Path:
    return root / "exports" / "holos_hdf5" / key / f"{key}.h5"


def _holos_event(result):
    return next(
        e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == "holos_hdf5"
    )


def test_exports_current_until_the_raw_capture_changes(tmp_path, landing):
    shutil.copytree(landing, tmp_path / "landing")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", KEYS)
        first = _run(tmp_path, instance, partition_key="a-vp")
        assert first.success
        md = _holos_event(first).materialization.metadata
        assert md["reused"].value is False
        assert {s["item"] for s in md["skipped_items"].value} >= {"obs/imu_accel"}
        path = _export(tmp_path, "a-vp")
        assert validate_file(path) == []
        notes = json.loads((path.parent / holos_export.NOTES_FILE).read_text())
        assert notes["data_version"].startswith(EXPORTER_VERSION)
        assert notes["file"] == "a-vp.h5" and notes["bytes"] == path.stat().st_size
        stamp = path.stat().st_mtime_ns

        second = _run(tmp_path, instance, partition_key="a-vp")
        assert _holos_event(second).materialization.metadata["reused"].value is True
        assert path.stat().st_mtime_ns == stamp

        # an edited transcript arrives as a new raw copy: trajectory, gate and export follow
        transcript = tmp_path / "landing/a-vp/transcript.json"
        doc = json.loads(transcript.read_text())
        doc["segments"][0]["text"] = "edited words"
        transcript.write_text(json.dumps(doc))
        write_marker(tmp_path / "landing/a-vp", "holos")
        shutil.rmtree(tmp_path / "raw" / "a-vp")
        _run(tmp_path, instance, partition_key="a-vp", selection=[raw_capture, trajectory])
        defs = dg.Definitions(
            assets=ASSETS, resources={"storage": StorageResource(root=str(tmp_path))}
        )
        graph = defs.resolve_asset_graph()
        status = CachingStaleStatusResolver(
            instance, graph, LoadingContextForTest(instance)
        ).get_status(holos_hdf5.key, "a-vp")
        assert status == StaleStatus.STALE
        third = _run(tmp_path, instance, partition_key="a-vp")
        assert third.success
        assert _holos_event(third).materialization.metadata["reused"].value is False
        resolver = CachingStaleStatusResolver(instance, graph, LoadingContextForTest(instance))
        assert resolver.get_status(holos_hdf5.key, "a-vp") == StaleStatus.FRESH
    with h5py.File(path) as f:
        assert f["holos/transcript/segments"][0]["text"] == b"edited words"
        # /holos/files holds the capture's own extra files, never the platform's manifest
        assert "manifest.json" not in f.get("holos/files", {})
    new_notes = json.loads((path.parent / holos_export.NOTES_FILE).read_text())
    assert new_notes["data_version"] != notes["data_version"]


def test_blocked_episodes_are_not_exported_single_or_ranged(tmp_path, landing):
    shutil.copytree(landing, tmp_path / "landing")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", KEYS)
        single = _run(tmp_path, instance, partition_key="b-lost")
        assert "holos_hdf5" not in {
            e.asset_key.path[-1] for e in single.get_asset_materialization_events()
        }
        ranged = _run(tmp_path, instance, tags={RANGE_START: KEYS[0], RANGE_END: KEYS[1]})
        assert not ranged.success  # the export step fails naming the blocked capture
        (failure,) = [e for e in ranged.all_events if e.is_step_failure]
        assert failure.step_key == "holos_hdf5"
        reasons = failure.step_failure_data.user_failure_data.metadata["blocking_reasons"]
        assert list(reasons.value) == ["b-lost"]
        records = instance.fetch_materializations(holos_hdf5.key, limit=10).records
        events = {r.partition_key: r.asset_materialization.metadata for r in records}
        assert list(events) == ["a-vp"]  # nothing claims b-lost's export
        assert "file" in events["a-vp"] and events["a-vp"]["samples"].value > 0
    assert validate_file(_export(tmp_path, "a-vp")) == []
    assert not (tmp_path / "exports" / "holos_hdf5" / "b-lost").exists()
    assert holos_export.stored_notes(Storage(tmp_path), "b-lost") is None
    receipt = read_receipt(Storage(tmp_path), "holos_hdf5", "a-vp")
    assert receipt is not None and receipt.path == "exports/holos_hdf5/a-vp/a-vp.h5"
    assert receipt.bytes == _export(tmp_path, "a-vp").stat().st_size
    assert read_receipt(Storage(tmp_path), "holos_hdf5", "b-lost") is None
