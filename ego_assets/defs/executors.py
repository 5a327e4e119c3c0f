"""Where a run's steps execute: chosen by the deployment, never by editing the code location.

``EGO_EXECUTOR`` (read when the definitions load) selects the job executor:

* unset / ``default``: Dagster's default (multiprocess, or in-process for
  ``materialize``); local runs, ``make demo`` and the K8s *run* launcher use this.
* ``celery``: `dagster_celery.celery_executor`, broker and result backend from
  ``EGO_CELERY_BROKER`` / ``EGO_CELERY_BACKEND`` (e.g. ``redis://host:6379/0``). Each
  step becomes a Celery task that any ``dagster-celery worker start -A dagster_celery.app
  -y <same broker/backend yaml>`` process executes; the workers load this same code
  location (same image, same env) and share the instance (Postgres) and the storage (S3).
* ``k8s``: `dagster_k8s.k8s_job_executor`, one pod per step.
* ``in_process``: every step in the run worker's own process (no process per step: the
  code location is imported once per run; small boxes and the API's end-to-end tests).

Kubernetes uses the same code location unchanged: the Helm chart's ``K8sRunLauncher``
starts one pod per run (per backfill chunk) from the code-location image with the same
``EGO_*`` environment, and that pod runs the steps with the executor chosen here (the
default for a chunk, or ``EGO_EXECUTOR=k8s`` for a pod per step). Only environment
variables differ between one box, Celery workers and a cluster.
"""

from collections.abc import Mapping

import dagster as dg

EXECUTOR_ENV = "EGO_EXECUTOR"
CELERY_BROKER_ENV = "EGO_CELERY_BROKER"
CELERY_BACKEND_ENV = "EGO_CELERY_BACKEND"


def executor_from_env(env: Mapping[str, str]) -> dg.ExecutorDefinition | None:
    """The executor named by ``EGO_EXECUTOR`` in ``env``; None means Dagster's default."""
    name = env.get(EXECUTOR_ENV, "default").strip().lower() or "default"
    if name == "default":
        return None
    if name == "celery":
        from dagster_celery import celery_executor

        return celery_executor.configured(
            {
                "broker": {"env": CELERY_BROKER_ENV},
                "backend": {"env": CELERY_BACKEND_ENV},
            },
            name="ego_celery_executor",
        )
    if name == "in_process":
        return dg.in_process_executor
    if name == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor
    raise ValueError(f"{EXECUTOR_ENV}={name!r}: expected default, in_process, celery or k8s")
