import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from ego_assets.capture import read_capture
from ego_assets.capture.manifest import write_marker
from ego_assets.defs.demo import aria_fixture_dir
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.resources import StorageResource
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import read_trajectory

KINDS = {
    "vp": "holos-visionpro",
    "phone": "holos-iphone",
    "xr": "webxr",
    "mano": "mano-video",
}
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    for key, kind in KINDS.items():
        synthesize(kind, root / "landing" / key, seconds=1.5, seed=7, capture_id=key)
    shutil.copytree(aria_fixture_dir(), root / "landing" / "aria")
    write_marker(root / "landing" / "aria", "aria_mps")
    return root


def _fresh_root(landing: Path, tmp_path: Path) -> Path:
    shutil.copytree(landing / "landing", tmp_path / "landing")
    return tmp_path


def _materialize(root: Path, instance, **kwargs):
    return dg.materialize(
        [raw_capture, trajectory],
        instance=instance,
        resources={"storage": StorageResource(root=str(root))},
        raise_on_error=False,
        **kwargs,
    )


@pytest.mark.parametrize("key", [*KINDS, "aria"])
def test_every_kind_materializes_raw_capture_and_trajectory(landing, tmp_path, key):
    root = _fresh_root(landing, tmp_path)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", [key])
        result = _materialize(root, instance, partition_key=key)
        assert result.success
        events = {e.asset_key.path[-1]: e for e in result.get_asset_materialization_events()}
        assert set(events) == {"raw_capture", "trajectory"}
        md = events["trajectory"].materialization.metadata
        stored = read_trajectory(root / "trajectory" / key)
        assert md["streams"].value == len(stored.streams)
        assert md["samples"].value == sum(len(s) for s in stored.streams)
    direct = read_capture(key, root / "landing" / key)
    assert [s.name for s in stored.streams] == sorted(s.name for s in direct.streams)
    first = direct.streams[0]
    np.testing.assert_array_equal(stored.stream(first.name).timestamp_ns, first.timestamp_ns)
    assert (root / "raw" / key / "manifest.json").exists()


def test_second_materialization_reuses_the_stored_outputs(landing, tmp_path):
    root = _fresh_root(landing, tmp_path)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["xr"])
        _materialize(root, instance, partition_key="xr")
        before = (root / "trajectory/xr/capture.json").stat().st_mtime_ns
        again = _materialize(root, instance, partition_key="xr")
        md = {
            e.asset_key.path[-1]: e.materialization.metadata
            for e in again.get_asset_materialization_events()
        }
        assert md["trajectory"]["reused"].value is True
        assert md["raw_capture"]["reused"].value is True
    assert (root / "trajectory/xr/capture.json").stat().st_mtime_ns == before


def test_malformed_capture_fails_its_partition_only_and_writes_nothing(landing, tmp_path):
    root = _fresh_root(landing, tmp_path)
    bad = root / "landing" / "broken"
    shutil.copytree(root / "landing" / "vp", bad)
    csv = bad / "device_pose.csv"
    lines = csv.read_text().splitlines()
    lines[3] = lines[3].replace(",", ",abc,", 1)
    csv.write_text("\n".join(lines) + "\n")
    write_marker(bad, "holos")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["broken", "vp"])
        failed = _materialize(root, instance, partition_key="broken")
        assert not failed.success
        messages = " ".join(
            e.step_failure_data.error.message
            for e in failed.all_events
            if e.is_step_failure and e.step_failure_data.error
        )
        assert "capture 'broken', file 'device_pose.csv'" in messages and "row 3" in messages
        ok = _materialize(root, instance, partition_key="vp")
        assert ok.success
    assert not (root / "trajectory" / "broken").exists()
    assert sorted(p.name for p in (root / "trajectory").iterdir()) == ["vp"]


def test_ranged_run_keeps_good_captures_when_one_fails(landing, tmp_path):
    root = _fresh_root(landing, tmp_path)
    bad = root / "landing" / "m-bad"
    bad.mkdir()
    (bad / "ego_capture.json").write_text('{"format": "ego-capture-marker", "version": 1}')
    keys = ["m-bad", "phone", "xr"]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", keys)
        result = _materialize(root, instance, tags={RANGE_START: keys[0], RANGE_END: keys[-1]})
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert "1 of 3 captures failed" in failure.step_failure_data.error.message
        assert "m-bad" in failure.step_failure_data.error.message
    assert (root / "raw" / "phone" / "manifest.json").exists()
    assert (root / "raw" / "xr" / "manifest.json").exists()
    assert not (root / "raw" / "m-bad").exists()
