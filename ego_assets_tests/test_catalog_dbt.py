"""The dataset catalog: staging the platform's rows and the dbt models over them.

One module-scoped data root holds two real 2 s synthetic captures carried through the
pipeline (raw copy, trajectory, quality gate): a clean WebXR capture and a faulty one
whose gate blocks its exports. Receipts are written with the receipts helper the
exporters call.
"""

import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from ego_assets import pipeline
from ego_assets.catalog.cli import run_catalog
from ego_assets.catalog.receipts import (
    make_receipt,
    read_receipt,
    receipt_location,
    record_export,
    write_receipt,
)
from ego_assets.catalog.sources import stage_rows
from ego_assets.catalog.warehouse import (
    WAIT_ENV,
    catalog_database,
    published_problem,
    query,
    run_dbt,
)
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.waiting import CEILING_S

CLEAN, FAULTY, NEW = "cat-clean", "cat-faulty", "cat-new"


@pytest.fixture(scope="module")
def pipeline_root(tmp_path_factory) -> Path:
    """A data root with two captures through raw, trajectory and quality."""
    root = tmp_path_factory.mktemp("catalog-root")
    storage = Storage(root)
    for key, seed, faults in ((CLEAN, 1, ()), (FAULTY, 2, ("hand_never_seen",))):
        synthesize(
            "webxr", root / "landing" / key, seconds=2, seed=seed, faults=faults, capture_id=key
        )
        pipeline.ingest_raw(storage, key)
        pipeline.normalize(storage, key)
        pipeline.assess_quality(storage, key)
    return root


@pytest.fixture
def root(pipeline_root, tmp_path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(pipeline_root, copy)
    return copy


def _export(storage: Storage, key: str, fmt: str, code_version: str, payload: bytes) -> None:
    target = storage.export_path(fmt, key)
    local = Path(target.path)
    local.mkdir(parents=True, exist_ok=True)
    (local / "episode.bin").write_bytes(payload)
    gate = pipeline.stored_gate(storage, key)
    assert gate is not None
    record_export(
        storage,
        export_format=fmt,
        capture_key=key,
        location=target,
        local=local,
        code_version=code_version,
        input_data_version=gate.data_version,
    )


def _land_new_capture(storage: Storage, root: Path) -> None:
    """A third capture (``NEW``) through raw, trajectory and quality."""
    synthesize("webxr", root / "landing" / NEW, seconds=2, seed=3, capture_id=NEW)
    pipeline.ingest_raw(storage, NEW)
    pipeline.normalize(storage, NEW)
    pipeline.assess_quality(storage, NEW)


def _rows(database: Path, sql: str) -> list[dict]:
    return query(database, sql).to_pylist()


def test_catalog_builds_and_refreshes_incrementally(root):
    storage = Storage(root)
    _export(storage, CLEAN, "holos_hdf5", "holos-1", b"h" * 100)
    versions = {"holos_hdf5": "holos-1"}
    with catalog_database(storage, write=True) as db:
        first = stage_rows(storage, db, versions)
        assert first.batch == 1
        assert first.changed["raw_manifests"] == 2
        assert first.changed["export_receipts_holos_hdf5"] == 1
        assert first.changed["export_receipts_ceres_episode"] == 0
        run_dbt(["build", "--quiet"], db)

        episodes = {r["capture_key"]: r for r in _rows(db, "select * from episodes")}
        assert sorted(episodes) == [CLEAN, FAULTY]
        clean, faulty = episodes[CLEAN], episodes[FAULTY]
        assert clean["source_kind"] == "webxr"
        assert clean["duration_s"] == pytest.approx(2.0, abs=0.1)
        assert (clean["gate"], faulty["gate"]) == ("allowed", "blocked")
        assert faulty["quality_status"] == "fail"
        assert faulty["worst_metric"] == "hand:left/tracking_loss_ratio"
        assert clean["holos_hdf5_state"] == "exported"
        assert clean["holos_hdf5_bytes"] == 100
        receipt = _rows(db, "select path, sha256 from platform.export_receipts_holos_hdf5")
        assert receipt[0]["path"] == f"exports/holos_hdf5/{CLEAN}"
        assert clean["ceres_episode_state"] == "missing"
        assert faulty["holos_hdf5_state"] == "blocked"
        assert clean["landing_day"] == dt.datetime.now(dt.UTC).date()

        coverage = {r["format"]: r for r in _rows(db, "select * from export_coverage")}
        assert sorted(coverage) == ["ceres_episode", "egosmith_shards", "holos_hdf5"]
        holos = coverage["holos_hdf5"]
        assert (holos["exported"], holos["blocked"], holos["stale"], holos["missing"]) == (
            1,
            1,
            0,
            0,
        )
        assert holos["blocked_keys"] == [FAULTY]
        assert coverage["egosmith_shards"]["missing_keys"] == [CLEAN]
        assert coverage["egosmith_shards"]["current_code_version"] is None

        (composition,) = _rows(db, "select * from dataset_composition")
        assert composition["episodes"] == 2
        assert composition["usable_episodes"] == 1
        total_s = clean["duration_s"] + faulty["duration_s"]
        assert composition["hours"] == pytest.approx(total_s / 3600)

        (trend,) = _rows(db, "select * from quality_trends")
        assert (trend["episodes"], trend["fail_episodes"], trend["blocked_episodes"]) == (2, 1, 1)
        # one episode each; ties go to the alphabetically first metric
        assert clean["worst_metric"] == "episode/duration_s"  # 2 s: shorter than 5 s
        assert (trend["top_worst_metric"], trend["top_worst_metric_episodes"]) == (
            "episode/duration_s",
            1,
        )

        # Nothing changed: no batch, nothing rebuilt.
        assert stage_rows(storage, db, versions).batch is None

        # A new exporter code version makes the receipt stale (every key is rebuilt);
        # a re-export with it makes it current again.
        assert stage_rows(storage, db, {"holos_hdf5": "holos-2"}).formats_changed == 1
        run_dbt(["run", "--quiet"], db)
        clean_sql = (
            "select holos_hdf5_state s, holos_hdf5_bytes b from episodes "
            f"where capture_key = '{CLEAN}'"
        )
        assert _rows(db, clean_sql) == [{"s": "stale", "b": 100}]
        _export(storage, CLEAN, "holos_hdf5", "holos-2", b"h" * 120)
        third = stage_rows(storage, db, {"holos_hdf5": "holos-2"})
        assert third.total_changed == 1
        run_dbt(["run", "--quiet"], db)
        rebuilt = _rows(db, "select capture_key, _batch from episodes")
        # Only the re-exported capture was rebuilt by the incremental run.
        assert {r["capture_key"]: r["_batch"] for r in rebuilt} == {
            CLEAN: third.batch,
            FAULTY: third.batch - 1,
        }
        assert _rows(db, clean_sql) == [{"s": "exported", "b": 120}]

        # A removed receipt: the export is missing again.
        receipt_location(storage, "holos_hdf5", CLEAN).unlink()
        assert stage_rows(storage, db, None).removed["export_receipts_holos_hdf5"] == 1
        run_dbt(["build", "--quiet"], db)
        assert _rows(db, "select missing from export_coverage where format = 'holos_hdf5'") == [
            {"missing": 1}
        ]


MODELS = ("episodes", "export_coverage", "dataset_composition", "quality_trends")


def _model_rows(database: Path, model: str) -> list[tuple]:
    """Every row of ``model`` but its ``_batch``, sorted, floats rounded (a rebuild may sum
    in another order; NaN as text, so that it equals itself)."""
    columns = [r["column_name"] for r in _rows(database, f"describe {model}")]
    names = ", ".join(c for c in columns if c != "_batch")
    rows = query(database, f"select {names} from {model} order by all").to_pylist()

    def same(value):
        if isinstance(value, float):
            return "nan" if math.isnan(value) else round(value, 9)
        return value

    return [tuple(same(v) for v in row.values()) for row in rows]


def _assert_equals_full_rebuild(database: Path, models=MODELS) -> None:
    """Every model after the incremental run equals a full rebuild of a copy."""
    rebuilt = database.parent / "rebuilt" / database.name  # same name: same DuckDB catalog
    rebuilt.parent.mkdir(exist_ok=True)
    shutil.copy(database, rebuilt)
    run_dbt(["run", "--full-refresh", "--quiet"], rebuilt)
    for model in models:
        assert _model_rows(database, model) == _model_rows(rebuilt, model), model
    rebuilt.unlink()


def test_incremental_refresh_equals_full_rebuild(root):
    """New captures only (older rows untouched), a changed older capture, an exporter's new
    code version (every capture rebuilt) and a removed raw copy: after each incremental
    run the models hold what a full rebuild computes."""
    storage = Storage(root)
    _export(storage, CLEAN, "holos_hdf5", "holos-1", b"h" * 100)
    versions = {"holos_hdf5": "holos-1"}
    with catalog_database(storage, write=True) as db:
        stage_rows(storage, db, versions)
        run_dbt(["run", "--quiet"], db)
        first = {r["capture_key"]: r["_batch"] for r in _rows(db, "select * from episodes")}

        # A day of new captures: only their rows are read and built.
        _land_new_capture(storage, root)
        batch = stage_rows(storage, db, versions).batch
        result = run_dbt(["run", "--quiet"], db)
        rebuilt = {r["capture_key"]: r["_batch"] for r in _rows(db, "select * from episodes")}
        assert rebuilt == {**first, NEW: batch}  # the older episodes were not rebuilt
        # a change this small is inserted on one DuckDB thread (then this count is restored)
        (episodes,) = [r.node for r in result.result.results if r.node.name == "episodes"]
        plan = json.loads(episodes.compiled_code.split("-- catalog_plan: ")[1].split("\n")[0])
        ((threads,),) = duckdb.sql("select current_setting('threads')").fetchall()
        assert (plan["full"], plan["replace"], plan["threads"]) == (False, None, threads)
        _assert_equals_full_rebuild(db)

        # An older capture changes (a new export): its unchanged older rows are read too.
        _export(storage, NEW, "ceres_episode", "ceres-1", b"c" * 10)
        receipt_batch = stage_rows(storage, db, versions).batch
        # its new item keeps the batch that first staged the capture
        items = _rows(
            db,
            "select _batch, first_batch from platform.item_versions "
            f"where capture_key = '{NEW}' and source = 'export_receipts_ceres_episode'",
        )
        assert items == [{"_batch": receipt_batch, "first_batch": batch}]
        run_dbt(["run", "--quiet"], db)
        state = f"select ceres_episode_state s from episodes where capture_key = '{NEW}'"
        assert _rows(db, state) == [{"s": "exported"}]
        _assert_equals_full_rebuild(db)

        # A new exporter code version: every capture's export state is rebuilt.
        stage_rows(storage, db, {"holos_hdf5": "holos-2"})
        run_dbt(["run", "--quiet"], db)
        assert _rows(db, "select count(*) n from episodes where holos_hdf5_state = 'stale'") == [
            {"n": 1}
        ]
        _assert_equals_full_rebuild(db)

        # A removed raw copy: its episode goes, from the aggregates too.
        (root / "raw" / NEW / "manifest.json").unlink()
        assert stage_rows(storage, db, None).removed["raw_manifests"] == 1
        run_dbt(["run", "--quiet"], db)
        assert NEW not in {r["capture_key"] for r in _rows(db, "select * from episodes")}
        _assert_equals_full_rebuild(db)


def test_a_catalog_of_an_older_shape_is_brought_up_to_date(root):
    """The refresh checks no columns: a table whose fingerprint (comment) is not the
    model's, e.g. built by an older model or materialization, is rebuilt in full at the
    next run instead of receiving rows of another shape. Staging adds
    ``item_versions.first_batch`` to a catalog staged before it existed."""

    storage = Storage(root)
    with catalog_database(storage, write=True) as db:
        stage_rows(storage, db, None)
        run_dbt(["run", "--quiet"], db)
        (comment,) = _rows(db, "select comment from duckdb_tables() where table_name = 'episodes'")
        assert comment["comment"].startswith("dbt-model:")
        with duckdb.connect(str(db)) as con:  # an older shape: a column fewer, no fingerprint
            con.execute("alter table episodes drop column holos_hdf5_bytes")
            con.execute("comment on table episodes is null")
            con.execute("alter table platform.item_versions drop column first_batch")
        _land_new_capture(storage, root)
        batch = stage_rows(storage, db, None).batch
        firsts = _rows(db, "select capture_key, first_batch from platform.item_versions")
        assert {r["capture_key"]: r["first_batch"] for r in firsts} == {
            CLEAN: None,
            FAULTY: None,
            NEW: batch,
        }
        run_dbt(["run", "--quiet"], db)
        rows = _rows(db, "select capture_key, _batch, holos_hdf5_bytes from episodes")
        assert {r["capture_key"]: r["_batch"] for r in rows} == {
            CLEAN: batch,
            FAULTY: batch,
            NEW: batch,
        }
        _assert_equals_full_rebuild(db)


def test_catalog_on_s3_and_the_cli(root, s3_server, s3_bucket, capsys):
    local = Storage(root)
    _export(local, CLEAN, "ceres_episode", "ceres-1", b"c" * 10)
    url = s3_bucket + "/ego"
    for stage in ("raw", "trajectory", "quality", "receipts"):
        s3_server.upload_dir(root / stage, f"{url}/{stage}", last=None)
    code = run_catalog(url, endpoint_url=s3_server.endpoint_url, build=True)
    assert code == 0
    printed = capsys.readouterr().out
    assert "export coverage" in printed
    header = printed.split("export coverage")[1].split()[:10]
    assert header[:6] == ["format", "code_version", "episodes", "exported", "skipped", "blocked"]
    assert "catalog/warehouse/catalog.duckdb" in s3_server.keys(url)
    storage = Storage(url, storage_options=s3_server.storage_options)
    assert read_receipt(storage, "ceres_episode", CLEAN) is not None
    code = run_catalog(
        url,
        endpoint_url=s3_server.endpoint_url,
        sql="select capture_key, ceres_episode_state from episodes order by capture_key",
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == [CLEAN, "exported"]
    assert lines[2].split() == [FAULTY, "blocked"]


def test_cli_without_a_catalog(tmp_path, capsys):
    assert run_catalog(tmp_path) == 1
    assert "no catalog" in capsys.readouterr().out


def test_dagster_builds_the_models_with_tests_as_checks(root):
    import dagster as dg

    from ego_assets.definitions import build_defs
    from ego_assets.defs.resources import StorageResource
    from ego_assets.defs.schedules import aggregates_job

    defs = build_defs(StorageResource(root=str(root)))
    graph = defs.resolve_asset_graph()
    sources = dg.AssetKey(["platform", "raw_manifests"])
    assert {"raw_capture"} == {k.to_user_string() for k in graph.get(sources).parent_keys}
    models = ["episodes", "export_coverage", "dataset_composition", "quality_trends"]
    for name in models:
        assert sources in graph.get(dg.AssetKey(name)).parent_keys or name != "episodes"
    checks = {c.name for c in graph.get(dg.AssetKey("episodes")).check_keys}
    assert {"unique_episodes_capture_key", "not_null_episodes_holos_hdf5_state"} <= checks
    job = defs.resolve_job_def(aggregates_job.name)
    catalog = {sources, *(dg.AssetKey(n) for n in models)}
    assert catalog <= set(job.asset_layer.selected_asset_keys)

    staged = [k for k in graph.get_all_asset_keys() if k.path[0] == "platform"]
    result = job.execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), asset_selection=[*catalog, *staged]
    )
    assert result.success
    materialized = {e.asset_key for e in result.get_asset_materialization_events()}
    assert catalog <= materialized
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) >= 20
    assert all(e.passed for e in evaluations)
    with catalog_database(Storage(root), write=False) as db:
        assert _rows(db, "select count(*) n from episodes") == [{"n": 2}]


def test_an_episode_the_exporter_skipped_shows_skipped_with_its_reason(root):
    storage = Storage(root)
    target = storage.export_path("egosmith_shards", CLEAN)
    local = Path(target.path)
    local.mkdir(parents=True)
    (local / "episode.json").write_text('{"status": "skipped"}\n')
    gate = pipeline.stored_gate(storage, CLEAN)
    assert gate is not None
    reason = "no head-camera video (media kind 'rgb' on a head camera)"
    receipt = make_receipt(
        storage,
        export_format="egosmith_shards",
        capture_key=CLEAN,
        location=target,
        local=local,
        code_version="egosmith-1",
        input_data_version=gate.data_version,
        skipped_reason=reason,
    )
    write_receipt(storage, receipt)
    assert (receipt.status, receipt.reason) == ("skipped", reason)
    with catalog_database(storage, write=True) as db:
        stage_rows(storage, db, {"egosmith_shards": "egosmith-1"})
        run_dbt(["build", "--quiet"], db)
        episodes = {r["capture_key"]: r for r in _rows(db, "select * from episodes")}
        assert episodes[CLEAN]["egosmith_shards_state"] == "skipped"
        assert episodes[CLEAN]["egosmith_shards_skip_reason"] == reason
        assert episodes[FAULTY]["egosmith_shards_state"] == "blocked"
        assert episodes[FAULTY]["egosmith_shards_skip_reason"] is None
        (egosmith,) = _rows(db, "select * from export_coverage where format = 'egosmith_shards'")
        assert (egosmith["exported"], egosmith["skipped"], egosmith["missing"]) == (0, 1, 0)
        assert egosmith["skipped_keys"] == [CLEAN]
        assert egosmith["missing_keys"] == []


# A catalog build in a child process that SIGKILLs itself at ``argv[2]``: "staged" (the
# staging transaction committed in the working copy), "episodes built" (dbt finished the
# table, not yet the views), "publish" (the copy checkpointed, about to be renamed).
KILLED_BUILD = """
import os, sys
from dbt.cli.main import dbtRunner
from ego_assets.catalog import warehouse
from ego_assets.catalog.sources import stage_rows
from ego_assets.storage import Storage

root, point = sys.argv[1], sys.argv[2]

def die(where):
    if where == point:
        os.kill(os.getpid(), 9)

def on_event(event):
    if event.info.name == "NodeFinished" and event.data.node_info.node_name == "episodes":
        die("episodes built")

rename = os.replace
def replace(src, dst):
    die("publish")
    rename(src, dst)
os.replace = replace

storage = Storage(root)
with warehouse.catalog_database(storage, write=True) as db:
    stage_rows(storage, db)
    die("staged")
    os.environ.update(warehouse.dbt_env(db))
    project = str(warehouse.dbt_project_dir())
    where = ["--project-dir", project, "--profiles-dir", project, "--quiet"]
    assert dbtRunner(callbacks=[on_event]).invoke(["build", *where]).success
"""
REPO = Path(__file__).resolve().parents[1]


def _killed_build(root: Path, point: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", KILLED_BUILD, str(root), point],
        cwd=REPO,
        timeout=CEILING_S,
        capture_output=True,
        text=True,
    )
    assert run.returncode == -9, f"the build was not killed at {point!r}: {run.stderr[-2000:]}"


def _episodes(database: Path) -> list[str]:
    return [
        r["capture_key"] for r in _rows(database, "select capture_key from episodes order by 1")
    ]


def test_a_build_killed_at_any_point_leaves_the_old_catalog_or_none(root, capsys):
    storage = Storage(root)
    published = root / "catalog" / "warehouse" / "catalog.duckdb"
    for point in ("staged", "episodes built"):  # the first build: nothing is published
        _killed_build(root, point)
        assert not published.exists(), point
        assert published_problem(storage) == "no catalog yet"
    assert run_catalog(root, build=True) == 0
    assert _episodes(published) == [CLEAN, FAULTY]

    _land_new_capture(storage, root)
    for point in ("staged", "episodes built", "publish"):  # a refresh: the old catalog stays
        _killed_build(root, point)
        assert published_problem(storage) is None, point
        assert _episodes(published) == [CLEAN, FAULTY], point
        assert _rows(published, "select count(*) n from platform.raw_manifests") == [{"n": 2}]
        leftovers = [p.name for p in published.parent.iterdir() if p.name.startswith(".")]
        assert len(leftovers) == 1, leftovers  # the dead writer's working folder, until...
    capsys.readouterr()
    assert run_catalog(root, build=True) == 0  # ...the next writer removes it
    # the new capture's manifest, header, quality rows and gate
    assert "staged 4 changed files" in capsys.readouterr().out
    assert _episodes(published) == [CLEAN, FAULTY, NEW]
    assert sorted(p.name for p in published.parent.iterdir()) == ["catalog.duckdb"]


def test_a_broken_catalog_is_reported_then_rebuilt(root, capsys):
    storage = Storage(root)
    published = root / "catalog" / "warehouse" / "catalog.duckdb"
    published.parent.mkdir(parents=True)
    stage_rows(storage, published)  # staged in place, then killed before dbt (older versions)
    assert published_problem(storage) == (
        "models not built yet: dataset_composition, episodes, export_coverage, quality_trends, "
        "releases, withdrawn_holdings"
    )
    assert run_catalog(root) == 1
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and "models not built yet" in printed
    assert run_catalog(root, build=True) == 0
    assert _episodes(published) == [CLEAN, FAULTY]

    published.write_bytes(b"not a database " * 1000)  # a file DuckDB cannot open
    assert published_problem(storage).startswith("unreadable: ")
    assert run_catalog(root) == 1
    assert run_catalog(root, sql="select 1") == 1
    capsys.readouterr()
    assert run_catalog(root, build=True) == 0  # rebuilt from an empty file: all staged again
    assert "staged 11 changed files" in capsys.readouterr().out  # 2 x 4 files, 3 formats
    assert _episodes(published) == [CLEAN, FAULTY]
    assert run_catalog(root, sql="select nope from episodes") == 1
    assert capsys.readouterr().out.startswith("query failed: Binder Error")


BUILD = (
    "import sys; from ego_assets.catalog.cli import run_catalog; "
    "sys.exit(run_catalog(sys.argv[1], build=True))"
)


def test_two_builds_at_once_take_turns(root):
    builds = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD, str(root)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [b.communicate(timeout=CEILING_S) for b in builds]
    assert [b.returncode for b in builds] == [0, 0], [err[-2000:] for _, err in outputs]
    staged = sorted(out.splitlines()[0] for out, _ in outputs)
    # the second found the first's staging published: nothing left to stage
    assert staged == ["staged 0 changed files", "staged 11 changed files"]
    assert all("export coverage" in out for out, _ in outputs)
    published = root / "catalog" / "warehouse" / "catalog.duckdb"
    assert _episodes(published) == [CLEAN, FAULTY]
    assert sorted(p.name for p in published.parent.iterdir()) == ["catalog.duckdb"]


def test_a_second_writer_gives_up_after_its_bounded_wait(root, monkeypatch, capsys):
    storage = Storage(root)
    monkeypatch.setenv(WAIT_ENV, "0.5")
    with storage.writer_lock(root / "catalog" / "warehouse" / "catalog.duckdb"):
        assert run_catalog(root, build=True) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("catalog not built: the catalog ")
    assert f"is being written by pid {os.getpid()} on " in line
    assert line.endswith(
        f"gave up after waiting 0.5 s (${WAIT_ENV}): run again when that writer has finished"
    )
    assert not (root / "catalog" / "warehouse" / "catalog.duckdb").exists()
