"""Exports of every source kind, written once per test module (shared by the Holos tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ego_assets.capture import read_capture
from ego_assets.capture.manifest import write_marker
from ego_assets.defs.demo import aria_fixture_dir
from ego_assets.formats.holos_hdf5 import write_holos_hdf5
from ego_assets.synth import synthesize
from ego_assets.trajectory.model import Trajectory

SYNTH_KINDS = ("holos-visionpro", "holos-iphone", "webxr", "mano-video")
KINDS = (*SYNTH_KINDS, "aria-mps")
HISTORY = "2026-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def holos_captures(tmp_path_factory) -> dict[str, tuple[Path, Trajectory]]:
    """kind -> (raw capture folder, trajectory) for every source kind."""
    root = tmp_path_factory.mktemp("holos_captures")
    out = {}
    for seed, kind in enumerate(SYNTH_KINDS):
        folder = synthesize(kind, root / kind, seconds=2, seed=seed, capture_id=f"cap-{kind}")
        out[kind] = (folder, read_capture(f"cap-{kind}", folder))
    aria = root / "aria-mps"
    shutil.copytree(aria_fixture_dir(), aria)
    write_marker(aria, "aria_mps")
    out["aria-mps"] = (aria, read_capture("cap-aria", aria))
    return out


@pytest.fixture(scope="module")
def holos_exports(holos_captures, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """kind -> (exported .h5, export notes as JSON)."""
    root = tmp_path_factory.mktemp("holos_exports")
    out = {}
    for kind, (folder, trajectory) in holos_captures.items():
        path = root / f"{kind}.h5"
        notes = write_holos_hdf5(trajectory, folder, path, history_time=HISTORY)
        out[kind] = (path, json.loads(notes.to_json()))
    return out
