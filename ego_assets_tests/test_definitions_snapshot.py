"""The Dagster definitions keep their shape: asset keys, ops, config fields, checks, jobs.

`definitions_shape` reads what a deployment, the API and saved run configs depend on
from `build_defs` (two capture sets, with the catalog location): each asset's op name,
group, kinds, dependencies, partitions, step tags, pool, whether its output is required
and its config fields (type, default, required); every check; every job's selection,
tags and executor. `snapshots/definitions.json` holds it as it was before the
exporter assets were built by one factory (`ego_assets.defs.export_assets`), apart
from the export jobs' executor (in-process since). After an intended change, write it
again with ``python -m ego_assets_tests.test_definitions_snapshot`` and review the diff.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import dagster as dg

from ego_assets.definitions import build_defs
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry

SNAPSHOT = Path(__file__).parent / "snapshots" / "definitions.json"
SETS = 2


def _config_fields(asset: dg.AssetsDefinition) -> dict[str, Any]:
    schema = asset.op.config_schema
    if schema is None or schema.config_type is None:
        return {}
    fields = getattr(schema.as_field().config_type, "fields", {})
    return {
        name: {
            "type": field.config_type.given_name or field.config_type.key,
            "required": field.is_required,
            "default": field.default_value if field.default_provided else None,
        }
        for name, field in sorted(fields.items())
    }


def definitions_shape(defs: dg.Definitions) -> dict[str, Any]:
    """What the snapshot compares (see the module docstring), JSON-ready."""
    repo = defs.get_repository_def()
    assets: dict[str, Any] = {}
    checks: list[str] = []
    for asset in repo.asset_graph.assets_defs:
        for key in asset.keys:
            spec = asset.specs_by_key[key]
            assets[key.to_user_string()] = {
                "op": asset.op.name,
                "group": spec.group_name,
                "kinds": sorted(spec.kinds),
                "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
                "partitions": getattr(asset.partitions_def, "name", None),
                "backfill": str(asset.backfill_policy),
                "op_tags": {k: str(v) for k, v in sorted(asset.op.tags.items())},
                "pool": asset.op.pool,
                "output_required": all(o.is_required for o in asset.op.output_defs),
                "config": _config_fields(asset),
            }
        checks += [check.to_user_string() for check in asset.check_keys]
    jobs = {
        job.name: {
            "executor": job.executor_def.name,
            "tags": dict(sorted(job.tags.items())),
            "assets": sorted(k.to_user_string() for k in job.asset_layer.executable_asset_keys),
        }
        for job in repo.get_all_jobs()
    }
    shape = {"assets": assets, "checks": sorted(checks), "jobs": jobs}
    return json.loads(json.dumps(shape, sort_keys=True))


def _current(root: Path) -> dict[str, Any]:
    return definitions_shape(build_defs(StorageResource(root=str(root)), sets=SETS))


def test_the_definitions_keep_their_shape(tmp_path: Path):
    shape = _current(tmp_path)
    expected = json.loads(SNAPSHOT.read_text())
    assert sorted(shape["assets"]) == sorted(expected["assets"])
    assert shape["checks"] == expected["checks"]
    assert sorted(shape["jobs"]) == sorted(expected["jobs"])
    for key, asset in expected["assets"].items():
        assert shape["assets"][key] == asset, key
    for name, job in expected["jobs"].items():
        assert shape["jobs"][name] == job, name


def test_exporter_assets_carry_their_registry_entry(tmp_path: Path):
    defs = build_defs(StorageResource(root=str(tmp_path)), sets=SETS, catalog=False)
    for fmt in registry.formats():
        for key in (dg.AssetKey(fmt.name), dg.AssetKey(["s001", fmt.name])):
            spec = defs.resolve_assets_def(key).specs_by_key[key]
            assert (spec.code_version, spec.description) == (fmt.code_version, fmt.description)
            assert spec.kinds == {"python", fmt.storage_kind}


if __name__ == "__main__":  # write the snapshot again (after an intended change)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        SNAPSHOT.write_text(json.dumps(_current(Path(tmp)), indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {SNAPSHOT}\n")
