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


def test_a_packed_run_is_one_run_pod_that_fits_every_step_of_its_captures():
    """K8sRunLauncher starts one Job (pod) per run: a packed landing run is one pod for its
    captures. The run's tags add no pod config, so the pod is the Helm chart's
    runK8sConfig, and with the default executor every step of every capture runs inside
    it, one after another: its memory limit must hold the largest step."""
    from pathlib import Path

    import dagster as dg
    import yaml
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.job import UserDefinedDagsterK8sConfig
    from kubernetes.utils import parse_quantity

    from ego_assets.defs.capture_location import per_capture_assets
    from ego_assets.defs.partitions import captures_per_run_from_env, packed_run_request

    values = yaml.safe_load((Path(__file__).parents[1] / "infra/helm/values.yaml").read_text())
    chart = values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]
    snake = {"containerConfig": "container_config", "jobSpecConfig": "job_spec_config"}
    launcher_config = UserDefinedDagsterK8sConfig.from_dict({snake[k]: v for k, v in chart.items()})
    request = packed_run_request(SET0, ["cap-01", "cap-02", "cap-03"])
    run = dg.DagsterRun(job_name="capture_job", run_id="packed", tags=dict(request.tags))
    rendered = K8sContainerContext(run_k8s_config=launcher_config).merge(
        K8sContainerContext.create_for_run(run, None, include_run_tags=True)
    )
    resources = rendered.run_k8s_config.container_config["resources"]
    assert resources == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}
    assert rendered.run_k8s_config.job_spec_config == {
        "ttl_seconds_after_finished": 3600,
        "backoff_limit": 0,  # a failed packed run is not retried by Kubernetes
    }
    steps = {
        a.key.to_user_string(): parse_quantity(
            get_user_defined_k8s_config(a.op.tags).container_config["resources"]["limits"]["memory"]
        )
        for a in per_capture_assets(SET0)
        if "dagster-k8s/config" in a.op.tags
    }
    assert set(steps) >= {"raw_capture", "trajectory", "quality_report"}
    assert max(steps.values()) <= parse_quantity(resources["limits"]["memory"])
    # the code location (which runs the landing sensor) packs 16 captures per run pod
    deployment = values["dagster-user-deployments"]["deployments"][0]
    env = {e["name"]: e["value"] for e in deployment["env"]}
    assert captures_per_run_from_env(env) == 16
