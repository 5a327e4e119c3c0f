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

One module per group of commands: `files` (one capture, trajectory or export file),
`data_root` (a data root), `instance` (a Dagster instance); `common` holds what they
share. `main` is the `ego-assets` entry point (also ``python -m ego_assets.cli``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings

from ego_assets.cli.common import Bars, HelpFormatter, UsageError
from ego_assets.cli.data_root import (
    add_catalog,
    add_demo,
    add_import,
    add_release,
    add_view,
    add_waive,
    add_withdraw,
)
from ego_assets.cli.files import (
    INSPECT_COLUMNS,
    add_convert,
    add_inspect,
    add_synth,
    add_validate,
)
from ego_assets.cli.instance import add_backfill, add_partitions, add_serve, add_where
from ego_assets.errors import CaptureFormatError, CaptureKeyError

__all__ = ["COMMANDS", "INSPECT_COLUMNS", "Bars", "UsageError", "build_parser", "main"]


# Every command's parser, in the order `ego-assets --help` lists them.
COMMANDS = (
    add_synth,
    add_convert,
    add_inspect,
    add_demo,
    add_waive,
    add_view,
    add_validate,
    add_catalog,
    add_serve,
    add_where,
    add_backfill,
    add_partitions,
    add_import,
    add_release,
    add_withdraw,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ego-assets", description=__doc__.splitlines()[0], formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(sub)
    for command in sub.choices.values():
        command.formatter_class = HelpFormatter
    return parser


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
