"""Bounded partition sets: the capture -> set hash, and the layout per number of sets."""

from collections import Counter

import dagster as dg
import pytest

from ego_assets.capture_sets import (
    PER_CAPTURE_ASSETS,
    capture_set,
    capture_sets_from_env,
    jump_hash,
    key_hash,
    parse_capture_sets,
)
from ego_assets.definitions import build_defs
from ego_assets.defs.exports import export_target
from ego_assets.defs.partitions import (
    CaptureSet,
    capture_run_request,
    group_by_set,
    partition_for_capture,
    register_captures,
    set_of_partitions_def,
)
from ego_assets.defs.resources import StorageResource

KEYS = [f"sim-{i:07d}" for i in range(20_000)]


def test_key_hash_is_stable_across_processes():
    # BLAKE2b-64 of the UTF-8 key, little endian: fixed values, not Python's salted hash()
    assert key_hash("sim-0000000") == key_hash("sim-0000000")
    assert key_hash("hv-0001") == int.from_bytes(
        __import__("hashlib").blake2b(b"hv-0001", digest_size=8).digest(), "little"
    )
    assert [capture_set(k, 40) for k in ("hv-0001", "sim-0000000", "aria-sample")] == [
        capture_set(k, 40) for k in ("hv-0001", "sim-0000000", "aria-sample")
    ]


def test_jump_hash_matches_the_reference_implementation():
    # the C++ function of Lamping & Veach (2014), compiled and run on these keys
    keys = (1, 2, 42, 123456789, 0xDEADBEEFCAFEBABE, 2**64 - 1)
    assert [[jump_hash(k, b) for b in (2, 10, 40, 1000)] for k in keys] == [
        [0, 6, 17, 549],
        [0, 6, 31, 338],
        [1, 2, 33, 571],
        [0, 7, 34, 294],
        [1, 4, 35, 144],
        [1, 9, 10, 313],
    ]
    assert {jump_hash(k, 1) for k in keys} == {0}
    with pytest.raises(ValueError):
        jump_hash(1, 0)


def test_one_set_puts_every_capture_in_set_zero():
    assert {capture_set(k, 1) for k in KEYS} == {0}
    assert partition_for_capture("hv-0001", 1) == partition_for_capture("hv-0001")


def test_sets_are_balanced():
    counts = Counter(capture_set(k, 40) for k in KEYS)
    assert sorted(counts) == list(range(40))
    expected = len(KEYS) / 40
    assert max(abs(c - expected) for c in counts.values()) < 0.15 * expected


def test_growing_the_sets_moves_only_the_captures_of_the_new_set():
    for sets in (1, 3, 39):
        before = {k: capture_set(k, sets) for k in KEYS}
        after = {k: capture_set(k, sets + 1) for k in KEYS}
        moved = [k for k in KEYS if before[k] != after[k]]
        assert all(after[k] == sets for k in moved)  # only into the new set
        share = len(moved) / len(KEYS)
        assert abs(share - 1 / (sets + 1)) < 0.2 / (sets + 1)


def test_env_parsing():
    assert capture_sets_from_env({}) == 1
    assert capture_sets_from_env({"EGO_CAPTURE_SETS": " 40 "}) == 40
    for bad in ("0", "-1", "x", "1000", "2.5"):
        with pytest.raises(ValueError, match="EGO_CAPTURE_SETS"):
            parse_capture_sets(bad)


def test_set_names():
    s = CaptureSet(7)
    assert (s.prefix, s.partitions_name) == ("s007", "captures_s007")
    assert s.key("trajectory") == dg.AssetKey(["s007", "trajectory"])
    assert s.job_name("capture_job") == "capture_job_s007"
    assert s.group("quality") == "captures_s007"
    zero = CaptureSet(0)
    assert (zero.prefix, zero.partitions_name, zero.key("trajectory")) == (
        "",
        "captures",
        dg.AssetKey("trajectory"),
    )
    assert (zero.job_name("capture_job"), zero.group("quality")) == ("capture_job", "quality")
    assert set_of_partitions_def("captures_s007") == s
    assert set_of_partitions_def("captures") == zero
    assert set_of_partitions_def("captures_s000") is None
    assert set_of_partitions_def("other") is None


def _layout(sets: int) -> dict[str, object]:
    with dg.instance_for_test():
        defs = build_defs(StorageResource(root="unused"), sets=sets)
        graph = defs.resolve_asset_graph()
        jobs = sorted(j.name for j in defs.resolve_all_job_defs())
    partitioned = {
        k.to_user_string(): (graph.get(k).partitions_def.name, graph.get(k).group_name)
        for k in graph.get_all_asset_keys()
        if graph.get(k).partitions_def is not None
    }
    return {"graph": graph, "jobs": jobs, "partitioned": partitioned}


def test_one_set_is_the_layout_from_before_sets():
    layout = _layout(1)
    assert layout["partitioned"] == {
        "raw_capture": ("captures", "capture"),
        "trajectory": ("captures", "capture"),
        "quality_report": ("captures", "quality"),
        "holos_hdf5": ("captures", "exports"),
        "egosmith_shards": ("captures", "exports"),
        "ceres_episode": ("captures", "exports"),
        "release": ("releases", "releases"),  # partitioned by release name, not by capture
    }
    assert [j for j in layout["jobs"] if not j.startswith("__")] == [
        "aggregates_job",
        "capture_job",
        "export_ceres_episode",
        "export_egosmith_shards",
        "export_holos_hdf5",
    ]


def test_three_sets_each_with_its_assets_checks_group_and_jobs():
    layout = _layout(3)
    graph = layout["graph"]
    expected = {name: ("captures", None) for name in PER_CAPTURE_ASSETS}
    for i in (1, 2):
        for name in PER_CAPTURE_ASSETS:
            expected[f"s{i:03d}/{name}"] = (f"captures_s{i:03d}", f"captures_s{i:03d}")
    expected["release"] = ("releases", "releases")  # one asset over every set
    got = layout["partitioned"]
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in expected.items()}
    assert {v[1] for k, v in got.items() if k.startswith("s002/")} == {"captures_s002"}
    # upstream stays within the set
    assert graph.get(dg.AssetKey(["s001", "trajectory"])).parent_keys == {
        dg.AssetKey(["s001", "raw_capture"])
    }
    # each set's quality_report carries its export gate check
    checks = {c.asset_key.to_user_string() for c in graph.asset_check_keys}
    assert {"quality_report", "s001/quality_report", "s002/quality_report"} <= checks
    # aggregates read every set
    assert graph.get(dg.AssetKey("quality_catalog")).parent_keys == {
        CaptureSet(i).key("quality_report") for i in range(3)
    }
    assert graph.get(dg.AssetKey("ceres_dataset")).parent_keys == {
        CaptureSet(i).key("ceres_episode") for i in range(3)
    }
    staged = graph.get(dg.AssetKey(["platform", "trajectory_headers"])).parent_keys
    assert staged == {CaptureSet(i).key("trajectory") for i in range(3)}
    jobs = set(layout["jobs"])
    assert {"capture_job", "capture_job_s001", "capture_job_s002"} <= jobs
    assert {f"export_holos_hdf5_s{i:03d}" for i in (1, 2)} <= jobs


def test_registration_run_requests_and_export_targets_follow_the_set():
    keys = KEYS[:60]
    by_set = group_by_set(keys, 3)
    assert sorted(cs.index for cs in by_set) == [0, 1, 2]
    assert sorted(k for ks in by_set.values() for k in ks) == sorted(keys)
    with dg.instance_for_test() as instance:
        assert register_captures(instance, keys, 3) == keys
        for cs, members in by_set.items():
            assert instance.get_dynamic_partitions(cs.partitions_name) == members
    key = next(k for k in keys if capture_set(k, 3) == 2)
    request = capture_run_request(key, 3)
    assert (request.job_name, request.partition_key, request.run_key) == (
        "capture_job_s002",
        key,
        key,
    )
    assert request.tags["dagster/partition_set"] == "capture_job_s002_partition_set"
    target = export_target(key, "holos_hdf5", 3)
    assert (target.asset_key, target.partition_key, target.job_name) == (
        dg.AssetKey(["s002", "holos_hdf5"]),
        key,
        "export_holos_hdf5_s002",
    )
    assert export_target(key, "holos_hdf5", 1).asset_key == dg.AssetKey("holos_hdf5")


def test_the_export_run_config_fits_the_job_of_every_set(tmp_path):
    """What the API launches names the exporter step of the capture's set (the step of
    set 2 is ``s002__holos_hdf5``): Dagster accepts it and the option arrives."""
    defs = build_defs(StorageResource(root=str(tmp_path)), sets=3, catalog=False)
    keys = {capture_set(k, 3): k for k in KEYS[:60]}
    for index in (0, 2):
        target = export_target(keys[index], "holos_hdf5", 3)
        job = defs.resolve_job_def(target.job_name)
        run_config = target.run_config({"decode_frames": True, "force": False})
        step = "holos_hdf5" if index == 0 else "s002__holos_hdf5"
        resolved = dg.validate_run_config(job, run_config)
        assert resolved["ops"][step]["config"] == {"decode_frames": True, "force": False}


def _materialize_in_set(root, source, key: str, index: int) -> list[str]:
    """Run one set's raw_capture, trajectory and quality_report for ``key``; the files."""
    import shutil

    from ego_assets.defs.ingest import build_raw_capture, build_trajectory
    from ego_assets.defs.quality import build_quality_report

    shutil.copytree(source, root / "landing" / key)
    cs = CaptureSet(index)
    assets = [build_raw_capture(cs), build_trajectory(cs), build_quality_report(cs)]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(cs.partitions_name, [key])
        result = dg.materialize(
            assets,
            partition_key=key,
            instance=instance,
            resources={"storage": StorageResource(root=str(root))},
        )
        assert result.success
        keys = {e.asset_key for e in result.get_asset_materialization_events()}
        assert keys == {cs.key(n) for n in ("raw_capture", "trajectory", "quality_report")}
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not p.relative_to(root).as_posix().startswith("landing/")
    )


def test_storage_paths_do_not_depend_on_the_set(tmp_path):
    """A capture's files are stored by capture key and step only: moving a capture between
    sets moves no data."""
    from ego_assets.synth import synthesize

    source = tmp_path / "source"
    synthesize("webxr", source, seconds=1.0, seed=3, capture_id="xr-1")
    in_set_0 = _materialize_in_set(tmp_path / "zero", source, "xr-1", 0)
    in_set_2 = _materialize_in_set(tmp_path / "two", source, "xr-1", 2)
    assert in_set_0 == in_set_2
    assert {p.split("/")[0] for p in in_set_0} >= {"raw", "trajectory", "quality"}


def test_on_postgres_one_statement_registers_every_set(tmp_path, monkeypatch):
    """Postgres: the captures of all sets in one INSERT (a connection per statement there)."""
    from dagster_postgres import PostgresEventLogStorage

    from ego_assets_tests.processes import (
        fresh_database,
        pg_env,
        require_postgres,
        write_dagster_home,
    )
    from ego_assets_tests.sql_count import sql_statements

    require_postgres()
    with fresh_database() as db:
        for name, value in pg_env(db).items():
            monkeypatch.setenv(name, value)
        home = write_dagster_home(tmp_path / "home")
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
            keys = KEYS[:200]
            register_captures(instance, keys[:1], 40)  # creates the tables
            with sql_statements() as statements:
                assert register_captures(instance, keys, 40) == keys
            inserts = [s for s in statements if s.lstrip().upper().startswith("INSERT")]
            assert len(inserts) == 1
            register_captures(instance, keys, 40)  # idempotent
            for cs, members in group_by_set(keys, 40).items():
                assert list(instance.get_dynamic_partitions(cs.partitions_name)) == [
                    k for k in keys if k in set(members)
                ]
