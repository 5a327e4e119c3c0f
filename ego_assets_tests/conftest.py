"""Shared fixtures: a loopback S3 API server (moto's server mode) for the whole test session,
and the code location's run-worker event switches (`RUN_WORKER_ENV`) for every test.

Nothing here talks to real AWS: the server binds to 127.0.0.1 on a free port, the
credentials are dummies set for the session only (restored afterwards), and any shared
AWS config/credentials files are hidden from botocore for the session.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ego_assets.defs.episodes import apply_run_worker_env
from ego_assets_tests.holos_files import holos_captures, holos_exports  # noqa: F401

# Every test process runs Dagster with the code location's event switches, whichever
# test happens to import `ego_assets.definitions` first.
apply_run_worker_env(os.environ)

DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
# Variables that would redirect or re-authenticate botocore: removed for the session.
_CLEARED_AWS_ENV = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ROLE_ARN")


@dataclass
class S3Server:
    """A running loopback S3 server.

    Attributes:
        endpoint_url: ``http://127.0.0.1:<port>``; pass it as ``endpoint_url`` to s3fs/boto3,
            as ``StorageResource(endpoint_url=...)`` or as ``EGO_S3_ENDPOINT_URL``.
        env: the dummy AWS variables plus ``EGO_S3_ENDPOINT_URL``, for child processes
            (``subprocess.Popen(..., env={**os.environ, **server.env})``).
    """

    endpoint_url: str
    env: dict[str, str]
    _counter: itertools.count = field(default_factory=itertools.count)

    @property
    def storage_options(self) -> dict[str, str]:
        """fsspec options for `ego_assets.storage.Storage` / ``UPath``."""
        return {"endpoint_url": self.endpoint_url}

    def client(self):
        """A boto3 S3 client bound to this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")

    def make_bucket(self, name: str | None = None) -> str:
        """Create bucket ``name`` (default: a fresh unique name) and return ``s3://name``."""
        bucket = name or f"ego-test-{next(self._counter)}-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(Bucket=bucket)
        return f"s3://{bucket}"

    def upload_dir(self, local: Path, url: str, last: str | None = "ego_capture.json") -> None:
        """Upload every file below ``local`` to ``s3://bucket/prefix``, ``last`` (the marker) last.

        What an uploader does with a capture folder: the marker goes up after the data.
        """
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        rels = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
        client = self.client()
        for rel in sorted(rels, key=lambda r: r == last):
            client.upload_file(str(local / rel), bucket, prefix + rel)

    def keys(self, url: str) -> list[str]:
        """Every object key below ``s3://bucket/prefix`` (sorted, relative to the prefix)."""
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(
            obj["Key"][len(prefix) :] for page in pages for obj in page.get("Contents", [])
        )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 (free port) with dummy credentials, for the session."""
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as patch:
        for name, value in DUMMY_AWS_ENV.items():
            patch.setenv(name, value)
        for name in _CLEARED_AWS_ENV:
            patch.delenv(name, raising=False)
        # One INFO line per request would bury a failing test's own log.
        patch.setattr(logging.getLogger("werkzeug"), "level", logging.WARNING)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            env = {**DUMMY_AWS_ENV, "EGO_S3_ENDPOINT_URL": endpoint}
            yield S3Server(endpoint_url=endpoint, env=env)
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A fresh empty bucket for one test: ``s3://<unique name>``."""
    return s3_server.make_bucket()
