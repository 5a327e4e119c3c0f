"""The import sensor: a configured source lands a page per tick, resuming at its cursor."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from ego_assets.definitions import build_defs
from ego_assets.defs import imports
from ego_assets.defs.imports import build_import_sensor, parse_import_sources
from ego_assets.defs.resources import StorageResource
from ego_assets.landing import scan_landing
from ego_assets.storage import Storage
from ego_assets.synth.egodex import write_egodex_episode

TASK = "train/add_remove_lid"


def test_sources_are_parsed_and_nonsense_refused():
    sources = parse_import_sources("egodex=s3://b/egodex/train; egodex=/data/two\nmano-sequence=/t")
    assert [(s.kind, s.src, s.name) for s in sources] == [
        ("egodex", "s3://b/egodex/train", "import_egodex"),
        ("egodex", "/data/two", "import_egodex_2"),
        ("mano-sequence", "/t", "import_mano_sequence"),
    ]
    assert parse_import_sources("") == ()
    with pytest.raises(ValueError, match="not KIND=SRC"):
        parse_import_sources("egodex")
    with pytest.raises(ValueError, match="unknown kind 'egodx'"):
        parse_import_sources("egodx=/x")


def _tick(sensor: dg.SensorDefinition, storage: StorageResource, cursor: str | None):
    context = dg.build_sensor_context(cursor=cursor, resources={"storage": storage})
    result = sensor(context)
    return result, context.cursor


def test_sensor_lands_a_page_per_tick_and_resumes_after_its_cursor(tmp_path, monkeypatch):
    src = tmp_path / "src"
    for n in range(5):
        write_egodex_episode(src / TASK, n, frames=10, seed=n)
    write_egodex_episode(src / TASK, 5, frames=10, faults=["no_camera"])
    monkeypatch.setattr(imports, "MAX_LANDED_PER_TICK", 2)
    (source,) = parse_import_sources(f"egodex={src}")
    sensor = build_import_sensor(source)
    storage = StorageResource(root=str(tmp_path / "data"))
    landing = Storage(tmp_path / "data")

    result, cursor = _tick(sensor, storage, None)
    assert "2 landed, 0 already there, 0 failed" in result.skip_message
    assert json.loads(cursor) == {"after": f"{TASK}/1.hdf5"}
    assert scan_landing(landing, None, 10).keys == (
        "egodex-train.add_remove_lid.0",
        "egodex-train.add_remove_lid.1",
    )
    result, cursor = _tick(sensor, storage, cursor)
    assert json.loads(cursor) == {"after": f"{TASK}/3.hdf5"}
    result, cursor = _tick(sensor, storage, cursor)  # episode 5 fails alone
    assert "1 landed, 0 already there, 1 failed" in result.skip_message
    assert json.loads(cursor) == {"after": f"{TASK}/5.hdf5"}
    result, again = _tick(sensor, storage, cursor)  # nothing new: the cursor stays
    assert "0 landed" in result.skip_message and again == cursor
    write_egodex_episode(src / TASK, 6, frames=10)  # appended later: the next tick lands it
    result, cursor = _tick(sensor, storage, cursor)
    assert "1 landed" in result.skip_message and json.loads(cursor)["after"] == f"{TASK}/6.hdf5"
    assert len(scan_landing(landing, None, 10).keys) == 6
    result, _ = _tick(sensor, storage, None)  # a reset cursor rescans; the bad one fails again
    assert "0 landed, 6 already there, 1 failed" in result.skip_message


def test_definitions_carry_one_sensor_per_configured_source(tmp_path):
    sources = parse_import_sources(f"egodex={tmp_path};mano-sequence={tmp_path}")
    defs = build_defs(StorageResource(root=str(tmp_path)), sets=1, import_sources=sources)
    names = {s.name for s in defs.sensors or []}
    assert {"import_egodex", "import_mano_sequence", "landing_sensor"} <= names
