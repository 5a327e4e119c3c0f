"""No bench rots: every `python -m bench NAME` runs once at its tiny size (`SMOKE_ARGS` in
its module), found by the same discovery as `python -m bench`, so a benchmark another
change broke (a signature, a key) fails here and not at the next measurement.

Each run must end without a traceback and write its JSON: a non-empty object whose
figures are all finite and whose keys, when `bench/results/NAME.json` is committed, are
keys of that file (the names the docs quote). Exit code 1 is accepted: some benches
report a missed target that way, and a tiny size misses targets.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import available
from ego_assets_tests.waiting import CEILING_S

REPO = Path(__file__).resolve().parents[1]


def _numbers(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}[{i}]")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, float(value)


def test_every_bench_is_found() -> None:
    assert {"normalize", "quality", "view", "api", "catalog"} <= set(available())


@pytest.mark.parametrize("name", available())
def test_bench_runs_at_its_smoke_size(name: str, tmp_path: Path) -> None:
    module = importlib.import_module(f"bench.{name}")
    args = getattr(module, "SMOKE_ARGS", None)
    assert args is not None, f"bench/{name}.py has no SMOKE_ARGS (its tiny size for this test)"
    out = tmp_path / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "bench", name, *args, "--json", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert "Traceback (most recent call last)" not in run.stderr, run.stderr[-4000:]
    assert run.returncode in (0, 1), run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert isinstance(result, dict) and result
    numbers = list(_numbers(result))
    assert numbers, "no figure in the result"
    assert [path for path, value in numbers if not math.isfinite(value)] == []
    committed = REPO / "bench" / "results" / f"{name}.json"
    if committed.exists():
        assert set(result) <= set(json.loads(committed.read_text())), committed


def test_chain_bench_times_every_kind_and_step_beside_its_floor(tmp_path: Path) -> None:
    """`bench chain` at its smoke size: every kind, and every step a kind goes through
    (land for the EgoDex import; the three exports where the gate lets them), has a CPU
    time, a floor and a ratio above zero; the real-time factors and chain ratios too."""
    from bench import chain

    out = tmp_path / "chain.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "chain", *chain.SMOKE_ARGS, "--json", str(out)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert set(result["steps"]) == set(chain.KINDS)
    for kind, steps in result["steps"].items():
        written = [s for s, status in result["exported"][kind].items() if status == "written"]
        expected = {"raw", "trajectory", "quality", *written} | (
            {"land"} if kind == "egodex" else set()
        )
        assert set(steps) == expected, kind
        for step, figures in steps.items():
            assert figures["cpu_ms"] > 0 and figures["floor_ms"] > 0, (kind, step)
            assert figures["ratio"] == pytest.approx(
                figures["cpu_ms"] / figures["floor_ms"], rel=0.05
            )
        assert result["realtime_factor"][kind] > 0 and result["ratio_vs_floors"][kind] > 0
    # the synthetic kinds pass the gate: all three exports are timed for them
    for kind in ("holos-visionpro", "holos-iphone", "webxr", "mano-video", "egodex"):
        assert set(result["steps"][kind]) >= {"holos", "egosmith", "ceres"}, kind
    assert result["import_ratio_vs_floor"] > 0
