"""Reliability under kills: ``ego-assets demo`` SIGKILLed N times at random moments of its
intake, exports and catalog build, then run once more to the end.

Each killed run is a fresh ``ego-assets demo`` process (its own session) on one data
root; before each run but the first the bench lands one more synthetic WebXR capture
(``chaos-<n>``), so that every run has intake and exports to do. The bench picks a phase
at random for each run (intake: a staging folder under ``raw/``,
``trajectory/`` or ``quality/``; exports: under ``exports/``, ``receipts/`` or
``registry/``; catalog: under ``catalog/``), waits until that phase is seen writing
(a staging folder or temporary file of a live writer, polled every 0.05 s), waits a
random 0 to 0.5 s more and SIGKILLs the process group. A run that ends before its phase
shows (nothing left to do there) counts as an attempt, not a kill. Then one rerun to
completion, and the data root is checked:

* ``torn_artefacts``: every file under a final name opened with its reader (raw
  manifests, trajectories, quality reports and gates, receipts, each export with its
  format's validator, the quality catalog, the dataset catalog's models). Must be 0.
* ``captures_without_exports``: captures whose gate allows an export that has no
  receipt after the rerun (or that never got a gate). Must be 0.
* ``leftovers``: staging folders and temporary files of writers
  (`ego_assets.storage.find_leftovers`) after the rerun. Must be 0.
* ``rerun_exit_code``: the rerun's exit code. Must be 0.

``--kills 2 --seconds 2`` is the smoke size.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import name_value_table, report

PHASES = {
    "intake": ("raw", "trajectory", "quality"),
    "exports": ("exports", "receipts", "registry"),
    "catalog": ("catalog",),
}
POLL_S = 0.05
MAX_EXTRA_DELAY_S = 0.5
SMOKE_ARGS = ("--kills", "2", "--seconds", "2")


def _demo(root: Path, seconds: float) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}  # <data>/.dagster_home
    command = ["demo", "--data", str(root), "--seconds", str(seconds)]
    return subprocess.Popen(
        [sys.executable, "-m", "ego_assets.cli", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its own process group: dbt's subprocess is killed too
    )


def _writing(root: Path, phase: str) -> bool:
    """Whether a writer of ``phase`` has a staging folder or temporary file now."""
    from ego_assets.storage import find_leftovers

    return any(p.relative_to(root).parts[0] in PHASES[phase] for p in find_leftovers(root))


def _land_capture(root: Path, number: int, seconds: float) -> str:
    """A new synthetic WebXR capture in the landing zone (written aside, then renamed in),
    so that every run has intake and exports to do; returns its key."""
    from ego_assets.synth import synthesize

    key = f"chaos-{number:03d}"
    staging = root / "landing" / f".{key}.landing"
    synthesize("webxr", staging, seconds=seconds, seed=1000 + number, capture_id=key)
    staging.rename(root / "landing" / key)
    return key


def _killed_run(root: Path, seconds: float, phase: str, rng: random.Random) -> dict[str, Any]:
    """One demo run, SIGKILLed once ``phase`` is seen writing (plus a random delay)."""
    run = _demo(root, seconds)
    start = time.monotonic()
    while run.poll() is None:
        if _writing(root, phase):
            time.sleep(rng.uniform(0.0, MAX_EXTRA_DELAY_S))
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
                return {"phase": phase, "killed": True, "at_s": time.monotonic() - start}
            break
        time.sleep(POLL_S)
    return {"phase": phase, "killed": False, "exit_code": run.wait()}


def _opens(reader: Any) -> Any:
    """A check that only opens a file with ``reader`` (its exception is the problem)."""

    def check(path: Path) -> list[str]:
        reader(path)
        return []

    return check


def _problems_of(path: Path, check: Any) -> list[str]:
    """``check(path)``'s problems; an exception is one problem."""
    try:
        return list(check(path))
    except Exception as exc:  # a torn file is whatever its reader cannot read
        return [f"{type(exc).__name__}: {exc}"]


def torn_artefacts(root: Path) -> dict[str, list[str]]:
    """Final-named artefacts whose reader fails or whose validator finds problems."""
    import pyarrow.parquet as pq

    from ego_assets.capture.manifest import read_manifest
    from ego_assets.catalog.receipts import read_receipt
    from ego_assets.catalog.warehouse import catalog_problem, published_location
    from ego_assets.exports import registry
    from ego_assets.formats.ceres_lerobot_validate import validate_dataset
    from ego_assets.formats.egosmith_reader import validate_path
    from ego_assets.formats.holos_hdf5_validate import validate_file
    from ego_assets.pipeline import stored_gate
    from ego_assets.storage import Storage
    from ego_assets.trajectory.store import read_trajectory

    storage = Storage(root)

    def visible(folder: Path) -> list[Path]:
        return (
            sorted(p for p in folder.iterdir() if not p.name.startswith("."))
            if folder.is_dir()
            else []
        )

    def quality(folder: Path) -> list[str]:
        if stored_gate(storage, folder.name) is None:
            return ["no gate"]
        for table in folder.glob("*.parquet"):
            pq.read_table(table)
        return []

    def egosmith(folder: Path) -> list[str]:
        summary = (
            json.loads((folder / "episode.json").read_text())
            if (folder / "episode.json").exists()
            else {}
        )
        return [] if summary.get("status") == "skipped" else validate_path(folder).errors

    def receipts(folder: Path) -> list[str]:
        fmt = folder.name
        return [
            f"{p.name}: unreadable"
            for p in visible(folder)
            if read_receipt(storage, fmt, p.stem) is None
        ]

    def warehouse(path: Path) -> list[str]:
        problem = catalog_problem(path)
        return [problem] if problem else []

    checks: list[tuple[Path, Any]] = []
    checks += [(p, _opens(read_manifest)) for p in visible(root / "raw")]
    checks += [(p, _opens(read_trajectory)) for p in visible(root / "trajectory")]
    checks += [(p, quality) for p in visible(root / "quality")]
    checks += [(p, receipts) for p in visible(root / "receipts")]
    exports = root / "exports"
    for fmt in registry.formats():
        for folder in visible(exports / fmt.folder):
            if fmt.name == "holos_hdf5":
                checks += [(h5, validate_file) for h5 in sorted(folder.glob("*.h5"))]
            elif fmt.name == "ceres_episode":
                checks += [(s, validate_dataset) for s in visible(folder / "shards")]
            else:
                checks.append((folder, egosmith))
    known = {f.folder for f in registry.formats()}
    for dataset in visible(exports):
        if dataset.name not in known:  # the packed datasets (CERES merge, EgoSmith packs)
            check = validate_dataset if (dataset / "meta" / "info.json").exists() else egosmith
            checks.append((dataset, check))
    quality_catalog = root / "catalog" / "quality" / "quality.parquet"
    if quality_catalog.exists():
        checks.append((quality_catalog, _opens(pq.read_table)))
    database = Path(published_location(storage).path)
    if database.exists():
        checks.append((database, warehouse))
    torn = {}
    for path, check in checks:
        problems = _problems_of(path, check)
        if problems:
            torn[path.relative_to(root).as_posix()] = problems[:3]
    return torn


def captures_without_exports(root: Path) -> dict[str, str]:
    """Capture key -> what it lacks: no gate, or the formats its gate allows without a receipt."""
    from ego_assets.catalog.receipts import read_receipt
    from ego_assets.exports import registry
    from ego_assets.pipeline import stored_gate
    from ego_assets.storage import Storage

    storage = Storage(root)
    lacking = {}
    for landed in sorted((root / "landing").iterdir()):
        if landed.name.startswith(".") or not landed.is_dir():
            continue
        key = landed.name
        gate = stored_gate(storage, key)
        if gate is None:
            lacking[key] = "no quality gate (intake never finished)"
            continue
        missing = [
            f.name
            for f in registry.formats()
            if gate.allows(f.policy_key) and read_receipt(storage, f.name, key) is None
        ]
        if missing:
            lacking[key] = "no " + ", ".join(missing)
    return lacking


def run(kills: int, seconds: float, seed: int, root: Path) -> dict[str, Any]:
    from ego_assets.storage import find_leftovers

    rng = random.Random(seed)
    runs: list[dict[str, Any]] = []
    done = 0
    while done < kills and len(runs) < 3 * kills + 2:
        if runs:  # the first run has the demo's own captures to do
            (root / "landing").mkdir(parents=True, exist_ok=True)
            _land_capture(root, len(runs), seconds)
        runs.append(_killed_run(root, seconds, rng.choice(sorted(PHASES)), rng))
        done += runs[-1]["killed"]
    start = time.monotonic()
    rerun = _demo(root, seconds).wait()
    rerun_s = time.monotonic() - start
    torn = torn_artefacts(root)
    lacking = captures_without_exports(root)
    leftovers = [p.relative_to(root).as_posix() for p in find_leftovers(root)]
    return {
        "kills": done,
        "torn_artefacts": len(torn),
        "captures_without_exports": len(lacking),
        "leftovers": len(leftovers),
        "rerun_exit_code": rerun,
        "attempts": runs,
        "kills_by_phase": {p: sum(r["killed"] and r["phase"] == p for r in runs) for p in PHASES},
        "torn": torn,
        "without_exports": lacking,
        "leftover_paths": leftovers,
        "rerun_s": rerun_s,
        "seconds": seconds,
        "seed": seed,
        "load_average_1_5_15": list(os.getloadavg()),
    }


def _table(result: dict[str, Any]) -> str:
    by_phase = ", ".join(f"{p} {n}" for p, n in result["kills_by_phase"].items())
    rows = [
        ("kills", f"{result['kills']} ({by_phase}; {len(result['attempts'])} runs)"),
        ("torn artefacts (must be 0)", str(result["torn_artefacts"])),
        ("captures without exports (must be 0)", str(result["captures_without_exports"])),
        ("leftovers (must be 0)", str(result["leftovers"])),
        ("rerun exit code (must be 0)", str(result["rerun_exit_code"])),
        ("rerun", f"{result['rerun_s']:.1f} s"),
        ("load average", " ".join(f"{x:.2f}" for x in result["load_average_1_5_15"])),
    ]
    rows += [(f"  torn {path}", "; ".join(p)[:120]) for path, p in result["torn"].items()]
    rows += [(f"  without exports {k}", why) for k, why in result["without_exports"].items()]
    rows += [("  leftover", path) for path in result["leftover_paths"]]
    return name_value_table(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench chaos", description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--kills", type=int, default=6, help="SIGKILLs before the rerun")
    parser.add_argument("--seconds", type=float, default=8.0, help="demo capture length")
    parser.add_argument("--seed", type=int, default=23, help="random phases and delays")
    parser.add_argument("--data", type=Path, help="data root (default: a temporary folder)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.kills < 0:
        parser.error("--kills must be >= 0")
    with tempfile.TemporaryDirectory(prefix="bench-chaos-") as tmp:
        root = (args.data or Path(tmp) / "data").resolve()
        result = run(args.kills, args.seconds, args.seed, root)
    report(_table(result), result, args.json)
    healthy = (
        result["torn_artefacts"] == 0
        and result["captures_without_exports"] == 0
        and result["leftovers"] == 0
        and result["rerun_exit_code"] == 0
    )
    return 0 if healthy else 1
