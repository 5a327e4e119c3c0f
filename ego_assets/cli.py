"""`ego-assets`: the platform's library for people without a running Dagster.

Commands:
    synth    write a synthetic capture of one kind (deterministic per seed)
    convert  read one capture folder into a canonical trajectory folder
    inspect  print the streams of a trajectory folder, or check EgoSmith shards
    demo     run the whole platform on ./data with a local Dagster instance
    waive    let one capture through one blocking quality metric (or --revoke it)
    view     write an episode's Rerun recording and open it (native or web viewer)
    validate check an exported file against its format and print every deviation
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from ego_assets.errors import CaptureFormatError, CaptureKeyError


def _synth(args: argparse.Namespace) -> int:
    from ego_assets.synth import synthesize

    faults = [f for f in (args.faults or "").split(",") if f]
    path = synthesize(
        args.kind, Path(args.out), seconds=args.seconds, seed=args.seed, faults=faults
    )
    print(path)
    return 0


def _convert(args: argparse.Namespace) -> int:
    from ego_assets.pipeline import convert_capture
    from ego_assets.trajectory.store import write_trajectory

    capture = Path(args.capture)
    key = args.key or capture.name
    trajectory, _ = convert_capture(key, capture)
    write_trajectory(trajectory, Path(args.out))
    print(f"{key}: {len(trajectory.streams)} streams, {trajectory.duration_s:.2f} s -> {args.out}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from ego_assets.formats.egosmith_reader import is_egosmith_path
    from ego_assets.trajectory.store import read_header

    if is_egosmith_path(Path(args.trajectory)):
        from ego_assets.formats.egosmith_reader import format_report, validate_path

        report = validate_path(Path(args.trajectory))
        print(format_report(report))
        return 0 if report.ok else 1
    header, index = read_header(Path(args.trajectory))
    info = header.info
    print(f"{info.capture_id}  {info.source_kind}  frame={info.world_frame} up={info.up_axis}")
    for entry in index:
        rate = entry["attrs"].get("nominal_rate_hz", "")
        print(f"  {entry['name']:<32} {entry['kind']:<18} rows={entry['rows']:<7} {rate}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ego_assets.defs.demo import run_demo

    return run_demo(Path(args.data), seconds=args.seconds)


def _waive(args: argparse.Namespace) -> int:
    from ego_assets.pipeline import rejudge_gate
    from ego_assets.quality.waivers import add_waiver, revoke_waiver
    from ego_assets.storage import Storage

    storage = Storage(args.data)
    if args.revoke:
        revoke_waiver(storage, args.key, args.metric, args.by)
        print(f"revoked the waiver of {args.key} for {args.metric}")
    else:
        add_waiver(storage, args.key, args.metric, args.reason or "", args.by)
        print(f"waived {args.metric} on {args.key} (by {args.by}: {args.reason})")
    gate = rejudge_gate(storage, args.key)
    print(gate.summary() if gate else f"{args.key}: no quality gate yet; its next run applies it")
    return 0


def _view(args: argparse.Namespace) -> int:
    from ego_assets.storage import Storage
    from ego_assets.viewer import episode

    target = Path(args.episode)
    if target.is_dir():
        out = Path(args.out or f"{target.resolve().name}.rrd")
        media = Path(args.media) if args.media else None
        found = episode.recording_for_folder(target, out, media_dir=media)
    else:
        out = Path(args.out or f"{args.episode}.rrd")
        found = episode.recording_for_key(Storage(args.data), args.episode, out)
    print(f"{found.path}: {found.how}")
    if args.save_only:
        return 0
    if not args.web:
        episode.open_native(found.path)
        return 0
    process, url = episode.serve_web(found.path, args.web_port, args.grpc_port)
    print(f"web viewer: {url}  (Ctrl-C stops it)")
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        return 0


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ego-assets", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="write a synthetic capture")
    synth.add_argument(
        "--kind", required=True, choices=["holos-visionpro", "holos-iphone", "webxr", "mano-video"]
    )
    synth.add_argument("--seconds", type=float, default=10.0)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--faults", default="", help="comma-separated fault options")
    synth.add_argument("out", help="capture folder to create")
    synth.set_defaults(func=_synth)

    convert = sub.add_parser("convert", help="capture folder -> trajectory folder")
    convert.add_argument("capture")
    convert.add_argument("out")
    convert.add_argument("--key", help="capture key (default: folder name)")
    convert.set_defaults(func=_convert)

    inspect = sub.add_parser(
        "inspect", help="list a trajectory folder's streams; EgoSmith shards: counts + checks"
    )
    inspect.add_argument("trajectory", help="trajectory folder, or SHARD_OR_DIR of EgoSmith")
    inspect.set_defaults(func=_inspect)

    demo = sub.add_parser("demo", help="run the platform on local files")
    demo.add_argument("--data", default="data")
    demo.add_argument("--seconds", type=float, default=8.0, help="synthetic capture length")
    demo.set_defaults(func=_demo)

    waive = sub.add_parser("waive", help="waive (or revoke) one blocking metric of a capture")
    waive.add_argument("key", help="capture key")
    waive.add_argument("metric", help="metric name, or <scope>/<name> for one scope")
    waive.add_argument("--reason", help="why the capture may be exported anyway")
    waive.add_argument("--by", required=True, help="who grants (or revokes) the waiver")
    waive.add_argument("--revoke", action="store_true", help="revoke the waiver instead")
    waive.add_argument("--data", default="data", help="data root holding waivers.json")
    waive.set_defaults(func=_waive)

    view = sub.add_parser("view", help="open an episode in the Rerun viewer")
    view.add_argument("episode", help="capture key (in --data) or trajectory folder")
    view.add_argument("--data", default=os.environ.get("EGO_DATA_DIR", "data"))
    view.add_argument("--media", help="raw capture folder (for a trajectory folder)")
    view.add_argument("--out", help="recording to write (default: ./<key>.rrd)")
    view.add_argument("--save-only", action="store_true", help="write the .rrd, do not open")
    view.add_argument("--web", action="store_true", help="serve the web viewer on 127.0.0.1")
    view.add_argument("--web-port", type=int, default=9090)
    view.add_argument("--grpc-port", type=int, default=9876)
    view.set_defaults(func=_view)

    validate = sub.add_parser("validate", help="check an exported file against its format")
    validate.add_argument(
        "path", help="an exported file (FILE.h5, SHARD.tar), EgoSmith folder or CERES shard/dataset"
    )
    validate.set_defaults(func=_validate)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Dagster flags backfill policies and partitioned checks as beta/preview on every load.
    warnings.filterwarnings("ignore", message=".*(beta|preview).*")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (CaptureFormatError, CaptureKeyError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
