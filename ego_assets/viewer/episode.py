"""Find or build the recording of one episode, and open it in Rerun's viewer.

An episode is named by its capture key (looked up in a `Storage`: the recording that
the quality step wrote beside the report, else built from the stored trajectory, raw
media and gate) or by a trajectory folder (built from it; its raw media and gate are
found when the folder sits in a storage layout, ``<root>/trajectory/<key>``).

The viewer is Rerun's own binary, shipped in the ``rerun-sdk`` wheel: the native
viewer, or ``--serve-web`` bound to 127.0.0.1 (web viewer + gRPC server on loopback).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ego_assets.quality.gate import GATE_FILE, Gate
from ego_assets.storage import Storage, is_local, raw_capture_dir
from ego_assets.trajectory.store import CAPTURE_JSON, read_trajectory
from ego_assets.viewer.recording import RECORDING_FILE, build_recording

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Located:
    """Where a recording came from: its local path and, in words, how it was made."""

    path: Path
    how: str


def _gate(folder: Path) -> Gate | None:
    path = folder / GATE_FILE
    return Gate.from_json(path.read_text()) if path.is_file() else None


def recording_for_folder(
    folder: Path, out: Path, media_dir: Path | None = None, quality_dir: Path | None = None
) -> Located:
    """Build the recording of the trajectory stored in ``folder`` into ``out``.

    ``media_dir`` (raw capture) and ``quality_dir`` (gate) default to the sibling
    stages ``../../raw/<key>/capture`` and ``../../quality/<key>`` when they exist.
    """
    folder = Path(folder)
    if not (folder / CAPTURE_JSON).is_file():
        raise ValueError(f"{folder}: not a trajectory folder (no {CAPTURE_JSON})")
    root, key = folder.parent.parent, folder.name
    if media_dir is None and raw_capture_dir(root / "raw" / key).is_dir():
        media_dir = raw_capture_dir(root / "raw" / key)
    if quality_dir is None and (root / "quality" / key).is_dir():
        quality_dir = root / "quality" / key
    trajectory = read_trajectory(folder)
    gate = _gate(quality_dir) if quality_dir is not None else None
    summary = build_recording(trajectory, out, media_dir=media_dir, gate=gate)
    notes = "; ".join(summary.notes)
    return Located(summary.path, f"built from {folder}" + (f" ({notes})" if notes else ""))


def recording_for_key(storage: Storage, key: str, out: Path) -> Located:
    """The stored recording of ``key`` (copied to ``out`` when remote), else a new one."""
    stored = storage.stage_path("quality", key) / RECORDING_FILE
    if stored.exists():
        if is_local(stored):
            return Located(Path(stored.path), f"stored beside the quality report of {key}")
        with stored.open("rb") as src, Path(out).open("wb") as dst:
            shutil.copyfileobj(src, dst)
        return Located(Path(out), f"downloaded from {stored}")
    if not storage.exists("trajectory", key, CAPTURE_JSON):
        raise ValueError(f"capture {key!r}: no trajectory in {storage.root / 'trajectory'}")
    with (
        storage.read_dir(storage.stage_path("trajectory", key)) as folder,
        storage.read_dir(raw_capture_dir(storage.stage_path("raw", key))) as raw,
    ):
        quality = storage.stage_path("quality", key)
        gate = (
            Gate.from_json((quality / GATE_FILE).read_text())
            if (quality / GATE_FILE).exists()
            else None
        )
        summary = build_recording(read_trajectory(folder), out, media_dir=raw, gate=gate)
    return Located(summary.path, f"built from the stored trajectory of {key}")


def rerun_command(*args: str) -> list[str]:
    """The command line of the ``rerun`` binary shipped in the rerun-sdk wheel.

    The binary itself, not ``python -m rerun`` (a wrapper that would outlive a terminate).
    """
    import rerun_cli

    return [str(Path(rerun_cli.__file__).parent / "rerun"), *args]


def open_native(path: Path) -> subprocess.Popen[bytes]:
    """Start the native viewer on ``path`` (returns at once)."""
    return subprocess.Popen(rerun_command(str(path)))


def serve_web(path: Path, web_port: int, grpc_port: int) -> tuple[subprocess.Popen[bytes], str]:
    """Serve the web viewer and ``path`` on loopback; returns the process and the page URL."""
    process = subprocess.Popen(
        rerun_command(
            "--serve-web",
            "--bind",
            LOOPBACK,
            "--web-viewer-port",
            str(web_port),
            "--port",
            str(grpc_port),
            str(path),
        )
    )
    proxy = f"rerun%2Bhttp%3A%2F%2F{LOOPBACK}%3A{grpc_port}%2Fproxy"
    return process, f"http://{LOOPBACK}:{web_port}/?url={proxy}"
