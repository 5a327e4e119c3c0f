"""The other virtualenvs some tests run code in: robomimic's and lerobot's, each with its
own pins (``make robomimic-venv``, ``make lerobot-env``), and how code runs there."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROBOMIMIC_PYTHON = Path(
    os.environ.get("EGO_ROBOMIMIC_PYTHON", REPO / ".venv-robomimic" / "bin" / "python")
)


def lerobot_python() -> Path | None:
    """lerobot's Python: ``EGO_LEROBOT_PYTHON`` (the test fails when it names no file), else
    ``.venv-lerobot``'s; None when there is none (the caller skips)."""
    named = os.environ.get("EGO_LEROBOT_PYTHON")
    if named:
        if not Path(named).exists():
            pytest.fail(f"EGO_LEROBOT_PYTHON={named} does not exist; run `make lerobot-env`")
        return Path(named)
    local = REPO / ".venv-lerobot" / "bin" / "python"
    return local if local.exists() else None


def venv_env(hf_home: Path | None = None) -> dict[str, str]:
    """This process's environment for another venv's Python: without the ``PYTHON*``
    variables (that Python keeps its own paths); with ``hf_home``, Hugging Face offline and
    its cache and lerobot's below that folder (``hf-home/``, ``lerobot-home/``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if hf_home is not None:
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_HOME"] = str(hf_home / "hf-home")
        env["HF_LEROBOT_HOME"] = str(hf_home / "lerobot-home")
    return env


def run_recipe(
    python: Path,
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
) -> str:
    """Run ``python args...`` in ``cwd``; check it exits 0 (the end of its stderr as the
    message) and return the last line it printed (the recipes print their JSON there)."""
    run = subprocess.run(
        [str(python), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=cwd,
        env=dict(env),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip().splitlines()[-1]
