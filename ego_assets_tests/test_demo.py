"""`make demo` end to end on a temporary folder (short captures), run as a user runs it:
the `ego-assets demo` command in its own process, so its terminal output is what a user
sees."""

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ego_assets.capture.manifest import CAPTURE_DIR, read_manifest
from ego_assets.catalog.receipts import read_receipt
from ego_assets.catalog.warehouse import catalog_database, query
from ego_assets.defs.demo import ARIA_SAMPLE_KEY, DEMO_CAPTURES
from ego_assets.demo_report import DATA_FOLDERS, LOG_FILE
from ego_assets.exports import registry
from ego_assets.pipeline import stored_gate
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import read_header
from ego_assets.viewer import RECORDING_FILE
from ego_assets.viewer.episode import recording_for_key
from ego_assets_tests.test_viewer import read_back
from ego_assets_tests.waiting import CEILING_S

REPO = Path(__file__).resolve().parents[1]
ODD_NAME = "bad capture é"  # a folder name that is no capture key
LINKED = "linked-capture"  # a symlink to a capture folder outside the landing zone
# What Dagster, dbt and numpy print on their own; none of it may reach the terminal.
NOISE = (
    "AssetObservation",
    "Telemetry",
    "No dagster.yaml found",
    "get_sensor_def",
    "UserWarning",
    "Running with dbt",
    "RuntimeWarning",
)


@dataclass
class Demo:
    data: Path
    stdout: str
    stderr: str
    returncode: int


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """One `ego-assets demo` over a landing zone that also holds an odd folder name and
    a symlink to a capture outside it."""
    root = tmp_path_factory.mktemp("demo")
    data = root / "data"
    synthesize("webxr", data / "landing" / ODD_NAME, seconds=2.0, seed=5)
    synthesize("webxr", root / "outside" / LINKED, seconds=2.0, seed=6, capture_id=LINKED)
    (data / "landing" / LINKED).symlink_to(root / "outside" / LINKED)
    elsewhere = root / "elsewhere"  # run from outside the data root's parent
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["PYTHONPATH"] = str(REPO)
    run = subprocess.run(
        [sys.executable, "-m", "ego_assets.cli", "demo", "--data", str(data), "--seconds", "2"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    return Demo(data, run.stdout, run.stderr, run.returncode)


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_demo_trajectories_list_no_platform_file_as_a_capture_file(
    demo: Demo, tmp_path: Path
) -> None:
    data = demo.data
    assert demo.returncode == 0, demo.stderr
    keys = [key for key, *_ in DEMO_CAPTURES] + [ARIA_SAMPLE_KEY]
    for key in keys:
        raw = data / "raw" / key
        landed = _files(data / "landing" / key)
        platform = {rel for rel in _files(raw) if not rel.startswith(f"{CAPTURE_DIR}/")}
        assert platform == {"manifest.json"}
        assert {f.path for f in read_manifest(raw).files} == landed
        assert _files(raw / CAPTURE_DIR) == landed
        header, _ = read_header(data / "trajectory" / key)
        assert set(header.extra_files) <= landed - {"ego_capture.json"}, key
        assert not set(header.extra_files) & platform
    # the one capture that carries extra files keeps exactly them (the sample's licence
    # and origin notes), and its trajectory was made from the manifest's content
    aria = data / "trajectory" / ARIA_SAMPLE_KEY
    assert read_header(aria)[0].extra_files == ("LICENSE-Apache-2.0.txt", "README.md")
    lineage = json.loads((aria / "lineage.json").read_text())
    raw_manifest = read_manifest(data / "raw" / ARIA_SAMPLE_KEY)
    assert lineage["raw_content_sha256"] == raw_manifest.content_sha256
    assert "demo-webxr-faulty" in demo.stdout
    # the demo built the dataset catalog once and printed its tables
    assert "export coverage" in demo.stdout
    with catalog_database(Storage(data), write=False) as database:
        counts = query(database, "select count(*) n from episodes").to_pylist()
        formats = query(database, "select format from export_coverage order by 1").to_pylist()
    assert counts == [{"n": len(keys)}]
    assert [r["format"] for r in formats] == ["ceres_episode", "egosmith_shards", "holos_hdf5"]
    # the quality step stores no recording; opened by key, it is built and finds the
    # video in the raw copy's capture folder
    assert not (data / "quality" / "demo-webxr" / RECORDING_FILE).exists()
    built = recording_for_key(Storage(data), "demo-webxr", tmp_path / "demo-webxr.rrd")
    columns, _ = read_back(built.path)
    assert ("/world/cameras/camera_outward", "VideoFrameReference:timestamp") in columns


def _row(stdout: str, key: str) -> list[str]:
    """The summary table's cells for ``key`` (cells are 2+ spaces apart)."""
    line = next(x for x in stdout.splitlines() if x.startswith(f"{key}  "))
    return re.split(r"\s{2,}", line.strip())


def test_the_demo_speaks_plainly(demo: Demo) -> None:
    data, out = demo.data, demo.stdout
    # third-party output went to the log, and the demo says where
    log = data / LOG_FILE
    assert f"Dagster's and dbt's own output: {log}" in out
    for text in NOISE:
        assert text not in out and text not in demo.stderr, text
    assert "AssetObservation" in log.read_text()  # dbt's tests, logged there
    # one status column, the gate's word
    store = Storage(data)
    for key in [k for k, *_ in DEMO_CAPTURES] + [ARIA_SAMPLE_KEY]:
        gate = stored_gate(store, key)
        assert gate is not None
        cells = _row(out, key)
        assert cells[4] == gate.status, cells
        assert cells[5] == ("exported" if gate.passed else "blocked"), cells
    # every reason of a blocked capture whole (wrapped, never cut), under "why"
    why = " ".join(out[out.index("\nwhy\n") :].split())
    for key in ("demo-webxr-faulty", ARIA_SAMPLE_KEY):
        gate = stored_gate(store, key)
        assert gate is not None and len(gate.reasons) > 2
        for reason in gate.reasons:
            assert f"blocked by {reason}" in why, reason
    # exports with absolute paths, no stray header line
    for fmt in registry.names():
        receipt = read_receipt(store, fmt, "demo-webxr")
        assert receipt is not None and f"{data / receipt.path}" in out
    assert all(line.strip() != "egosmith" for line in out.splitlines())
    # the closing block: where everything is, what to open, what the blocked need
    closing = out[out.index("where everything is") :]
    for name, _ in DATA_FOLDERS:
        if (data / name.rstrip("/")).exists():
            assert str(data / name.rstrip("/")) in closing, name
    assert f"view demo-holos-iphone --web --data {data}" in closing
    assert f"waive demo-webxr-faulty backwards_timestamps --data {data}" in closing
    assert "serve --config api.toml" in closing and "dagster dev -w " in closing


def test_the_demo_s_blocked_capture_reads_blocked_in_its_dagster_instance(demo: Demo) -> None:
    import dagster as dg

    from ego_assets.dagster_compat import instance_at
    from ego_assets.defs.partitions import captures_partitions
    from ego_assets.defs.quality import GATE_TAG

    assert demo.returncode == 0, demo.stderr  # a blocked capture is no failed demo
    with instance_at(str(demo.data / ".dagster_home")) as instance:
        for fmt in registry.names():
            statuses = instance.get_status_by_partition(
                dg.AssetKey(fmt), ["demo-webxr-faulty", "demo-webxr"], captures_partitions
            )
            assert statuses is not None
            # what `make dev` shows: the blocked capture's export partition Failed
            assert statuses["demo-webxr-faulty"].value == "FAILED", fmt
            assert statuses["demo-webxr"].value == "MATERIALIZED", fmt
        (run,) = instance.get_runs(dg.RunsFilter(tags={"dagster/partition": "demo-webxr-faulty"}))
        assert run.status == dg.DagsterRunStatus.FAILURE and run.tags[GATE_TAG] == "blocked"


def test_skipped_landing_entries_are_listed_with_why(demo: Demo) -> None:
    out = demo.stdout
    assert _row(out, f"landing/{ODD_NAME}")[-1] == "skipped"
    assert _row(out, f"landing/{LINKED}")[-1] == "skipped"
    why = " ".join(out[out.index("\nwhy\n") :].split())
    assert f"landing/{ODD_NAME} (skipped): - the folder name is not a capture key" in why
    assert f"landing/{LINKED} (skipped): - a symlink to {demo.data.parent / 'outside'}" in why
    # nothing of the linked folder reached the data root
    assert not (demo.data / "raw" / LINKED).exists()


def test_readme_where_things_land_lists_every_folder_the_demo_writes(demo: Demo) -> None:
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Where things land") :]
    table = table[: table.index("\n\n", table.index("| path |"))]
    written = {p.name for p in demo.data.iterdir()}
    listed = {name.rstrip("/") for name, _ in DATA_FOLDERS}
    assert written <= listed
    for name in written:
        assert f"`data/{name}" in table, name


def test_the_demo_builds_a_sample_release_and_prints_its_summary(demo: Demo) -> None:
    folder = demo.data / "releases" / "demo" / "v1"
    manifest = json.loads((folder / "release.json").read_text())
    assert set(manifest["formats"]) == {"webdataset", "robomimic", "lerobot"}
    # every capture with a current export in each format, and only those
    exported = {
        p.stem
        for p in (demo.data / "receipts" / "egosmith_shards").glob("*.json")
        if all(
            json.loads((demo.data / "receipts" / fmt / p.name).read_text())["status"] == "exported"
            for fmt in ("egosmith_shards", "holos_hdf5", "ceres_episode")
            if (demo.data / "receipts" / fmt / p.name).exists()
        )
    }
    keys = {e["capture_key"] for e in manifest["episodes"]}
    assert len(keys) >= 2 and keys <= exported
    assert keys | {e["capture_key"] for e in manifest["left_out"]} >= exported - keys
    out = demo.stdout
    assert f"release demo v1 (written now): {folder}" in out
    for split, counts in manifest["splits"].items():
        n = sum(e["split"] == split for e in manifest["episodes"])
        assert counts["episodes"] == n
        line = f"  {split:6} {n:3d} episodes  {counts['duration_s']:7.1f} s"
        assert line in out
    files = manifest["files"]
    assert f"  {len(files)} files, {sum(f['bytes'] for f in files)} bytes (webdataset " in out
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert on_disk == sorted([f["path"] for f in files] + ["release.json"])
    for f in files:
        assert (folder / f["path"]).stat().st_size == f["bytes"]
    assert (folder / "robomimic" / "release.hdf5").is_file()
    assert (demo.data / "releases" / "demo.toml").read_text().startswith("[release]")


def test_the_demo_builds_the_eef_sample_release_beside_it(demo: Demo) -> None:
    folder = demo.data / "releases" / "demo-eef" / "v1"
    manifest = json.loads((folder / "release.json").read_text())
    plain = json.loads((demo.data / "releases" / "demo" / "v1" / "release.json").read_text())
    assert manifest["spec"]["actions"]["space"] == "eef_pose_gripper"
    assert manifest["spec"]["actions"]["frame"] == "head"
    assert [e["capture_key"] for e in manifest["episodes"]] == [
        e["capture_key"] for e in plain["episodes"]
    ]
    actions = manifest["actions"]
    assert actions["state_names"][0] == "left.eef.x" and len(actions["state_names"]) == 22
    info = json.loads(next(folder.glob("lerobot/*/meta/info.json")).read_text())
    assert info["features"]["observation.state"]["names"] == actions["state_names"]
    out = demo.stdout
    assert f"release demo-eef v1 (written now): {folder}" in out
    assert f"  state 22 values, action 22: {actions['describe']}" in out
    assert "## State and actions" in (folder / "README.md").read_text()


@pytest.mark.parametrize("name", ["demo", "demo-eef"])
def test_the_demo_s_releases_read_materialized_in_its_dagster_instance(
    demo: Demo, name: str
) -> None:
    """What `make dev` shows after `make demo` (#35): the ``release`` asset's partition of
    each sample release Materialized, its metadata the version, episodes and bytes of the
    manifest."""
    import dagster as dg

    from ego_assets.dagster_compat import instance_at
    from ego_assets.defs.releases import RELEASE_KEY, RELEASES_PARTITIONS_NAME, releases_partitions

    manifest = json.loads((demo.data / "releases" / name / "v1" / "release.json").read_text())
    with instance_at(str(demo.data / ".dagster_home")) as instance:
        assert name in instance.get_dynamic_partitions(RELEASES_PARTITIONS_NAME)
        statuses = instance.get_status_by_partition(RELEASE_KEY, [name], releases_partitions)
        assert statuses is not None and statuses[name].value == "MATERIALIZED"
        (record,) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=RELEASE_KEY, asset_partitions=[name]), limit=5
        ).records
    event = record.asset_materialization
    assert event is not None
    md = {k: getattr(v, "value", v) for k, v in event.metadata.items()}
    assert (md["version"], md["written"]) == (1, True)
    assert md["episodes"] == len(manifest["episodes"]) >= 2
    assert md["bytes"] == sum(f["bytes"] for f in manifest["files"])
    assert md["path"] == str(demo.data / "releases" / name / "v1")
    assert event.tags["dagster/data_version"] == manifest["inputs_sha256"]
    assert event.tags["ego/built_by"] == "ego-assets-demo"
