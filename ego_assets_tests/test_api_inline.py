"""The export API's inline exports (docs/api.md, "Short captures are exported at once"):
a short capture whose inputs are current is exported inside the POST and reported to
Dagster as its asset's materialization, without a run; everything else is a run.

A local SQLite Dagster instance; the capture is prepared by the library and Dagster is
told its quality report exists (a reported materialization), as after a capture run.
The HTTP end to end of the run path is test_api.py."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import h5py
import pytest
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from ego_assets import pipeline
from ego_assets.api.app import DEFAULT_INLINE_MAX_S, inline_max_s
from ego_assets.api.service import INLINE_EXPORTER, ExportService
from ego_assets.catalog.receipts import read_receipt
from ego_assets.dagster_client import exporter_code_versions
from ego_assets.defs.episodes import CODE_VERSION_TAG, DATA_VERSION_TAG
from ego_assets.defs.export_assets import EXPORTED_BY_TAG
from ego_assets.defs.exports import EXPORT_TAG, PARTITION_TAG, ExportTarget, export_target
from ego_assets.defs.partitions import partition_for_capture
from ego_assets.exports import registry
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import read_trajectory

KEY = "inline-vp-0001"
SECONDS = 2.0


class _Launcher:
    """Records the launches (a run is never started: only the ask is tested)."""

    def __init__(self) -> None:
        self.launches: list[tuple[str, dict[str, Any], bool]] = []

    def launch(
        self, target: ExportTarget, run_config: dict[str, Any], upstream: bool = True
    ) -> str:
        self.launches.append((target.format, run_config, upstream))
        return f"run-{len(self.launches)}"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Vision Pro capture of 2 s: raw copy, trajectory and gate by the library."""
    tmp = tmp_path_factory.mktemp("inline")
    landing = tmp / "landing"
    synthesize("holos-visionpro", landing / KEY, seconds=SECONDS, seed=5, capture_id=KEY)
    storage = Storage(tmp / "data", landing=landing)
    pipeline.ingest_raw(storage, KEY)
    pipeline.normalize(storage, KEY)
    pipeline.assess_quality(storage, KEY)
    return tmp


@pytest.fixture
def service(prepared: Path, tmp_path: Path) -> Iterator[ExportService]:
    """A service over a fresh instance that knows the capture's quality report."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = dg.DagsterInstance.from_config(str(home))
    where = partition_for_capture(KEY)
    instance.add_dynamic_partitions(where.partitions_name, [where.partition_key])
    gate_key = export_target(KEY, "holos_hdf5").gate_key
    instance.report_runless_asset_event(dg.AssetMaterialization(gate_key, partition=KEY))
    storage = Storage(prepared / "data", landing=prepared / "landing")
    made = ExportService(
        instance,
        storage,
        _Launcher(),
        code_versions=exporter_code_versions(),
        inline_max_s=DEFAULT_INLINE_MAX_S,
    )
    yield made
    instance.dispose()


def _materializations(service: ExportService, target: ExportTarget) -> list[Any]:
    records = service.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=target.asset_key, asset_partitions=[KEY]), limit=10
    ).records
    return list(records)


def test_a_short_capture_is_exported_in_the_post_and_recorded_in_dagster(
    service: ExportService,
) -> None:
    target = export_target(KEY, "holos_hdf5")
    launched, state = service.request(target, force=True)  # whatever another test wrote
    assert launched is False
    assert service.launcher.launches == []  # type: ignore[union-attr]
    assert (state.status, state.progress, state.run_id, state.error) == ("ready", 1.0, None, None)
    artifact = state.artifact
    assert artifact is not None and artifact.current
    # the file the answer describes: its bytes, digest and content
    receipt = read_receipt(service.storage, "holos_hdf5", KEY)
    assert receipt is not None and receipt.status == "exported"
    path = service.storage.root / receipt.path
    data = path.read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (artifact.size, artifact.sha256)
    trajectory = read_trajectory(service.storage.stage_path("trajectory", KEY))
    with h5py.File(path) as h5:
        demos = [name for name in h5["data"] if name.startswith("demo_")]
        assert len(demos) == 1
        assert h5["data"][demos[0]].attrs["num_samples"] > 0
    assert trajectory.duration_s == pytest.approx(SECONDS, abs=0.1)
    # Dagster has it as the asset's step records it, with no run
    (record,) = _materializations(service, target)
    assert record.run_id == ""
    event = record.asset_materialization
    assert event.partition == KEY
    assert event.tags[EXPORTED_BY_TAG] == INLINE_EXPORTER
    assert event.tags[CODE_VERSION_TAG] == registry.by_name("holos_hdf5").code_version
    assert event.tags[DATA_VERSION_TAG] == event.metadata["data_version"].value != ""
    assert event.metadata["reused"].value is False
    # asked again: current, nothing written, nothing recorded
    launched, again = service.request(target)
    assert (launched, again.status, again.artifact.sha256) == (False, "ready", artifact.sha256)  # type: ignore[union-attr]
    assert len(_materializations(service, target)) == 1
    # forced: written again in the POST, a second materialization, still no run
    launched, forced = service.request(target, force=True)
    assert (launched, forced.status, forced.run_id) == (False, "ready", None)
    assert forced.artifact is not None and forced.artifact.resolved_at >= artifact.resolved_at
    assert len(_materializations(service, target)) == 2
    assert service.launcher.launches == []  # type: ignore[union-attr]


def test_an_inline_export_after_an_earlier_run_names_no_run(service: ExportService) -> None:
    target = export_target(KEY, "ceres_episode")
    service.instance.add_run(
        DagsterRun(
            job_name=target.job_name,
            run_id="0f0e0d0c-0000-4000-8000-000000000001",
            status=DagsterRunStatus.SUCCESS,
            tags={EXPORT_TAG: target.format, PARTITION_TAG: KEY},
        )
    )
    assert service.read(target).run_id == "0f0e0d0c-0000-4000-8000-000000000001"
    launched, state = service.request(target, force=True)
    assert (launched, state.status, state.run_id) == (False, "ready", None)
    assert (service.read(target).status, service.read(target).run_id) == ("ready", None)


def test_every_format_is_written_inline(service: ExportService) -> None:
    for fmt in registry.formats():
        launched, state = service.request(export_target(KEY, fmt.name), force=True)
        assert (launched, state.status, state.run_id) == (False, "ready", None), fmt.name
        receipt = read_receipt(service.storage, fmt.name, KEY)
        assert receipt is not None and receipt.status == "exported", fmt.name
    assert service.launcher.launches == []  # type: ignore[union-attr]


def test_what_inline_cannot_do_is_a_run(service: ExportService, prepared: Path) -> None:
    launches = service.launcher.launches  # type: ignore[union-attr]
    hdf5 = export_target(KEY, "holos_hdf5")
    # decoded frames: a run, the exporter alone (inputs current)
    launched, state = service.request(hdf5, options={"decode_frames": True})
    assert (launched, state.status, state.run_id) == (True, "queued", "run-1")
    assert launches[-1] == (
        "holos_hdf5",
        hdf5.run_config({"decode_frames": True, "force": False}),
        False,
    )
    # a capture longer than the limit
    service.inline_max_s = SECONDS / 2
    lerobot = export_target(KEY, "ceres_episode")
    assert service.request(lerobot, force=True)[0] is True
    assert launches[-1][0] == "ceres_episode"
    # turned off
    service.inline_max_s = 0.0
    shards = export_target(KEY, "egosmith_shards")
    assert service.request(shards, force=True)[0] is True
    assert len(launches) == 3
    assert _materializations(service, hdf5) == []


def test_inputs_dagster_has_not_recorded_are_a_run_with_the_upstream_steps(
    prepared: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    launcher = _Launcher()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        service = ExportService(
            instance,
            Storage(prepared / "data"),
            launcher,
            code_versions=exporter_code_versions(),
            inline_max_s=DEFAULT_INLINE_MAX_S,
        )
        assert service.request(export_target(KEY, "holos_hdf5"), force=True)[0] is True
    assert launcher.launches[0][2] is True  # the raw copy, trajectory and quality steps too


def test_a_failing_inline_export_becomes_a_run(service: ExportService, tmp_path: Path) -> None:
    target = export_target(KEY, "egosmith_shards")
    storage = Storage(tmp_path / "broken", landing=service.storage.landing)
    for stage in ("raw", "trajectory", "quality"):
        for src in service.storage.stage_path(stage, KEY).rglob("*"):
            if src.is_file():
                dst = storage.stage_path(stage, KEY) / src.relative_to(
                    service.storage.stage_path(stage, KEY)
                )
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(src.read_bytes())
    (storage.stage_path("trajectory", KEY) / "streams.parquet").write_bytes(b"not a parquet file")
    service.storage = storage
    launched, state = service.request(target, force=True)
    assert (launched, state.status) == (True, "queued")
    assert _materializations(service, target) == []
    assert read_receipt(storage, "egosmith_shards", KEY) is None


@pytest.mark.parametrize(
    ("text", "expected"), [("", DEFAULT_INLINE_MAX_S), ("0", 0.0), (" 12.5 ", 12.5)]
)
def test_inline_limit_from_the_environment(text: str, expected: float) -> None:
    assert inline_max_s({"EGO_API_INLINE_MAX_S": text}) == expected


@pytest.mark.parametrize("text", ["soon", "-1", "nan", "inf"])
def test_a_nonsense_inline_limit_is_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(ValueError, match=r"EGO_API_INLINE_MAX_S=.*expected seconds"):
        inline_max_s({"EGO_API_INLINE_MAX_S": text})


def test_preload_imports_what_the_exporters_import_where_they_use_it() -> None:
    code = (
        "import sys\n"
        "before = {m for m in ('av', 'h5py', 'webdataset') if m in sys.modules}\n"
        "from ego_assets.exports.preload import preload_exports\n"
        "failed = preload_exports()\n"
        "after = {m for m in ('av', 'h5py', 'webdataset') if m in sys.modules}\n"
        "import gc, h5py\n"
        "frozen = gc.get_freeze_count()\n"
        "tracked = any(o is h5py.File for o in gc.get_objects())\n"
        "print(sorted(before), failed, sorted(after), frozen > 10_000, tracked)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    ).stdout
    # what was loaded is frozen: the collector no longer walks the libraries' objects
    assert out.strip() == "[] [] ['av', 'h5py', 'webdataset'] True False"
