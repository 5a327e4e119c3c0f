"""The export API end to end: Postgres instance, dagster-daemon, dagster-webserver and
`ego-assets serve`, every output on the loopback S3 (moto), step logs there too.

One deployment serves every test of this module (started once: the processes import
the code location, ~a minute on 2 shared cores). Its captures are ingested, normalized
and judged by the library before the tests (the landing zone stays empty, so the
landing sensor never starts a capture_job): every export the tests see was asked for
through the API and made by an ``export_<format>`` run that the daemon dequeued (the
inline exports of short captures are off here: `test_api_inline.py` covers them).

The tests run in file order and build on each other where the story does (ask, follow,
reuse, force, edited capture -> stale -> fresh).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import tarfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import h5py
import pytest
from dagster._core.storage.compute_log_manager import ComputeIOType
from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter

from ego_assets import pipeline
from ego_assets.api.config import hash_token
from ego_assets.capture.manifest import MARKER_FILE, write_marker
from ego_assets.catalog.receipts import read_receipt
from ego_assets.defs.partitions import CAPTURES_PARTITIONS_NAME
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.browser import MISSING, chromium_available, headless_chromium
from ego_assets_tests.conftest import S3Server
from ego_assets_tests.processes import (
    BIN,
    compute_logs_env,
    free_port,
    fresh_database,
    pg_env,
    require_postgres,
    start,
    start_dagster,
    stop,
    wait_http_ok,
    write_dagster_home,
)
from ego_assets_tests.waiting import CEILING_S, wait_for

TOKEN = "holos-token-7f3c1e"
OTHER_TOKEN = "other-token-91ab2d"
GOOD = "api-vp-0001"  # Vision Pro capture: every export allowed
WEB = "api-xr-0001"  # the browser test's capture
LOST = "api-lost-0001"  # left hand never seen: the export policy blocks it
BROKEN = "api-broken-0001"  # trajectory stream overwritten with garbage: the export fails
OTHER = "other-vp-0001"  # another organization's capture


@dataclass
class Api:
    url: str
    dagster_url: str
    home: Path
    env: dict[str, str]
    storage: Storage
    logs: Path
    bucket: str
    landing: Path
    instance: dg.DagsterInstance = field(repr=False)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = TOKEN,
        raw: bytes | None = None,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def export(self, key: str, route: str = "export-hdf5") -> str:
        return f"/captures/{key}/{route}"

    def wait(self, key: str, route: str = "export-hdf5") -> list[dict]:
        """Poll GET until the export is no longer queued or in progress; every answer."""
        seen: list[dict] = []

        def settled() -> bool:
            status, body = self.call("GET", self.export(key, route))
            assert status == 200, body
            seen.append(body)
            return body["status"] not in ("queued", "in_progress")

        wait_for(f"{route} of {key} to finish", settled, interval_s=0.25, state=lambda: seen[-1])
        return seen

    def export_runs(self, key: str, fmt: str = "holos_hdf5") -> list[dg.DagsterRun]:
        return list(
            self.instance.get_runs(
                filters=RunsFilter(tags={"dagster/partition": key, "ego/export": fmt})
            )
        )


def _prepare(storage: Storage, key: str) -> None:
    """What capture_job's first three assets do, by the library (no export)."""
    pipeline.ingest_raw(storage, key)
    pipeline.normalize(storage, key)
    pipeline.assess_quality(storage, key)


def _write_config(path: Path) -> Path:
    path.write_text(
        "[links]\nttl_s = 600\n\n"
        '[organizations.holos]\ncaptures = ["api-*"]\n'
        f'[organizations.holos.tokens]\nholos-ci = "{hash_token(TOKEN)}"\n\n'
        '[organizations.other]\ncaptures = ["other-*"]\n'
        f'[organizations.other.tokens]\nother-ci = "{hash_token(OTHER_TOKEN)}"\n'
    )
    return path


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[Api]:
    require_postgres()
    tmp = tmp_path_factory.mktemp("api")
    bucket = s3_server.make_bucket()
    data, landing = f"{bucket}/data", f"{bucket}/landing"
    local_landing = tmp / "landing"
    synthesize("holos-visionpro", local_landing / GOOD, seconds=1.5, seed=3, capture_id=GOOD)
    synthesize("webxr", local_landing / WEB, seconds=2.0, seed=7, capture_id=WEB)
    synthesize("holos-visionpro", local_landing / OTHER, seconds=1.0, seed=4, capture_id=OTHER)
    synthesize(
        "webxr",
        local_landing / LOST,
        seconds=2.0,
        seed=12,
        faults=["hand_never_seen"],
        capture_id=LOST,
    )
    synthesize("webxr", local_landing / BROKEN, seconds=2.0, seed=9, capture_id=BROKEN)
    # The captures are copied from a staging prefix, never from the watched landing zone.
    staging = f"{bucket}/staging"
    keys = [GOOD, WEB, OTHER, LOST, BROKEN]
    for key in keys:
        s3_server.upload_dir(local_landing / key, f"{staging}/{key}")
    storage = Storage(data, landing=staging, storage_options=s3_server.storage_options)
    for key in keys:
        _prepare(storage, key)
    broken = storage.stage_path("trajectory", BROKEN) / "streams.parquet"
    storage.write_file(broken, b"not a parquet file")

    with fresh_database("ego_api") as db_name:
        home = write_dagster_home(tmp / "dagster_home", s3_compute_logs=True)
        env = {
            **s3_server.env,
            **pg_env(db_name),
            **compute_logs_env(bucket, s3_server.endpoint_url),
            "DAGSTER_HOME": str(home),
            "EGO_DATA_DIR": data,
            "EGO_LANDING_DIR": landing,
            "EGO_SENSOR_INTERVAL_S": "3600",
            "EGO_API_LINK_SECRET": "test-link-secret",
            "EGO_API_INLINE_MAX_S": "0",  # every export a run (test_api_inline: the other path)
        }
        services = []
        instance = None
        try:
            with pytest.MonkeyPatch.context() as patch:
                for name, value in env.items():
                    patch.setenv(name, value)
                instance = dg.DagsterInstance.from_config(str(home))
                # built lazily: build it while its bucket and endpoint variables are set
                assert type(instance.compute_log_manager).__name__ == "S3ComputeLogManager"
            instance.add_dynamic_partitions(CAPTURES_PARTITIONS_NAME, keys)
            web_port, api_port = free_port(), free_port()
            web = start_dagster(services, env, tmp, web_port)
            dagster_url = f"http://127.0.0.1:{web_port}"
            config = _write_config(tmp / "api.toml")
            serve = [str(BIN / "ego-assets"), "serve", "--port", str(api_port)]
            serve += ["--config", str(config), "--dagster-url", dagster_url]
            server = start("ego-assets-serve", serve, env, tmp)
            services.append(server)
            wait_http_ok(f"{dagster_url}/server_info", web)
            url = f"http://127.0.0.1:{api_port}"
            wait_http_ok(f"{url}/healthz", server)
            yield Api(
                url,
                dagster_url,
                home,
                env,
                storage,
                server.log_path,
                bucket,
                local_landing,
                instance,
            )
        finally:
            stop(services)
            if instance is not None:
                instance.dispose()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def test_tokens_organizations_and_ids_are_checked(api: Api) -> None:
    path = api.export(GOOD)
    assert api.call("GET", path, token=None)[0] == 401
    assert api.call("GET", path, token="not-a-token")[0] == 401
    # another organization's capture is not found, whichever token asks
    assert api.call("GET", path, token=OTHER_TOKEN)[0] == 404
    assert api.call("GET", api.export(OTHER))[0] == 404
    assert api.call("GET", api.export(OTHER), token=OTHER_TOKEN)[0] == 200
    assert api.call("POST", api.export(OTHER), token=TOKEN)[0] == 404
    # ids by the platform's key rule; unknown ids of the organization are not found
    for bad in ("api..x", "-api", "a" * 129, "api%20x"):
        status, body = api.call("GET", api.export(bad))
        assert status == 422, (bad, body)
        assert "capture key" in body["detail"]
    assert api.call("GET", api.export("api-unknown-1"))[0] == 404
    # unknown or mistyped body fields are refused; decodeFrames is HDF5's only
    status, body = api.call("POST", path, {"forse": True})
    assert status == 422 and body["detail"][0]["loc"] == ["forse"]
    assert api.call("POST", api.export(GOOD, "export-lerobot"), {"decodeFrames": True})[0] == 422
    assert api.call("POST", path, {"force": "maybe"})[0] == 422
    assert api.call("POST", path, raw=b"{not json")[0] == 422
    assert api.export_runs(GOOD) == []  # nothing refused ever launched a run
    log = api.logs.read_text()
    assert "token=holos-ci" in log and "token=other-ci" in log
    assert TOKEN not in log and OTHER_TOKEN not in log


def _steps(api: Api, run_id: str) -> set[str]:
    """The steps run ``run_id`` executed."""
    entries = api.instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
    return {entry.step_key for entry in entries if entry.step_key}


def test_hdf5_export_queued_followed_ready_reused_and_forced(api: Api) -> None:
    path = api.export(GOOD)
    status, body = api.call("GET", path)
    assert (status, body["status"], body["artifact"]) == (200, "none", None)

    # two clients ask at once: one run
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: api.call("POST", path), range(2)))
    codes = sorted(code for code, _ in answers)
    assert codes == [200, 202], answers
    run_ids = {body["runId"] for _, body in answers}
    assert len(run_ids) == 1
    assert all(body["status"] in ("queued", "in_progress") for _, body in answers)
    runs = api.export_runs(GOOD)
    assert [r.run_id for r in runs] == list(run_ids)
    assert runs[0].job_name == "export_holos_hdf5"

    seen = api.wait(GOOD)
    statuses = [s["status"] for s in seen]
    assert statuses[-1] == "ready", seen[-1]
    # every status between ask and answer is an open one, in order
    order = {"queued": 0, "in_progress": 1, "ready": 2}
    assert [order[s] for s in statuses] == sorted(order[s] for s in statuses)
    progress = [s["progress"] for s in seen if s["status"] == "in_progress"]
    assert progress == sorted(progress) and all(0.0 <= p <= 1.0 for p in progress)
    run = api.instance.get_run_by_id(seen[-1]["runId"])
    assert run is not None and run.status == DagsterRunStatus.SUCCESS
    # the exporter's own progress, recorded on the run: the upload phase done
    assert run.tags["ego/progress"] == "1.000" and run.tags["ego/phase"] == "upload"
    # no EGO_EXECUTOR: the export job ran its steps in the run worker, no process per step
    messages = [entry.message for entry in api.instance.all_logs(run.run_id)]
    assert any(m.startswith("Executing steps in process") for m in messages)
    assert not any(m.startswith("Launching subprocess") for m in messages)
    # the capture was judged outside Dagster: the run records its inputs first
    assert _steps(api, run.run_id) == {"raw_capture", "trajectory", "quality_report", "holos_hdf5"}

    artifact = seen[-1]["artifact"]
    receipt = read_receipt(api.storage, "holos_hdf5", GOOD)
    assert receipt is not None
    assert artifact["filename"] == f"{GOOD}.h5" and artifact["current"] is True
    assert artifact["size"] == receipt.bytes and artifact["resolvedAt"] == receipt.exported_at
    # on S3 the link is presigned: straight from the bucket, no API in between
    assert artifact["downloadUrl"].startswith(api.env["EGO_S3_ENDPOINT_URL"])
    assert "Signature=" in artifact["downloadUrl"] and "Expires=" in artifact["downloadUrl"]
    data = _get(artifact["downloadUrl"])
    assert len(data) == receipt.bytes and _sha256(data) == receipt.sha256
    with h5py.File(io.BytesIO(data)) as f:
        assert f.attrs["Conventions"].startswith("CF-1.11") or "data" in f

    # current: the same artefact at once, no run
    status, body = api.call("POST", path)
    assert (status, body["status"]) == (200, "ready")
    assert body["artifact"]["resolvedAt"] == receipt.exported_at
    assert len(api.export_runs(GOOD)) == 1

    # force: a new run that writes the file again
    status, body = api.call("POST", path, {"force": True})
    assert status == 202 and body["runId"] not in run_ids
    final = api.wait(GOOD)[-1]
    assert final["status"] == "ready" and final["artifact"]["current"] is True, final
    assert final["artifact"]["resolvedAt"] > receipt.exported_at
    assert len(api.export_runs(GOOD)) == 2
    # its inputs are current and recorded: the run is the exporter alone
    assert _steps(api, final["runId"]) == {"holos_hdf5"}

    # the run's step logs were uploaded to S3 by the compute log manager and read back
    manager = api.instance.compute_log_manager
    assert type(manager).__name__ == "S3ComputeLogManager"
    # The run's own events name its log files. (Listing the bucket instead, with
    # `get_log_keys_for_log_key_prefix`, breaks on the `.partial` objects that
    # `upload_interval` leaves beside the final ones when a step outlasts it, as on a busy
    # machine: dagster-aws splits each object name at every dot.)
    captured = api.instance.all_logs(final["runId"], of_type=dg.DagsterEventType.LOGS_CAPTURED)
    log_keys = [
        [final["runId"], "compute_logs", entry.dagster_event.logs_captured_data.file_key]
        for entry in captured
        if entry.dagster_event is not None
    ]
    assert log_keys, "no compute log capture in the run's events"
    assert all(manager.cloud_storage_has_logs(key, ComputeIOType.STDERR) for key in log_keys)
    text = b"".join(
        manager.get_log_data_for_type(key, ComputeIOType.STDERR, 0, None)[0] or b""
        for key in log_keys
    ).decode(errors="replace")
    assert "holos_hdf5" in text


def test_edited_transcript_makes_the_export_stale_and_the_next_ask_fresh(api: Api) -> None:
    before = read_receipt(api.storage, "holos_hdf5", GOOD)
    assert before is not None
    # the capture is copied again with an edited transcript (a new raw copy)
    transcript = api.landing / GOOD / "transcript.json"
    doc = json.loads(transcript.read_text())
    doc["segments"][0]["text"] = "edited words"
    transcript.write_text(json.dumps(doc))
    write_marker(api.landing / GOOD, "holos")
    for name in ("transcript.json", MARKER_FILE):
        api.storage.write_file(
            api.storage.landing_path(GOOD) / name, (api.landing / GOOD / name).read_bytes()
        )
    (api.storage.stage_path("raw", GOOD) / "manifest.json").unlink()
    pipeline.ingest_raw(api.storage, GOOD)
    # polls are answered from a cache refreshed in the background (about a second old)
    answers: list[dict] = []

    def stale() -> bool:
        status, body = api.call("GET", api.export(GOOD))
        assert status == 200 and body["status"] == "ready"
        answers.append(body)
        return body["artifact"]["current"] is False

    wait_for(f"{GOOD}'s export to turn stale", stale, interval_s=0.3, state=lambda: answers[-1])
    body = answers[-1]
    assert body["artifact"]["current"] is False
    status, body = api.call("POST", api.export(GOOD))
    assert status == 202
    final = api.wait(GOOD)[-1]
    assert final["status"] == "ready" and final["artifact"]["current"] is True
    after = read_receipt(api.storage, "holos_hdf5", GOOD)
    assert after is not None and after.input_data_version != before.input_data_version
    # a new raw copy: the run brought trajectory and gate up to date before exporting
    assert _steps(api, final["runId"]) == {
        "raw_capture",
        "trajectory",
        "quality_report",
        "holos_hdf5",
    }
    data = _get(final["artifact"]["downloadUrl"])
    assert _sha256(data) == after.sha256
    with h5py.File(io.BytesIO(data)) as f:
        assert f["holos/transcript/segments"][0]["text"] == b"edited words"


def test_blocked_episode_is_refused_at_once_with_the_gate_reasons(api: Api) -> None:
    for route in ("export-hdf5", "export-lerobot"):
        status, body = api.call("POST", api.export(LOST, route), {"force": True})
        assert status == 409, body
        assert "blocked" in body["detail"] and LOST in body["detail"]
        assert any("hand" in reason for reason in body["reasons"]), body
    assert api.export_runs(LOST) == [] and api.export_runs(LOST, "ceres_episode") == []
    # a GET says so too (#35): blocked, with the 409's message and reasons, no run
    status, body = api.call("GET", api.export(LOST))
    assert (status, body["status"], body["runId"], body["artifact"]) == (200, "blocked", None, None)
    gate = pipeline.stored_gate(api.storage, LOST)
    assert gate is not None and body["reasons"] == list(gate.reasons)
    assert body["error"] == (
        f"capture {LOST!r}: export blocked by export policy v1: " + "; ".join(gate.reasons)
    )


def test_failed_run_reports_the_exporter_error(api: Api) -> None:
    status, _ = api.call("POST", api.export(BROKEN))
    assert status == 202
    final = api.wait(BROKEN)[-1]
    assert final["status"] == "failed", final
    assert BROKEN in final["error"] and "holos_hdf5" in final["error"]
    run = api.instance.get_run_by_id(final["runId"])
    assert run is not None and run.status == DagsterRunStatus.FAILURE


@pytest.mark.parametrize(
    ("route", "fmt"),
    [("export-lerobot", "ceres_episode"), ("export-webdataset", "egosmith_shards")],
)
def test_folder_exports_download_as_one_tar(api: Api, route: str, fmt: str) -> None:
    status, body = api.call("POST", api.export(WEB, route))
    assert status == 202, body
    final = api.wait(WEB, route)[-1]
    assert final["status"] == "ready", final
    receipt = read_receipt(api.storage, fmt, WEB)
    assert receipt is not None
    artifact = final["artifact"]
    assert artifact["filename"] == f"{WEB}.{fmt}.tar" and final["progress"] == 1.0
    # a folder is served by the API as a tar, behind a signed expiring link; the artifact
    # describes exactly those bytes
    assert artifact["downloadUrl"].startswith(f"/downloads/{fmt}/{WEB}?")
    data = _get(api.url + artifact["downloadUrl"])
    assert len(data) == artifact["size"] and _sha256(data) == artifact["sha256"]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        assert len(members) == receipt.files
        assert sum(m.size for m in members) == receipt.bytes
    tampered = artifact["downloadUrl"].replace("sig=", "sig=0")
    with pytest.raises(urllib.error.HTTPError) as err:
        _get(api.url + tampered)
    assert err.value.code == 403


def test_captures_page_from_click_to_downloaded_file(api: Api, tmp_path: Path) -> None:
    if not chromium_available():
        pytest.skip(MISSING)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from ego_assets.quality.waivers import add_waiver

    # a waiver changes WEB's gate inputs: its LeRobot and WebDataset exports turn stale
    add_waiver(api.storage, WEB, "episode/duration_s", "short takes are fine", "test")
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver = headless_chromium(
        tmp_path / "profile",
        (1600, 900),
        "--disable-gpu",
        "--disable-sync",
        prefs={"download.default_directory": str(downloads), "download.prompt_for_download": False},
    )
    try:
        driver.execute_cdp_cmd(
            "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
        )
        driver.get(api.url + "/captures")  # not signed in: the sign-in form
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "sign-in").click()
        WebDriverWait(driver, CEILING_S).until(lambda d: d.find_elements(By.ID, "captures"))
        table = driver.find_element(By.ID, "captures").text
        # the organization's captures only, with kind, duration, quality and gate
        assert GOOD in table and WEB in table and OTHER not in table
        lost = driver.find_element(By.ID, f"capture-{LOST}")
        assert "webxr" in lost.text and "blocked" in lost.text
        # its Export buttons are disabled, the gate's reasons in their title
        buttons = lost.find_elements(By.CSS_SELECTOR, "td.export button")
        assert buttons and all(not b.is_enabled() for b in buttons)
        assert all("hand" in (b.get_attribute("title") or "") for b in buttons)
        web_row = driver.find_element(By.ID, f"capture-{WEB}")
        assert "2.0 s" in web_row.text
        stale = web_row.find_elements(By.CSS_SELECTOR, "td.export span.stale")
        assert len(stale) == 2, web_row.text  # LeRobot and WebDataset, not HDF5 (none yet)

        cell = web_row.find_element(By.CSS_SELECTOR, 'td.export[data-route="export-hdf5"]')
        cell.find_element(By.TAG_NAME, "button").click()
        texts: list[str] = []

        def downloaded(_: Any) -> bool:
            texts.append(cell.find_element(By.CSS_SELECTOR, ".state").text)
            return (downloads / f"{WEB}.h5").exists()

        WebDriverWait(driver, CEILING_S, poll_frequency=0.2).until(downloaded)
        assert any(t.startswith(("queued", "in progress")) for t in texts), texts
        assert cell.find_element(By.CSS_SELECTOR, "a.download").text == f"{WEB}.h5"
    finally:
        driver.quit()
    receipt = read_receipt(api.storage, "holos_hdf5", WEB)
    assert receipt is not None
    data = (downloads / f"{WEB}.h5").read_bytes()
    assert len(data) == receipt.bytes and _sha256(data) == receipt.sha256
