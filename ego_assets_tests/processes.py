"""Test helpers for deployment tests: a throwaway Postgres database, a DAGSTER_HOME
written from infra/dagster.yaml, and Dagster processes started and stopped by their ids."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest.mock
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest
import yaml

from ego_assets_tests.waiting import CEILING_S, wait_for

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
INFRA = REPO / "infra"
BIN = Path(os.environ.get("VIRTUAL_ENV") or REPO / ".venv") / "bin"
PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


def postgres_reachable() -> bool:
    """True when the machine's PostgreSQL accepts a trust-auth connection."""
    try:
        psycopg2.connect(dbname="postgres", connect_timeout=3, **PG).close()
    except psycopg2.OperationalError:
        return False
    return True


def require_postgres() -> None:
    if not postgres_reachable():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (user postgres, trust auth)")


def _admin(sql: str) -> None:
    conn = psycopg2.connect(dbname="postgres", connect_timeout=5, **PG)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


@contextlib.contextmanager
def fresh_database(prefix: str = "ego_test") -> Iterator[str]:
    """A new, empty database with a unique name; dropped (connections closed) on exit."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_env(db_name: str) -> dict[str, str]:
    """The DAGSTER_PG_* variables infra/dagster.yaml reads, for ``db_name`` on this machine."""
    return {
        "DAGSTER_PG_HOST": PG["host"],
        "DAGSTER_PG_PORT": str(PG["port"]),
        "DAGSTER_PG_USER": PG["user"],
        "DAGSTER_PG_PASSWORD": "",
        "DAGSTER_PG_DB": db_name,
    }


def write_dagster_home(home: Path, *, s3_compute_logs: bool = False) -> Path:
    """``home`` with the deployment's instance config (infra/dagster.yaml) as dagster.yaml.

    Without ``s3_compute_logs`` the S3 compute log manager is left out (step logs stay
    local), so a test needs no bucket for them; with it the environment must carry
    `compute_logs_env`.
    """
    home.mkdir(parents=True, exist_ok=True)
    if s3_compute_logs:
        shutil.copyfile(INFRA / "dagster.yaml", home / "dagster.yaml")
        return home
    config = yaml.safe_load((INFRA / "dagster.yaml").read_text())
    config.pop("compute_logs", None)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return home


def compute_logs_env(bucket: str, endpoint_url: str, prefix: str = "compute-logs") -> dict:
    """The variables infra/dagster.yaml's S3 compute logs read, for ``s3://bucket``."""
    return {
        "DAGSTER_COMPUTE_LOGS_BUCKET": bucket.removeprefix("s3://"),
        "DAGSTER_COMPUTE_LOGS_PREFIX": prefix,
        "AWS_ENDPOINT_URL_S3": endpoint_url,
    }


def create_instance_schema(env: Mapping[str, str]) -> None:
    """Create the Dagster instance's tables in the database ``env`` names, before any
    service starts: two processes that open an empty Postgres database at once both create
    them and one fails (``type "alembic_version" already exists``). A deployment does the
    same with its first ``dagster instance ...`` command (docs/deploy.md)."""
    import dagster as dg

    with (
        unittest.mock.patch.dict(os.environ, env),
        dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance,
    ):
        instance.get_runs_count()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    """A started process and the file its output goes to."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def start(name: str, args: list[str], env: Mapping[str, str], log_dir: Path) -> Service:
    """Start ``args`` in its own process group, output to ``log_dir/<name>.log``."""
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            args,
            cwd=REPO,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    log.info("started %s (pid %d)", name, process.pid)
    return Service(name, process, log_path)


def stop(services: list[Service], timeout_s: float = 15.0) -> None:
    """SIGTERM the process group of every service (led by its pid), SIGKILL after a timeout.

    A group holds what its service spawned itself (the webserver's and daemon's code
    servers, run workers), so nothing outlives the test. All groups are signalled
    first, then awaited, so shutdowns overlap.
    """
    for service in services:
        if service.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(service.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for service in services:
        try:
            service.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) ignored SIGTERM; killing", service.name, service.process.pid)
        # Children (code servers, run workers) may still be alive in the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            service.process.wait(timeout=5)


def wait_http_ok(url: str, service: Service, timeout_s: float = CEILING_S) -> None:
    """Poll ``url`` until it answers 200; fail at once if ``service`` exits, and with its
    log tail after ``timeout_s`` (a ceiling for a hang, generous by default)."""

    def answers() -> bool:
        if service.process.poll() is not None:
            pytest.fail(f"{service.name} exited early:\n{service.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_for(f"{url} to answer 200", answers, ceiling_s=timeout_s, state=service.tail)


def webserver_args(port: int) -> list[str]:
    return [
        str(BIN / "dagster-webserver"),
        "-w",
        "workspace.yaml",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
    ]


def daemon_args() -> list[str]:
    return [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"]


def start_dagster(
    services: list[Service], env: Mapping[str, str], log_dir: Path, port: int
) -> Service:
    """Start a Dagster daemon, then a webserver on 127.0.0.1:``port`` (both over
    workspace.yaml), each added to ``services`` once started, so the caller's `stop` ends
    it even when the next one fails to start. Returns the webserver (``/server_info``
    answers once it is up)."""
    create_instance_schema(env)
    services.append(start("dagster-daemon", daemon_args(), env, log_dir))
    web = start("dagster-webserver", webserver_args(port), env, log_dir)
    services.append(web)
    return web
