"""The two code locations of workspace.yaml: capture runs load no dbt and none of the
libraries only a step uses; together they hold the same assets, checks and jobs as the
whole workspace built in one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import yaml

from ego_assets.catalog_definitions import build_catalog_defs
from ego_assets.definitions import build_assets, build_defs
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry

ROOT = Path(__file__).resolve().parents[1]
# What a capture run's load must not import (seconds each; a step imports what it uses):
# the catalog's dbt and DuckDB, GX and pandas (expectations, LeRobot tables), Rerun (the
# recording), SciPy (rotations), h5py (HDF5), PyAV (video), simplejpeg, webdataset, PIL,
# SQLAlchemy (reading partitions) and Dagster's backfill machinery (launching a backfill).
HEAVY = (
    "dbt",
    "dagster_dbt",
    "great_expectations",
    "duckdb",
    "pandas",
    "rerun",
    "scipy",
    "h5py",
    "av",
    "simplejpeg",
    "webdataset",
    "PIL",
    "sqlalchemy",
    "dagster._core.execution.backfill",
)


def test_capture_location_loads_without_dbt_the_catalog_or_step_libraries(
    tmp_path: Path,
) -> None:
    code = (
        "import json, sys, ego_assets.definitions as d; "
        "defs = d.defs(); "
        "jobs = sorted(j.name for j in defs.resolve_all_job_defs()); "
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} "
        f"or m in {HEAVY!r}); "
        "print(json.dumps({'heavy': heavy, 'jobs': jobs}))"
    )
    env = {**os.environ, "EGO_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["heavy"] == []
    assert "capture_job" in loaded["jobs"] and "export_holos_hdf5" in loaded["jobs"]
    assert "aggregates_job" not in loaded["jobs"]


def _keys(defs: dg.Definitions) -> set[str]:
    return {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}


def _materializable(defs: dg.Definitions) -> set[str]:
    graph = defs.resolve_asset_graph()
    return {k.to_user_string() for k in graph.materializable_asset_keys}


def test_the_two_locations_together_are_the_whole_workspace(tmp_path: Path) -> None:
    storage = StorageResource(root=str(tmp_path))
    whole = build_defs(storage)
    capture = build_defs(storage, catalog=False)
    catalog = build_catalog_defs(storage, 1, build_assets(1)[0])
    capture_keys, catalog_keys = _materializable(capture), _materializable(catalog)
    assert not capture_keys & catalog_keys  # each asset defined in one location only
    assert capture_keys | catalog_keys == _materializable(whole)
    assert {"quality_catalog", "egosmith_dataset", "platform/quality_rows"} <= catalog_keys
    assert {"raw_capture", "trajectory", "quality_report", "holos_hdf5"} <= capture_keys
    # the catalog location names the capture assets it reads by key (cross-location deps)
    assert {"quality_report", "raw_capture", "egosmith_shards"} <= _keys(catalog) - catalog_keys
    deps = catalog.resolve_asset_graph().get(dg.AssetKey("quality_catalog")).parent_keys
    assert deps == {dg.AssetKey("quality_report")}
    checks = {c.to_user_string() for c in whole.resolve_asset_graph().asset_check_keys}
    capture_checks = {c.to_user_string() for c in capture.resolve_asset_graph().asset_check_keys}
    catalog_checks = {c.to_user_string() for c in catalog.resolve_asset_graph().asset_check_keys}
    assert capture_checks | catalog_checks == checks and capture_checks and catalog_checks
    jobs = {j.name for j in whole.resolve_all_job_defs()}
    assert {j.name for j in capture.resolve_all_job_defs()} | {
        j.name for j in catalog.resolve_all_job_defs()
    } == jobs


def test_workspace_yaml_names_both_locations() -> None:
    entries = yaml.safe_load((ROOT / "workspace.yaml").read_text())["load_from"]
    assert [e["python_module"]["module_name"] for e in entries] == [
        "ego_assets.definitions",
        "ego_assets.catalog_definitions",
    ]
    assert [e["python_module"]["location_name"] for e in entries] == [
        "ego_assets",
        "ego_assets_catalog",
    ]


ROOT_ENV = "EGO_TEST_CAPTURE_JOB_ROOT"


def capture_job_at_env_root() -> dg.JobDefinition:
    """The code location's ``capture_job`` over the storage named by ``ROOT_ENV`` (a
    reconstructable target, so the run executes as a deployed run does)."""
    storage = StorageResource(root=os.environ[ROOT_ENV])
    return build_defs(storage, catalog=False).resolve_job_def("capture_job")


def test_capture_job_runs_its_steps_in_the_run_process_by_default_egosmith_before_ceres(
    tmp_path: Path,
) -> None:
    """Every step of a capture run in the run's process, and the exports in
    `registry.run_order` (the ``dagster/priority`` step tag): EgoSmith's decode leaves
    CERES its camera statistics (`ego_assets.formats.camera_sample`)."""
    from ego_assets.synth import synthesize

    storage = StorageResource(root=str(tmp_path))
    job = build_defs(storage, catalog=False).resolve_job_def("capture_job")
    assert job.executor_def.name == "in_process"
    # a deployment's executor (EGO_EXECUTOR) still applies to capture runs
    chosen = build_defs(storage, executor=dg.multiprocess_executor, catalog=False)
    assert chosen.resolve_job_def("capture_job").executor_def.name == "multiprocess"

    for key, kind in (("good-1", "holos-iphone"), ("bad-1", "webxr"), ("good-2", "webxr")):
        synthesize(kind, tmp_path / "landing" / key, seconds=2.0, seed=1, capture_id=key)
    # a capture whose marker is not JSON: its run fails, the others do not
    (tmp_path / "landing" / "bad-1" / "ego_capture.json").write_text("{not json")
    os.environ[ROOT_ENV] = str(tmp_path)
    try:
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("captures", ["good-1", "bad-1", "good-2"])
            outcome = {}
            pids = {}
            started = {}
            for key in ("good-1", "bad-1", "good-2"):
                with dg.execute_job(
                    dg.reconstructable(capture_job_at_env_root),
                    instance,
                    tags={"dagster/partition": key},
                    raise_on_error=False,
                ) as result:
                    outcome[key] = result.success
                    events = result.all_events
                    pids[key] = {e.pid for e in events if e.is_step_event}
                    started[key] = [
                        e.step_key for e in events if e.event_type_value == "STEP_START"
                    ]
                    assert not [e for e in events if e.event_type_value == "STEP_WORKER_STARTING"]
    finally:
        del os.environ[ROOT_ENV]
    assert outcome == {"good-1": True, "bad-1": False, "good-2": True}
    assert all(len(p) == 1 for p in pids.values()), pids  # every step in one process
    for key in ("good-1", "good-2"):
        exports = [step for step in started[key] if step in registry.names()]
        assert sorted(exports) == sorted(registry.names()), started[key]
        assert exports.index("egosmith_shards") < exports.index("ceres_episode"), exports
    exports = tmp_path / "exports"
    for key in ("good-1", "good-2"):
        assert (exports / "holos_hdf5" / key / f"{key}.h5").stat().st_size > 0
        assert (exports / "egosmith" / key / "shard-000000.tar").stat().st_size > 0
    assert not (exports / "holos_hdf5" / "bad-1").exists()
