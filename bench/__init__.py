"""Benchmarks: `python -m bench <name> [--json FILE]`, each printing a table."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("bench")

POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


def name_value_table(rows: Sequence[tuple[str, str]]) -> str:
    """Two aligned columns: a label and its figure per line."""
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def report(table: str, result: dict[str, Any], json_path: Path | None) -> None:
    """Log ``table`` and, when asked, write ``result`` as JSON to ``json_path``."""
    log.info("%s", table)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=1) + "\n")


@contextlib.contextmanager
def postgres_home(
    home: Path, prefix: str, extra_config: dict[str, Any] | None = None
) -> Iterator[tuple[Path, str]]:
    """DAGSTER_HOME on a fresh database ``<prefix>_<hex>`` of the local PostgreSQL (plus
    ``extra_config`` in its dagster.yaml); yields (home, database name), drops it on exit."""
    import psycopg2

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"

    def admin(sql: str) -> None:
        conn = psycopg2.connect(dbname="postgres", **POSTGRES)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
        conn.close()

    admin(f'CREATE DATABASE "{name}"')
    home.mkdir(parents=True, exist_ok=True)
    config = {
        "storage": {
            "postgres": {
                "postgres_db": {
                    "hostname": POSTGRES["host"],
                    "port": POSTGRES["port"],
                    "username": POSTGRES["user"],
                    "password": "",
                    "db_name": name,
                    "scheme": "postgresql+psycopg2",
                }
            }
        },
        **(extra_config or {}),
        "telemetry": {"enabled": False},
    }
    (home / "dagster.yaml").write_text(json.dumps(config))
    try:
        yield home, name
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
