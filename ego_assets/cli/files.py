"""`ego-assets` commands on one capture, trajectory or export file: ``synth``,
``convert``, ``inspect``, ``validate`` (no data root, no Dagster)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ego_assets.cli.common import (
    UsageError,
    capture_folder,
    capture_key,
    checked_seconds,
    existing_folder,
    free_output,
    progress,
    progress_option,
)


def _synth(args: argparse.Namespace) -> int:
    from ego_assets.capture.files import MARKER_FILE
    from ego_assets.synth import check_options, synthesize
    from ego_assets.trajectory.store import atomic_directory

    out = Path(args.out)
    faults = [f for f in (args.faults or "").split(",") if f]
    check_options(args.kind, checked_seconds(args.seconds), faults)  # before any write
    free_output(out, args.force, MARKER_FILE, "capture")
    with progress(args), atomic_directory(out) as staging:
        synthesize(args.kind, staging, seconds=args.seconds, seed=args.seed, faults=faults)
    print(out)
    return 0


def _convert(args: argparse.Namespace) -> int:
    from ego_assets.capture import read_checked_capture
    from ego_assets.trajectory.store import CAPTURE_JSON, write_trajectory

    capture = capture_folder(Path(args.capture))
    key = capture_key(args, Path(args.capture))
    out = Path(args.out)
    free_output(out, args.force, CAPTURE_JSON, "trajectory")
    with progress(args):
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
    capture = capture_folder(target) if target.is_dir() else target
    if not (target / CAPTURE_JSON).is_file() and not (capture / MARKER_FILE).is_file():
        if is_egosmith_path(target):
            from ego_assets.formats.egosmith_reader import format_report, validate_path

            report = validate_path(target)
            print(format_report(report))
            return 0 if report.ok else 1
        path = existing_folder(target, "folder")
        raise UsageError(
            f"{path} is neither a trajectory folder (no {CAPTURE_JSON}) nor a capture "
            f"folder (no {MARKER_FILE})"
        )
    if (target / CAPTURE_JSON).is_file():
        header, index = read_header(target)
        info, what = header.info, "trajectory folder"
    else:
        from ego_assets.capture import read_checked_capture

        with progress(args):
            trajectory, manifest = read_checked_capture(capture_key(args, target), capture)
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


def add_synth(sub: Any) -> None:
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
    progress_option(synth)
    synth.add_argument("out", help="capture folder to create")
    synth.set_defaults(func=_synth)


def add_convert(sub: Any) -> None:
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
    progress_option(convert)
    convert.set_defaults(func=_convert)


def add_inspect(sub: Any) -> None:
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
    progress_option(inspect)
    inspect.set_defaults(func=_inspect)


def add_validate(sub: Any) -> None:
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
