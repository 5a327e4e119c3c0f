"""`ego-assets` commands on a Dagster instance (``$DAGSTER_HOME``): ``serve``, ``where``,
``backfill``, ``partitions migrate``; they reach it through `ego_assets.dagster_client`
only."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ego_assets.cli.common import UsageError


def add_serve(sub: Any) -> None:
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


def add_where(sub: Any) -> None:
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


def add_backfill(sub: Any) -> None:
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


def add_partitions(sub: Any) -> None:
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
