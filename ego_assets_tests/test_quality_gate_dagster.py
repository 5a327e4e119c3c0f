"""The quality gate in Dagster: blocked episodes never reach downstream assets."""

import shutil
from collections.abc import Iterator

import dagster as dg
import pytest

from ego_assets import pipeline
from ego_assets.defs.episodes import AssetEvent, backfill_policy, materialize_each
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.partitions import captures_partitions
from ego_assets.defs.quality import GX_CHECK, quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.storage import Storage
from ego_assets.synth import synthesize

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


@dg.asset(
    partitions_def=captures_partitions, deps=[quality_report], backfill_policy=backfill_policy
)
def downstream_export(
    context: dg.AssetExecutionContext, storage: StorageResource
) -> Iterator[AssetEvent]:
    """Stands in for an exporter: gate first, then write one file per episode."""
    store = storage.get_storage()

    def step(key: str) -> pipeline.StepResult:
        gate = pipeline.require_export_gate(store, key)
        out = store.root / "exports" / key
        out.mkdir(parents=True, exist_ok=True)
        (out / "export.txt").write_text(gate.data_version)
        return pipeline.StepResult(key, gate.data_version, False, {"exported": 1})

    yield from materialize_each(context, step)


ASSETS = [raw_capture, trajectory, quality_report, downstream_export]


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    synthesize("webxr", root / "a-clean", seconds=6, seed=11, capture_id="a-clean")
    synthesize(
        "webxr",
        root / "b-lost",
        seconds=6,
        seed=12,
        faults=["hand_never_seen"],
        capture_id="b-lost",
    )
    return root


def _run(tmp_path, landing, instance, **kwargs):
    shutil.copytree(landing, tmp_path / "landing", dirs_exist_ok=True)
    return dg.materialize(
        ASSETS,
        instance=instance,
        resources={"storage": StorageResource(root=str(tmp_path))},
        raise_on_error=False,
        **kwargs,
    )


def _materialized(result) -> set[str]:
    return {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}


def test_failing_check_skips_downstream_of_that_episode(tmp_path, landing):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["a-clean", "b-lost"])
        bad = _run(tmp_path, landing, instance, partition_key="b-lost")
        assert _materialized(bad) == {"raw_capture", "trajectory", "quality_report"}
        (evaluation,) = bad.get_asset_check_evaluations()
        assert evaluation.check_name == GX_CHECK and not evaluation.passed
        assert evaluation.severity == dg.AssetCheckSeverity.ERROR
        assert evaluation.metadata["blocked_episodes"].value == ["b-lost"]
        good = _run(tmp_path, landing, instance, partition_key="a-clean")
        assert good.success
        assert "downstream_export" in _materialized(good)
        (ok,) = good.get_asset_check_evaluations()
        assert ok.passed
    assert (tmp_path / "exports" / "a-clean" / "export.txt").exists()
    assert not (tmp_path / "exports" / "b-lost").exists()
    gate = pipeline.stored_gate(Storage(tmp_path), "b-lost")
    assert gate is not None and not gate.passed
    assert any("tracked" in o.description for o in gate.errors)


def test_ranged_run_gates_per_episode_so_the_clean_one_is_exported(tmp_path, landing):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["a-clean", "b-lost"])
        result = _run(
            tmp_path, landing, instance, tags={RANGE_START: "a-clean", RANGE_END: "b-lost"}
        )
        (evaluation,) = result.get_asset_check_evaluations()
        assert evaluation.severity == dg.AssetCheckSeverity.WARN
        assert evaluation.metadata["blocked_episodes"].value == ["b-lost"]
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert failure.step_key == "downstream_export"
        assert "b-lost" in failure.step_failure_data.error.message
        assert "blocked by failed expectations" in failure.step_failure_data.error.message
    assert (tmp_path / "exports" / "a-clean" / "export.txt").exists()
    assert not (tmp_path / "exports" / "b-lost").exists()
    for key in ("a-clean", "b-lost"):
        assert (tmp_path / "quality" / key / "quality.parquet").exists()
        assert (tmp_path / "quality" / key / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_quality_metadata_has_key_figures_and_the_timeline(tmp_path, landing):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["a-clean"])
        result = _run(tmp_path, landing, instance, partition_key="a-clean")
        event = next(
            e
            for e in result.get_asset_materialization_events()
            if e.asset_key.path[-1] == "quality_report"
        )
        md = event.materialization.metadata
        assert md["status"].value == "pass"
        assert md["duration_s"].value == pytest.approx(6.0, abs=0.1)
        assert md["timeline"].value.startswith("![timeline of a-clean](data:image/png;base64,")
        assert md["gate_passed"].value == "True"
