"""The SHA-256 of every file `make demo` exports: the contract of a refactor of the exporters.

``python -m bench export_digests [--seconds 2] [--json FILE] [--check BASELINE]``

Runs the demo (`ego_assets.defs.demo.run_demo`: the synthetic captures of every kind,
the Aria sample, the capture job per capture and the aggregates) into a temporary data
root with its own Dagster instance, then digests every file below ``exports/`` and
``receipts/``. Files that hold a write time are digested without it, and exactly these
fields are left out (`TIME_FIELDS`):

* ``receipts/<format>/<key>.json``: ``exported_at`` (the JSON without that key);
* ``exports/holos_hdf5/<key>/<key>.h5``: the time at the start of the root attribute
  ``history`` (``2026-12-01T21:55:00Z written by ...``), replaced in the file's bytes by
  a fixed stamp of the same length.

Every other byte counts. ``--check BASELINE`` compares with digests recorded earlier at
the same ``--seconds`` (``bench/results/export_digests.json`` holds those of the commit
before the exporters moved into ``ego_assets/exports/``, its ``commit``) and exits 1
naming each file that differs, is missing or is new; the suite runs the same check.

A change that alters exported bytes on purpose (a new writer, quality or viewer code
version changes the data versions in lineage files, notes and receipts) records the
digests again: ``python -m bench export_digests --json bench/results/export_digests.json``,
and says so in its commit.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import name_value_table, report

log = logging.getLogger("bench.export_digests")

DIGESTED = ("exports", "receipts")
TIME_FIELDS = {
    "receipts/*/*.json": "exported_at (JSON key)",
    "exports/holos_hdf5/*/*.h5": "root attribute history: its leading ISO-8601 time",
    "receipts/holos_hdf5/*.json": "sha256 (JSON key: the .h5 with its time)",
}
ROOT_MARK = b"<data root>"
HISTORY_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ(?= written by ego_assets )")
FIXED_TIME = b"2000-01-01T00:00:00Z"
DEFAULT_SECONDS = 2.0
BASELINE = Path(__file__).parent / "results" / "export_digests.json"


def file_digest(root: Path, rel: str) -> str:
    """SHA-256 hex of ``root/rel`` without its write-time fields (`TIME_FIELDS`)."""
    data = (root / rel).read_bytes().replace(str(root).encode(), ROOT_MARK)
    if rel.startswith("receipts/") and rel.endswith(".json"):
        body = json.loads(data)
        body.pop("exported_at")
        if rel.startswith("receipts/holos_hdf5/"):
            body.pop("sha256")
        data = json.dumps(body, sort_keys=True).encode()
    elif rel.startswith("exports/holos_hdf5/") and rel.endswith(".h5"):
        data, found = HISTORY_TIME.subn(FIXED_TIME, data)
        if found != 1:
            raise ValueError(f"{rel}: {found} history times in the file, expected 1")
    return hashlib.sha256(data).hexdigest()


def digests(root: Path) -> dict[str, str]:
    """relative POSIX path -> digest of every file below `DIGESTED` (hidden files too)."""
    out = {}
    for top in DIGESTED:
        for path in sorted((root / top).rglob("*")):
            if path.is_file():
                rel = path.relative_to(root).as_posix()
                out[rel] = file_digest(root, rel)
    return out


@contextlib.contextmanager
def _dagster_home(home: Path) -> Iterator[None]:
    saved = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = saved


def run(seconds: float, data: Path | None = None) -> dict[str, Any]:
    """Run the demo into ``data`` (default: a temporary folder) and digest its exports."""
    from ego_assets.defs.demo import run_demo

    with tempfile.TemporaryDirectory(prefix="ego-digests-") as tmp:
        root = Path(data) if data is not None else Path(tmp) / "data"
        root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with _dagster_home(Path(tmp) / "dagster_home"):
            status = run_demo(root, seconds=seconds, out=io.StringIO())
        elapsed = time.perf_counter() - started
        files = digests(root)
    return {
        "commit": _commit(),
        "seconds": seconds,
        "demo_status": status,
        "demo_s": round(elapsed, 1),
        "time_fields": TIME_FIELDS,
        "files": files,
    }


def _commit() -> str:
    """The git commit of the code that ran ("" outside a git checkout)."""
    import ego_assets

    here = Path(ego_assets.__file__).parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def compare(result: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """One line per file that differs from ``baseline`` (empty: byte-identical)."""
    if result["seconds"] != baseline["seconds"]:
        return [f"baseline is for --seconds {baseline['seconds']}, this run {result['seconds']}"]
    now, then = result["files"], baseline["files"]
    lines = [f"missing: {rel}" for rel in sorted(set(then) - set(now))]
    lines += [f"new: {rel}" for rel in sorted(set(now) - set(then))]
    lines += [f"differs: {rel}" for rel in sorted(set(now) & set(then)) if now[rel] != then[rel]]
    return lines


# the suite's smoke size (ego_assets_tests/test_bench_smoke.py); the digest check itself is
# ego_assets_tests/test_export_digests.py
SMOKE_ARGS = ("--seconds", "2")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(prog="python -m bench export_digests")
    parser.add_argument("--json", type=Path, help="write the digests here")
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, help="capture length")
    parser.add_argument("--data", type=Path, help="data root to run the demo in (kept)")
    parser.add_argument("--check", type=Path, help="digests recorded earlier to compare with")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    result = run(args.seconds, args.data)
    rows = [
        ("capture length", f"{result['seconds']} s"),
        ("demo", f"{result['demo_s']} s, exit status {result['demo_status']}"),
        ("files digested", str(len(result["files"]))),
        *((f"without ({pattern})", field) for pattern, field in TIME_FIELDS.items()),
    ]
    differences: list[str] = []
    if args.check is not None:
        differences = compare(result, json.loads(args.check.read_text()))
        rows.append(("against " + args.check.name, "identical" if not differences else ""))
    report(name_value_table(rows), result, args.json)
    for line in differences:
        log.info("%s", line)
    return 1 if differences else 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
