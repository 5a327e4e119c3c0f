"""The deployment files in infra/ are what Dagster, docker compose and the Helm chart accept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._core.instance.config import dagster_instance_config

from ego_assets.defs.episodes import BACKFILL_CHUNK, RUN_WORKER_ENV
from ego_assets.defs.pools import SINGLE_WRITER_LIMIT, SINGLE_WRITER_POOL
from ego_assets_tests.processes import (
    INFRA,
    fresh_database,
    pg_env,
    require_postgres,
    write_dagster_home,
)
from ego_assets_tests.waiting import CEILING_S


def _load(name: str) -> Any:
    return yaml.safe_load((INFRA / name).read_text())


def test_instance_config_is_valid_for_dagster_with_queued_runs_and_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in pg_env("dagster").items():
        monkeypatch.setenv(name, value)
    home = write_dagster_home(tmp_path / "home")
    config, custom_class = dagster_instance_config(str(home))
    assert custom_class is None
    db = config["storage"]["postgres"]["postgres_db"]
    assert db["scheme"] == "postgresql+psycopg2"
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    runs = config["concurrency"]["runs"]
    backfill_limit = {t["key"]: t["limit"] for t in runs["tag_concurrency_limits"]}
    # Backfills leave run slots for sensor-driven captures.
    assert 0 < backfill_limit["dagster/backfill"] < runs["max_concurrent_runs"]
    assert config["concurrency"]["pools"]["default_limit"] >= 1
    assert config["telemetry"] == {"enabled": False}
    assert config["backfills"]["use_threads"] and config["sensors"]["use_threads"]


def test_instance_config_names_every_connection_setting_by_env_var() -> None:
    db = _load("dagster.yaml")["storage"]["postgres"]["postgres_db"]
    assert {k: v for k, v in db.items() if k != "scheme"} == {
        "hostname": {"env": "DAGSTER_PG_HOST"},
        "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USER"},
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"},
    }
    local = dict(
        line.split("=", 1)
        for line in (INFRA / "local.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert local["DAGSTER_PG_HOST"] == "127.0.0.1" and local["DAGSTER_PG_PORT"] == "5432"


def test_compute_logs_go_to_s3_in_the_instance_and_the_helm_values() -> None:
    logs = _load("dagster.yaml")["compute_logs"]
    assert (logs["module"], logs["class"]) == (
        "dagster_aws.s3.compute_log_manager",
        "S3ComputeLogManager",
    )
    assert logs["config"]["bucket"] == {"env": "DAGSTER_COMPUTE_LOGS_BUCKET"}
    assert logs["config"]["prefix"] == {"env": "DAGSTER_COMPUTE_LOGS_PREFIX"}
    helm = _load("helm/values.yaml")["computeLogManager"]
    assert helm["type"] == "S3ComputeLogManager"
    assert helm["config"]["s3ComputeLogManager"]["bucket"]
    # reading a run's logs back from S3: ego_assets_tests/test_api.py


def test_instance_opens_on_a_fresh_postgres_database_with_the_single_writer_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_postgres()
    with fresh_database() as db_name:
        for name, value in pg_env(db_name).items():
            monkeypatch.setenv(name, value)
        home = write_dagster_home(tmp_path / "home")
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
            assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
            assert instance.run_coordinator.dequeue_interval_seconds == 1  # type: ignore[attr-defined]
            queue = instance.get_concurrency_config().run_queue_config
            assert queue is not None and queue.max_concurrent_runs == 8
            assert instance.run_retries_enabled and instance.run_monitoring_enabled
            # runs forked warm; crashed runs (dead worker: the launcher's health check)
            # are retried once
            assert type(instance.run_launcher).__name__ == "WarmRunLauncher"
            assert instance.run_launcher.supports_check_run_worker_health
            assert instance.run_retries_max_retries == 1
            assert not instance.run_retries_retry_on_asset_or_op_failure
            # Storage round trip: a partition registered is read back from Postgres.
            instance.add_dynamic_partitions("captures", ["cap-001", "cap-002"])
            assert instance.get_dynamic_partitions("captures") == ["cap-001", "cap-002"]
            instance.event_log_storage.set_concurrency_slots(
                SINGLE_WRITER_POOL, SINGLE_WRITER_LIMIT
            )
            info = instance.event_log_storage.get_concurrency_info(SINGLE_WRITER_POOL)
            assert info.slot_count == 1
        finally:
            instance.dispose()


def _env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def test_compose_file_wires_postgres_s3_code_server_webserver_and_daemon() -> None:
    compose = _load("docker-compose.yaml")
    services = compose["services"]
    assert set(services) == {"postgres", "s3", "init", "code", "catalog", "webserver", "daemon"}
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["s3"]["image"].startswith("minio/minio:")
    build = services["init"]["build"]
    assert (INFRA / build["context"] / build["dockerfile"]).resolve() == (INFRA / "Dockerfile")
    dagster_services = ("init", "code", "catalog", "webserver", "daemon")
    for name in dagster_services:
        service = services[name]
        assert service["image"] == services["init"]["image"], name
        assert service["build"] == build, name
        env = _env_of(service)
        assert env["DAGSTER_PG_HOST"] == "postgres", name
        assert env["EGO_DATA_DIR"].startswith("s3://"), name
        assert env["EGO_S3_ENDPOINT_URL"] == "http://s3:9000", name
        # step logs in the same MinIO (infra/dagster.yaml compute_logs)
        assert env["DAGSTER_COMPUTE_LOGS_BUCKET"] == "ego", name
        assert env["AWS_ENDPOINT_URL_S3"] == env["EGO_S3_ENDPOINT_URL"], name
        assert "dagster-storage" in service["volumes"][0], name
    assert services["init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["init"]["depends_on"]["s3"]["condition"] == "service_healthy"
    for name in ("code", "catalog"):
        assert services[name]["depends_on"]["init"]["condition"] == "service_completed_successfully"
    for name in ("webserver", "daemon"):
        assert services[name]["depends_on"]["code"]["condition"] == "service_healthy"
        assert services[name]["depends_on"]["catalog"]["condition"] == "service_healthy"
    # run monitoring finds dead run workers (the code server's children) by process id
    assert services["daemon"]["pid"] == "service:code"
    assert services["webserver"]["pid"] == "service:code"  # terminates warm runs by pid
    assert "single_writer 1" in " ".join(services["init"]["command"])
    # Published ports are bound to loopback only.
    for name in ("webserver", "s3"):
        assert all(p.startswith("127.0.0.1:") for p in services[name]["ports"]), name
    assert services["webserver"]["ports"] == ["127.0.0.1:3000:3000"]
    assert set(compose["volumes"]) == {"pgdata", "s3data", "dagster-storage"}


def test_compose_workspace_reaches_the_code_server_over_grpc() -> None:
    workspace = _load("workspace.docker.yaml")
    entry, catalog = workspace["load_from"]
    assert entry["grpc_server"] == {"host": "code", "port": 4000, "location_name": "ego_assets"}
    assert catalog["grpc_server"] == {
        "host": "catalog",
        "port": 4001,
        "location_name": "ego_assets_catalog",
    }
    compose = _load("docker-compose.yaml")
    assert "ego_assets.catalog_definitions" in compose["services"]["catalog"]["command"]
    dockerfile = (INFRA / "Dockerfile").read_text()
    assert dockerfile.startswith("# ") and "FROM python:3.11-slim" in dockerfile
    assert "-c constraints.txt" in dockerfile
    assert '"-p", "4000"' in dockerfile and '"ego_assets.definitions"' in dockerfile


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    return [standalone] if standalone else None


def test_compose_file_validates_against_the_compose_specification() -> None:
    # compose-pydantic's models are generated from the compose-spec JSON schema and forbid
    # unknown keys; `x-` extension blocks (our YAML anchors) are outside the models.
    from compose_pydantic import ComposeSpecification
    from pydantic import ValidationError

    compose = {k: v for k, v in _load("docker-compose.yaml").items() if not k.startswith("x-")}
    spec = ComposeSpecification.model_validate(compose)
    assert spec.services is not None and set(spec.services) == set(compose["services"])
    assert spec.services["daemon"].environment is not None
    misspelled = {**compose, "services": {**compose["services"]}}
    misspelled["services"]["daemon"] = {
        "enviroment" if k == "environment" else k: v
        for k, v in compose["services"]["daemon"].items()
    }
    with pytest.raises(ValidationError, match="enviroment"):
        ComposeSpecification.model_validate(misspelled)


def test_compose_file_passes_docker_compose_config() -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no docker compose plugin or docker-compose binary on this machine")
    result = subprocess.run(
        [*cli, "-f", str(INFRA / "docker-compose.yaml"), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=CEILING_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_helm_values_set_k8s_run_launcher_external_postgres_s3_and_run_limits() -> None:
    values = _load("helm/values.yaml")
    assert values["postgresql"]["enabled"] is False
    assert values["postgresql"]["postgresqlScheme"] == "postgresql+psycopg2"
    assert values["global"]["postgresqlSecretName"]
    assert values["generatePostgresqlPasswordSecret"] is False

    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    run_pod = launcher["config"]["k8sRunLauncher"]["runK8sConfig"]["containerConfig"]
    assert run_pod["resources"]["requests"]["memory"] == "2Gi"

    deployment, catalog = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"][:2] == ["-m", "ego_assets.definitions"]
    assert catalog["dagsterApiGrpcArgs"][:2] == ["-m", "ego_assets.catalog_definitions"]
    assert catalog["env"] == deployment["env"]
    assert deployment["includeConfigInLaunchedRuns"] == {"enabled": True}
    env = {item["name"]: item["value"] for item in deployment["env"]}
    assert env["EGO_DATA_DIR"].startswith("s3://")
    assert env["EGO_LANDING_DIR"].startswith("s3://")

    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["type"] == "QueuedRunCoordinator"
    queued = coordinator["config"]["queuedRunCoordinator"]
    # Dagster rejects run limits in the coordinator once `concurrency` is enabled.
    assert "maxConcurrentRuns" not in queued and "tagConcurrencyLimits" not in queued
    runs = values["concurrency"]["runs"]
    assert values["concurrency"]["enabled"] is True
    (backfill,) = runs["tagConcurrencyLimits"]
    assert backfill["key"] == "dagster/backfill"
    assert 0 < backfill["limit"] < runs["maxConcurrentRuns"]
    for daemon_loop in ("sensors", "backfills"):
        assert values["dagsterDaemon"][daemon_loop]["useThreads"] is True


def test_sensor_interval_comes_from_the_environment_at_definition_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ego_assets import definitions
    from ego_assets.defs.sensors import sensor_interval_s

    # Dagster is asked for a second less: its 5 s loop then ticks on the wake-up that is due
    monkeypatch.setenv("EGO_SENSOR_INTERVAL_S", "5")
    sensor = definitions.defs().resolve_sensor_def("landing_sensor")
    assert sensor.minimum_interval_seconds == 4
    assert "Ticks every 5 s" in (sensor.description or "")
    monkeypatch.setenv("EGO_SENSOR_INTERVAL_S", "1")
    assert definitions.defs().resolve_sensor_def("landing_sensor").minimum_interval_seconds == 1
    monkeypatch.delenv("EGO_SENSOR_INTERVAL_S")
    assert definitions.defs().resolve_sensor_def("landing_sensor").minimum_interval_seconds == 29
    with pytest.raises(ValueError, match="EGO_SENSOR_INTERVAL_S"):
        sensor_interval_s({"EGO_SENSOR_INTERVAL_S": "0.5"})


def test_loading_the_code_location_sets_the_run_worker_event_switches() -> None:
    # a run worker (or celery worker) imports the code location in a fresh process; an
    # operator's own setting wins
    env = {k: v for k, v in os.environ.items() if k not in RUN_WORKER_ENV}
    env["DAGSTER_EVENT_BATCH_SIZE"] = "7"
    probe = (
        "import json, os, ego_assets.definitions; "
        "print(json.dumps({k: os.environ.get(k) for k in "
        "('DAGSTER_EVENT_BATCH_SIZE', 'DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS')}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "DAGSTER_EVENT_BATCH_SIZE": "7",
        "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "1",
    }
    assert RUN_WORKER_ENV["DAGSTER_EVENT_BATCH_SIZE"] == str(BACKFILL_CHUNK)


def test_deploy_doc_backfill_figures_match_the_code_location() -> None:
    # 10,000 captures in chunks of BACKFILL_CHUNK: the run count docs/deploy.md quotes.
    assert BACKFILL_CHUNK == 50 and -(-10_000 // BACKFILL_CHUNK) == 200
    deploy = (INFRA.parent / "docs" / "deploy.md").read_text()
    assert "200 runs" in deploy and "multi_run(50)" in deploy and SINGLE_WRITER_POOL in deploy
