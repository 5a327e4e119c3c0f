"""Benchmark: the dataset catalog's dbt models at a million episodes.

``python -m bench catalog [--json FILE] [--episodes 1000000] [--new 10000] [--repeats 5]``

Fills the staged ``platform`` tables of a fresh catalog DuckDB file with simulated rows
(SQL over ``range``: each of 200 demonstrators records with one device and source kind
on 8 of 40 tasks and belongs to one split; durations 20-300 s; 70 % pass, 22 % warn,
8 % fail, most failures blocked by the policy and some waived; receipts of the three
exporters, 3 % from an older exporter version) for ``--episodes`` captures landed over a
year, then:

1. parses the dbt project once and reuses the manifest for every invocation (in-process
   dbtRunner: what ``ego-assets catalog --build`` does);
2. warms dbt up on a small scratch catalog (``--warmup`` episodes: a full build and an
   incremental refresh). dbt compiles each Jinja macro it uses (materializations,
   incremental strategy, adapter macros) once per process, inside the first model that
   needs it, so a process's first full build and first incremental refresh each carry
   that fixed cost in a model's ``execution_time``. It is reported as
   ``dbt_warmup_s``, like the parse, rather than charged to whichever model runs first;
3. full build: ``dbt run --full-refresh``;
4. stages ``--new`` more captures (one landing day) as a new batch and runs
   ``dbt run --selector catalog_refresh``: the incremental refresh of the model that holds
   rows (``episodes``; dbt/selectors.yml). The three views hold no
   rows; their run on unchanged SQL (``dbt run`` of the ``stable_view`` models, which
   only reads each view's comment) is timed next and reported beside the ratio;
5. times each model's typical query (median of ``--repeats``, read-only connection).

Model times are dbt's own (``run_results.json``: each model's ``execution_time``, which
covers compiling the model, the look-ups it runs then, and its materialization); the
per-invocation overhead is the invocation's wall time minus them, both in process with
the parsed manifest and as a ``dbt`` subprocess with partial parsing (how dagster-dbt
runs it). Prints a table and writes ``{"incremental_ratio", "max_query_s",
"dbt_invocation_overhead_s", ...}``; targets: ratio <= 0.05, every query <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

from bench import name_value_table, report
from ego_assets.catalog.sources import SCHEMA, ensure_schema
from ego_assets.catalog.warehouse import (
    DB_ENV,
    catalog_database,
    dbt_executable,
    dbt_project_dir,
    parse_project,
    published_location,
)
from ego_assets.storage import Storage

RATIO_TARGET = 0.05
REFRESH_SELECTOR = "catalog_refresh"  # dbt/selectors.yml: the catalog_incremental models
VIEWS = "config.materialized:stable_view"
QUERY_TARGET_S = 1.0

KINDS = "['holos-visionpro', 'holos-iphone', 'webxr', 'mano-video', 'aria-mps']"
DEVICES = "['Apple Vision Pro', 'iPhone 15 Pro', 'Meta Quest 3', 'GoPro HERO12', 'Project Aria']"
FORMATS = ("holos_hdf5", "ceres_episode", "egosmith_shards")
CODE_VERSIONS = {"holos_hdf5": "holos-hdf5-2", "ceres_episode": "ceres-3", "egosmith_shards": "e-1"}

# Typical question per model (docs/catalog.md has these and more).
QUERIES = {
    "episodes": (
        "select capture_key, task, blocking_reasons from episodes "
        "where gate = 'blocked' and source_kind = 'webxr' and task = 'task-07' "
        "order by capture_key limit 50"
    ),
    "episodes (stale list)": (
        "select capture_key, holos_hdf5_code_version from episodes "
        "where holos_hdf5_state = 'stale' order by capture_key"
    ),
    "export_coverage": "select format, exported, blocked, stale, missing from export_coverage",
    "dataset_composition": (
        "select task, source_kind, sum(usable_hours) as hours, sum(episodes) as episodes "
        "from dataset_composition group by all order by hours desc"
    ),
    "quality_trends": (
        "select landing_day, source_kind, fail_episodes * 1.0 / episodes as fail_rate, "
        "top_worst_metric from quality_trends "
        "where landing_day >= (select max(landing_day) - 30 from quality_trends) "
        "order by landing_day, source_kind"
    ),
}


def _pick(options: str, salt: str, modulo: str = "") -> str:
    """A deterministic pseudo-random element of a SQL list literal, per episode ``i``."""
    return f"{options}[1 + h(i, '{salt}') % len({options}){modulo}]"


def _simulate(
    con: duckdb.DuckDBPyConnection, first: int, count: int, batch: int, random_keys: bool = False
) -> None:
    """Stage ``count`` simulated captures (keys ``ep-<first>``..., or ``ep-<md5>`` when
    ``random_keys``) as staging ``batch``."""
    _simulated_episodes(con, first, count, batch, random_keys)
    _stage_captures(con, batch)
    _stage_quality(con, batch)
    _stage_receipts(con, batch)
    _record_batch(con, batch, count)


# Verdicts of the simulated episodes, from their pseudo-random ``q`` and ``x`` (0-99):
# 70 % pass, 22 % warn, 8 % fail; a fail blocks every export unless waived (10 %).
_STATUS = "case when q < 70 then 'pass' when q < 92 then 'warn' else 'fail' end"
_WORST = (
    "case when q < 70 then null when q < 80 then 'hand:left/tracking_loss_ratio' "
    "when q < 88 then 'stream:camera/missing_sample_ratio' "
    "when q < 95 then 'hand:right/jitter_mps3' else 'cross/start_misalignment_s' end"
)
_BLOCKED = "(q >= 92 and x >= 10)"
# Share of the allowed episodes with a receipt, per format (%).
_RECEIPT_SHARES = {"holos_hdf5": 95, "ceres_episode": 80, "egosmith_shards": 60}


def _simulated_episodes(
    con: duckdb.DuckDBPyConnection, first: int, count: int, batch: int, random_keys: bool
) -> None:
    """The temp table ``sim``: one row per simulated episode (key, kind, device, task,
    demonstrator, split, duration, landing time, verdict draws ``q`` and ``x``)."""
    days = 365
    # h(i, salt): a deterministic pseudo-random non-negative integer per episode
    con.execute("create or replace macro h(i, salt) as cast(hash(i, salt) % 1000003 as bigint)")
    con.execute(
        f"""
        create or replace temp table sim as
        select
          {"'ep-' || md5(i::varchar)" if random_keys else "printf('ep-%08d', i)"} as capture_key,
          i,
          {KINDS}[1 + who % 5] as kind,
          {DEVICES}[1 + who % 5] as device,
          printf('task-%02d', (who * 7 + h(i, 'task') % 8) % 40)
            as task,
          printf('demo-%03d', who) as demonstrator,
          ['train', 'train', 'train', 'train', 'val', 'test'][1 + who % 6] as split,
          20.0 + (h(i, 'dur') % 28000) / 100.0 as duration_s,
          timestamp '2026-01-01' + to_days(cast(
            case when {batch} = 1 then (i * {days}) // {count} else {days} end as integer))
            + to_seconds(h(i, 'sec') % 86400) as landed_at,
          h(i, 'q') % 100 as q,
          h(i, 'x') % 100 as x
        from (
          select i, h(i, 'who') % 200 as who
          from range({first}, {first + count}) t(i)
        )
        """
    )


def _stage_captures(con: duckdb.DuckDBPyConnection, batch: int) -> None:
    """``sim``'s raw manifests and trajectory headers as staging ``batch``."""
    con.execute(
        f"""insert into {SCHEMA}.raw_manifests by name
        select capture_key, kind as raw_kind, 12 as raw_files,
               cast(duration_s * 2e6 as bigint) as raw_bytes,
               md5(capture_key) as content_sha256, landed_at, {batch} as _batch from sim"""
    )
    con.execute(
        f"""insert into {SCHEMA}.trajectory_headers by name
        select capture_key, capture_key as capture_id, kind as source_kind,
               device, task, demonstrator, split, 'ego' as dataset_name, duration_s,
               6 as n_streams, ['camera', 'hand_left_world', 'hand_right_world', 'head']
                 as stream_names,
               landed_at - interval 1 hour as started_at,
               'normalize-2:' || md5(capture_key) as trajectory_data_version,
               {batch} as _batch from sim"""
    )


def _stage_quality(con: duckdb.DuckDBPyConnection, batch: int) -> None:
    """``sim``'s quality rows and export gates as staging ``batch``."""
    status, worst, blocked = _STATUS, _WORST, _BLOCKED
    con.execute(
        f"""insert into {SCHEMA}.quality_rows by name
        select capture_key, capture_key as capture_id, kind as source_kind,
               'quality-report-1' as report_version, 1 as thresholds_version,
               {status} as status, coalesce({worst}, '') as worst_metric,
               case when q >= 92 then 1 + q % 3 else 0 end as n_fail,
               case when q >= 70 then 1 + q % 2 else 0 end as n_warn, 30 as n_pass,
               duration_s, h(i, 'retry') % 3 as n_retries,
               (h(i, 'gap') % 3000) / 1000.0 as max_longest_gap_s,
               (h(i, 'miss') % 100) / 2000.0 as max_missing_sample_ratio,
               (h(i, 'll') % 600) / 1000.0 as left_tracking_loss_ratio,
               (h(i, 'rl') % 600) / 1000.0 as right_tracking_loss_ratio,
               (h(i, 'lj') % 8000) / 10.0 as left_jitter_mps3,
               (h(i, 'rj') % 8000) / 10.0 as right_jitter_mps3,
               {batch} as _batch from sim"""
    )
    con.execute(
        f"""insert into {SCHEMA}.quality_gates by name
        select capture_key, not {blocked} as gate_passed, {status} as gate_status,
               {worst} as gate_worst_metric, 'q1:' || md5(capture_key) as gate_data_version,
               1 as policy_version,
               case when {blocked} then {list(FORMATS)} else [] end as blocked_formats,
               case when {blocked} then [{worst} || ' = 1 (fail > 0.5)'] else [] end
                 as blocking_reasons,
               q >= 92 and x < 10 as waived,
               case when q >= 92 and x < 10 then '[{{"by": "lead"}}]' end as waivers,
               case when q >= 92 then 1 else 0 end as gx_errors, 0 as gx_warnings,
               {batch} as _batch from sim"""
    )


def _stage_receipts(con: duckdb.DuckDBPyConnection, batch: int) -> None:
    """Export receipts of ``sim``'s allowed episodes (`_RECEIPT_SHARES` of them per
    format, 3 % by an old exporter version) as staging ``batch``."""
    for fmt in FORMATS:
        con.execute(
            f"""insert into {SCHEMA}.export_receipts_{fmt} by name
            select 1 as receipt_version, capture_key, '{fmt}' as format,
                   'exports/{fmt}/' || capture_key as path,
                   cast(duration_s * 1.5e6 as bigint) as bytes, 3 as files,
                   sha256(capture_key || '{fmt}') as sha256,
                   case when h(i, '{fmt}') % 100 < 3 then 'old'
                        else '{CODE_VERSIONS[fmt]}' end as code_version,
                   'q1:' || md5(capture_key) as input_data_version,
                   landed_at + interval 2 hour as exported_at, {batch} as _batch
            from sim where not {_BLOCKED} and h(i, 'has-{fmt}') % 100 < {_RECEIPT_SHARES[fmt]}"""
        )


def _record_batch(con: duckdb.DuckDBPyConnection, batch: int, count: int) -> None:
    """The staged rows' item versions, the export formats (first batch) and the batch."""
    tables = ["raw_manifests", "trajectory_headers", "quality_rows", "quality_gates"]
    tables += [f"export_receipts_{fmt}" for fmt in FORMATS]
    for table in tables:
        con.execute(
            f"""insert into {SCHEMA}.item_versions
              (source, capture_key, fingerprint, first_batch, _batch)
            select '{table}', capture_key, 'sim', {batch}, {batch} from {SCHEMA}.{table}
            where _batch = {batch}"""
        )
    if batch == 1:
        for fmt in FORMATS:
            con.execute(
                f"insert into {SCHEMA}.export_formats values (?, ?, 1)", [fmt, CODE_VERSIONS[fmt]]
            )
    con.execute(f"insert into {SCHEMA}.batches values ({batch}, now()::timestamp, {count})")


def _model_times(target: Path) -> dict[str, float]:
    results = json.loads((target / "run_results.json").read_text())["results"]
    return {r["unique_id"].split(".")[-1]: float(r["execution_time"]) for r in results}


def _where(target: Path) -> list[str]:
    project = str(dbt_project_dir())
    return ["--project-dir", project, "--profiles-dir", project, "--target-path", str(target)]


def _run_in_process(runner: Any, target: Path, args: list[str]) -> tuple[dict[str, float], float]:
    """One in-process dbt invocation: (model execution times, wall time), seconds."""
    from ego_assets.catalog.warehouse import _release_duckdb

    start = time.perf_counter()
    result = runner.invoke([*args, *_where(target), "--quiet"])
    wall = time.perf_counter() - start
    _release_duckdb()
    if not result.success:
        raise RuntimeError(f"dbt {args} failed: {result.exception or result.result}")
    return _model_times(target), wall


def _run_subprocess(target: Path, args: list[str]) -> tuple[dict[str, float], float]:
    start = time.perf_counter()
    subprocess.run(
        [dbt_executable(), *args, *_where(target), "--quiet"],
        check=True,
        env=os.environ.copy(),
    )
    return _model_times(target), time.perf_counter() - start


def _time_queries(database: Path, repeats: int) -> dict[str, float]:
    times: dict[str, float] = {}
    with duckdb.connect(str(database), read_only=True) as con:
        for name, sql in QUERIES.items():
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                con.sql(sql).fetchall()
                samples.append(time.perf_counter() - start)
            times[name] = statistics.median(samples)
    return times


def _warm_up(runner: Any, tmp: Path, episodes: int) -> float:
    """A full build and an incremental refresh of a small scratch catalog; wall time, s."""
    scratch = tmp / "warmup" / "catalog.duckdb"  # the parsed manifest names the catalog
    scratch.parent.mkdir()
    start = time.perf_counter()
    with duckdb.connect(str(scratch)) as con:
        ensure_schema(con)
        _simulate(con, 0, episodes, batch=1)
    os.environ[DB_ENV] = str(scratch)
    _run_in_process(runner, tmp / "warmup-target", ["run", "--full-refresh"])
    with duckdb.connect(str(scratch)) as con:
        _simulate(con, episodes, max(1, episodes // 100), batch=2)
    _run_in_process(runner, tmp / "warmup-target", ["run", "--selector", REFRESH_SELECTOR])
    _run_in_process(runner, tmp / "warmup-target", ["run", "--select", VIEWS])
    scratch.unlink()
    return time.perf_counter() - start


def _publish_cycle(storage: Storage) -> float:
    """Seconds a catalog writer spends besides its work (`catalog_database`: lock, copy of
    the published file, its check, checkpoint and rename), median of three."""
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        with catalog_database(storage, write=True):
            pass
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run(
    episodes: int, new: int, repeats: int, warmup: int = 2000, random_keys: bool = False
) -> dict[str, Any]:
    from dbt.cli.main import dbtRunner

    with tempfile.TemporaryDirectory(prefix="bench-catalog-") as tmp:
        storage = Storage(Path(tmp) / "root")  # the database at its place below a data root
        database = Path(published_location(storage).path)
        database.parent.mkdir(parents=True)
        target = Path(tmp) / "target"
        os.environ[DB_ENV] = str(database)
        with duckdb.connect(str(database)) as con:
            ensure_schema(con)
            start = time.perf_counter()
            _simulate(con, 0, episodes, batch=1, random_keys=random_keys)
            simulate_s = time.perf_counter() - start

        start = time.perf_counter()
        manifest = parse_project()
        parse_s = time.perf_counter() - start
        runner = dbtRunner(manifest=manifest)
        warmup_s = _warm_up(runner, Path(tmp), warmup) if warmup else 0.0

        os.environ[DB_ENV] = str(database)
        full, full_wall = _run_in_process(runner, target, ["run", "--full-refresh"])
        with duckdb.connect(str(database)) as con:
            _simulate(con, episodes, new, batch=2, random_keys=random_keys)
        load = os.getloadavg()
        incremental, incremental_wall = _run_in_process(
            runner, target, ["run", "--selector", REFRESH_SELECTOR]
        )
        views, _ = _run_in_process(runner, target, ["run", "--select", VIEWS])
        # the fixed cost alone: a run with nothing new for the incremental models
        idle, idle_wall = _run_in_process(runner, target, ["run", "--select", "episodes"])
        cli, cli_wall = _run_subprocess(target, ["run", "--select", "episodes"])
        with duckdb.connect(str(database), read_only=True) as con:
            rows = con.sql("select count(*) from episodes").fetchall()[0][0]
        queries = _time_queries(database, repeats)
        size_mb = database.stat().st_size / 1e6
        publish_s = _publish_cycle(storage)

    full_s, incremental_s = sum(full.values()), sum(incremental.values())
    views_s = sum(views.values())
    return {
        "episodes": episodes,
        "new_episodes": new,
        "capture_keys": "random" if random_keys else "sequential",
        "episodes_after": rows,
        "simulate_s": simulate_s,
        "parse_once_s": parse_s,
        "warmup_episodes": warmup,
        "dbt_warmup_s": warmup_s,
        "full_build_s": full_s,
        "full_build_models_s": full,
        "incremental_s": incremental_s,
        "incremental_models_s": incremental,
        "incremental_ratio": incremental_s / full_s,
        "refresh_selection": f"--selector {REFRESH_SELECTOR}",
        "views_unchanged_s": views,
        "incremental_ratio_with_views": (incremental_s + views_s) / full_s,
        "load_average_1_5_15": list(load),
        "dbt_invocation_overhead_s": incremental_wall - incremental_s,
        "dbt_invocation_overhead_full_s": full_wall - full_s,
        "dbt_idle_run_overhead_s": idle_wall - sum(idle.values()),
        "dbt_cli_subprocess_overhead_s": cli_wall - sum(cli.values()),
        "query_s": queries,
        "max_query_s": max(queries.values()),
        "database_mb": size_mb,
        "publish_cycle_s": publish_s,
    }


def _table(result: dict[str, Any]) -> str:
    rows = [
        ("episodes (then new)", f"{result['episodes']:,} (+{result['new_episodes']:,})"),
        ("capture keys", result["capture_keys"]),
        ("simulate rows", f"{result['simulate_s']:.1f} s"),
        ("dbt parse (once)", f"{result['parse_once_s']:.2f} s"),
        (
            f"dbt warm-up ({result['warmup_episodes']:,} episodes, once)",
            f"{result['dbt_warmup_s']:.2f} s",
        ),
        ("full build, models", f"{result['full_build_s']:.2f} s"),
        ("incremental refresh, models", f"{result['incremental_s']:.2f} s"),
        (
            "incremental / full",
            f"{result['incremental_ratio']:.3f} (target <= {RATIO_TARGET})",
        ),
        (
            "incremental + unchanged views / full",
            f"{result['incremental_ratio_with_views']:.3f}",
        ),
        (
            "load average at the refresh",
            " ".join(f"{x:.2f}" for x in result["load_average_1_5_15"]),
        ),
    ]
    for name, full_s in result["full_build_models_s"].items():
        if name in result["incremental_models_s"]:
            refresh = f"{result['incremental_models_s'][name]:.3f} s"
        else:
            refresh = f"{result['views_unchanged_s'].get(name, 0.0):.3f} s (view, unchanged)"
        rows.append((f"  {name}: full | incremental", f"{full_s:.3f} s | {refresh}"))
    rows += [
        ("dbt overhead per invocation (parsed)", f"{result['dbt_invocation_overhead_s']:.2f} s"),
        ("dbt overhead, idle run (parsed)", f"{result['dbt_idle_run_overhead_s']:.2f} s"),
        ("dbt overhead, CLI subprocess", f"{result['dbt_cli_subprocess_overhead_s']:.2f} s"),
    ]
    rows += [(f"query {name}", f"{s * 1000:.1f} ms") for name, s in result["query_s"].items()]
    rows += [
        ("max query", f"{result['max_query_s'] * 1000:.1f} ms (target <= 1000 ms)"),
        ("catalog file", f"{result['database_mb']:.0f} MB"),
        ("writer's copy, check, checkpoint, swap", f"{result['publish_cycle_s']:.2f} s"),
        (
            "incremental + that / full",
            f"{(result['incremental_s'] + result['publish_cycle_s']) / result['full_build_s']:.3f}",
        ),
    ]
    return name_value_table(rows)


# The suite's smoke run (ego_assets_tests/test_bench_smoke.py): a tiny size, same code.
SMOKE_ARGS = ("--episodes", "200", "--new", "10", "--repeats", "1", "--warmup", "0")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench catalog", description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--warmup", type=int, default=2000, help="scratch catalog episodes (0: no warm-up)"
    )
    parser.add_argument(
        "--random-keys",
        action="store_true",
        help="capture keys in no order (ep-<md5>) instead of ep-00000000, ep-00000001, ...",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run(args.episodes, args.new, args.repeats, args.warmup, args.random_keys)
    report(_table(result), result, args.json)
    ok = result["incremental_ratio"] <= RATIO_TARGET and result["max_query_s"] <= QUERY_TARGET_S
    return 0 if ok else 1
