"""The demo goes through the landing sensor and tags its runs as the sensor daemon does."""

from __future__ import annotations

import dagster as dg

from ego_assets.defs.demo import (
    ARIA_SAMPLE_KEY,
    pending_requests,
    seed_waiver,
    sensor_tags,
)
from ego_assets.defs.sensors import landing_sensor
from ego_assets.demo_report import capture_status
from ego_assets.quality.waivers import read_waivers
from ego_assets.storage import Storage


@dg.op
def _noop() -> None:
    return None


@dg.job
def _job() -> None:
    _noop()


def test_a_run_key_the_demo_ran_is_not_requested_again() -> None:
    requests = [dg.RunRequest(run_key=k, partition_key=k) for k in ("cap-a", "cap-b")]
    with dg.instance_for_test() as instance:
        assert pending_requests(instance, requests, landing_sensor.name) == requests
        tags = sensor_tags(requests[0], landing_sensor.name)
        assert tags == {"dagster/run_key": "cap-a", "dagster/sensor_name": "landing_sensor"}
        _job.execute_in_process(instance=instance, tags=tags)
        assert pending_requests(instance, requests, landing_sensor.name) == [requests[1]]
        # a run of another sensor with the same key does not count (the daemon's rule)
        other = sensor_tags(requests[1], "another_sensor")
        _job.execute_in_process(instance=instance, tags=other)
        assert pending_requests(instance, requests, landing_sensor.name) == [requests[1]]


def test_the_demo_waiver_is_granted_once(tmp_path) -> None:
    store = Storage(tmp_path)
    assert seed_waiver(store) and not seed_waiver(store)
    (waiver,) = read_waivers(store)
    assert (waiver.capture_key, waiver.metric) == (ARIA_SAMPLE_KEY, "longest_gap_s")
    # before any run the capture has no gate: the summary says so, not "ok"
    status = capture_status(store, ARIA_SAMPLE_KEY)
    assert (status.quality, status.status) == ("-", "not materialized")


def test_every_sensor_schedule_and_job_says_what_it_does(tmp_path) -> None:
    from ego_assets.definitions import build_defs
    from ego_assets.defs.resources import StorageResource

    defs = build_defs(StorageResource(root=str(tmp_path)))
    repo = defs.get_repository_def()
    described = [*repo.sensor_defs, *repo.schedule_defs]
    described += [j for j in repo.get_all_jobs() if not j.name.startswith("__")]
    assert {d.name for d in described} >= {"landing_sensor", "capture_job", "aggregates_job"}
    assert [d.name for d in described if not (d.description or "").strip()] == []
