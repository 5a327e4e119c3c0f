"""Stage the dataset releases and the consent withdrawals into the catalog (schema ``platform``).

=========================  ==============================================  ==================
table                      read from                                       row
=========================  ==============================================  ==================
``release_versions``       ``releases/<name>/v<N>/release.json``           one per version
``release_episodes``       the same manifests' ``episodes``                one per episode
                                                                           of each version
``consent_withdrawals``    ``consent/withdrawals/<id>.json``               one per record
=========================  ==============================================  ==================

A release version is immutable once its folder exists, so only manifests whose
fingerprint (modification time and size; S3: ETag) is new are read; a version folder that
disappeared loses its rows. Each capture whose release membership changed gets a new
``item_versions`` row (source ``release_episodes``, fingerprint: its ``name@vN`` list),
so the incremental ``episodes`` model rebuilds its ``releases`` column. Withdrawal
records are few and small: the table is replaced whenever the set of records changed.

The folder and file names are the ones `ego_assets.releases` writes (this room may not
import it: releases read the catalog).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import duckdb
import pyarrow as pa

from ego_assets.storage import Storage

RELEASES_DIR = "releases"
MANIFEST_FILE = "release.json"
WITHDRAWALS_DIR = "consent/withdrawals"
MEMBERSHIP_SOURCE = "release_episodes"
VERSION_DIR = re.compile(r"^v([1-9][0-9]*)$")

RELEASE_VERSIONS_SCHEMA = pa.schema(
    [
        ("release", pa.string()),
        ("version", pa.int64()),
        ("path", pa.string()),
        ("episodes", pa.int64()),
        ("bytes", pa.int64()),
        ("inputs_sha256", pa.string()),
        ("fingerprint", pa.string()),
    ]
)
RELEASE_EPISODES_SCHEMA = pa.schema(
    [
        ("release", pa.string()),
        ("version", pa.int64()),
        ("capture_key", pa.string()),
        ("split", pa.string()),
        ("demonstrator", pa.string()),
    ]
)
WITHDRAWALS_SCHEMA = pa.schema(
    [
        ("withdrawal_id", pa.string()),
        ("demonstrator", pa.string()),
        ("withdrawn_at", pa.timestamp("us")),
        ("withdrawn_by", pa.string()),
        ("reason", pa.string()),
        ("capture_keys", pa.list_(pa.string())),
        ("fingerprint", pa.string()),
    ]
)
RELEASE_TABLES = {
    "release_versions": RELEASE_VERSIONS_SCHEMA,
    "release_episodes": RELEASE_EPISODES_SCHEMA,
    "consent_withdrawals": WITHDRAWALS_SCHEMA,
}


def _fingerprint(info: dict[str, Any]) -> str:
    stamp = info.get("ETag") or info.get("mtime") or info.get("LastModified") or ""
    return f"{stamp}:{info.get('size')}"


def _listing(storage: Storage, pattern: str) -> dict[str, dict[str, Any]]:
    """fs path -> info of the files matching ``pattern`` below the data root."""
    base = storage.root
    found = base.fs.glob(f"{base.path.rstrip('/')}/{pattern}", detail=True)
    return dict(found) if isinstance(found, dict) else {}


def list_release_versions(storage: Storage) -> dict[tuple[str, int], tuple[str, str]]:
    """(release, version) -> (manifest fs path, fingerprint) of every finished version."""
    versions = {}
    for path, info in _listing(storage, f"{RELEASES_DIR}/*/v*/{MANIFEST_FILE}").items():
        parts = path.rstrip("/").split("/")
        match = VERSION_DIR.fullmatch(parts[-2])
        if match and not parts[-3].startswith("."):
            versions[(parts[-3], int(match.group(1)))] = (path, _fingerprint(info))
    return versions


def _manifest_rows(release: str, version: int, data: dict[str, Any], fingerprint: str) -> Any:
    episodes = [
        {
            "release": release,
            "version": version,
            "capture_key": e["capture_key"],
            "split": e.get("split"),
            "demonstrator": e.get("demonstrator"),
        }
        for e in data.get("episodes", [])
    ]
    summary = {
        "release": release,
        "version": version,
        "path": f"{RELEASES_DIR}/{release}/v{version}",
        "episodes": len(episodes),
        "bytes": sum(int(f.get("bytes", 0)) for f in data.get("files", [])),
        "inputs_sha256": data.get("inputs_sha256"),
        "fingerprint": fingerprint,
    }
    return summary, episodes


def _timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)


def stage_releases(
    con: duckdb.DuckDBPyConnection,
    storage: Storage,
    batch: Callable[[], int],
    record_items: Callable[[duckdb.DuckDBPyConnection, str, int], None],
) -> dict[str, int]:
    """Stage what changed (see the module docstring); changed item counts per table.

    ``batch()`` gives the run's batch number (allocated on first use); ``record_items``
    writes ``item_versions`` rows for the registered ``versions`` relation
    (capture_key, fingerprint).
    """
    counts = {"release_versions": 0, "release_episodes": 0, "consent_withdrawals": 0}
    listed = list_release_versions(storage)
    stored = {
        (r, v): f
        for r, v, f in con.execute(
            "select release, version, fingerprint from platform.release_versions"
        ).fetchall()
    }
    changed = [k for k, (_, f) in listed.items() if stored.get(k) != f]
    removed = [k for k in stored if k not in listed]
    if changed or removed:
        number = batch()
        fs = storage.root.fs
        summaries, episodes = [], []
        for key in sorted(changed):
            path, fingerprint = listed[key]
            summary, rows = _manifest_rows(*key, json.loads(fs.cat_file(path)), fingerprint)
            summaries.append(summary)
            episodes += rows
        touched = pa.table(
            {
                "release": pa.array([k[0] for k in changed + removed], pa.string()),
                "version": pa.array([k[1] for k in changed + removed], pa.int64()),
            }
        )
        con.register("touched_versions", touched)
        affected = {
            k
            for (k,) in con.execute(
                "select distinct capture_key from platform.release_episodes "
                "where (release, version) in (select (release, version) from touched_versions)"
            ).fetchall()
        }
        affected.update(e["capture_key"] for e in episodes)
        for table in ("release_versions", "release_episodes"):
            con.execute(
                f"delete from platform.{table} "
                "where (release, version) in (select (release, version) from touched_versions)"
            )
        con.unregister("touched_versions")
        for table, rows in (("release_versions", summaries), ("release_episodes", episodes)):
            new_rows = pa.Table.from_pylist(rows, schema=RELEASE_TABLES[table])
            con.register("new_rows", new_rows)
            names = ", ".join(new_rows.column_names)
            con.execute(
                f"insert into platform.{table} ({names}, _batch) "
                f"select {names}, {number} from new_rows"
            )
            con.unregister("new_rows")
        _record_memberships(con, sorted(affected), number, record_items)
        counts["release_versions"] = len(changed) + len(removed)
        counts["release_episodes"] = len(affected)
    counts["consent_withdrawals"] = _stage_withdrawals(con, storage, batch)
    return counts


def _record_memberships(
    con: duckdb.DuckDBPyConnection,
    keys: list[str],
    number: int,
    record_items: Callable[[duckdb.DuckDBPyConnection, str, int], None],
) -> None:
    """``item_versions`` rows for ``keys``: the fingerprint is a digest of the capture's
    ``name@vN`` list now (null when no version holds it any more)."""
    con.register("affected", pa.table({"capture_key": pa.array(keys, pa.string())}))
    rows = con.execute(
        "select a.capture_key, string_agg(r.release || '@v' || r.version, ',' "
        "order by r.release, r.version) from affected a "
        "left join platform.release_episodes r using (capture_key) group by a.capture_key"
    ).fetchall()
    con.unregister("affected")
    versions = pa.table(
        {
            "capture_key": pa.array([k for k, _ in rows], pa.string()),
            "fingerprint": pa.array(
                [hashlib.sha256(m.encode()).hexdigest()[:16] if m else None for _, m in rows],
                pa.string(),
            ),
        }
    )
    con.register("versions", versions)
    record_items(con, MEMBERSHIP_SOURCE, number)
    con.unregister("versions")


def _stage_withdrawals(
    con: duckdb.DuckDBPyConnection, storage: Storage, batch: Callable[[], int]
) -> int:
    """Replace ``consent_withdrawals`` when the records changed; records staged."""
    listed = {
        path: _fingerprint(info)
        for path, info in _listing(storage, f"{WITHDRAWALS_DIR}/*.json").items()
        if not path.rsplit("/", 1)[-1].startswith(".")
    }
    stored = con.execute(
        "select withdrawal_id, fingerprint from platform.consent_withdrawals"
    ).fetchall()
    names = {p.rsplit("/", 1)[-1].removesuffix(".json"): f for p, f in listed.items()}
    if dict(stored) == names:
        return 0
    fs = storage.root.fs
    rows = []
    for path, fingerprint in sorted(listed.items()):
        record = json.loads(fs.cat_file(path))
        rows.append(
            {
                "withdrawal_id": path.rsplit("/", 1)[-1].removesuffix(".json"),
                "demonstrator": record["demonstrator"],
                "withdrawn_at": _timestamp(record["withdrawn_at"]),
                "withdrawn_by": record.get("by"),
                "reason": record.get("reason"),
                "capture_keys": list(record.get("capture_keys", [])),
                "fingerprint": fingerprint,
            }
        )
    number = batch()
    table = pa.Table.from_pylist(rows, schema=WITHDRAWALS_SCHEMA)
    con.register("new_rows", table)
    columns = ", ".join(table.column_names)
    con.execute("delete from platform.consent_withdrawals")
    con.execute(
        f"insert into platform.consent_withdrawals ({columns}, _batch) "
        f"select {columns}, {number} from new_rows"
    )
    con.unregister("new_rows")
    return len(rows)
