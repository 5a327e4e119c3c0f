from dagster_k8s.job import get_user_defined_k8s_config

from ego_assets.defs.export_assets import build_export_asset
from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.partitions import SET0
from ego_assets.defs.quality import quality_report
from ego_assets.exports import registry


def test_every_per_episode_asset_requests_its_pod_resources_in_the_k8s_format():
    expected = {
        "raw_capture": ("250m", "512Mi"),
        "trajectory": ("1", "4Gi"),
        "quality_report": ("1", "3Gi"),
        "holos_hdf5": ("1", "4Gi"),
        "ceres_episode": ("1", "3Gi"),
        "egosmith_shards": ("1", "2Gi"),
    }
    exporters = [build_export_asset(SET0, fmt) for fmt in registry.formats()]
    for asset in (raw_capture, trajectory, quality_report, *exporters):
        config = get_user_defined_k8s_config(asset.op.tags)
        resources = config.container_config["resources"]
        cpu, memory = expected[asset.op.name]
        assert resources["requests"] == {"cpu": cpu, "memory": memory}
        assert resources["limits"] == {"memory": memory}
