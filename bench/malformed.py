"""Benchmark: memory and time that each malformed capture of the corpus costs.

``python -m bench malformed [--json FILE] [--bomb-mb 1536]``

Builds the base captures of ``ego_assets_tests/malformed.py`` (1-second synthetic
captures of every kind and the packaged Aria MPS sample), then converts each base
(the baseline, side by side) and each malformed case, every one in a fresh forked
process, so each figure is that conversion's own: wall time and peak RSS (and its
growth over the process before the conversion). A compressed bomb of ``--bomb-mb``
MiB of zeros behind a small ``.npz`` member is added, like the one that used to be
inflated whole. Prints per-class and worst figures; ``--json`` writes every case.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import name_value_table, report
from ego_assets_tests.malformed import (
    CLASSES,
    KINDS,
    Case,
    make_base,
    npz_bomb,
    prepare,
    run_convert,
)
from ego_assets_tests.malformed_cases import CASES


def _rss_mb() -> float:
    """Current resident set size, MiB (Linux ``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _measure(capture: Path, out: Path) -> dict[str, Any]:
    """Convert ``capture`` in a forked child; its exit code, stderr, seconds and RSS."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: convert, report, exit without running the parent's cleanup
        os.close(read_fd)
        before = _rss_mb()
        start = time.perf_counter()
        code, err = run_convert(capture, out)
        seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = {"code": code, "error": err.strip(), "seconds": seconds}
        result.update(peak_rss_mb=peak, rss_growth_mb=max(peak - before, 0.0))
        with os.fdopen(write_fd, "w") as fh:
            json.dump(result, fh)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as fh:
        text = fh.read()
    os.waitpid(pid, 0)
    return dict(json.loads(text))


def run(bomb_mb: int) -> dict[str, Any]:
    """Build the corpus, convert every base and case; the figures as a JSON-ready dict."""
    root = Path(tempfile.mkdtemp(prefix="bench-malformed-"))
    try:
        bases = {kind: make_base(kind, root / "bases" / kind) for kind in KINDS}
        run_convert(bases["webxr"], root / "warm-up")  # imports, codecs: not in any figure
        baseline = {
            kind: _measure(folder, root / f"base-{kind}-out") for kind, folder in bases.items()
        }
        t = 30  # frames of the 1-second mano-video base
        bomb = Case(
            "mv-npz-bomb-large",
            "mano-video",
            "npz-size",
            "mano.npz",
            "expected P = 15",
            npz_bomb("mano.npz", "hand_pose", (2, t, bomb_mb * 2**20 // (2 * t * 4))),
        )
        cases = []
        for case in (*CASES, bomb):
            capture = prepare(case, bases, root / "cases")
            result = _measure(capture, root / "cases" / f"{case.name}-out")
            ok = (result["code"] == 0) if case.accepted else (case.problem in result["error"])
            size = sum(p.stat().st_size for p in capture.rglob("*") if p.is_file())
            cases.append(
                {"name": case.name, "kind": case.kind, "class": case.klass, "ok": ok}
                | {"capture_mb": size / 2**20}
                | result
            )
            shutil.rmtree(capture, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"bomb_mb": bomb_mb, "baseline": baseline, "cases": cases}


def _table(result: dict[str, Any]) -> str:
    rows = [("baseline (clean 1 s capture)", "seconds  peak RSS MiB")]
    for kind, base in result["baseline"].items():
        rows.append((f"  {kind}", f"{base['seconds']:7.2f}  {base['peak_rss_mb']:7.0f}"))
    by_class: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for case in result["cases"]:
        by_class[case["class"]].append(case)
    rows.append(("class (cases)", "max s  max RSS growth MiB"))
    for klass in CLASSES:
        group = by_class.get(klass, [])
        if group:
            worst_s = max(c["seconds"] for c in group)
            worst_mb = max(c["rss_growth_mb"] for c in group)
            rows.append((f"  {klass} ({len(group)})", f"{worst_s:7.2f}  {worst_mb:7.1f}"))
    slowest = max(result["cases"], key=lambda c: c["seconds"])
    hungriest = max(result["cases"], key=lambda c: c["peak_rss_mb"])
    failed = [c["name"] for c in result["cases"] if not c["ok"]]
    rows += [
        ("cases", f"{len(result['cases'])} ({len(failed)} not as expected: {failed})"),
        ("slowest case", f"{slowest['name']}: {slowest['seconds']:.2f} s"),
        ("largest peak RSS", f"{hungriest['name']}: {hungriest['peak_rss_mb']:.0f} MiB"),
    ]
    return name_value_table(rows)


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = ("--bomb-mb", "8")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench malformed", description=__doc__)
    parser.add_argument("--json", type=Path, help="write every case's figures to this file")
    parser.add_argument(
        "--bomb-mb", type=int, default=1536, help="inflated size of the large .npz bomb, MiB"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ego_assets").setLevel(logging.WARNING)
    result = run(args.bomb_mb)
    report(_table(result), result, args.json)
    return 0
