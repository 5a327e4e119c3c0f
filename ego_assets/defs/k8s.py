"""Container resources per asset on Kubernetes.

`K8sRunLauncher` and `k8s_job_executor` read the ``dagster-k8s/config`` op tag of the
step they launch; elsewhere (local, compose, Celery) the tag is ignored. Requests are
sized for one chunk of 10-minute episodes processed one after another in a step.
"""

from typing import Any


def k8s_resources(cpu: str, memory: str) -> dict[str, Any]:
    """Op tags requesting ``cpu`` and ``memory`` (also the memory limit) for a step's pod."""
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}
    return {"dagster-k8s/config": {"container_config": {"resources": resources}}}


# Copying and hashing files: I/O bound, little memory.
RAW_CAPTURE_TAGS = k8s_resources("250m", "512Mi")
# One episode's streams in memory (a 10-minute Vision Pro capture is ~1.5 GiB as float64).
TRAJECTORY_TAGS = k8s_resources("1", "4Gi")
# Reads one trajectory and computes the report; GX adds ~300 MiB once per process.
QUALITY_TAGS = k8s_resources("1", "3Gi")
