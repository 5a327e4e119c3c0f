"""The per-capture assets in Dagster, on the local backend and on S3 (loopback moto server).

Every test takes the ``backend`` fixture, so the same assertions run on a local folder and
on ``s3://bucket`` (landing zone and every stage in the bucket).
"""

import hashlib
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from rerun.chunk import RrdReader

from ego_assets.capture import read_capture
from ego_assets.capture.manifest import write_marker
from ego_assets.defs.demo import aria_fixture_dir
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.quality import GX_CHECK, quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import read_trajectory
from ego_assets.viewer.episode import recording_for_key

KINDS = {
    "vp": "holos-visionpro",
    "phone": "holos-iphone",
    "xr": "webxr",
    "mano": "mano-video",
}
STAMPED = ("raw/xr/manifest.json", "trajectory/xr/capture.json", "quality/xr/gate.json")
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    """Local source folders of the synthetic captures (copied or uploaded per test)."""
    root = tmp_path_factory.mktemp("data")
    for key, kind in KINDS.items():
        synthesize(kind, root / "landing" / key, seconds=1.5, seed=7, capture_id=key)
    shutil.copytree(aria_fixture_dir(), root / "landing" / "aria")
    write_marker(root / "landing" / "aria", "aria_mps")
    return root


@dataclass
class Backend:
    """One storage root (local folder or S3 bucket) and how a test inspects it."""

    root: str
    server: object | None  # conftest.S3Server on S3

    @property
    def resource(self) -> StorageResource:
        endpoint = getattr(self.server, "endpoint_url", None)
        return StorageResource(root=self.root, endpoint_url=endpoint)

    @property
    def storage(self) -> Storage:
        return self.resource.get_storage()

    def land(self, source: Path, key: str) -> None:
        """Put the capture folder ``source`` into the landing zone as ``key``, marker last."""
        if self.server is None:
            shutil.copytree(source, Path(self.root) / "landing" / key)
        else:
            self.server.upload_dir(source, f"{self.root}/landing/{key}")  # type: ignore[attr-defined]

    def files(self, rel: str) -> list[str]:
        """Every file below ``rel`` (relative to the root), sorted."""
        if self.server is None:
            folder = Path(self.root) / rel
            return sorted(
                p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
            )
        return self.server.keys(f"{self.root}/{rel}")  # type: ignore[attr-defined]

    def stamp(self, rel: str) -> object:
        """Changes whenever the file is rewritten (mtime ns; S3 object version id)."""
        if self.server is None:
            return (Path(self.root) / rel).stat().st_mtime_ns
        bucket = self.root.removeprefix("s3://")
        head = self.server.client().head_object(Bucket=bucket, Key=rel)  # type: ignore[attr-defined]
        return head["VersionId"]

    @contextmanager
    def local(self, stage: str, key: str) -> Iterator[Path]:
        """A local folder with ``stage/key`` (downloaded from S3)."""
        with self.storage.read_dir(self.storage.stage_path(stage, key)) as folder:
            yield folder


@pytest.fixture(params=["local", "s3"])
def backend(request, tmp_path) -> Backend:
    if request.param == "local":
        return Backend(str(tmp_path), None)
    server = request.getfixturevalue("s3_server")
    url = server.make_bucket()
    server.client().put_bucket_versioning(
        Bucket=url.removeprefix("s3://"), VersioningConfiguration={"Status": "Enabled"}
    )
    return Backend(url, server)


def _materialize(backend: Backend, instance, assets=(raw_capture, trajectory), **kwargs):
    return dg.materialize(
        list(assets),
        instance=instance,
        resources={"storage": backend.resource},
        raise_on_error=False,
        **kwargs,
    )


# Every reader on the local backend; on S3 (where only the storage differs) the kind with
# the most files and the real Aria fixture, to keep the file's runtime modest.
@pytest.mark.parametrize(
    ("backend", "key"),
    [*(("local", key) for key in [*KINDS, "aria"]), ("s3", "vp"), ("s3", "aria")],
    indirect=["backend"],
)
def test_every_kind_materializes_raw_capture_and_trajectory(landing, backend, key):
    backend.land(landing / "landing" / key, key)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", [key])
        result = _materialize(backend, instance, partition_key=key)
        assert result.success
        events = {e.asset_key.path[-1]: e for e in result.get_asset_materialization_events()}
        assert set(events) == {"raw_capture", "trajectory"}
        md = events["trajectory"].materialization.metadata
        with backend.local("trajectory", key) as folder:
            stored = read_trajectory(folder)
        assert md["streams"].value == len(stored.streams)
        assert md["samples"].value == sum(len(s) for s in stored.streams)
    direct = read_capture(key, landing / "landing" / key)
    assert [s.name for s in stored.streams] == sorted(s.name for s in direct.streams)
    first = direct.streams[0]
    np.testing.assert_array_equal(stored.stream(first.name).timestamp_ns, first.timestamp_ns)
    # the raw copy: the capture's files byte for byte below capture/, the platform's
    # manifest beside them and never among the capture's extra files
    landed = sorted(
        p.relative_to(landing / "landing" / key).as_posix()
        for p in (landing / "landing" / key).rglob("*")
        if p.is_file()
    )
    assert backend.files(f"raw/{key}") == sorted(
        ["manifest.json", *(f"capture/{rel}" for rel in landed)]
    )
    assert set(stored.extra_files) <= set(landed) - {"ego_capture.json"}
    assert stored.extra_files == direct.extra_files


def test_every_asset_of_one_capture_writes_its_outputs_and_a_rerun_reuses_them(
    landing, backend, tmp_path_factory
):
    source = landing / "landing" / "xr"
    backend.land(source, "xr")
    every_asset = (raw_capture, trajectory, quality_report)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["xr"])
        result = _materialize(backend, instance, every_asset, partition_key="xr")
        assert result.success
        assert {e.asset_key.path[-1] for e in result.get_asset_materialization_events()} == {
            "raw_capture",
            "trajectory",
            "quality_report",
        }
        (check,) = result.get_asset_check_evaluations()
        assert check.check_name == GX_CHECK and check.passed
        (quality_event,) = [
            e
            for e in result.get_asset_materialization_events()
            if e.asset_key.path[-1] == "quality_report"
        ]
        opener = quality_event.materialization.metadata["open recording"].value
        assert "`ego-assets view xr`" in str(opener)
        before = {rel: backend.stamp(rel) for rel in STAMPED}
        again = _materialize(backend, instance, every_asset, partition_key="xr")
        assert again.success
        reused = {
            e.asset_key.path[-1]: e.materialization.metadata["reused"].value
            for e in again.get_asset_materialization_events()
        }
        assert reused == {"raw_capture": True, "trajectory": True, "quality_report": True}
    assert {rel: backend.stamp(rel) for rel in STAMPED} == before
    with backend.local("raw", "xr") as raw:
        manifest = json.loads((raw / "manifest.json").read_text())
        entry = next(f for f in manifest["files"] if f["path"].endswith(".json"))
        landed = hashlib.sha256((source / entry["path"]).read_bytes()).hexdigest()
        assert entry["sha256"] == landed
        copied = raw / "capture" / entry["path"]
        assert copied.read_bytes() == (source / entry["path"]).read_bytes()
    with backend.local("trajectory", "xr") as folder:
        header = json.loads((folder / "capture.json").read_text())
        expected = sorted(s.name for s in read_capture("xr", source).streams)
        assert sorted(s["name"] for s in header["streams"]) == expected
        assert "lineage.json" in backend.files("trajectory/xr")
    quality = backend.files("quality/xr")
    # the Rerun recording is built when opened, not by the quality step
    assert {Path(f).name for f in quality} == {
        "gate.json",
        "quality.json",
        "quality.parquet",
        "timeline.png",
    }
    with backend.local("quality", "xr") as folder:
        assert (folder / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert json.loads((folder / "gate.json").read_text())["passed"] is True
    # opened by key: built from the stored trajectory, raw video and gate
    located = recording_for_key(backend.storage, "xr", tmp_path_factory.mktemp("view") / "xr.rrd")
    entities = {c.entity_path for c in RrdReader(located.path).stream()}
    assert {"/world/cameras/camera_outward", "/world/hand_left", "/quality/report"} <= entities


def test_malformed_capture_fails_its_partition_only_and_writes_nothing(landing, backend, tmp_path):
    bad = tmp_path / "uploads" / "broken"
    shutil.copytree(landing / "landing" / "vp", bad)
    csv = bad / "device_pose.csv"
    lines = csv.read_text().splitlines()
    lines[3] = lines[3].replace(",", ",abc,", 1)
    csv.write_text("\n".join(lines) + "\n")
    write_marker(bad, "holos")
    backend.land(bad, "broken")
    backend.land(landing / "landing" / "vp", "vp")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["broken", "vp"])
        failed = _materialize(backend, instance, partition_key="broken")
        assert not failed.success
        messages = " ".join(
            e.step_failure_data.error.message
            for e in failed.all_events
            if e.is_step_failure and e.step_failure_data.error
        )
        assert "capture 'broken', file 'device_pose.csv'" in messages and "row 3" in messages
        ok = _materialize(backend, instance, partition_key="vp")
        assert ok.success
    assert backend.files("trajectory/broken") == []
    assert {rel.split("/")[0] for rel in backend.files("trajectory")} == {"vp"}


def test_ranged_run_keeps_good_captures_when_one_fails(landing, backend, tmp_path):
    bad = tmp_path / "uploads" / "m-bad"
    bad.mkdir(parents=True)
    (bad / "ego_capture.json").write_text('{"format": "ego-capture-marker", "version": 1}')
    backend.land(bad, "m-bad")
    for key in ("phone", "xr"):
        backend.land(landing / "landing" / key, key)
    keys = ["m-bad", "phone", "xr"]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", keys)
        result = _materialize(backend, instance, tags={RANGE_START: keys[0], RANGE_END: keys[-1]})
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert "1 of 3 captures failed" in failure.step_failure_data.error.message
        assert "m-bad" in failure.step_failure_data.error.message
    assert "manifest.json" in backend.files("raw/phone")
    assert "manifest.json" in backend.files("raw/xr")
    assert backend.files("raw/m-bad") == []


def test_capture_files_named_like_platform_files_survive_intake_byte_for_byte(
    landing, backend, tmp_path
):
    """A capture's own manifest.json (and a capture/ folder) never collide with the platform's."""
    source = tmp_path / "uploads" / "own"
    shutil.copytree(landing / "landing" / "xr", source)
    own = {
        "manifest.json": b'{"made by": "the recorder, not the platform"}\n',
        "capture/manifest.json": b"nested \x00\xff bytes\n",
    }
    for rel, data in own.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_bytes(data)
    write_marker(source, "webxr")
    backend.land(source, "own")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["own"])
        assert _materialize(backend, instance, partition_key="own").success
    with backend.local("raw", "own") as raw:
        for rel, data in own.items():
            assert (raw / "capture" / rel).read_bytes() == data
        platform = json.loads((raw / "manifest.json").read_text())
        assert platform["capture"] == "own" and platform["version"] == 2
        by_path = {f["path"]: f for f in platform["files"]}
        assert (
            by_path["manifest.json"]["sha256"] == hashlib.sha256(own["manifest.json"]).hexdigest()
        )
    with backend.local("trajectory", "own") as folder:
        assert read_trajectory(folder).extra_files == ("capture/manifest.json", "manifest.json")
