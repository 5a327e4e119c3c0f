"""``ego-assets release build|diff|rebuild``: build a version, compare two, pack one again.

Errors (a bad spec, nothing selected, an unknown version) are `ValueError`s: the CLI
prints them as one line and exits with 2, having written nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TextIO


def add_data_options(parser: Any, *, data_help: str, landing_help: str | None = None) -> None:
    """``--data`` on ``parser``, default ``$EGO_DATA_DIR`` else ``data``, and with
    ``landing_help`` ``--landing``, default ``$EGO_LANDING_DIR`` (None: the root's
    ``landing/``): the data-root options of the ``ego-assets`` commands that read them from
    the environment (``ego_assets.cli`` uses it too)."""
    parser.add_argument("--data", default=os.environ.get("EGO_DATA_DIR", "data"), help=data_help)
    if landing_help is not None:
        parser.add_argument(
            "--landing", default=os.environ.get("EGO_LANDING_DIR"), help=landing_help
        )


def add_release_parser(sub: Any) -> None:
    """The ``release`` command and its ``build`` and ``diff`` subcommands."""
    release = sub.add_parser(
        "release",
        help="build a named, versioned dataset release; diff two versions (docs/releases.md)",
        description=(
            "Build a dataset release from its spec (ROOT/releases/NAME.toml): the episodes\n"
            "the spec selects from the catalog, split by its seeded rule, packed into an\n"
            "immutable releases/NAME/v<N>/ with release.json; or diff two versions."
        ),
    )
    rsub = release.add_subparsers(
        dest="release_command", required=True, metavar="ACTION", help="build, diff or rebuild"
    )
    build = rsub.add_parser(
        "build",
        help="build releases/<NAME>/v<N>/ from its spec (nothing new when nothing changed)",
        description=(
            "Select, split and pack release NAME into a new version releases/NAME/v<N>/;\n"
            "when neither the spec nor the selected episodes changed, nothing is written."
        ),
    )
    build.add_argument("name", metavar="NAME", help="release name")
    build.add_argument("--spec", type=Path, help="spec file (default: ROOT/releases/NAME.toml)")
    diff = rsub.add_parser(
        "diff",
        help="episodes added, removed and changed between versions",
        description="Episodes added, removed and changed from version VA to VB, each with why.",
    )
    diff.add_argument("name", metavar="NAME", help="release name")
    diff.add_argument("a", metavar="VA", help="older version (v1)")
    diff.add_argument("b", metavar="VB", help="newer version (v2)")
    rebuild = rsub.add_parser(
        "rebuild",
        help="pack a version again from its release.json and check every file's SHA-256",
        description=(
            "Pack version V of release NAME again from its manifest alone (its episodes,\n"
            "splits and parts; the catalog is not read), checking each export and every\n"
            "packed file against the manifest's SHA-256. Into --out, or into the version's\n"
            "own folder when it is missing."
        ),
    )
    rebuild.add_argument("name", metavar="NAME", help="release name")
    rebuild.add_argument("version", metavar="V", help="version (v2)")
    rebuild.add_argument("--out", type=Path, help="new folder to write (default: the version's)")
    for parser in (build, diff, rebuild):
        add_data_options(parser, data_help="data root (a local folder)")
    build.set_defaults(func=run_build)
    diff.set_defaults(func=run_diff)
    rebuild.set_defaults(func=run_rebuild)


def run_build(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Build the release; print the version and its split counts."""
    from ego_assets.releases.build import build_release

    out = out or sys.stdout
    result = build_release(args.data, args.name, args.spec)
    state = "written" if result.written else "unchanged, nothing written"
    print(f"release {args.name} v{result.version} ({state}): {result.path}", file=out)
    for split, counts in result.manifest["splits"].items():
        print(
            f"  {split:10} {counts['episodes']:6d} episodes  {counts['duration_s'] / 3600:.3f} h",
            file=out,
        )
    for item in result.manifest["left_out"]:
        print(f"  left out {item['capture_key']}: {item['reason']}", file=out)
    for note in result.manifest.get("notes", []):
        print(f"  note: {note}", file=out)
    return 0


def run_diff(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the episodes added, removed and changed from version VA to VB."""
    from ego_assets.releases.build import read_manifest
    from ego_assets.releases.manifest import diff_manifests, spec_changes

    out = out or sys.stdout
    root = Path(args.data)
    a, b = read_manifest(root, args.name, args.a), read_manifest(root, args.name, args.b)
    diff = diff_manifests(a, b)
    print(
        f"release {args.name} v{a['version']} -> v{b['version']}: {len(diff['added'])} added, "
        f"{len(diff['removed'])} removed, {len(diff['changed'])} changed",
        file=out,
    )
    for line in spec_changes(a, b):
        print(f"* {line}", file=out)
    for kind, sign in (("added", "+"), ("removed", "-"), ("changed", "~")):
        for item in diff[kind]:
            print(
                f"{sign} {item['capture_key']} [{item['split']}]: {'; '.join(item['why'])}",
                file=out,
            )
    return 0


def run_rebuild(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Pack a version again from its manifest; print where and how many files matched."""
    from ego_assets.releases.build import read_manifest, rebuild_release

    out = out or sys.stdout
    target = rebuild_release(args.data, args.name, args.version, args.out)
    manifest = read_manifest(Path(args.data), args.name, args.version)
    files = manifest["files"]
    print(
        f"release {args.name} v{manifest['version']} rebuilt at {target}: {len(files)} files, "
        f"{sum(f['bytes'] for f in files)} bytes, every SHA-256 as in its release.json",
        file=out,
    )
    return 0


def add_withdraw_parser(sub: Any) -> None:
    """The ``withdraw`` command: record a consent withdrawal and quarantine the captures."""
    withdraw = sub.add_parser(
        "withdraw",
        help="record a demonstrator's consent withdrawal; quarantine their captures",
        description=(
            "Record that a demonstrator withdrew consent (who, when, why) under\n"
            "ROOT/consent/withdrawals/, move their captures (landing, raw, trajectory,\n"
            "quality, exports, receipts) to ROOT/quarantine/<key>/, refresh the catalog and\n"
            "list the release versions and exports that still hold them. Every later\n"
            "release build leaves their episodes out (docs/releases.md)."
        ),
    )
    withdraw.add_argument("--demonstrator", required=True, metavar="ID", help="demonstrator id")
    withdraw.add_argument("--reason", required=True, help="why (kept in the record and notes)")
    withdraw.add_argument(
        "--by",
        default=os.environ.get("USER") or "unknown",
        metavar="WHO",
        help="who records it (default: $USER)",
    )
    add_data_options(
        withdraw,
        data_help="data root (a local folder)",
        landing_help="landing zone (default: ROOT/landing; $EGO_LANDING_DIR)",
    )
    withdraw.add_argument(
        "--no-catalog",
        action="store_true",
        help="do not refresh the catalog afterwards (run `ego-assets catalog --build` later)",
    )
    withdraw.set_defaults(func=run_withdraw)


HOLDINGS_SQL = """
select holder_kind, holder, capture_key, path from withdrawn_holdings
where demonstrator = ? order by holder_kind, holder, capture_key
"""


def run_withdraw(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Record the withdrawal, quarantine, refresh the catalog, print what still holds them."""
    import duckdb

    from ego_assets.catalog.sources import stage_rows
    from ego_assets.catalog.warehouse import CatalogBusy, DbtFailed, catalog_database, run_dbt
    from ego_assets.releases.consent import withdraw
    from ego_assets.storage import Storage

    out = out or sys.stdout
    result = withdraw(args.data, args.demonstrator, args.reason, args.by, landing=args.landing)
    w = result.withdrawal
    print(
        f"consent of {w.demonstrator} withdrawn at {w.withdrawn_at} (recorded by {w.by}): "
        f"{result.path}",
        file=out,
    )
    print(f"  {len(w.capture_keys)} captures, {len(result.moved)} folders quarantined", file=out)
    root = Path(args.data).resolve()
    for source, target in result.moved:
        print(
            f"  moved {source.relative_to(root) if source.is_relative_to(root) else source} "
            f"-> {target.relative_to(root)}",
            file=out,
        )
    if args.no_catalog:
        print("catalog not refreshed (--no-catalog): run `ego-assets catalog --build`", file=out)
        return 0
    storage = Storage(args.data)
    try:
        with catalog_database(storage, write=True) as database:
            stage_rows(storage, database)
            run_dbt(["run", "--quiet"], database)
    except (CatalogBusy, DbtFailed) as exc:
        print(f"catalog not refreshed: {exc}", file=out)
        return 1
    with (
        catalog_database(storage, write=False) as database,
        duckdb.connect(str(database), read_only=True) as con,
    ):
        rows = con.execute(HOLDINGS_SQL, [w.demonstrator]).fetchall()
    print(f"still holding episodes of {w.demonstrator}: {len(rows)}", file=out)
    for kind, holder, key, path in rows:
        print(f"  {kind:10} {holder:24} {key:24} {path}", file=out)
    return 0
