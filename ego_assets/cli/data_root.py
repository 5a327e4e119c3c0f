"""`ego-assets` commands on a data root: ``demo``, ``waive``, ``view``, ``catalog``,
``import``, ``release``, ``withdraw``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ego_assets.cli.common import UsageError, checked_seconds, existing_file, local_folder, port
from ego_assets.releases.cli import add_data_options

if TYPE_CHECKING:
    from ego_assets.storage import Storage


def _demo(args: argparse.Namespace) -> int:
    from ego_assets.dagster_client import run_demo

    # every input checked before the demo writes anything (#35)
    seconds = checked_seconds(args.seconds)
    data = local_folder(args.data, "--data")
    if os.environ.get("DAGSTER_HOME"):
        local_folder(os.environ["DAGSTER_HOME"], "DAGSTER_HOME")
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


def _catalog(args: argparse.Namespace) -> int:
    from ego_assets.catalog.cli import run_catalog

    return run_catalog(args.data, endpoint_url=args.endpoint_url, sql=args.sql, build=args.build)


def add_demo(sub: Any) -> None:
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


def add_waive(sub: Any) -> None:
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


def add_view(sub: Any) -> None:
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
    view.add_argument("--web-port", type=port, default=9090, help="web viewer port")
    view.add_argument("--grpc-port", type=port, default=9876, help="recording stream port")
    view.set_defaults(func=_view)


def add_catalog(sub: Any) -> None:
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


def add_import(sub: Any) -> None:
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
        licence = existing_file(args.licence_file, "licence file").read_text(encoding="utf-8")
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


def add_release(sub: Any) -> None:
    from ego_assets.releases.cli import add_release_parser

    add_release_parser(sub)


def add_withdraw(sub: Any) -> None:
    from ego_assets.releases.cli import add_withdraw_parser

    add_withdraw_parser(sub)
