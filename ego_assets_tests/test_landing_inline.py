"""The landing sensor takes a lone short capture through every asset in its tick
(`ego_assets.defs.landing_inline`), and leaves to a run what it should not take."""

import json
import os
import time
from pathlib import Path

import dagster as dg
import pytest

from ego_assets import pipeline
from ego_assets.capture.manifest import write_marker
from ego_assets.capture_sets import PER_CAPTURE_ASSETS
from ego_assets.definitions import build_defs
from ego_assets.defs.landing_inline import (
    DEFAULT_INLINE_MAX_S,
    INLINE_BY,
    INLINE_TAG,
    inline_max_s,
)
from ego_assets.defs.quality import EXPORT_GATE_CHECK
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.sensors import build_landing_sensor
from ego_assets.exports import registry
from ego_assets.exports.run import run_export
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.factories import synth_blocked_capture

EXPORTED_BY = "ego/exported_by"


def _land(folder: Path) -> None:
    """Make ``folder``'s marker the newest write, as an uploader does."""
    now = time.time()
    os.utime(folder / "ego_capture.json", (now, now))


def _evaluate(root: Path, instance: dg.DagsterInstance, inline_s: float = DEFAULT_INLINE_MAX_S):
    storage = StorageResource(root=str(root))
    sensor = build_landing_sensor(sets=1, inline_s=inline_s)
    context = dg.build_sensor_context(
        instance=instance, resources={"storage": storage}, definitions=build_defs(storage)
    )
    return sensor(context)


def _synth(root: Path, key: str, seconds: float = 2.0, kind: str = "holos-iphone") -> None:
    _land(synthesize(kind, root / "landing" / key, seconds=seconds, seed=5, capture_id=key))


def test_a_lone_short_capture_is_materialized_by_the_tick_with_every_asset_and_its_check(
    tmp_path,
):
    _synth(tmp_path, "lone-1")
    with dg.instance_for_test() as instance:
        result = _evaluate(tmp_path, instance)
        assert isinstance(result, dg.SensorResult)
        assert not result.run_requests  # no run: the tick did the work
        assert "lone-1" in result.skip_reason.skip_message
        materializations = [
            e for e in result.asset_events if isinstance(e, dg.AssetMaterialization)
        ]
        checks = [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
        assert [m.asset_key.path[-1] for m in materializations] == list(PER_CAPTURE_ASSETS)
        assert {m.partition for m in materializations} == {"lone-1"}

        # what was written is what the events say: each step, asked again, reuses it
        store = Storage(tmp_path)
        again = {
            "raw_capture": pipeline.ingest_raw(store, "lone-1"),
            "trajectory": pipeline.normalize(store, "lone-1"),
            "quality_report": pipeline.assess_quality(store, "lone-1"),
        }
        for fmt in registry.formats():
            exporter_class = fmt.exporter_class()
            exporter = exporter_class.from_options(
                {o.name: o.default for o in exporter_class.OPTIONS}
            )
            again[fmt.name] = run_export(store, "lone-1", exporter, force=False)
        assets = build_defs(StorageResource(root=str(tmp_path))).resolve_asset_graph()
        for m in materializations:
            name = m.asset_key.path[-1]
            assert again[name].reused, name
            assert m.tags["dagster/data_version"] == again[name].data_version
            assert m.metadata["data_version"].value == again[name].data_version
            assert m.tags["dagster/code_version"] == assets.get(m.asset_key).code_version
            tag = EXPORTED_BY if name in registry.names() else INLINE_TAG
            assert m.tags[tag] == INLINE_BY
        by_name = {m.asset_key.path[-1]: m for m in materializations}
        assert by_name["trajectory"].metadata["duration_s"].value == pytest.approx(2.0, abs=0.1)
        assert by_name["quality_report"].metadata["gate"].value == "allowed"
        assert by_name["raw_capture"].metadata["bytes"].value > 0

        (check,) = checks
        assert (check.check_name, check.partition, check.passed) == (
            EXPORT_GATE_CHECK,
            "lone-1",
            True,
        )
        assert check.metadata["gate"].value == "allowed"

        # Dagster takes them as the daemon hands them over: every partition materialized
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
        for name in PER_CAPTURE_ASSETS:
            assert instance.get_materialized_partitions(dg.AssetKey(name)) == {"lone-1"}
        assert instance.get_dynamic_partitions("captures") == ["lone-1"]


def test_the_tick_exports_egosmith_before_ceres_whose_remux_then_decodes_nothing(
    tmp_path, monkeypatch
):
    """EgoSmith's decode leaves CERES the sample behind its camera statistics
    (`camera_sample`): the tick runs it first, and CERES counts no frame itself."""
    from ego_assets.defs import landing_inline
    from ego_assets.formats import lerobot_video

    ran: list[str] = []

    def recorded(store, key, exporter, **kwargs):
        ran.append(exporter.format.name)
        return run_export(store, key, exporter, **kwargs)

    counted: list[int] = []
    count = lerobot_video.frame_histogram
    monkeypatch.setattr(landing_inline, "run_export", recorded)
    monkeypatch.setattr(lerobot_video, "frame_histogram", lambda *a: counted.append(1) or count(*a))
    _synth(tmp_path, "order-1")
    with dg.instance_for_test() as instance:
        result = _evaluate(tmp_path, instance)
    assert ran == [f.name for f in registry.run_order()]
    assert ran.index("egosmith_shards") < ran.index("ceres_episode")
    assert counted == []
    shard = next((tmp_path / "exports" / "ceres-lerobot-v3" / "order-1").rglob("meta/info.json"))
    assert json.loads(shard.read_text())["features"]["observation.images.passthrough"]
    # the events keep the registry's display order
    names = [e.asset_key.path[-1] for e in result.asset_events if hasattr(e, "asset_key")]
    assert [n for n in names if n in registry.names()] == list(registry.names())


def test_two_captures_in_one_tick_go_to_a_packed_run(tmp_path):
    _synth(tmp_path, "pair-a")
    _synth(tmp_path, "pair-b")
    with dg.instance_for_test() as instance:
        result = _evaluate(tmp_path, instance)
        (request,) = result.run_requests
        assert request.run_key == "pair-a...pair-b"
        assert not result.asset_events
        assert not (tmp_path / "raw").exists()  # the tick wrote nothing


def test_a_blocked_capture_gets_its_run_and_nothing_is_reported(tmp_path):
    _land(synth_blocked_capture(tmp_path / "landing" / "blocked-1", "blocked-1"))
    with dg.instance_for_test() as instance:
        result = _evaluate(tmp_path, instance)
        (request,) = result.run_requests
        assert (request.run_key, request.partition_key) == ("blocked-1", "blocked-1")
        assert not result.asset_events
        # the run finds the tick's work stored and shows the block (docs/quality.md)
        gate = pipeline.stored_gate(Storage(tmp_path), "blocked-1")
        assert gate is not None and not gate.allows()


def test_a_malformed_capture_gets_its_run_which_fails_with_the_error(tmp_path):
    folder = tmp_path / "landing" / "broken-1"
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text("{}")
    write_marker(folder, "holos")
    with dg.instance_for_test() as instance:
        result = _evaluate(tmp_path, instance)
        (request,) = result.run_requests
        assert request.run_key == "broken-1"
        assert not result.asset_events
        assert not (tmp_path / "trajectory" / "broken-1").exists()  # nothing partial


def test_a_capture_longer_than_the_limit_gets_its_run_which_reuses_the_tick_s_work(tmp_path):
    _synth(tmp_path, "long-1", seconds=3.0)
    with dg.instance_for_test() as instance:
        result = _evaluate(tmp_path, instance, inline_s=2.5)
        (request,) = result.run_requests
        assert request.run_key == "long-1"
        assert not result.asset_events
        store = Storage(tmp_path)
        assert pipeline.stored_duration_s(store, "long-1") == pytest.approx(3.0, abs=0.1)
        assert pipeline.normalize(store, "long-1").reused
        assert pipeline.stored_gate(store, "long-1") is None  # stopped before quality


def test_inline_off_leaves_every_capture_to_a_run(tmp_path):
    _synth(tmp_path, "off-1")
    with dg.instance_for_test() as instance:
        result = _evaluate(tmp_path, instance, inline_s=0)
        (request,) = result.run_requests
        assert request.run_key == "off-1"
        assert not result.asset_events
        assert not (tmp_path / "raw").exists()


def test_the_setting_is_read_from_the_environment_and_nonsense_refused(monkeypatch):
    assert inline_max_s({}) == DEFAULT_INLINE_MAX_S
    assert inline_max_s({"EGO_SENSOR_INLINE_MAX_S": "0"}) == 0
    assert inline_max_s({"EGO_SENSOR_INLINE_MAX_S": " 12.5 "}) == 12.5
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="EGO_SENSOR_INLINE_MAX_S"):
            inline_max_s({"EGO_SENSOR_INLINE_MAX_S": bad})
    from ego_assets import definitions

    monkeypatch.setenv("EGO_SENSOR_INLINE_MAX_S", "7")
    description = definitions.defs().resolve_sensor_def("landing_sensor").description or ""
    assert "at most 7 s long (EGO_SENSOR_INLINE_MAX_S)" in description


def test_the_demo_s_tick_records_a_capture_the_sensor_took_as_the_daemon_does(tmp_path):
    from ego_assets.defs.demo import landing_tick

    _synth(tmp_path, "demo-lone")
    storage = StorageResource(root=str(tmp_path))
    with dg.instance_for_test() as instance:
        tick = landing_tick(build_defs(storage), instance, storage)
        assert (tick.inline, tick.requests, tick.failures) == (["demo-lone"], [], {})
        for name in PER_CAPTURE_ASSETS:
            assert instance.get_materialized_partitions(dg.AssetKey(name)) == {"demo-lone"}
        assert not instance.get_runs()
