"""What `make demo` prints after its runs: plain Python over the stored outputs (no Dagster).

One table of captures whose status column is the gate's word (``exported``, ``blocked``,
``FAILED``...), then every problem whole (each blocking reason, a failed run's full error,
wrapped, never cut), the landing-zone entries the sensor passed over and why, the
exports with absolute paths, and a closing block: where everything is, what to open and
what the blocked captures need.
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ego_assets.catalog.receipts import read_receipt
from ego_assets.exports import registry
from ego_assets.pipeline import stored_gate
from ego_assets.quality.gate import Gate
from ego_assets.storage import Storage
from ego_assets.trajectory.store import read_header

WIDTH = 100  # wrap long reasons at this many characters
# Everything the demo writes below its data root, in the order a reader meets it
# (README "Where things land" lists the same; a test keeps them together).
DATA_FOLDERS: tuple[tuple[str, str], ...] = (
    ("landing/", "captures as uploaded (ego_capture.json, written last, marks one complete)"),
    ("raw/", "immutable copy of each capture and its manifest (sizes, SHA-256)"),
    (
        "trajectory/",
        "canonical trajectories (capture.json, streams.parquet, lineage.json, "
        "action_sources.arrow)",
    ),
    ("quality/", "quality reports, gates (gate.json) and timelines"),
    ("exports/", "exports per capture and format, and the merged datasets (*-dataset/)"),
    ("receipts/", "one receipt per export: path, bytes, SHA-256, code version"),
    ("catalog/", "quality catalog (quality/) and dataset catalog (warehouse/catalog.duckdb)"),
    ("registry/", "CERES episode indices, stable across runs"),
    ("releases/", "dataset releases: specs <name>.toml, immutable versions <name>/v<N>/"),
    ("waivers.json", "waivers granted (ego-assets waive)"),
    ("logs/", "the demo's log: Dagster's and dbt's own output"),
    (".locks/", "writer locks"),
    (".dagster_home/", "the Dagster instance, unless DAGSTER_HOME points elsewhere"),
)
LOG_FILE = "logs/demo.log"


@dataclass(frozen=True, slots=True)
class CaptureStatus:
    """One capture's row in the summary and its problems, whole.

    Attributes:
        key: the capture key (partition) or, for a skipped landing entry, its name.
        kind, duration_s, streams: from the trajectory ("-" without one).
        quality: the report's worst status (pass / warn / fail, "-" without one).
        status: the gate's word: exported, blocked, FAILED, not exported, skipped...
        problems: each problem's full text (reasons, the run's error, waivers).
        blocking: the metric names that block its exports (what a waiver would name).
    """

    key: str
    kind: str
    duration_s: str
    streams: str
    quality: str
    status: str
    problems: tuple[str, ...] = ()
    blocking: tuple[str, ...] = ()

    @property
    def blocked(self) -> bool:
        return self.status.startswith("blocked")


@contextlib.contextmanager
def output_to_log(log_path: Path) -> Iterator[TextIO]:
    """Send whatever this process and its children write to file descriptors 1 and 2
    (Dagster's banners and warnings, dbt's log lines) to ``log_path`` (truncated) until
    the block ends; yield a stream to the terminal's stderr for a progress bar."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved[1]), "w", buffering=1)
    try:
        with log_path.open("wb") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield terminal
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        terminal.close()
        for fd in saved:
            os.close(fd)


def capture_status(storage: Storage, key: str, failure: str = "") -> CaptureStatus:
    """The status of ``key`` from its stored trajectory, gate and receipts; ``failure`` is
    its run's error ("" when the run succeeded or did not run now)."""
    kind = duration = streams = "-"
    folder = storage.stage_path("trajectory", key)
    if (folder / "capture.json").exists():
        header, index = read_header(Path(folder.path))
        kind = header.info.source_kind
        duration = f"{max((s['t_last'] or 0.0 for s in index), default=0.0):.2f}"
        streams = str(len(index))
    gate = stored_gate(storage, key)
    quality = gate.status if gate is not None else "-"
    if failure:
        return CaptureStatus(key, kind, duration, streams, quality, "FAILED", (failure,))
    if gate is None:
        return CaptureStatus(key, kind, duration, streams, quality, "not materialized")
    status, problems = _export_status(storage, key, gate)
    blocking = tuple(dict.fromkeys(f.name for f in gate.findings if f.blocking))
    return CaptureStatus(key, kind, duration, streams, quality, status, problems, blocking)


def _export_status(storage: Storage, key: str, gate: Gate) -> tuple[str, tuple[str, ...]]:
    """The gate's verdict and the receipts, in one word, and the problems behind it."""
    problems: list[str] = []
    blocked = [f for f in registry.formats() if f.policy_key in gate.blocked_exports]
    problems += [f"blocked by {reason}" for reason in gate.reasons]
    for finding in gate.waived:
        problems.append(f"waived {finding.text()} by {finding.waived_by}: {finding.waiver_reason}")
    missing = []
    for fmt in registry.formats():
        receipt = read_receipt(storage, fmt.name, key)
        if receipt is not None and receipt.status == "skipped":
            problems.append(f"{fmt.name} skipped: {receipt.reason}")
        elif receipt is None and fmt not in blocked:
            missing.append(fmt.name)
    if blocked:
        names = (
            ""
            if len(blocked) == len(registry.formats())
            else ": " + ", ".join(f.name for f in blocked)
        )
        return f"blocked{names}", tuple(problems)
    if missing:
        problems.append(f"allowed by the gate but not exported yet: {', '.join(missing)}")
        return "not exported", tuple(problems)
    return "exported", tuple(problems)


def skipped_status(name: str, why: str) -> CaptureStatus:
    """The row of a landing-zone entry the sensor passed over."""
    return CaptureStatus(f"landing/{name}", "-", "-", "-", "-", "skipped", (why,))


def print_table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Columns padded to their widest cell (the last column is not padded)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip(), file=out)


def print_captures(statuses: Sequence[CaptureStatus], root: Path, out: TextIO) -> None:
    """The summary table, then every problem of every capture, whole and wrapped."""
    print(f"\ncaptures (data root {root})", file=out)
    header = ("partition", "kind", "duration s", "streams", "quality", "status")
    rows = [header] + [
        (s.key, s.kind, s.duration_s, s.streams, s.quality, s.status) for s in statuses
    ]
    print_table(rows, out)
    with_problems = [s for s in statuses if s.problems]
    if not with_problems:
        return
    print("\nwhy", file=out)
    for status in with_problems:
        print(f"  {status.key} ({status.status}):", file=out)
        for problem in status.problems:
            print(wrap(problem, "    - ", "      "), file=out)


def wrap(text: str, first: str, rest: str) -> str:
    """``text`` whole, wrapped at `WIDTH` (its own line breaks kept), never shortened."""
    lines = []
    for i, paragraph in enumerate(text.strip().splitlines() or [""]):
        lines += textwrap.wrap(
            paragraph,
            WIDTH,
            initial_indent=first if i == 0 else rest,
            subsequent_indent=rest,
            break_long_words=True,
            break_on_hyphens=False,
        ) or [rest.rstrip()]
    return "\n".join(lines)


def print_exports(storage: Storage, root: Path, keys: Sequence[str], out: TextIO) -> None:
    """Every export of ``keys`` (absolute paths) and the merged datasets."""
    rows: list[tuple[str, ...]] = [("partition", "export", "size", "path")]
    for key in sorted(keys):
        for fmt in registry.names():
            receipt = read_receipt(storage, fmt, key)
            if receipt is not None and receipt.status == "exported":
                rows.append((key, fmt, f"{receipt.bytes / 1e6:.1f} MB", str(root / receipt.path)))
    print("\nexports", file=out)
    if len(rows) == 1:
        print("  none yet", file=out)
    else:
        print_table(rows, out)


def print_release(manifest: dict, path: Path, written: bool, out: TextIO) -> None:
    """A release version's manifest summary: name, version, episodes and hours per split,
    files and bytes (in all, per format), where its manifest and card are."""
    state = "written now" if written else "unchanged, nothing written"
    print(f"\nrelease {manifest['release']} v{manifest['version']} ({state}): {path}", file=out)
    for split, counts in manifest["splits"].items():
        print(
            f"  {split:6} {counts['episodes']:3d} episodes  {counts['duration_s']:7.1f} s",
            file=out,
        )
    files = manifest["files"]
    sizes = {
        fmt: sum(f["bytes"] for f in files if f["path"].startswith(f"{fmt}/"))
        for fmt in manifest["formats"]
    }
    print(
        f"  {len(files)} files, {sum(f['bytes'] for f in files)} bytes ("
        + ", ".join(f"{fmt} {n}" for fmt, n in sizes.items())
        + f"); {len(manifest['left_out'])} selected episodes left out",
        file=out,
    )
    if manifest.get("actions"):
        actions = manifest["actions"]
        print(
            f"  state {len(actions['state_names'])} values, action "
            f"{len(actions['action_names'])}: {actions['describe']}",
            file=out,
        )
    print(f"  manifest {path / 'release.json'}; card {path / 'README.md'}", file=out)


def print_closing(
    root: Path,
    dagster_home: Path,
    statuses: Sequence[CaptureStatus],
    out: TextIO,
) -> None:
    """Where everything is, what to open next, and what the blocked captures need."""
    print(f"\nwhere everything is (below {root})", file=out)
    rows = [(str(root / n), what) for n, what in DATA_FOLDERS if (root / n.rstrip("/")).exists()]
    if not dagster_home.resolve().is_relative_to(root):
        rows.append((str(dagster_home), "the Dagster instance (DAGSTER_HOME)"))
    print_table([(f"  {path}", what) for path, what in rows], out)
    exported = [s.key for s in statuses if s.status == "exported"]
    example = exported[0] if exported else "KEY"
    data = f" --data {root}" if root != Path.cwd() / "data" else ""
    cli, dagster = _command("ego-assets"), _command("dagster")
    here = Path.cwd()  # `make dev` shows ./data with ./.dagster_home, from the repository
    makefile = (here / "Makefile").exists() and (here / "workspace.yaml").exists()
    same = root == here / "data" and dagster_home.resolve() == (here / ".dagster_home").resolve()
    dev = "make dev"
    if not (makefile and same):
        workspace = Path(__file__).resolve().parents[1] / "workspace.yaml"
        dev = f"DAGSTER_HOME={dagster_home} EGO_DATA_DIR={root} {dagster} dev -w {workspace}"
    print("\nwhat to open", file=out)
    print_table(
        [
            (f"  {dev}", "the Dagster UI on http://127.0.0.1:3000 over these runs"),
            (f"  {cli} serve --config api.toml", "the export API and captures page (docs/api.md)"),
            (f"  {cli} view {example} --web{data}", "an episode in the Rerun web viewer"),
            (f"  {cli} catalog{data}", "the dataset catalog again"),
        ],
        out,
    )
    blocked = [s for s in statuses if s.blocked]
    if blocked:
        print(
            f"\n{len(blocked)} blocked capture(s) need a new capture without the faults listed"
            ' under "why", or a waiver per blocking metric, e.g.:',
            file=out,
        )
        for status in blocked:
            metric = status.blocking[0] if status.blocking else "METRIC"
            print(
                f"  {cli} waive {status.key} {metric}{data} "
                '--reason "why it may be exported anyway" --by NAME',
                file=out,
            )


def _command(name: str) -> str:
    """How to call the console script ``name`` of this environment from here:
    ``.venv/bin/<name>`` beside the running Python, the bare name when it is elsewhere."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        return name
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative
