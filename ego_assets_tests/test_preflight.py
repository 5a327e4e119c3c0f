"""`make test` says first what it installs and why and stops in its first seconds, with
one line, when something it needs is missing and cannot be installed (.ci/preflight.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ego_assets_tests.processes import free_port
from ego_assets_tests.waiting import CEILING_S

REPO = Path(__file__).resolve().parents[1]
PREFLIGHT = REPO / ".ci" / "preflight.py"


def _preflight(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PREFLIGHT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=CEILING_S,
    )


def test_no_postgres_is_one_clear_line_after_the_plan() -> None:
    port = free_port()  # nothing listens there
    run = _preflight("--postgres", f"127.0.0.1:{port}", "ffmpeg")
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert line.startswith(
        f"make test: cannot run: PostgreSQL is not reachable on 127.0.0.1:{port}"
    )
    plan = run.stdout
    assert "system package ffmpeg (FFmpeg libraries for lerobot's torchcodec decoder)" in plan
    assert "lerobot 0.6.1" in plan and ".venv-robomimic" in plan
    assert f"PostgreSQL on 127.0.0.1:{port}, user postgres, trust auth" in plan


def test_a_missing_package_without_apt_get_is_refused(tmp_path: Path) -> None:
    # a PATH with neither apt-get, dpkg-query nor h5dump on it
    run = _preflight("--lerobot-version", "0.4.4", "hdf5-tools", env={"PATH": str(tmp_path)})
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert "system packages hdf5-tools are missing and no apt-get on this machine" in line
    assert "system package hdf5-tools (h5dump for the HDF5 reader test): to install" in run.stdout
    assert "no Python 3.12 found: 0.4.4 is the newest lerobot for 3.11" in run.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_test_runs_the_preflight_before_anything_else() -> None:
    run = subprocess.run(
        ["make", "-n", "-C", str(REPO), "test"], capture_output=True, text=True, timeout=CEILING_S
    )
    assert run.returncode == 0, run.stderr
    commands = [c for c in run.stdout.splitlines() if c and not c.startswith("make")]
    assert ".ci/preflight.py" in commands[0]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == "make test"  # CI runs the README's command
