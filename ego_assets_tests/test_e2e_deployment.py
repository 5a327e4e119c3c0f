"""End to end on the deployment topology: Postgres instance, dagster-daemon, dagster-webserver.

A fresh database gets infra/dagster.yaml's instance; the daemon and the webserver run as
separate processes against it, with the landing zone and every output in S3 (the
session's loopback moto server). A synthetic capture uploaded to the landing zone must be
registered by the landing sensor (ticking every second here, EGO_SENSOR_INTERVAL_S) and
materialized asset by asset, with its quality check evaluated and every stage's objects
written to the bucket: on the run path (``EGO_SENSOR_INLINE_MAX_S=0``) by a run launched
through the queued run coordinator, on the tick path (the default for a lone short
capture) by the sensor's tick itself, without a run.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.utils import RUNLESS_RUN_ID
from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter

from ego_assets.capture_sets import PER_CAPTURE_ASSETS
from ego_assets.defs.landing_inline import INLINE_BY, INLINE_TAG
from ego_assets.defs.partitions import CAPTURES_PARTITIONS_NAME
from ego_assets.defs.quality import GX_CHECK
from ego_assets.synth import synthesize
from ego_assets_tests.conftest import S3Server
from ego_assets_tests.processes import (
    free_port,
    fresh_database,
    pg_env,
    require_postgres,
    start_dagster,
    stop,
    wait_http_ok,
    write_dagster_home,
)
from ego_assets_tests.waiting import wait_for

CAPTURE_KEY = "e2e-webxr-0001"
ASSETS = ("raw_capture", "trajectory", "quality_report")


@dataclass
class Deployment:
    path: str  # "run" or "tick": who takes a lone capture through the assets
    home: Path
    data: str  # s3://bucket/data
    landing: str  # s3://bucket/landing
    url: str
    env: dict[str, str]


@pytest.fixture(params=["run", "tick"])
def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, s3_server: S3Server
) -> Iterator[Deployment]:
    """Daemon + webserver over a fresh Postgres database and a fresh bucket; stopped and
    dropped afterwards. ``run``: the landing sensor leaves every capture to a run."""
    require_postgres()
    bucket = s3_server.make_bucket()
    with fresh_database("ego_e2e") as db_name:
        home = write_dagster_home(tmp_path / "dagster_home")
        data, landing = f"{bucket}/data", f"{bucket}/landing"
        env = {
            **s3_server.env,
            **pg_env(db_name),
            "DAGSTER_HOME": str(home),
            "EGO_DATA_DIR": data,
            "EGO_LANDING_DIR": landing,
            "EGO_SENSOR_INTERVAL_S": "1",
            "EGO_SENSOR_INLINE_MAX_S": "0" if request.param == "run" else "30",
        }
        port = free_port()
        services = []
        try:
            web = start_dagster(services, env, tmp_path, port)
            url = f"http://127.0.0.1:{port}"
            wait_http_ok(f"{url}/server_info", web)
            yield Deployment(request.param, home, data, landing, url, env)
        finally:
            stop(services)


def _upload_capture(s3: S3Server, landing: str, key: str, tmp: Path) -> None:
    """What an uploader does: every file of the capture, the completion marker last."""
    folder = synthesize("webxr", tmp / key, seconds=2.0, seed=7, capture_id=key)
    s3.upload_dir(folder, f"{landing}/{key}")


def _graphql(url: str, query: str) -> dict:
    body = json.dumps({"query": query}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


def _wait_for_finished_run(instance: dg.DagsterInstance, key: str) -> dg.DagsterRun:
    """The first finished run of partition ``key``: the sensor's tick, the queue and every
    step's subprocess take minutes on a loaded machine, so this waits for the run itself
    (a ceiling only bounds a hang, and its message shows the runs and their last event)."""
    finished = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}

    def runs() -> list[dg.DagsterRun]:
        return list(instance.get_runs(filters=RunsFilter(tags={"dagster/partition": key})))

    def state() -> str:
        seen = []
        for run in runs():
            records = instance.get_records_for_run(run.run_id, limit=1, ascending=False).records
            entry = records[0].event_log_entry if records else None
            last = f"{entry.dagster_event_type} {entry.step_key or ''}" if entry else "none"
            seen.append(f"run {run.run_id} {run.status.value}, last event: {last!r}")
        return "; ".join(seen) or "no run yet (the sensor has not requested one)"

    return wait_for(
        f"a finished run of partition {key}",
        lambda: next((run for run in runs() if run.status in finished), None),
        interval_s=1.0,
        state=state,
    )


def _wait_for_tick_materializations(instance: dg.DagsterInstance, key: str) -> None:
    """Until every per-capture asset of partition ``key`` is materialized, each by the
    landing sensor (its tag), in the order the assets run."""

    def missing() -> list[str]:
        return [
            name
            for name in PER_CAPTURE_ASSETS
            if not instance.get_materialized_partitions(dg.AssetKey(name)) >= {key}
        ]

    wait_for(
        f"every asset of {key} materialized by the landing sensor's tick",
        lambda: not missing(),
        interval_s=1.0,
        state=lambda: f"not yet materialized: {missing()}",
    )
    for name in PER_CAPTURE_ASSETS:
        event = instance.get_latest_materialization_event(dg.AssetKey(name))
        assert event is not None and event.asset_materialization is not None
        tags = event.asset_materialization.tags or {}
        assert INLINE_BY in (tags.get(INLINE_TAG), tags.get("ego/exported_by")), (name, tags)


def test_uploaded_capture_is_registered_and_fully_materialized_by_daemon_and_sensor(
    deployment: Deployment, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _upload_capture(s3_server, deployment.landing, CAPTURE_KEY, tmp_path / "upload")

    for name, value in deployment.env.items():
        monkeypatch.setenv(name, value)
    instance = dg.DagsterInstance.from_config(str(deployment.home))
    try:
        if deployment.path == "run":
            run = _wait_for_finished_run(instance, CAPTURE_KEY)
            assert run.status == DagsterRunStatus.SUCCESS, run.run_id
            assert run.job_name == "capture_job"
            assert run.tags["dagster/sensor_name"] == "landing_sensor"
            run_id = run.run_id
        else:  # every asset, the exports included, materialized by the tick: no run
            _wait_for_tick_materializations(instance, CAPTURE_KEY)
            assert not instance.get_runs(
                filters=RunsFilter(tags={"dagster/partition": CAPTURE_KEY})
            )
            run_id = RUNLESS_RUN_ID
        assert instance.get_dynamic_partitions(CAPTURES_PARTITIONS_NAME) == [CAPTURE_KEY]

        for name in ASSETS:
            event = instance.get_latest_materialization_event(dg.AssetKey(name))
            assert event is not None and event.run_id == run_id, name
            materialization = event.asset_materialization
            assert materialization is not None and materialization.partition == CAPTURE_KEY
        quality = instance.get_latest_materialization_event(dg.AssetKey("quality_report"))
        assert quality is not None and quality.asset_materialization is not None
        metadata = quality.asset_materialization.metadata
        # A clean 2 s capture: only its short duration is flagged (warn, exports allowed).
        assert (metadata["quality"].value, metadata["gate"].value) == ("warn", "allowed")
        assert metadata["worst_metric"].value == "episode/duration_s"
        assert metadata["duration (s)"].value == pytest.approx(2.0, abs=0.1)

        check_key = dg.AssetCheckKey(dg.AssetKey("quality_report"), GX_CHECK)
        records = instance.event_log_storage.get_latest_asset_check_execution_by_key([check_key])
        record = records[check_key]
        assert record.run_id == run_id
        assert record.status.value == "SUCCEEDED"
        evaluation = record.event.dagster_event.event_specific_data
        assert evaluation.passed

        # Every stage's objects for the capture, in the bucket.
        data = deployment.data
        raw = s3_server.keys(f"{data}/raw/{CAPTURE_KEY}")
        landed = s3_server.keys(f"{deployment.landing}/{CAPTURE_KEY}")
        assert set(raw) == {"manifest.json", *(f"capture/{k}" for k in landed)}
        trajectory = s3_server.keys(f"{data}/trajectory/{CAPTURE_KEY}")
        assert "capture.json" in trajectory
        assert "streams.parquet" in trajectory
        quality_keys = s3_server.keys(f"{data}/quality/{CAPTURE_KEY}")
        assert {"quality.json", "quality.parquet"} <= set(quality_keys)
        bucket, _, prefix = data.removeprefix("s3://").partition("/")
        body = (
            s3_server.client()
            .get_object(Bucket=bucket, Key=f"{prefix}/quality/{CAPTURE_KEY}/quality.json")["Body"]
            .read()
        )
        report = json.loads(body)
        # Dagster's metadata is the stored report's verdict.
        assert report["capture_id"] == CAPTURE_KEY
        assert metadata["quality"].value == report["status"]
        assert metadata["worst_metric"].value == report["worst_metric"]
    finally:
        instance.dispose()

    # The webserver serves the same instance: it lists the run as a success (no run on
    # the tick path).
    runs = _graphql(
        deployment.url,
        "{ runsOrError { ... on Runs { results { runId status jobName } } } }",
    )["runsOrError"]["results"]
    if deployment.path == "run":
        assert {"runId": run_id, "status": "SUCCESS", "jobName": "capture_job"} in runs
    else:
        assert runs == []
