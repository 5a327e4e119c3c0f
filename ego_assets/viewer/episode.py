"""Find or build the recording of one episode, and open it in Rerun's viewer.

An episode is named by its capture key (looked up in a `Storage`: the recording that
the quality step wrote beside the report, else built from the stored trajectory, raw
media and gate), by a trajectory folder (built from it; its raw media and gate are
found when the folder sits in a storage layout, ``<root>/trajectory/<key>``), or by an
export (`ego_assets.viewer.exports`). The recording always ends up at the ``out`` path
asked for.

The viewer is Rerun's own binary, shipped in the ``rerun-sdk`` wheel: the native
viewer, or ``--serve-web`` (web viewer + gRPC server). Its servers listen on 127.0.0.1
unless another address is asked for. The binary is a child that ends with this process:
it is stopped on SIGTERM and Ctrl-C, and the kernel stops it when this process dies
(``PR_SET_PDEATHSIG`` on Linux).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ego_assets.fileio import atomic_output
from ego_assets.quality.gate import GATE_FILE, Gate
from ego_assets.storage import Storage, is_local, raw_capture_dir
from ego_assets.trajectory.store import CAPTURE_JSON, read_trajectory
from ego_assets.viewer import RECORDING_FILE, exports
from ego_assets.viewer.recording import build_recording

LOOPBACK = "127.0.0.1"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_WAIT_S = 30.0  # a stopped viewer gets this long to exit before it is killed
TERMINATED = 128 + signal.SIGTERM  # exit status after SIGTERM


@dataclass(frozen=True, slots=True)
class Located:
    """Where a recording is: its local path and, in words, how it was made."""

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
    """The recording of ``key`` at ``out``: a copy of the one stored beside the quality
    report, else built from the stored trajectory, raw media and gate."""
    stored = storage.stage_path("quality", key) / RECORDING_FILE
    if stored.exists():
        if is_local(stored) and Path(stored.path).resolve() == Path(out).resolve():
            return Located(Path(out), f"stored beside the quality report of {key}")
        with stored.open("rb") as src, atomic_output(out) as tmp, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        return Located(Path(out), f"copied from {stored}, stored beside the quality report")
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


def default_out(episode: str) -> Path:
    """``./<name>.rrd``: the name of the folder, file (without suffix) or capture key."""
    target = Path(episode)
    if exports.is_hdf5_file(target):
        return Path(f"{target.stem}.rrd")
    if target.is_dir():
        return Path(f"{target.resolve().name}.rrd")
    return Path(f"{episode}.rrd")


def locate(
    episode: str,
    out: Path,
    *,
    data: str,
    media: Path | None = None,
    lerobot_episode: int | None = None,
) -> Located:
    """Write the recording of ``episode`` (an export, a trajectory folder or a capture key
    in the storage at ``data``) to ``out``."""
    target = Path(episode)
    if target.is_dir() and exports.is_lerobot_dataset(target):
        path, notes = exports.lerobot_recording(target, out, lerobot_episode)
        how = f"LeRobot dataset {target}, read by Rerun's LeRobotReader"
    elif exports.is_hdf5_file(target):
        path, notes = exports.hdf5_recording(target, out)
        how = f"HDF5 file {target}, read by Rerun's Hdf5Reader"
    elif target.is_dir():
        return recording_for_folder(target, out, media_dir=media)
    else:
        return recording_for_key(Storage(data), episode, out)
    return Located(path, how + (f" ({'; '.join(notes)})" if notes else ""))


def missing_display() -> str | None:
    """Why the native viewer cannot open a window here (None when it can try)."""
    if not sys.platform.startswith("linux"):
        return None
    if any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "WAYLAND_SOCKET")):
        return None
    return "no display for the native viewer (DISPLAY and WAYLAND_DISPLAY are not set)"


def rerun_command(*args: str) -> list[str]:
    """The command line of the ``rerun`` binary shipped in the rerun-sdk wheel.

    The binary itself, not ``python -m rerun`` (a wrapper that would outlive a terminate).
    """
    import rerun_cli

    return [str(Path(rerun_cli.__file__).parent / "rerun"), *args]


def _end_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send SIGTERM to the child when ``parent`` dies
    (Linux; None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None

    def preexec() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return preexec


def start_viewer(*args: str) -> subprocess.Popen[bytes]:
    """Start the ``rerun`` binary as a child that ends with this process.

    Its log lines come without colour codes and below warnings only when ``RUST_LOG``
    asks for them.
    """
    env = {**os.environ, "NO_COLOR": "1"}
    env.setdefault("RUST_LOG", "warn")
    return subprocess.Popen(rerun_command(*args), env=env, preexec_fn=_end_with_parent(os.getpid()))


def open_native(path: Path, grpc_port: int, bind: str = LOOPBACK) -> subprocess.Popen[bytes]:
    """Start the native viewer on ``path`` (its gRPC server on ``bind:grpc_port``)."""
    return start_viewer("--bind", bind, "--port", str(grpc_port), str(path))


def serve_web(
    path: Path, web_port: int, grpc_port: int, bind: str = LOOPBACK
) -> tuple[subprocess.Popen[bytes], str]:
    """Serve the web viewer and ``path`` on ``bind``; returns the process and the page URL."""
    process = start_viewer(
        "--serve-web",
        "--bind",
        bind,
        "--web-viewer-port",
        str(web_port),
        "--port",
        str(grpc_port),
        str(path),
    )
    host = LOOPBACK if bind in ("0.0.0.0", "::") else bind
    proxy = f"rerun%2Bhttp%3A%2F%2F{host}%3A{grpc_port}%2Fproxy"
    return process, f"http://{host}:{web_port}/?url={proxy}"


class _Terminated(Exception):
    """This process received SIGTERM."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate ``process`` (kill it after `STOP_WAIT_S`) and reap it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_viewer(process: subprocess.Popen[bytes]) -> int:
    """Wait until the viewer exits; SIGTERM and Ctrl-C stop it first.

    Returns the viewer's exit status, 0 after Ctrl-C (the way to close a served viewer)
    and 128 + SIGTERM after SIGTERM.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
    try:
        return process.wait()
    except KeyboardInterrupt:
        return 0
    except _Terminated:
        return TERMINATED
    finally:
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        stop(process)
