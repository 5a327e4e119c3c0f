from dagster_k8s.job import get_user_defined_k8s_config

from ego_assets.defs.ingest import raw_capture, trajectory
from ego_assets.defs.quality import quality_report


def test_every_per_episode_asset_requests_its_pod_resources_in_the_k8s_format():
    expected = {
        "raw_capture": ("250m", "512Mi"),
        "trajectory": ("1", "4Gi"),
        "quality_report": ("1", "3Gi"),
    }
    for asset in (raw_capture, trajectory, quality_report):
        config = get_user_defined_k8s_config(asset.op.tags)
        resources = config.container_config["resources"]
        cpu, memory = expected[asset.op.name]
        assert resources["requests"] == {"cpu": cpu, "memory": memory}
        assert resources["limits"] == {"memory": memory}
