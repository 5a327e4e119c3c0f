"""What every `ego-assets` command shares: the usage error, the help formatter, the
progress bars and the checks of paths and numbers given on the command line (each raises
`UsageError`, one line naming the flag; nothing is written by a check)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO


class UsageError(Exception):
    """A command's input is unusable (missing path, existing output): one line, exit 2."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` for options that have a default; keeps epilog line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or action.default == "":
            return action.help or ""
        return super()._get_help_string(action) or ""


class Bars:
    """Progress bars (tqdm) for `ego_assets.progress` reports: one bar per task run.

    Units are bytes for a task named ``... (bytes)`` (``capture.manifest.HASH_TASK``),
    else video frames (the synthetic video tasks).

    Args:
        stream: where the bars go (the terminal's stderr).
        delay_s: a bar appears only once its task has run this long.
    """

    def __init__(self, stream: TextIO, delay_s: float = 0.5) -> None:
        self.stream = stream
        self.delay_s = delay_s
        self.task: str | None = None
        self.bar: Any = None

    def __call__(self, task: str, done: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None or task != self.task or done < self.bar.n:
            self.close()
            self.task = task
            in_bytes = "(bytes)" in task
            self.bar = tqdm(
                total=total,
                desc=task.replace(" (bytes)", ""),
                file=self.stream,
                delay=self.delay_s,
                leave=False,
                unit="B" if in_bytes else " frames",
                unit_scale=in_bytes,
            )
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@contextmanager
def progress(args: argparse.Namespace) -> Iterator[None]:
    """Progress bars on stderr while the block runs, when stderr is a terminal."""
    from ego_assets.progress import listening

    if args.no_progress or not sys.stderr.isatty():
        yield
        return
    bars = Bars(sys.stderr)
    try:
        with listening(bars):
            yield
    finally:
        bars.close()


def progress_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (one is drawn on stderr only when it is a terminal)",
    )


def existing_folder(path: Path, what: str) -> Path:
    if not path.exists():
        raise UsageError(f"{what} {path} does not exist")
    if not path.is_dir():
        raise UsageError(f"{what} {path} is not a folder")
    return path


def existing_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise UsageError(f"{what} {str(path)!r} is not a file")
    return path


def free_output(path: Path, force: bool, index_file: str, what: str) -> None:
    """Refuse an existing non-empty output folder unless ``force``; even then, replace
    only a folder that holds ``index_file`` (a ``what`` folder), never anything else."""
    parent = next(p for p in path.absolute().parents if p.exists())
    if not parent.is_dir():
        raise UsageError(f"output {path}: {parent} is not a folder")
    if not path.exists():
        return
    if not path.is_dir():
        raise UsageError(f"output {path} exists and is not a folder")
    if not any(path.iterdir()):
        return
    if not force:
        raise UsageError(f"output folder {path} exists; pass --force to replace it")
    if not (path / index_file).is_file():
        raise UsageError(
            f"output folder {path} is not a {what} folder (no {index_file}); "
            "refusing to replace it, even with --force"
        )


def capture_folder(path: Path) -> Path:
    """The folder holding a capture's files: ``path`` itself, or ``path/capture`` for a
    raw copy made by the platform (``raw/<key>`` with its manifest)."""
    from ego_assets.capture.files import MARKER_FILE
    from ego_assets.storage import RAW_MANIFEST_FILE as MANIFEST_FILE
    from ego_assets.storage import raw_capture_dir

    existing_folder(path, "capture folder")
    inner = raw_capture_dir(path)
    if not (path / MARKER_FILE).exists() and (path / MANIFEST_FILE).is_file() and inner.is_dir():
        return inner
    return path


def capture_key(args: argparse.Namespace, path: Path) -> str:
    return str(args.key or path.resolve().name)


def checked_seconds(seconds: float) -> float:
    """``--seconds`` when it is a finite number > 0, else UsageError naming the flag."""
    if not seconds > 0:
        raise UsageError(f"--seconds must be > 0 (got {seconds:g})")
    if not math.isfinite(seconds):
        raise UsageError(f"--seconds must be a finite number of seconds (got {seconds:g})")
    return seconds


def local_folder(text: str, what: str) -> Path:
    """``text`` as a local folder that exists or can be created (nothing is created
    here), else UsageError naming ``what`` (the flag or variable it came from)."""
    if "://" in text:
        raise UsageError(f"{what} {text}: a local folder is needed, not a URL")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} is not a folder")
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is not None and not path.exists() and not parent.is_dir():
        raise UsageError(f"{what} {path}: {parent} is not a folder")
    return path


def port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (1-65535)")
    return port
