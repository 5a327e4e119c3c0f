"""The export gate in Dagster: blocked episodes are never exported; their export step
fails naming the gate's reasons (the partition reads Failed, never Materialized), the
quality step succeeds, and the run is not retried for it."""

import shutil
from collections.abc import Iterator

import dagster as dg
import pytest

from ego_assets import pipeline
from ego_assets.defs.episodes import (
    NO_RETRY_TAGS,
    AssetEvent,
    backfill_policy,
    is_blocked_failure,
    materialize_each,
    planned_per_partition,
)
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.partitions import captures_partitions
from ego_assets.defs.quality import EXPORT_GATE_CHECK, GATE_TAG, quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.exports.run import require_export_gate
from ego_assets.quality.waivers import add_waiver
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.factories import synth_blocked_capture

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


@dg.asset(
    partitions_def=captures_partitions,
    deps=[quality_report],
    backfill_policy=backfill_policy,
    output_required=False,
)
def downstream_export(
    context: dg.AssetExecutionContext, storage: StorageResource
) -> Iterator[AssetEvent]:
    """Stands in for an exporter: gate first, then write one file per episode."""
    store = storage.get_storage()

    def step(key: str) -> pipeline.StepResult:
        gate = require_export_gate(store, key)
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
    synth_blocked_capture(root / "b-lost", "b-lost")
    return root


def _run(tmp_path, landing, instance, **kwargs):
    shutil.copytree(landing, tmp_path / "landing", dirs_exist_ok=True)
    with planned_per_partition():  # as the demo creates its single-capture runs
        return dg.materialize(
            ASSETS,
            instance=instance,
            resources={"storage": StorageResource(root=str(tmp_path))},
            raise_on_error=False,
            **kwargs,
        )


def _step_failures(result) -> dict[str, dg.DagsterEvent]:
    return {e.step_key: e for e in result.all_events if e.is_step_failure}


def _status(instance, asset, partition):
    statuses = instance.get_status_by_partition(asset.key, [partition], captures_partitions)
    return statuses[partition].value


def _materialized(result) -> set[str]:
    return {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}


def _check_records(instance, partition):
    key = dg.AssetCheckKey(dg.AssetKey("quality_report"), EXPORT_GATE_CHECK)
    records = instance.event_log_storage.get_asset_check_execution_history(key, limit=20)
    return [r for r in records if r.partition == partition]


def test_blocked_episode_fails_its_export_step_with_the_reasons_and_fails_the_gate_check(
    tmp_path, landing
):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["a-clean", "b-lost"])
        bad = _run(tmp_path, landing, instance, partition_key="b-lost")
        assert not bad.success  # the export step said no: nothing claims an export
        (failure,) = _step_failures(bad).values()  # the export step only, no quality trace
        assert failure.step_key == "downstream_export"
        data = failure.step_failure_data
        assert is_blocked_failure(data)
        assert data.user_failure_data.metadata["gate"].value == "blocked"
        reasons = data.user_failure_data.metadata["blocking_reasons"].value
        assert reasons[0] == "hand:left/tracking_loss_ratio = 1 (fail > 0.5)"
        assert data.user_failure_data.description == (
            "capture 'b-lost': export blocked by export policy v1: " + "; ".join(reasons)
        )
        assert _materialized(bad) == {"raw_capture", "trajectory", "quality_report"}
        assert _status(instance, downstream_export, "b-lost") == "FAILED"
        assert _status(instance, quality_report, "b-lost") == "MATERIALIZED"
        (evaluation,) = bad.get_asset_check_evaluations()
        assert evaluation.check_name == EXPORT_GATE_CHECK and not evaluation.passed
        assert evaluation.severity == dg.AssetCheckSeverity.ERROR
        assert evaluation.partition == "b-lost"
        assert evaluation.description.startswith("quality: fail — export: blocked (")
        assert "hand:left/tracking_loss_ratio = 1 (fail > 0.5)" in evaluation.description
        # one key per fact, the same keys as the export step's failure
        assert evaluation.metadata["gate"].value == "blocked"
        assert evaluation.metadata["blocking_reasons"].value == reasons
        assert evaluation.metadata["policy_version"].value == "1"  # a label, not plotted
        assert not {"export", "blocking reasons", "policy version"} & set(evaluation.metadata)
        tags = instance.get_run_by_id(bad.run_id).tags
        assert tags[GATE_TAG] == "blocked"
        assert NO_RETRY_TAGS.items() <= tags.items()  # a retry would be blocked again
        fails = evaluation.metadata["fail (blocking unless waived)"].value
        assert evaluation.metadata["metrics at fail"].value == len(fails) >= 1
        good = _run(tmp_path, landing, instance, partition_key="a-clean")
        assert good.success
        assert "downstream_export" in _materialized(good)
        assert _status(instance, downstream_export, "a-clean") == "MATERIALIZED"
        (ok,) = good.get_asset_check_evaluations()
        assert ok.passed and ok.partition == "a-clean"
        assert ok.description == "quality: pass — export: allowed"
        assert ok.metadata["metrics at fail"].value == 0
        assert ok.metadata["blocking_reasons"].value == []
        good_tags = instance.get_run_by_id(good.run_id).tags
        assert good_tags[GATE_TAG] == "allowed" and NO_RETRY_TAGS.keys().isdisjoint(good_tags)
    assert (tmp_path / "exports" / "a-clean" / "export.txt").exists()
    assert not (tmp_path / "exports" / "b-lost").exists()
    gate = pipeline.stored_gate(Storage(tmp_path), "b-lost")
    assert gate is not None and not gate.passed and gate.blocked_exports
    assert gate.reasons[0] == "hand:left/tracking_loss_ratio = 1 (fail > 0.5)"


def test_a_waiver_lets_the_episode_through_on_the_next_run(tmp_path, landing):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["b-lost"])
        _run(tmp_path, landing, instance, partition_key="b-lost")
        store = Storage(tmp_path)
        gate = pipeline.stored_gate(store, "b-lost")
        assert gate is not None
        for finding in gate.findings:
            if finding.blocking:
                add_waiver(store, "b-lost", finding.metric, "left hand is out of the task", "qa")
        rejudged = pipeline.rejudge_gate(store, "b-lost")
        assert rejudged is not None and rejudged.passed
        assert rejudged.summary().startswith("quality: fail — export: allowed (waived: ")
        again = _run(tmp_path, landing, instance, partition_key="b-lost")
        assert again.success and "downstream_export" in _materialized(again)
        (evaluation,) = again.get_asset_check_evaluations()
        assert evaluation.passed
        assert evaluation.metadata["waivers"].value[0]["by"] == "qa"
        quality = next(
            e
            for e in again.get_asset_materialization_events()
            if e.asset_key.path[-1] == "quality_report"
        )
        assert quality.materialization.metadata["reused"].value is True  # rejudged in place
    assert (tmp_path / "exports" / "b-lost" / "export.txt").exists()


def test_ranged_run_gates_per_episode_and_records_each_partition(tmp_path, landing):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["a-clean", "b-lost"])
        result = _run(
            tmp_path, landing, instance, tags={RANGE_START: "a-clean", RANGE_END: "b-lost"}
        )
        assert not result.success  # only the export step failed, for b-lost
        (failure,) = _step_failures(result).values()
        assert failure.step_key == "downstream_export"
        metadata = failure.step_failure_data.user_failure_data.metadata
        assert list(metadata["blocking_reasons"].value) == ["b-lost"]
        (evaluation,) = result.get_asset_check_evaluations()
        assert evaluation.severity == dg.AssetCheckSeverity.WARN
        assert evaluation.metadata["blocked episodes"].value == ["b-lost"]
        assert [r.status.value for r in _check_records(instance, "b-lost")][:1] == ["FAILED"]
        assert [r.status.value for r in _check_records(instance, "a-clean")][:1] == ["SUCCEEDED"]
        records = instance.fetch_materializations(downstream_export.key, limit=10).records
        exports = {r.partition_key: r.asset_materialization for r in records}
        assert list(exports) == ["a-clean"]  # the allowed one recorded, the blocked not
        gate = pipeline.stored_gate(Storage(tmp_path), "a-clean")
        assert gate is not None
        assert exports["a-clean"].tags["dagster/data_version"] == gate.data_version
        assert exports["a-clean"].metadata["exported"].value == 1
        assert _status(instance, downstream_export, "a-clean") == "MATERIALIZED"
        assert _status(instance, downstream_export, "b-lost") == "FAILED"
    assert (tmp_path / "exports" / "a-clean" / "export.txt").exists()
    assert not (tmp_path / "exports" / "b-lost").exists()
    for key in ("a-clean", "b-lost"):
        assert (tmp_path / "quality" / key / "quality.parquet").exists()
        assert (tmp_path / "quality" / key / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_quality_metadata_is_rounded_unit_labelled_with_the_verdict_first(tmp_path, landing):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["a-clean"])
        result = _run(tmp_path, landing, instance, partition_key="a-clean")
        event = next(
            e
            for e in result.get_asset_materialization_events()
            if e.asset_key.path[-1] == "quality_report"
        )
        md = event.materialization.metadata
        assert list(md)[:3] == ["gate", "blocking_reasons", "timeline"]
        assert md["timeline"].value.startswith("![timeline of a-clean](data:image/png;base64,")
        assert (md["gate"].value, md["quality"].value) == ("allowed", "pass")
        assert md["blocking_reasons"].value == [] and md["policy_version"].value == "1"
        assert not {"status", "export", "blocking reasons"} & set(md)  # one key per fact
        assert md["duration (s)"].value == pytest.approx(6.0, abs=0.1)
        for value in md.values():
            if isinstance(value, dg.FloatMetadataValue) and value.value:
                assert len(f"{abs(value.value):.12g}".replace(".", "").strip("0")) <= 4
