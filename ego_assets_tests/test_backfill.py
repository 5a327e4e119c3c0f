"""Chunked (ranged) backfill runs: per-capture results, failure isolation, reuse on rerun."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from ego_assets.capture.manifest import MANIFEST_FILE, RawManifest
from ego_assets.dagster_compat import add_partition_metadata
from ego_assets.defs.episodes import BACKFILL_CHUNK, DATA_VERSION_TAG
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.quality import quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.pipeline import LINEAGE_FILE, NORMALIZER_VERSION
from ego_assets.synth import synthesize
from ego_assets_tests.factories import garble_holos_pose_row

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
KEYS = ["c01", "c02", "c03", "c04", "c05"]
BAD = "c03"


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> Path:
    """Five 1 s iPhone captures (different seeds); c03's device_pose.csv row 4 is garbled.

    ``fixed`` holds c03 as it should have been (the re-upload).
    """
    root = tmp_path_factory.mktemp("backfill")
    for seed, key in enumerate(KEYS):
        synthesize("holos-iphone", root / key, seconds=1.0, seed=seed, capture_id=key)
    shutil.copytree(root / BAD, root / "fixed")
    garble_holos_pose_row(root / BAD)
    return root


def _data_root(captures: Path, tmp_path: Path) -> Path:
    for key in KEYS:
        shutil.copytree(captures / key, tmp_path / "landing" / key)
    return tmp_path


def _ranged(root: Path, instance, assets) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        assets,
        instance=instance,
        resources={"storage": StorageResource(root=str(root))},
        tags={RANGE_START: KEYS[0], RANGE_END: KEYS[-1]},
        raise_on_error=False,
    )


def _latest(instance, asset: str, key: str) -> dg.AssetMaterialization:
    record = instance.get_latest_data_version_record(dg.AssetKey(asset), partition_key=key)
    assert record is not None and record.asset_materialization is not None
    return record.asset_materialization


def test_backfill_chunk_is_documented_and_bounded():
    assert 10 <= BACKFILL_CHUNK <= 100
    for asset in (raw_capture, trajectory, quality_report):
        assert asset.backfill_policy == dg.BackfillPolicy.multi_run(BACKFILL_CHUNK)


def test_chunk_with_a_malformed_capture_keeps_the_others_and_names_the_bad_one(captures, tmp_path):
    root = _data_root(captures, tmp_path)
    good = [k for k in KEYS if k != BAD]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", KEYS)
        first = _ranged(root, instance, [raw_capture, trajectory, quality_report])
        assert not first.success
        failures = [e for e in first.all_events if e.is_step_failure]
        assert [e.step_key for e in failures] == ["trajectory"]
        message = failures[0].step_failure_data.error.message
        assert "1 of 5 captures failed" in message
        assert f"capture '{BAD}', file 'device_pose.csv'" in message and "row 4" in message
        # every good capture's trajectory was written (atomically) before the step failed
        for key in good:
            lineage = json.loads((root / "trajectory" / key / LINEAGE_FILE).read_text())
            sha = RawManifest.from_json((root / "raw" / key / MANIFEST_FILE).read_text())
            assert lineage["data_version"] == f"{NORMALIZER_VERSION}:{sha.content_sha256}"
        assert not (root / "trajectory" / BAD).exists()
        # raw_capture succeeded for the whole chunk, each partition with its own metadata:
        # the content hash as data_version; Dagster's tag is one logical version per range
        latest = {k: _latest(instance, "raw_capture", k) for k in KEYS}
        versions = {k: event.metadata["data_version"].value for k, event in latest.items()}
        for key in KEYS:
            manifest = RawManifest.from_json((root / "raw" / key / MANIFEST_FILE).read_text())
            assert versions[key] == manifest.content_sha256
            assert latest[key].metadata["files"].value == len(manifest.files)
        assert len(set(versions.values())) == len(KEYS)
        assert len({event.tags[DATA_VERSION_TAG] for event in latest.values()}) == 1
        mtimes = {k: (root / "trajectory" / k / LINEAGE_FILE).stat().st_mtime_ns for k in good}

        # the uploader fixes c03 (and the bad raw copy is discarded); rerunning the same
        # chunk recomputes only c03, every good capture is reused as stored
        shutil.rmtree(root / "landing" / BAD)
        shutil.copytree(captures / "fixed", root / "landing" / BAD)
        shutil.rmtree(root / "raw" / BAD)
        again = _ranged(root, instance, [raw_capture, trajectory, quality_report])
        assert again.success
        for key in good:
            event = _latest(instance, "trajectory", key)
            assert event.metadata["reused"].value is True
            assert _latest(instance, "raw_capture", key).metadata["reused"].value is True
            assert event.metadata["data_version"].value == f"{NORMALIZER_VERSION}:{versions[key]}"
            assert (root / "trajectory" / key / LINEAGE_FILE).stat().st_mtime_ns == mtimes[key]
        assert _latest(instance, "trajectory", BAD).metadata["reused"].value is False
        for key in KEYS:
            quality = _latest(instance, "quality_report", key)
            raw_version = _latest(instance, "raw_capture", key).metadata["data_version"].value
            # quality version : trajectory version : the episode's waivers
            assert f":{NORMALIZER_VERSION}:{raw_version}:waivers-" in (
                quality.metadata["data_version"].value
            )
            assert (root / "quality" / key / "quality.parquet").exists()


def test_partition_metadata_falls_back_to_the_public_call_when_dagster_moves_its_internals():
    calls = []
    context = SimpleNamespace(
        op_execution_context=SimpleNamespace(),
        asset_key=dg.AssetKey("trajectory"),
        add_asset_metadata=lambda md, partition_key: calls.append((partition_key, md)),
    )
    add_partition_metadata(context, "c02", {"frames": 12})
    assert calls == [("c02", {"frames": 12})]


def _metadata_statements(registered: int) -> tuple[int, dict[str, dict]]:
    """SQL statements while a ranged run's asset records metadata for its 3 partitions,
    with ``registered`` captures in the instance; and the metadata Dagster stored."""
    from ego_assets.defs.partitions import captures_partitions
    from ego_assets_tests.sql_count import sql_statements

    counted: list[int] = []

    @dg.asset(partitions_def=captures_partitions)
    def probe(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        keys = context.partition_keys  # resolving the range lists the keys (Dagster's)
        with sql_statements() as statements:
            for key in keys:
                add_partition_metadata(context, key, {"key_again": key})
        counted.append(len(statements))
        return dg.MaterializeResult()

    keys = [f"k{i:05d}" for i in range(registered)]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", keys)
        result = dg.materialize(
            [probe], instance=instance, tags={RANGE_START: keys[10], RANGE_END: keys[12]}
        )
        assert result.success
        stored = {key: dict(_latest(instance, "probe", key).metadata) for key in keys[10:13]}
    return counted[0], stored


def test_partition_metadata_helper_queries_nothing_whatever_the_number_of_captures():
    small, stored = _metadata_statements(100)
    large, _ = _metadata_statements(5000)
    assert small == large == 0  # the public call re-reads every registered key per call
    assert stored == {
        k: {"key_again": dg.TextMetadataValue(k)} for k in ("k00010", "k00011", "k00012")
    }
