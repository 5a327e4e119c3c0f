"""`ego-assets`: the platform's library for people without a running Dagster.

Commands:
    synth    write a synthetic capture of one kind (deterministic per seed)
    convert  read one capture folder into a canonical trajectory folder
    inspect  print the streams of a trajectory, capture folder or raw copy; check EgoSmith shards
    demo     run the whole platform on ./data with a local Dagster instance
    waive    let one capture through one blocking quality metric (or --revoke it)
    view     write an episode's Rerun recording and open it (native or web viewer)
    validate check an exported file against its format and print every deviation
    catalog  print the dataset catalog's composition and export coverage (or run --sql)
    import   land the episodes of an existing dataset as captures (docs/importers.md)
    serve    serve the export API and the captures page
    where    which capture set (Dagster partitions, group, assets, job) a capture is in
    backfill re-run per-capture assets for some or all captures
    partitions migrate   move captures to their set under a new number of sets
    release  build a versioned dataset release from the catalog; diff, rebuild versions
    withdraw record a demonstrator's consent withdrawal; quarantine their captures

Commands that need a Dagster instance (where, backfill, partitions, serve) reach it
through `ego_assets.dagster_client` only.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ego_assets.errors import CaptureFormatError, CaptureKeyError
from ego_assets.releases.cli import add_data_options

if TYPE_CHECKING:
    from ego_assets.storage import Storage


class UsageError(Exception):
    """A command's input is unusable (missing path, existing output): one line, exit 2."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` for options that have a default; keeps epilog line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or action.default == "":
            return action.help or ""
        return super()._get_help_string(action) or ""


class _Bars:
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
def _progress(args: argparse.Namespace) -> Iterator[None]:
    """Progress bars on stderr while the block runs, when stderr is a terminal."""
    from ego_assets.progress import listening

    if args.no_progress or not sys.stderr.isatty():
        yield
        return
    bars = _Bars(sys.stderr)
    try:
        with listening(bars):
            yield
    finally:
        bars.close()


def _existing_folder(path: Path, what: str) -> Path:
    if not path.exists():
        raise UsageError(f"{what} {path} does not exist")
    if not path.is_dir():
        raise UsageError(f"{what} {path} is not a folder")
    return path


def _free_output(path: Path, force: bool, index_file: str, what: str) -> None:
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


def _capture_folder(path: Path) -> Path:
    """The folder holding a capture's files: ``path`` itself, or ``path/capture`` for a
    raw copy made by the platform (``raw/<key>`` with its manifest)."""
    from ego_assets.capture.files import MARKER_FILE
    from ego_assets.storage import RAW_MANIFEST_FILE as MANIFEST_FILE
    from ego_assets.storage import raw_capture_dir

    _existing_folder(path, "capture folder")
    inner = raw_capture_dir(path)
    if not (path / MARKER_FILE).exists() and (path / MANIFEST_FILE).is_file() and inner.is_dir():
        return inner
    return path


def _key(args: argparse.Namespace, path: Path) -> str:
    return str(args.key or path.resolve().name)


def _checked_seconds(seconds: float) -> float:
    """``--seconds`` when it is a finite number > 0, else UsageError naming the flag."""
    if not seconds > 0:
        raise UsageError(f"--seconds must be > 0 (got {seconds:g})")
    if not math.isfinite(seconds):
        raise UsageError(f"--seconds must be a finite number of seconds (got {seconds:g})")
    return seconds


def _local_folder(text: str, what: str) -> Path:
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


def _synth(args: argparse.Namespace) -> int:
    from ego_assets.capture.files import MARKER_FILE
    from ego_assets.synth import check_options, synthesize
    from ego_assets.trajectory.store import atomic_directory

    out = Path(args.out)
    faults = [f for f in (args.faults or "").split(",") if f]
    check_options(args.kind, _checked_seconds(args.seconds), faults)  # before any write
    _free_output(out, args.force, MARKER_FILE, "capture")
    with _progress(args), atomic_directory(out) as staging:
        synthesize(args.kind, staging, seconds=args.seconds, seed=args.seed, faults=faults)
    print(out)
    return 0


def _convert(args: argparse.Namespace) -> int:
    from ego_assets.capture import read_checked_capture
    from ego_assets.trajectory.store import CAPTURE_JSON, write_trajectory

    capture = _capture_folder(Path(args.capture))
    key = _key(args, Path(args.capture))
    out = Path(args.out)
    _free_output(out, args.force, CAPTURE_JSON, "trajectory")
    with _progress(args):
        trajectory, _ = read_checked_capture(key, capture)
        write_trajectory(trajectory, out)
    print(f"{key}: {len(trajectory.streams)} streams, {trajectory.duration_s:.2f} s -> {out}")
    return 0


INSPECT_COLUMNS = ("stream", "kind", "rows", "rate (Hz)", "first (s)", "last (s)", "source file")


def _inspect(args: argparse.Namespace) -> int:
    from ego_assets.capture.files import MARKER_FILE
    from ego_assets.formats.egosmith_reader import is_egosmith_path
    from ego_assets.trajectory.store import CAPTURE_JSON, read_header, stream_index_entry

    target = Path(args.path)
    capture = _capture_folder(target) if target.is_dir() else target
    if not (target / CAPTURE_JSON).is_file() and not (capture / MARKER_FILE).is_file():
        if is_egosmith_path(target):
            from ego_assets.formats.egosmith_reader import format_report, validate_path

            report = validate_path(target)
            print(format_report(report))
            return 0 if report.ok else 1
        path = _existing_folder(target, "folder")
        raise UsageError(
            f"{path} is neither a trajectory folder (no {CAPTURE_JSON}) nor a capture "
            f"folder (no {MARKER_FILE})"
        )
    if (target / CAPTURE_JSON).is_file():
        header, index = read_header(target)
        info, what = header.info, "trajectory folder"
    else:
        from ego_assets.capture import read_checked_capture

        with _progress(args):
            trajectory, manifest = read_checked_capture(_key(args, target), capture)
        info = trajectory.info
        index = [stream_index_entry(s) for s in sorted(trajectory.streams, key=lambda s: s.name)]
        what = (
            f"{'raw copy' if capture != target else 'capture folder'}, read without "
            f"converting: {len(manifest.files)} files, {manifest.total_bytes / 1e6:.1f} MB, "
            f"content sha256 {manifest.content_sha256[:12]}"
        )
    print(f"capture   {info.capture_id}  ({what})")
    print(f"source    {info.source_kind}  world frame {info.world_frame!r}, up +{info.up_axis}")
    duration = max((e["t_last"] for e in index if e["t_last"] is not None), default=0.0)
    print(f"duration  {duration:.3f} s, {len(index)} streams")
    rows = [INSPECT_COLUMNS]
    for entry in index:
        rate = entry["attrs"].get("nominal_rate_hz")
        first, last = entry["t_first"], entry["t_last"]
        rows.append(
            (
                entry["name"],
                entry["kind"],
                str(entry["rows"]),
                "-" if rate is None else f"{float(rate):g}",
                "-" if first is None else f"{first:.3f}",
                "-" if last is None else f"{last:.3f}",
                str(entry["attrs"].get("source_file", "-")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(INSPECT_COLUMNS))]
    for row in rows:
        cells = [
            cell.rjust(width) if 2 <= i <= 5 else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ego_assets.dagster_client import run_demo

    # every input checked before the demo writes anything (#35)
    seconds = _checked_seconds(args.seconds)
    data = _local_folder(args.data, "--data")
    if os.environ.get("DAGSTER_HOME"):
        _local_folder(os.environ["DAGSTER_HOME"], "DAGSTER_HOME")
    return run_demo(data, seconds=seconds)


STAGES_OF_A_CAPTURE = ("raw", "trajectory", "quality")  # a capture seen by the platform


def _known_metric(metric: str) -> str:
    """``metric`` if its name (after any ``<scope>/``) is a quality metric, else UsageError."""
    from ego_assets.quality.thresholds import default_thresholds

    names = [m.name for m in default_thresholds().metrics]
    if metric.strip().rsplit("/", 1)[-1] not in names:
        raise UsageError(f"no quality metric {metric!r}; metrics: {', '.join(names)}")
    return metric


def _seen_capture(storage: Storage, key: str) -> str:
    """``key`` if the data root has seen that capture (landing folder, raw copy, trajectory
    or quality report), else UsageError."""
    from ego_assets.keys import validate_capture_key

    validate_capture_key(key)
    places = [storage.landing_path(key), *(storage.stage_path(s, key) for s in STAGES_OF_A_CAPTURE)]
    if not any(place.exists() for place in places):
        raise UsageError(
            f"no capture {key!r} under {storage.root} (no landing folder, raw copy, trajectory "
            "or quality report)"
        )
    return key


def _waive(args: argparse.Namespace) -> int:
    from ego_assets.pipeline import rejudge_gate
    from ego_assets.quality.waivers import add_waiver, revoke_waiver
    from ego_assets.storage import Storage

    storage = Storage(args.data)
    if args.revoke:
        revoke_waiver(storage, args.key, args.metric, args.by)
        print(f"revoked the waiver of {args.key} for {args.metric}")
    else:
        _seen_capture(storage, args.key)
        _known_metric(args.metric)
        add_waiver(storage, args.key, args.metric, args.reason or "", args.by)
        print(f"waived {args.metric} on {args.key} (by {args.by}: {args.reason})")
    gate = rejudge_gate(storage, args.key)
    print(gate.summary() if gate else f"{args.key}: no quality gate yet; its next run applies it")
    for reason in gate.reasons if gate else ():  # every one whole (the summary counts some)
        print(f"  blocked by {reason}")
    return 0


def _view(args: argparse.Namespace) -> int:
    from ego_assets.viewer import episode

    if not args.save_only and not args.web and (missing := episode.missing_display()):
        raise UsageError(f"{missing}: pass --web to serve it to a browser, or --save-only")
    out = Path(args.out) if args.out else episode.default_out(args.episode)
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; give the .rrd file to write")
    media = Path(args.media) if args.media else None
    found = episode.locate(
        args.episode, out, data=args.data, media=media, lerobot_episode=args.lerobot_episode
    )
    print(f"{found.path}: {found.how}", flush=True)
    if args.save_only:
        return 0
    if args.web:
        process, url = episode.serve_web(found.path, args.web_port, args.grpc_port, args.bind)
        print(f"web viewer: {url}  (Ctrl-C stops it)", flush=True)
    else:
        process = episode.open_native(found.path, args.grpc_port, args.bind)
    status = episode.wait_viewer(process)
    if status not in (0, episode.TERMINATED):
        print(f"error: the Rerun viewer exited with status {status}", file=sys.stderr)
    return status


def _port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (1-65535)")
    return port


def _holos_hdf5_validator(path: Path) -> Callable[[Path], list[str]] | None:
    from ego_assets.formats.holos_hdf5_validate import is_hdf5, validate_file

    return validate_file if is_hdf5(path) else None


def _egosmith_validator(path: Path) -> Callable[[Path], list[str]] | None:
    from ego_assets.formats.egosmith_reader import is_egosmith_path, validate_path

    return (lambda p: validate_path(p).errors) if is_egosmith_path(path) else None


def _ceres_validator(path: Path) -> Callable[[Path], list[str]] | None:
    from ego_assets.formats.ceres_lerobot_validate import is_ceres_dataset, validate_dataset

    return validate_dataset if is_ceres_dataset(path) else None


# One entry per export format: given the path, its validator if the path is that format's.
VALIDATORS: tuple[tuple[str, Callable[[Path], Callable[[Path], list[str]] | None]], ...] = (
    ("Holos HDF5", _holos_hdf5_validator),
    ("EgoSmith WebDataset", _egosmith_validator),
    ("CERES LeRobot v3", _ceres_validator),
)


def _validate(args: argparse.Namespace) -> int:
    path = Path(args.path)
    for name, recognise in VALIDATORS:
        validator = recognise(path)
        if validator is None:
            continue
        problems = validator(path)
        for problem in problems:
            print(problem)
        verdict = f"{len(problems)} deviations" if problems else "conforms"
        print(f"{path}: {name}: {verdict}")
        return 1 if problems else 0
    print(
        f"error: {path}: not a file of any export format ({', '.join(n for n, _ in VALIDATORS)})",
        file=sys.stderr,
    )
    return 2


def _synth_epilog() -> str:
    from ego_assets.synth import APPLICABLE_FAULTS, FAULT_MEANINGS, KIND_MEANINGS

    width = max(map(len, [*KIND_MEANINGS, *FAULT_MEANINGS]))
    lines = ["kinds:"]
    lines += [f"  {kind:<{width}}  {meaning}" for kind, meaning in KIND_MEANINGS.items()]
    lines += ["", "faults (--faults a,b; one that does not apply to the kind is ignored):"]
    for fault, meaning in FAULT_MEANINGS.items():
        kinds = [k for k in KIND_MEANINGS if fault in APPLICABLE_FAULTS[k]]
        only = "" if len(kinds) == len(KIND_MEANINGS) else f" [{', '.join(kinds)}]"
        lines.append(f"  {fault:<{width}}  {meaning}{only}")
    return "\n".join(lines)


def _progress_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (one is drawn on stderr only when it is a terminal)",
    )


def _catalog(args: argparse.Namespace) -> int:
    from ego_assets.catalog.cli import run_catalog

    return run_catalog(args.data, endpoint_url=args.endpoint_url, sql=args.sql, build=args.build)


def _add_synth(sub: Any) -> None:
    from ego_assets.synth import KINDS

    synth = sub.add_parser(
        "synth",
        help="write a synthetic capture",
        description="Write one synthetic capture folder (the same options give the same bytes).",
        epilog=_synth_epilog(),
    )
    synth.add_argument(
        "--kind", required=True, choices=KINDS, metavar="KIND", help="capture kind (see below)"
    )
    synth.add_argument("--seconds", type=float, default=10.0, help="capture length, seconds")
    synth.add_argument("--seed", type=int, default=0, help="random seed")
    synth.add_argument(
        "--faults", default="", help="comma-separated faults (see below; default: none)"
    )
    synth.add_argument("--force", action="store_true", help="replace an existing capture folder")
    _progress_option(synth)
    synth.add_argument("out", help="capture folder to create")
    synth.set_defaults(func=_synth)


def _add_convert(sub: Any) -> None:
    convert = sub.add_parser(
        "convert",
        help="capture folder -> trajectory folder",
        description=(
            "Check a capture folder against its completion marker (as the raw_capture\n"
            "asset does), read it and write the canonical trajectory folder."
        ),
    )
    convert.add_argument("capture", help="capture folder (or a raw copy data/raw/<key>)")
    convert.add_argument("out", help="trajectory folder to create")
    convert.add_argument("--key", help="capture key (default: the capture folder's name)")
    convert.add_argument(
        "--force", action="store_true", help="replace an existing trajectory folder"
    )
    _progress_option(convert)
    convert.set_defaults(func=_convert)


def _add_inspect(sub: Any) -> None:
    inspect = sub.add_parser(
        "inspect",
        help="list the streams of a trajectory or capture folder; check EgoSmith shards",
        description=(
            "List the streams of a trajectory folder, or of a capture folder or raw copy\n"
            "(read and checked in memory, nothing written): rows, nominal rate in Hz,\n"
            "first and last sample in seconds since the capture start. For EgoSmith\n"
            "shards (a .tar or a folder of them): sample counts and format checks."
        ),
    )
    inspect.add_argument(
        "path", help="trajectory folder, capture folder, raw copy, or EgoSmith SHARD_OR_DIR"
    )
    inspect.add_argument("--key", help="capture key of a capture folder (default: its name)")
    _progress_option(inspect)
    inspect.set_defaults(func=_inspect)


def _add_demo(sub: Any) -> None:
    demo = sub.add_parser(
        "demo",
        help="run the platform on local files",
        description=(
            "Seed DATA/landing with a short synthetic capture of every kind and the real\n"
            "Aria sample, run every capture through the platform on a local Dagster\n"
            "instance ($DAGSTER_HOME, else DATA/.dagster_home), build the catalog and print\n"
            "the results. A capture whose earlier run died is run again; the rest is reused.\n"
            "Exit code 1 when a capture or the catalog failed."
        ),
    )
    demo.add_argument("--data", default="data", help="data root (landing zone and stages)")
    demo.add_argument("--seconds", type=float, default=8.0, help="synthetic capture length")
    demo.set_defaults(func=_demo)


def _add_waive(sub: Any) -> None:
    waive = sub.add_parser(
        "waive",
        help="waive (or revoke) one blocking metric of a capture",
        description=(
            "Let one capture through one blocking quality metric, on the record (who, why,\n"
            "when, in DATA/waivers.json), and decide its stored gate again; --revoke takes\n"
            "the waiver back. The capture must be one the data root has seen and the\n"
            "metric one of the quality metrics (docs/quality.md)."
        ),
    )
    waive.add_argument("key", help="capture key")
    waive.add_argument("metric", help="metric name, or <scope>/<name> for one scope")
    waive.add_argument("--reason", help="why the capture may be exported anyway")
    waive.add_argument("--by", required=True, help="who grants (or revokes) the waiver")
    waive.add_argument("--revoke", action="store_true", help="revoke the waiver instead")
    waive.add_argument("--data", default="data", help="data root holding waivers.json")
    waive.set_defaults(func=_waive)


def _add_view(sub: Any) -> None:
    view = sub.add_parser(
        "view",
        help="open an episode in the Rerun viewer",
        description=(
            "Write an episode's Rerun recording (.rrd) and open it in the native viewer, or\n"
            "serve the web viewer on 127.0.0.1 (--web), or only write it (--save-only)."
        ),
    )
    view.add_argument(
        "episode", help="capture key (in --data), trajectory folder, LeRobot dataset or HDF5 file"
    )
    add_data_options(view, data_help="data root ($EGO_DATA_DIR)")
    view.add_argument("--media", help="raw capture folder (for a trajectory folder)")
    view.add_argument(
        "--lerobot-episode", type=int, help="episode of a LeRobot dataset (default: first)"
    )
    view.add_argument("--out", help="recording to write (default: ./<name or key>.rrd)")
    view.add_argument("--save-only", action="store_true", help="write the .rrd, do not open")
    view.add_argument("--web", action="store_true", help="serve the web viewer (see --bind)")
    view.add_argument(
        "--bind", default="127.0.0.1", help="address the viewer's servers listen on (0.0.0.0: all)"
    )
    view.add_argument("--web-port", type=_port, default=9090, help="web viewer port")
    view.add_argument("--grpc-port", type=_port, default=9876, help="recording stream port")
    view.set_defaults(func=_view)


def _add_validate(sub: Any) -> None:
    validate = sub.add_parser(
        "validate",
        help="check an exported file against its format",
        description=(
            "Check an exported artefact against its format's spec and print every deviation:\n"
            f"{', '.join(name for name, _ in VALIDATORS)}. Exit code 0 when it conforms,\n"
            "1 with deviations, 2 when the path is no export of any format."
        ),
    )
    validate.add_argument(
        "path", help="an exported file (FILE.h5, SHARD.tar), EgoSmith folder or CERES shard/dataset"
    )
    validate.set_defaults(func=_validate)


def _add_catalog(sub: Any) -> None:
    catalog = sub.add_parser(
        "catalog",
        help="print the dataset catalog (docs/catalog.md)",
        description=(
            "Print the dataset catalog's composition and export coverage from the data\n"
            "root's catalog (DuckDB), or the result of one SQL query (--sql); --build stages\n"
            "the receipts and quality reports and runs the dbt models first."
        ),
    )
    add_data_options(catalog, data_help="data root: a folder or s3://bucket/prefix")
    catalog.add_argument(
        "--endpoint-url",
        default=os.environ.get("EGO_S3_ENDPOINT_URL"),
        help="S3 API endpoint for an s3:// data root (EGO_S3_ENDPOINT_URL)",
    )
    catalog.add_argument("--sql", help="run this query on the catalog and print the result")
    catalog.add_argument("--build", action="store_true", help="stage rows and dbt build first")
    catalog.set_defaults(func=_catalog)


def _add_serve(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve the export API and captures page (docs/api.md)",
        description=(
            "Serve the export API and the captures page over the Dagster instance of\n"
            "$DAGSTER_HOME and the data root $EGO_DATA_DIR; exports are launched through\n"
            "the Dagster webserver (--dagster-url). --hash-token prints a token's\n"
            "configuration entry for api.toml and exits."
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on")
    serve.add_argument("--config", help="API configuration TOML (default: $EGO_API_CONFIG)")
    serve.add_argument(
        "--dagster-url",
        default=os.environ.get("EGO_DAGSTER_URL", "http://127.0.0.1:3000"),
        help="the Dagster webserver that launches runs ($EGO_DAGSTER_URL)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("EGO_API_WORKERS", "1")),
        help="server processes (one refresher process serves them all; $EGO_API_WORKERS)",
    )
    serve.add_argument(
        "--hash-token",
        metavar="TOKEN",
        help='print the api.toml entry (TOKEN_ID = "sha256:...") for TOKEN and exit',
    )
    serve.add_argument(
        "--token-id", default="my-token", help="the token's id in the entry --hash-token prints"
    )
    serve.set_defaults(func=_serve)


def _add_where(sub: Any) -> None:
    where = sub.add_parser(
        "where",
        help="which capture set (Dagster partitions, group, assets) a capture is in",
        description=(
            "Print the capture set of each registered capture (instance of $DAGSTER_HOME;\n"
            "EGO_CAPTURE_SETS sets, see docs/scale.md): its partitions definition, asset\n"
            "group, asset keys and job. In the Dagster UI: the group, then an asset's\n"
            "Partitions tab."
        ),
    )
    where.add_argument("keys", nargs="+", metavar="KEY", help="capture key")
    where.add_argument("--sets", type=int, help="number of sets (default: $EGO_CAPTURE_SETS)")
    where.set_defaults(func=_where)


def _add_backfill(sub: Any) -> None:
    from ego_assets.capture_sets import PER_CAPTURE_ASSETS

    backfill = sub.add_parser(
        "backfill",
        help="re-run per-capture assets for some or all captures (one backfill per set)",
        description=(
            "Launch Dagster asset backfills on the instance of $DAGSTER_HOME: the captures\n"
            "are grouped by capture set and each set gets one backfill, run by the backfill\n"
            "daemon in ranged runs of BACKFILL_CHUNK captures. Prints the backfill ids.\n"
            "Unregistered captures and unknown assets are refused before anything launches."
        ),
    )
    chosen = backfill.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--captures", nargs="+", metavar="KEY", help="capture keys")
    chosen.add_argument("--all", action="store_true", help="every registered capture")
    backfill.add_argument(
        "--assets",
        help=f"comma-separated per-capture assets: {', '.join(PER_CAPTURE_ASSETS)} "
        "(default: all of them)",
    )
    backfill.add_argument("--sets", type=int, help="number of sets (default: $EGO_CAPTURE_SETS)")
    backfill.set_defaults(func=_backfill)


def _add_partitions(sub: Any) -> None:
    partitions = sub.add_parser("partitions", help="maintain the capture partition sets")
    psub = partitions.add_subparsers(
        dest="partitions_command", required=True, metavar="ACTION", help="migrate"
    )
    migrate = psub.add_parser(
        "migrate",
        help="move captures to their set under a new number of sets",
        description=(
            "Put every registered capture (instance of $DAGSTER_HOME) in its set among\n"
            "--sets sets: dry run by default (counts per set now and after); with --apply\n"
            "each moving capture joins its new set, the latest materialization of each\n"
            "per-capture asset is re-reported there (metadata, data and code versions: no\n"
            "re-run), then it leaves its old set. Safe to run again after an interruption.\n"
            "Set EGO_CAPTURE_SETS to the same number for every process afterwards."
        ),
    )
    migrate.add_argument("--sets", type=int, required=True, help="the new number of sets")
    migrate.add_argument(
        "--from-sets",
        type=int,
        help="number of sets captures may be in now (default: $EGO_CAPTURE_SETS)",
    )
    migrate.add_argument("--apply", action="store_true", help="migrate (default: dry run)")
    migrate.set_defaults(func=_migrate)


def _add_import_parser(sub: Any) -> None:
    from ego_assets.importers import IMPORTERS

    imp = sub.add_parser(
        "import",
        help="land the episodes of an existing dataset as captures (docs/importers.md)",
        description=(
            "Land every episode of SRC (a folder or s3:// prefix) in the landing zone as an\n"
            "ordinary capture: its files byte for byte, ego_provenance.json, the marker last.\n"
            "Each episode is read with its capture reader first; a bad one is reported and\n"
            "the others still land. Episodes already landed (or with a raw copy) are\n"
            "skipped, so running it again lands only what is missing. Exit code 1 when any\n"
            "episode failed."
        ),
    )
    imp.add_argument("kind", metavar="KIND", choices=sorted(IMPORTERS), help="source kind")
    imp.add_argument("src", metavar="SRC", help="dataset folder or s3://bucket/prefix")
    add_data_options(
        imp,
        data_help="data root: a folder or s3://bucket/prefix ($EGO_DATA_DIR)",
        landing_help="landing zone (default: <data>/landing; $EGO_LANDING_DIR)",
    )
    imp.add_argument(
        "--endpoint-url",
        default=os.environ.get("EGO_S3_ENDPOINT_URL"),
        help="S3 API endpoint for s3:// locations (EGO_S3_ENDPOINT_URL)",
    )
    imp.add_argument("--limit", type=int, help="import at most N episodes (landed or failed)")
    imp.add_argument("--dataset-version", help="the dataset's version, kept in the provenance")
    imp.add_argument(
        "--licence-file",
        type=Path,
        help="licence text to keep with the data (default: SRC's LICENSE file, else the "
        "dataset's stated licence)",
    )
    imp.set_defaults(func=_import)


def _import(args: argparse.Namespace) -> int:
    from ego_assets.importers import get_importer
    from ego_assets.importers.core import import_source, open_source
    from ego_assets.storage import Storage

    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be >= 1")
    options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    licence = None
    if args.licence_file is not None:
        licence = _existing_file(args.licence_file, "licence file").read_text(encoding="utf-8")
    importer = get_importer(args.kind)
    source = open_source(
        args.src,
        importer,
        storage_options=options,
        dataset_version=args.dataset_version,
        licence_text=licence,
    )
    storage = Storage(args.data, landing=args.landing, storage_options=options)

    def tell(status: str, name: str, detail: str) -> None:
        if status == "failed":
            print(f"error: {detail}", file=sys.stderr)
        else:
            print(f"{status:8} {name}  ({detail})")

    summary = import_source(storage, importer, source, limit=args.limit, on_result=tell)
    print(
        f"{args.kind}: {len(summary.landed)} landed, {len(summary.skipped)} already there, "
        f"{len(summary.failed)} failed -> {storage.landing}"
    )
    return 1 if summary.failed else 0


def _existing_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise UsageError(f"{what} {str(path)!r} is not a file")
    return path


def _add_release(sub: Any) -> None:
    from ego_assets.releases.cli import add_release_parser

    add_release_parser(sub)


def _add_withdraw(sub: Any) -> None:
    from ego_assets.releases.cli import add_withdraw_parser

    add_withdraw_parser(sub)


# Every command's parser, in the order `ego-assets --help` lists them.
COMMANDS = (
    _add_synth,
    _add_convert,
    _add_inspect,
    _add_demo,
    _add_waive,
    _add_view,
    _add_validate,
    _add_catalog,
    _add_serve,
    _add_where,
    _add_backfill,
    _add_partitions,
    _add_import_parser,
    _add_release,
    _add_withdraw,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ego-assets", description=__doc__.splitlines()[0], formatter_class=_HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(sub)
    for command in sub.choices.values():
        command.formatter_class = _HelpFormatter
    return parser


def _check_sets(sets: int | None) -> int | None:
    from ego_assets.capture_sets import parse_capture_sets

    return None if sets is None else parse_capture_sets(str(sets))


def _registered(instance: Any, keys: list[str], sets: int | None) -> list[str]:
    """``keys`` if each is a registered capture among ``sets`` sets, else UsageError."""
    from ego_assets import dagster_client

    missing = dagster_client.unregistered(instance, keys, sets)
    if missing:
        among = f" (among {sets} capture sets)" if sets is not None else ""
        raise UsageError(
            f"not registered captures{among}: {', '.join(missing)}; "
            "a capture is registered when the landing sensor (or `ego-assets demo`) sees it"
        )
    return keys


def _where(args: argparse.Namespace) -> int:
    from ego_assets import dagster_client

    sets = _check_sets(args.sets)
    with dagster_client.instance_from_env() as instance:
        _registered(instance, args.keys, sets)
    for key in args.keys:
        place = dagster_client.where(key, sets)
        print(f"{place['capture']}: set {place['set']}  partitions {place['partitions']}")
        print(f"  group: {place['group']}")
        print(f"  assets: {', '.join(place['assets'])}")  # type: ignore[arg-type]
        print(f"  job: {place['job']}")
    return 0


def _backfill(args: argparse.Namespace) -> int:
    from ego_assets import dagster_client
    from ego_assets.capture_sets import PER_CAPTURE_ASSETS

    chosen = args.assets or ",".join(PER_CAPTURE_ASSETS)
    assets = [a.strip() for a in chosen.split(",") if a.strip()]
    unknown = [a for a in assets if a not in PER_CAPTURE_ASSETS]
    if unknown or not assets:
        raise UsageError(
            f"not per-capture assets: {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(PER_CAPTURE_ASSETS)}"
        )
    sets = _check_sets(args.sets)
    with dagster_client.instance_from_env() as instance:
        if args.captures is not None:
            _registered(instance, args.captures, sets)
        return dagster_client.backfill(instance, args.captures, assets, sets, print)


def _migrate(args: argparse.Namespace) -> int:
    from ego_assets import dagster_client

    sets = _check_sets(args.sets)
    assert sets is not None
    with dagster_client.instance_from_env() as instance:
        current = _check_sets(args.from_sets)
        return dagster_client.migrate(instance, sets, current, args.apply, print)


def _serve(args: argparse.Namespace) -> int:
    from ego_assets.api.config import hash_token

    if args.hash_token:
        entry = f'{args.token_id} = "{hash_token(args.hash_token)}"'
        print(entry)
        print(
            "# put it under [organizations.<name>.tokens] in api.toml (docs/api.md)",
            file=sys.stderr,
        )
        return 0
    from ego_assets.api.app import serve_from_env
    from ego_assets.dagster_client import check_instance_env

    check_instance_env()
    serve_from_env(args.host, args.port, args.config, args.dagster_url, args.workers)
    return 0


def main(argv: list[str] | None = None) -> int:
    from ego_assets.dagster_client import InstanceMissingError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Dagster flags backfill policies and partitioned checks as beta/preview on every load.
    warnings.filterwarnings("ignore", message=".*(beta|preview).*")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (
        UsageError,
        InstanceMissingError,
        CaptureFormatError,
        CaptureKeyError,
        ValueError,
        KeyError,
    ) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. permission denied, disk full: the system's own words
        print(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    """The error's message (a KeyError's without the quotes str() adds)."""
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


if __name__ == "__main__":
    raise SystemExit(main())
