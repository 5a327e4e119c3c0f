"""Every private Dagster name in `ego_assets.dagster_compat` is still where it was and
still does what the platform relies on: a Dagster upgrade that moves one fails here,
naming the name and the function to update."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from ego_assets import dagster_compat
from ego_assets.defs.capture_ops import asset_graph
from ego_assets.defs.partitions import SET0, register_captures


def _resolve(dotted: str) -> tuple[Any, list[str]]:
    """The longest importable module prefix of ``dotted``, walked down by attributes;
    returns the last object reached and the attribute names left (instance attributes)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        rest = parts[cut:]
        while rest and hasattr(obj, rest[0]):
            obj = getattr(obj, rest.pop(0))
        return obj, rest
    raise ImportError(dotted)


def _problem(dotted: str, needs: tuple[str, ...]) -> str:
    """What no longer matches for one `PRIVATE_NAMES` entry ("" when all does)."""
    try:
        obj, rest = _resolve(dotted)
    except ImportError:
        return "no module of it imports"
    if rest:
        # an attribute set on instances: its class must still assign it
        if len(rest) > 1 or not inspect.isclass(obj):
            return f"{'.'.join(rest)} not found"
        source = "".join(inspect.getsource(c) for c in obj.__mro__ if c.__module__ != "builtins")
        return "" if f"self.{rest[0]} =" in source else f"no class in its MRO sets self.{rest[0]}"
    if callable(obj) and not isinstance(obj, type(dg.DagsterRunStatus)):
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            params = {}
        if params:
            missing = [n for n in needs if "." not in n and n not in params and n != "self"]
            return f"parameters {missing} are gone" if missing else ""
    missing = [n for n in needs if not _has_path(obj, n)]
    return f"members {missing} are gone" if missing else ""


def _has_path(obj: Any, path: str) -> bool:
    for name in path.split("."):
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


@pytest.mark.parametrize(
    ("dotted", "needs", "user"), dagster_compat.PRIVATE_NAMES, ids=lambda v: str(v)[-40:]
)
def test_every_private_dagster_name_is_still_there(dotted, needs, user):
    problem = _problem(dotted, needs)
    assert not problem, (
        f"Dagster {dg.__version__} changed {dotted}: {problem}. "
        f"Update ego_assets.dagster_compat.{user} (written against Dagster 1.13.27)."
    )


def test_the_partition_tags_are_the_ones_the_ui_and_the_daemon_write():
    assert dagster_compat.PARTITION_NAME_TAG == "dagster/partition"
    assert dagster_compat.PARTITION_SET_TAG == "dagster/partition_set"


def test_instance_at_opens_the_folder_s_instance_and_keeps_what_it_stores(tmp_path: Path):
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with dagster_compat.instance_at(str(tmp_path)) as instance:
        assert Path(instance.root_directory) == tmp_path
        instance.add_dynamic_partitions("captures", ["cap-a", "cap-b"])
    with dagster_compat.instance_at(str(tmp_path)) as again:
        assert sorted(again.get_dynamic_partitions("captures")) == ["cap-a", "cap-b"]


def test_an_asset_backfill_covers_exactly_the_captures_and_assets_asked():
    graph = asset_graph(1)
    with dg.instance_for_test() as instance:
        register_captures(instance, ["cap-1", "cap-2", "cap-3"], 1)
        keys = [SET0.key("trajectory"), SET0.key("quality_report")]
        backfill_id = dagster_compat.launch_asset_backfill(
            instance, graph, ["cap-1", "cap-3"], keys, tags={"ego/backfill": "test"}, title="two"
        )
        stored = instance.get_backfill(backfill_id)
        assert stored is not None and stored.tags == {"ego/backfill": "test"}
        assert stored.title == "two"
        targets = {
            (ap.asset_key, ap.partition_key)
            for ap in stored.asset_backfill_data.target_subset.iterate_asset_partitions()
        }
        assert targets == {(k, p) for k in keys for p in ("cap-1", "cap-3")}


def test_a_run_request_for_asset_partitions_holds_exactly_those_partitions():
    graph = asset_graph(1)
    pairs = {(SET0.key("trajectory"), "cap-1"), (SET0.key("holos_hdf5"), "cap-2")}
    with dg.instance_for_test() as instance:
        register_captures(instance, ["cap-1", "cap-2"], 1)
        request = dagster_compat.asset_partitions_run_request(graph, pairs, {"t": "1"})
    assert request.tags == {"t": "1"}
    subset = request.asset_graph_subset
    assert subset is not None
    assert {(ap.asset_key, ap.partition_key) for ap in subset.iterate_asset_partitions()} == pairs


def test_sqlite_instances_take_the_portable_paths():
    with dg.instance_for_test() as instance:
        assert dagster_compat.insert_dynamic_partitions_postgres(instance, [("c", "k")]) is False
        assert instance.get_dynamic_partitions("c") == []
        assert dagster_compat.postgres_run_storage_connection(instance) is None


def test_postgres_run_storage_connection_is_a_live_connection(tmp_path: Path):
    from sqlalchemy import text

    from ego_assets_tests.processes import PG, fresh_database, require_postgres

    require_postgres()
    with fresh_database() as db_name:
        db = {"username": PG["user"], "hostname": PG["host"], "port": PG["port"]}
        db |= {"password": "", "db_name": db_name, "scheme": "postgresql+psycopg2"}
        config = {"storage": {"postgres": {"postgres_db": db}}, "telemetry": {"enabled": False}}
        (tmp_path / "dagster.yaml").write_text(json.dumps(config))
        with dagster_compat.instance_at(str(tmp_path)) as instance:
            connection = dagster_compat.postgres_run_storage_connection(instance)
            assert connection is not None
            with connection as conn:
                assert conn.execute(text("SELECT 41 + 1")).scalar() == 42
            rows = [("captures", "cap-1"), ("captures_s001", "cap-2"), ("captures", "cap-1")]
            assert dagster_compat.insert_dynamic_partitions_postgres(instance, rows) is True
            assert instance.get_dynamic_partitions("captures") == ["cap-1"]
            assert instance.get_dynamic_partitions("captures_s001") == ["cap-2"]


def test_a_failure_without_trace_fails_the_step_with_its_text_metadata_and_no_stack():
    """What a blocked export's step records (#35): the run fails, the step failure's error
    is ``<class>: <description>`` with no stack frame, and its failure data keeps the
    description and metadata (how `is_blocked_failure` tells it apart)."""

    @dg.asset
    def refused() -> None:
        failure = dg.Failure("capture 'k': not allowed", metadata={"gate": "blocked"})
        raise dagster_compat.failure_without_trace(failure, "ExportBlockedError")

    @dg.asset
    def plain() -> None:
        raise dg.Failure("capture 'k': not allowed")

    result = dg.materialize([refused], raise_on_error=False)
    assert not result.success
    (failed,) = [e for e in result.all_events if e.is_step_failure]
    data = failed.step_failure_data
    assert data.error is not None
    assert data.error.message == "ExportBlockedError: capture 'k': not allowed\n"
    assert (data.error.stack, data.error.cls_name, data.error.cause) == (
        [],
        "ExportBlockedError",
        None,
    )
    assert data.user_failure_data is not None
    assert data.user_failure_data.description == "capture 'k': not allowed"
    assert data.user_failure_data.metadata["gate"].value == "blocked"
    # a plain dg.Failure, for comparison: the stack trace this avoids
    (other,) = [
        e for e in dg.materialize([plain], raise_on_error=False).all_events if e.is_step_failure
    ]
    assert other.step_failure_data.error is not None and other.step_failure_data.error.stack
