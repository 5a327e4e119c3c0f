"""A fourth export format is one writer plus one registry entry (docs/architecture.md).

The toy format below lives in this test only: `ToyExporter` writes one CSV of the
trajectory's streams (name, rows; with its option ``header`` off, without the header
line), and `TOY` is its registry entry. Added to the registry, it reaches the export
step (gate, receipt), the Dagster definitions (its asset with that option as config, its
export job, one partition materialized), the API routes, the page's columns, the export
policy and the catalog's staging without any other change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg
import duckdb
import pytest
from upath import UPath

from ego_assets import pipeline
from ego_assets.api.config import Caller
from ego_assets.api.page import render_page
from ego_assets.api.routes.exports import export_router
from ego_assets.catalog.receipts import read_receipt
from ego_assets.catalog.sources import SCHEMA, sources, stage_rows
from ego_assets.definitions import build_defs
from ego_assets.defs.episodes import is_blocked_failure
from ego_assets.defs.exports import EXPORT_TAG, exporter_code_versions
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry
from ego_assets.exports.registry import ExportFormat, ExportOption
from ego_assets.exports.run import Written, run_export
from ego_assets.quality.gate import ExportBlockedError
from ego_assets.quality.policy import Policy, default_policy
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import read_trajectory

TOY_VERSION = "toy-csv-1"
TOY = ExportFormat(
    name="toy_csv",
    route="export-toy",
    label="Toy CSV",
    policy_key="toy",
    version_of=f"{__name__}:TOY_VERSION",
    exporter_of=f"{__name__}:ToyExporter",
    folder="toy",
    receipt_layout="file",
    receipt_path="exports/toy/{key}/{key}.csv",
    needs="any streams",
    description="One CSV per capture: each stream's name and row count.",
    storage_kind="csv",
    step_resources=("250m", "256Mi"),
)


@dataclass(frozen=True, slots=True)
class ToyExporter:
    """``exports/toy/<key>/<key>.csv``: one line per stream (name, rows)."""

    header: bool = True
    format: ExportFormat = TOY
    index_file: str = "done.txt"
    uses_episode_index: bool = False

    OPTIONS: ClassVar[tuple[ExportOption, ...]] = (
        ExportOption("header", True, "write the header line"),
    )

    @classmethod
    def from_options(cls, values: Mapping[str, Any]) -> ToyExporter:
        return cls(header=bool(values["header"]))

    def target(self, storage: Storage, key: str) -> UPath:
        return storage.export_path(TOY.folder, key)

    def data_version(
        self, storage: Storage, key: str, gate_version: str | None, episode_index: int
    ) -> str:
        return f"{TOY_VERSION}:{int(self.header)}:{gate_version}"

    def stored(self, storage: Storage, key: str) -> str | None:
        done = self.target(storage, key) / self.index_file
        return done.read_text() if done.exists() else None

    def is_current(self, record: str, version: str, episode_index: int) -> bool:
        return record == version

    def artefact(self, key: str, record: str) -> str:
        return f"{key}.csv"

    def skipped(self, record: str) -> str:
        return ""

    def write(
        self, storage: Storage, key: str, stage: Path, version: str, episode_index: int
    ) -> Written:
        with storage.read_dir(storage.stage_path("trajectory", key)) as folder:
            trajectory = read_trajectory(folder)
        lines = [f"{s.name},{len(s)}" for s in trajectory.streams]
        header = ["stream,rows"] if self.header else []
        (stage / f"{key}.csv").write_text("\n".join([*header, *lines]) + "\n")
        (stage / self.index_file).write_text(version)
        return Written(version, f"{key}.csv")

    def figures(self, storage: Storage, key: str, record: str) -> dict[str, float | int | str]:
        return {"version": record}

    def details(self, storage: Storage, key: str) -> dict[str, Any]:
        return {"file": self.target(storage, key) / f"{key}.csv"}


@pytest.fixture
def with_toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "FORMATS", (*registry.FORMATS, TOY))


@pytest.fixture(scope="module")
def assessed(tmp_path_factory: pytest.TempPathFactory) -> Storage:
    """One clean WebXR capture and one blocked one, up to their gates (decided with the
    toy format registered: a gate names the exports it blocks when it is decided)."""
    storage = Storage(tmp_path_factory.mktemp("toy"))
    synthesize("webxr", storage.landing / "toy-ok", seconds=2, seed=1, capture_id="toy-ok")
    synthesize(
        "webxr",
        storage.landing / "toy-bad",
        seconds=2,
        seed=4,
        faults=("hand_never_seen", "backwards_timestamps"),  # the demo's blocked capture
        capture_id="toy-bad",
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "FORMATS", (*registry.FORMATS, TOY))
        for key in ("toy-ok", "toy-bad"):
            pipeline.ingest_raw(storage, key)
            pipeline.normalize(storage, key)
            pipeline.assess_quality(storage, key)
    gate = pipeline.stored_gate(storage, "toy-bad")
    assert gate is not None and "toy" in gate.blocked_exports
    return storage


def test_the_toy_format_is_gated_written_and_receipted(with_toy: None, assessed: Storage):
    result = run_export(assessed, "toy-ok", ToyExporter())
    assert not result.reused
    csv = Path(assessed.export_path("toy", "toy-ok").path) / "toy-ok.csv"
    rows = csv.read_text().splitlines()
    assert rows[0] == "stream,rows" and any(r.startswith("head,") for r in rows[1:])
    receipt = read_receipt(assessed, "toy_csv", "toy-ok")
    assert receipt is not None
    assert receipt.path == TOY.receipt_path.format(key="toy-ok")
    assert (receipt.code_version, receipt.bytes, receipt.files) == (
        TOY_VERSION,
        len(csv.read_bytes()),
        1,
    )
    assert run_export(assessed, "toy-ok", ToyExporter()).reused
    with pytest.raises(ExportBlockedError, match="toy-bad"):
        run_export(assessed, "toy-bad", ToyExporter())
    assert not Path(assessed.export_path("toy", "toy-bad").path).exists()


def test_the_toy_format_reaches_the_policy(with_toy: None):
    assert registry.policy_keys()[0] == "toy"  # gates list the newest format first
    assert "toy" in default_policy().blocks("longest_gap_s", "stream:head/longest_gap_s", "fail")
    only_toy = Policy.from_dict({"version": 1, "rules": [
        {"level": "warn", "metrics": ["*"], "exports": ["toy"]}
    ]})  # fmt: skip
    assert only_toy.blocks("x", "stream:head/x", "warn") == ("toy",)


def test_the_toy_format_reaches_the_api_routes_and_the_page(with_toy: None):
    paths = {(route.path, method) for route in export_router().routes for method in route.methods}
    assert ("/captures/{captureId}/export-toy", "GET") in paths
    assert ("/captures/{captureId}/export-toy", "POST") in paths
    row = {"id": "toy-ok", "kind": "webxr", "duration": 1.0, "quality": "pass", "gate": "allowed"}
    row["exports"] = {name: {"status": "none"} for name in registry.names()}
    page = render_page(Caller("t", "org"), [row])
    assert "<th>Toy CSV</th>" in page and 'data-route="export-toy"' in page
    assert exporter_code_versions()["toy_csv"] == TOY_VERSION


def test_the_toy_format_reaches_the_catalog_staging(with_toy: None, assessed: Storage, tmp_path):
    run_export(assessed, "toy-ok", ToyExporter())
    assert "export_receipts_toy_csv" in {s.table for s in sources()}
    database = tmp_path / "catalog.duckdb"
    stage_rows(assessed, database, exporter_code_versions())
    with duckdb.connect(str(database)) as con:
        rows = con.execute(
            f"select capture_key, format, code_version from {SCHEMA}.export_receipts_toy_csv"
        ).fetchall()
        formats = dict(
            con.execute(
                f"select format, current_code_version from {SCHEMA}.export_formats"
            ).fetchall()
        )
        blocked = dict(
            con.execute(
                f"select capture_key, blocked_formats from {SCHEMA}.quality_gates"
            ).fetchall()
        )
    assert rows == [("toy-ok", "toy_csv", TOY_VERSION)]
    assert formats["toy_csv"] == TOY_VERSION
    assert "toy_csv" in blocked["toy-bad"] and "toy_csv" not in blocked["toy-ok"]


def test_the_toy_format_reaches_the_dagster_definitions(with_toy: None, assessed: Storage):
    """Its asset (key, config, kinds, resources), its export job, and one partition
    materialized in-process by that job: the CSV without its header (the option), the
    partition's metadata; the blocked capture runs and materializes nothing."""
    defs = build_defs(StorageResource(root=str(assessed.root)), sets=2, catalog=False)
    for key in (dg.AssetKey("toy_csv"), dg.AssetKey(["s001", "toy_csv"])):
        asset = defs.resolve_assets_def(key)
        spec = asset.specs_by_key[key]
        assert (spec.code_version, spec.kinds) == (TOY_VERSION, {"python", "csv"})
        pod = json.loads(asset.op.tags["dagster-k8s/config"])  # Dagster stores tags as text
        assert pod["container_config"]["resources"] == {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"memory": "256Mi"},
        }
    fields = defs.resolve_assets_def("toy_csv").op.config_schema.as_field().config_type.fields
    assert (sorted(fields), fields["header"].default_value) == (["force", "header"], True)
    job = defs.resolve_job_def("export_toy_csv")
    assert job.tags[EXPORT_TAG] == "toy_csv" and job.executor_def is dg.in_process_executor
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("captures", ["toy-ok", "toy-bad"])
        config = {"ops": {"toy_csv": {"config": {"header": False}}}}
        run = job.execute_in_process(partition_key="toy-ok", instance=instance, run_config=config)
        assert run.success
        csv = Path(assessed.export_path("toy", "toy-ok").path) / "toy-ok.csv"
        rows = csv.read_text().splitlines()
        assert rows[0] != "stream,rows" and any(r.startswith("head,") for r in rows)
        materialization = instance.get_latest_materialization_event(dg.AssetKey("toy_csv"))
        assert materialization is not None
        assert materialization.asset_materialization.partition == "toy-ok"
        metadata = materialization.asset_materialization.metadata
        gate = pipeline.stored_gate(assessed, "toy-ok")
        assert gate is not None
        assert metadata["version"].value == f"{TOY_VERSION}:0:{gate.data_version}"
        assert metadata["file"] == dg.MetadataValue.path(str(csv))
        assert metadata["reused"].value is False

        blocked = job.execute_in_process(
            partition_key="toy-bad", instance=instance, raise_on_error=False
        )
        assert not blocked.success  # the export step says blocked, with the reasons
        (failure,) = [e for e in blocked.all_events if e.is_step_failure]
        assert failure.step_key == "toy_csv" and is_blocked_failure(failure.step_failure_data)
        assert "toy-bad" in (failure.step_failure_data.user_failure_data.description or "")
        assert not blocked.asset_materializations_for_node("toy_csv")
        assert not Path(assessed.export_path("toy", "toy-bad").path).exists()


def test_an_export_step_shares_its_decodes_only_with_exports_of_its_own_process():
    """`exports_share_process`: in-process steps with another export of the set selected
    (a capture run) share; another executor (a process or pod a step) or an export alone
    does not; a run of the whole job is taken to select every export."""
    from types import SimpleNamespace

    from ego_assets.defs.export_assets import exports_share_process
    from ego_assets.defs.partitions import SET0

    keys = [SET0.key(fmt.name) for fmt in registry.formats()]
    upstream = [SET0.key("raw_capture"), SET0.key("trajectory"), SET0.key("quality_report")]

    def context(executor, selection):
        return SimpleNamespace(
            job_def=SimpleNamespace(executor_def=executor),
            run=SimpleNamespace(asset_selection=selection),
            selected_asset_keys={keys[0]},
        )

    in_process, multiprocess = dg.in_process_executor, dg.multi_or_in_process_executor
    assert exports_share_process(context(in_process, frozenset(upstream + keys)), SET0)
    assert exports_share_process(context(in_process, None), SET0)
    assert not exports_share_process(context(in_process, frozenset([*upstream, keys[0]])), SET0)
    assert not exports_share_process(context(multiprocess, frozenset(keys)), SET0)
