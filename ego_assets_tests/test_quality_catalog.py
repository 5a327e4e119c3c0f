"""Quality catalog: pure concatenation, the aggregate asset and its nightly schedule."""

import datetime as dt
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.defs.aggregates import quality_catalog
from ego_assets.defs.pools import SINGLE_WRITER_POOL
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.schedules import aggregates_job, nightly_aggregates
from ego_assets.quality.catalog import build_catalog, write_quality_catalog
from ego_assets.quality.gate import GATE_FILE, Finding, Gate
from ego_assets.quality.waivers import Waiver
from ego_assets.storage import Storage


def _row(capture_id: str, status: str, loss: float, extra: bool = True) -> pa.Table:
    columns = {"capture_id": [capture_id], "status": [status], "tracking_loss_ratio": [loss]}
    if extra:
        columns["jitter_m_s3"] = [12.5]
    return pa.table(columns)


def _gate(key: str, status: str, waived: bool = False) -> Gate:
    finding = Finding(
        "hand:left/tracking_loss_ratio", "tracking_loss_ratio", "fail", 0.6, "1", 0.5, "max",
        ("webdataset", "lerobot", "robomimic"),
    )  # fmt: skip
    waivers = (Waiver(key, "tracking_loss_ratio", "one-handed task", "qa", "2026-12-01"),)
    gate = Gate(key, "v", True, status, "", (), 1, (finding,) if status == "fail" else ())
    return gate.with_waivers(waivers if waived else (), "v")


def _write_report(
    root: Path, key: str, table: pa.Table, complete: bool = True, waived: bool = False
) -> None:
    folder = root / "quality" / key
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "quality.parquet")
    if complete:
        status = table["status"][0].as_py()
        (folder / GATE_FILE).write_text(_gate(key, status, waived).to_json())


def test_catalog_unions_columns_by_name_and_sorts_by_key():
    catalog = build_catalog(
        {
            "b-2": _row("dev-b", "fail", 0.25),
            "a-1": _row("dev-a", "pass", 0.0, extra=False),
        }
    )
    assert catalog.num_rows == 2
    assert catalog.column_names == [
        "capture_key",
        "capture_id",
        "status",
        "tracking_loss_ratio",
        "jitter_m_s3",
    ]
    assert catalog["capture_key"].to_pylist() == ["a-1", "b-2"]
    assert catalog["tracking_loss_ratio"].to_pylist() == [0.0, 0.25]
    assert catalog["jitter_m_s3"].to_pylist() == [None, 12.5]
    assert build_catalog({}).num_rows == 0


def test_catalog_file_holds_every_complete_report(tmp_path):
    _write_report(tmp_path, "ep-1", _row("ep-1", "pass", 0.0))
    _write_report(tmp_path, "ep-2", _row("ep-2", "fail", 0.6))
    _write_report(tmp_path, "ep-3", _row("ep-3", "pass", 0.1), complete=False)
    _write_report(tmp_path, "ep-4", _row("ep-4", "fail", 0.6), waived=True)
    summary = write_quality_catalog(Storage(tmp_path))
    assert (summary.episodes, summary.failed, summary.blocked, summary.waived) == (3, 2, 1, 1)
    table = pq.read_table(tmp_path / "catalog" / "quality" / "quality.parquet")
    assert table["capture_key"].to_pylist() == ["ep-1", "ep-2", "ep-4"]
    assert table["tracking_loss_ratio"].to_pylist() == [0.0, 0.6, 0.6]
    assert table["export"].to_pylist() == ["allowed", "blocked", "allowed"]
    assert table["policy_version"].to_pylist() == [1, 1, 1]
    assert table["blocking_reasons"].to_pylist() == [
        "",
        "hand:left/tracking_loss_ratio = 0.6 (fail > 0.5)",
        "",
    ]
    assert table["waivers"].to_pylist() == ["", "", "tracking_loss_ratio by qa: one-handed task"]
    assert summary.uri.endswith("catalog/quality/quality.parquet")


def test_quality_catalog_asset_is_single_writer_and_reports_episode_count(tmp_path):
    _write_report(tmp_path, "ep-1", _row("ep-1", "warn", 0.05))
    # a killed export's staging folder (no live writer): the nightly step sweeps it
    leftover = tmp_path / "exports" / "holos_hdf5" / ".ep-1.abcd1234.tmp"
    leftover.mkdir(parents=True)
    (leftover / "episode.hdf5").write_bytes(b"half")
    assert quality_catalog.op.pool == SINGLE_WRITER_POOL
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [quality_catalog],
            instance=instance,
            resources={"storage": StorageResource(root=str(tmp_path))},
        )
        (event,) = result.get_asset_materialization_events()
        assert event.materialization.metadata["episodes"].value == 1
        assert event.materialization.metadata["failed_episodes"].value == 0
        assert event.materialization.metadata["leftovers_removed"].value == 1
    assert not leftover.exists()


def test_nightly_schedule_requests_the_aggregates_job_at_three_utc():
    assert nightly_aggregates.cron_schedule == "0 3 * * *"
    assert nightly_aggregates.execution_timezone == "UTC"
    assert nightly_aggregates.default_status == dg.DefaultScheduleStatus.RUNNING
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=dt.datetime(2026, 11, 30, 3, 0, tzinfo=dt.UTC),
        )
        requests = list(nightly_aggregates.evaluate_tick(context).run_requests or [])
    assert len(requests) == 1
    assert nightly_aggregates.job_name == aggregates_job.name == "aggregates_job"
    defs = dg.Definitions(
        assets=[quality_catalog],
        jobs=[aggregates_job],
        resources={"storage": StorageResource(root="unused")},
    )
    job = defs.resolve_job_def("aggregates_job")
    assert job.asset_layer.executable_asset_keys == {dg.AssetKey("quality_catalog")}
