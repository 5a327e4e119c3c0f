"""A code location for the warm launcher's tests: a run that holds until told to end.

`held_job`'s one op waits until its folder holds a file ``release`` (or the run is
interrupted), so a test can kill or terminate a run that is surely running. The sensor
`held_requests` starts one run per file ``<name>.request`` in the folder
``EGO_WARM_TEST_DIR`` (run key = name): tests ask for runs through the daemon, as the
landing sensor does.
"""

import os
import time
from pathlib import Path

import dagster as dg

DIR_ENV = "EGO_WARM_TEST_DIR"
POLL_S = 0.2


@dg.op(config_schema={"folder": str})
def hold(context: dg.OpExecutionContext) -> None:
    """Wait for ``<folder>/release``."""
    release = Path(context.op_config["folder"]) / "release"
    while not release.exists():
        time.sleep(POLL_S)


@dg.job
def held_job() -> None:
    hold()


@dg.sensor(job=held_job, minimum_interval_seconds=1, default_status=dg.DefaultSensorStatus.RUNNING)
def held_requests(context: dg.SensorEvaluationContext):  # type: ignore[no-untyped-def]
    folder = Path(os.environ[DIR_ENV])
    for request in sorted(folder.glob("*.request")):
        yield dg.RunRequest(
            run_key=request.stem,
            run_config={"ops": {"hold": {"config": {"folder": str(folder)}}}},
        )


defs = dg.Definitions(jobs=[held_job], sensors=[held_requests])
