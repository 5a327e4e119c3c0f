"""The Dagster UI in a real browser: headless Debian Chromium driven by selenium.

Two captures are materialized in-process into a local SQLite instance, a clean one and
one whose left hand is never seen (blocked by the export policy), then the aggregates
and the dataset catalog, and the sample release is built and recorded as `make demo`
does it (`refresh_aggregates`, `build_sample_release`); dagster-webserver serves that
instance on loopback. Checked in the browser, by
what the pages show: the intake assets on the lineage graph, both partitions filled; the
quality report partition page's verdict and rounded, unit-labelled figures; the blocked
capture marked failed in the export gate check's partition view, with the reason; the
timeline PNG shown in the metadata, read back from the page, with its legend text.

Blocked is visible in every view a user opens first (#27): the runs list shows the
blocked capture's run as a failure tagged ``ego/gate: blocked`` (the clean one's as a
success tagged ``allowed``); every export asset's partition of the blocked capture reads
Failed, not Missing nor Materialized, and its "View logs" names the gate's reasons;
quality_report's partition of it opens with ``gate: blocked`` and the reasons.

And what the demo leaves for `make dev` reads as it is (#35): the ``release`` asset's
``demo`` partition Materialized with its version, episodes and bytes; the export_gate
check's description says what it gates beside Dagster's "non-blocking"; its blocked
partition names the blocked exports as the assets are named (each with its policy
name); a blocked export's "View logs" shows the gate's reasons and no stack trace.
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import dagster as dg
import pytest
from PIL import Image

from ego_assets.definitions import ASSETS, build_defs
from ego_assets.defs.catalog import CATALOG_RESOURCES
from ego_assets.defs.demo import DEMO_RELEASE, build_sample_release, refresh_aggregates
from ego_assets.defs.episodes import is_blocked_failure, planned_per_partition
from ego_assets.defs.partitions import CAPTURES_PARTITIONS_NAME
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry
from ego_assets.synth import synthesize
from ego_assets_tests.browser import MISSING, chromium_available, headless_chromium
from ego_assets_tests.processes import free_port, start, stop, wait_http_ok, webserver_args
from ego_assets_tests.waiting import CEILING_S

log = logging.getLogger(__name__)

CAPTURE_KEY = "ui-webxr-0001"
BLOCKED_KEY = "ui-webxr-lost"
ASSET_NAMES = ("raw_capture", "trajectory", "quality_report")
INTAKE_GROUPS = ("capture", "quality")  # the groups holding ASSET_NAMES
WAIT_S = CEILING_S  # a ceiling for a hang: the UI renders slowly on 2 loaded cores


@dataclass
class Served:
    url: str
    data: Path
    release: dict  # the sample release's manifest (release.json)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A webserver over an instance holding the two captures' runs (made once for the
    module: the pages only read it); stopped by its pid."""
    tmp_path = tmp_path_factory.mktemp("served")
    home, data = tmp_path / "dagster_home", tmp_path / "data"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    synthesize("webxr", data / "landing" / CAPTURE_KEY, seconds=2.0, seed=7, capture_id=CAPTURE_KEY)
    synthesize(
        "webxr",
        data / "landing" / BLOCKED_KEY,
        seconds=2.0,
        seed=8,
        faults=["hand_never_seen", "backwards_timestamps"],
        capture_id=BLOCKED_KEY,
    )
    resources = {"storage": StorageResource(root=str(data)), **CATALOG_RESOURCES}
    per_capture = [a for a in ASSETS if a.partitions_def is not None]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(CAPTURES_PARTITIONS_NAME, [BLOCKED_KEY, CAPTURE_KEY])
        for key in (BLOCKED_KEY, CAPTURE_KEY):
            with planned_per_partition():  # runs created as the demo creates them
                result = dg.materialize(
                    per_capture,
                    partition_key=key,
                    resources=resources,
                    instance=instance,
                    raise_on_error=False,
                )
            failed = [e for e in result.all_events if e.is_step_failure]
            # the blocked capture: only its export steps fail, each saying why
            assert {e.step_key for e in failed} == (
                set(registry.names()) if key == BLOCKED_KEY else set()
            )
            assert all(is_blocked_failure(e.step_failure_data) for e in failed)
        # what `make demo` does next: the aggregates and catalog, then its sample release
        assert refresh_aggregates(build_defs(resources["storage"]), instance) == ""
        release, error = build_sample_release(data, instance)
        assert release is not None, error
    port = free_port()
    env = {"DAGSTER_HOME": str(home), "EGO_DATA_DIR": str(data)}
    web = start("dagster-webserver", webserver_args(port), env, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{url}/server_info", web)
        yield Served(url, data, release.manifest)
    finally:
        stop([web])


@pytest.fixture
def browser(tmp_path: Path):
    """Headless Chromium with a fresh profile, quit after the test."""
    if not chromium_available():
        pytest.skip(MISSING)
    driver = headless_chromium(
        tmp_path / "chromium-profile",
        (1920, 1080),
        "--disable-gpu",
        "--disable-quic",
        "--disable-sync",
        page_load_timeout_s=WAIT_S,
    )
    try:
        yield driver
    finally:
        driver.quit()


def _page_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def _wait_for_text(driver, *needles: str) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, WAIT_S, poll_frequency=0.5).until(
        lambda d: all(n in _page_text(d) for n in needles),
        message=f"page never showed all of {needles}",
    )
    return _page_text(driver)


def _dismiss_community_dialog(driver) -> None:
    """The webserver's first-visit newsletter dialog covers the page: skip it if shown."""
    from selenium.webdriver.common.by import By

    for button in driver.find_elements(By.XPATH, "//button[normalize-space()='Skip']"):
        button.click()


def _overlay_open(driver) -> bool:
    from selenium.webdriver.common.by import By

    _dismiss_community_dialog(driver)
    return bool(driver.find_elements(By.CSS_SELECTOR, ".bp5-overlay-backdrop"))


def _click(driver, element) -> None:
    """Click ``element``; the newsletter dialog can open late and cover it, so on an
    intercepted click wait until no dialog backdrop is left and click again."""
    from selenium.common.exceptions import ElementClickInterceptedException
    from selenium.webdriver.support.ui import WebDriverWait

    for attempt in range(3):
        try:
            element.click()
            return
        except ElementClickInterceptedException:
            if attempt == 2:
                raise
            WebDriverWait(driver, WAIT_S, poll_frequency=0.25).until(
                lambda d: not _overlay_open(d), message="a dialog kept covering the page"
            )


def _intake_graph_url(base: str) -> str:
    """The global lineage page filtered to the intake groups, both groups open.

    The unfiltered graph no longer fits: with the exporters and the dbt catalog assets
    (23 assets) it opens zoomed out to collapsed group boxes, and opening a group
    re-centres the view on that group, so the other groups' nodes leave the viewport,
    which the graph does not render at all (their names are not in the page). The
    page's own URL state selects the assets (``~<selection>``, as typed in its search
    box) and opens groups (``expanded=``), so nothing is clicked and the layout is the
    same every time.
    """
    selection = " or ".join(f"group:{g}" for g in INTAKE_GROUPS)
    expanded = ",".join(f"global@global:{g}" for g in INTAKE_GROUPS)
    return f"{base}/asset-groups~{quote(selection, safe='')}?expanded={quote(expanded, safe='')}"


def _hide_navigation(driver) -> None:
    """Fold the left navigation and the asset tree so the whole graph fits the screenshot."""
    from selenium.webdriver.common.by import By

    toggles = (
        (By.XPATH, "//button[normalize-space()='Hide navigation']"),
        (By.CSS_SELECTOR, "[aria-label='panel_show_right']"),
    )
    for by, selector in toggles:
        found = driver.find_elements(by, selector)
        if found:
            _click(driver, found[0])


def _metadata_values(page: str) -> dict[str, str]:
    """Metadata renders as a label line then a value line."""
    lines = page.splitlines()
    return {lines[i]: lines[i + 1] for i in range(len(lines) - 1)}


def test_asset_graph_and_partition_quality_page_show_assets_and_figures(
    served: Served, browser, tmp_path: Path
) -> None:
    browser.get(_intake_graph_url(served.url))
    _wait_for_text(browser, "Global asset lineage", *INTAKE_GROUPS)
    _dismiss_community_dialog(browser)
    _hide_navigation(browser)
    graph = _wait_for_text(browser, *ASSET_NAMES, "100% filled")
    lines = graph.splitlines()
    for name in ASSET_NAMES:  # each node: its name, then its facets, 2 partitions filled
        node = lines[lines.index(name) :]
        assert node[node.index("Partitions") + 1] == "100% filled", name
        assert "2 partitions" in node[: node.index("Automation") + 3], name
    assert "exports" not in lines  # the filter holds: only the intake groups are drawn
    browser.save_screenshot(str(tmp_path / "asset_graph.png"))

    browser.get(f"{served.url}/assets/quality_report?view=partitions&partition={CAPTURE_KEY}")
    page = _wait_for_text(browser, "Latest materialization", "duration (s)", "worst_metric")
    _dismiss_community_dialog(browser)
    browser.save_screenshot(str(tmp_path / "quality_report_partition.png"))
    values = _metadata_values(page)
    assert CAPTURE_KEY in page.splitlines()
    assert (values["gate"], values["quality"]) == ("allowed", "warn")
    assert "status" not in values and "export" not in values  # one key per fact
    assert values["worst_metric"] == "episode/duration_s"
    assert values["duration (s)"] == "1.967"  # rounded to 4 significant digits
    assert values["report"] == str(served.data / "quality" / CAPTURE_KEY / "quality.json")
    log.info("screenshots in %s", tmp_path)


def test_a_blocked_partition_reads_as_blocked_in_the_export_gate_partition_view(
    served: Served, browser, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{served.url}/assets/quality_report?view=checks&checkDetail=export_gate")
    _wait_for_text(browser, "export_gate", "Latest execution")
    _dismiss_community_dialog(browser)
    tab = browser.find_elements(By.XPATH, "//button[normalize-space()='Partitions']")
    _click(browser, tab[-1])
    listing = _wait_for_text(browser, "Failed (1)", "Passed (1)", BLOCKED_KEY, CAPTURE_KEY)
    assert "2 Partitions Selected" in listing
    # the key shows twice: in the partition selector, then in the status list
    entry = browser.find_elements(By.XPATH, f"//span[normalize-space()='{BLOCKED_KEY}']")[-1]
    _click(browser, entry)
    detail = _wait_for_text(browser, "Description", "quality: fail — export: blocked (")
    browser.save_screenshot(str(tmp_path / "export_gate_partitions.png"))
    lines = detail.splitlines()
    label = lines[lines.index(BLOCKED_KEY, lines.index("Passed (1)") + 3) + 1]
    assert label == "Failed"  # the blocked partition's label in the check's partition view
    assert "gate blocked" in lines  # check metadata: label and value on one line
    description = _metadata_values(detail)["Description"]
    assert description.startswith("quality: fail — export: blocked (stream:")
    assert "backwards_timestamps = " in description
    assert "Traceback" not in detail and "DagsterAssetCheckFailedError" not in detail


def test_the_timeline_is_shown_with_its_legend(served: Served, browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{served.url}/assets/quality_report?view=partitions&partition={BLOCKED_KEY}")
    _wait_for_text(browser, "Latest materialization", "timeline")
    _dismiss_community_dialog(browser)
    show = browser.find_elements(By.XPATH, "//a[normalize-space()='[Show Markdown]']")
    _click(browser, show[0])  # the timeline is the first markdown entry
    from selenium.webdriver.support.ui import WebDriverWait

    image = WebDriverWait(browser, WAIT_S).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "img[src^='data:image/png;base64,']"),
        message="the timeline image never showed",
    )[0]
    browser.save_screenshot(str(tmp_path / "timeline_shown.png"))
    assert image.size["width"] > 300
    png = base64.b64decode(image.get_attribute("src").split(",", 1)[1])
    (tmp_path / "timeline.png").write_bytes(png)
    decoded = Image.open(io.BytesIO(png))
    legend = decoded.text["legend"].split("; ")
    for text in ("tracked", "not tracked", "gap", "backwards timestamp", "duplicate timestamp"):
        assert text in legend
    assert decoded.text["Title"].startswith(f"{BLOCKED_KEY}  webxr")


def _row_of(lines: list[str], partition: str) -> list[str]:
    """The runs list's row of ``partition``'s run: from its partition tag to its View."""
    start = lines.index(f"partition: {partition}")
    return lines[start : lines.index("View", start)]


def test_the_runs_list_shows_the_blocked_capture_s_run_by_its_tag(
    served: Served, browser, tmp_path: Path
) -> None:
    browser.get(f"{served.url}/runs")
    page = _wait_for_text(browser, "ego/gate: blocked", "ego/gate: allowed", BLOCKED_KEY)
    _dismiss_community_dialog(browser)
    browser.save_screenshot(str(tmp_path / "runs_list.png"))
    lines = page.splitlines()
    blocked, clean = _row_of(lines, BLOCKED_KEY), _row_of(lines, CAPTURE_KEY)
    assert "ego/gate: blocked" in blocked and "Failure" in blocked
    assert "ego/gate: allowed" in clean and "Success" in clean


def test_every_export_partition_of_a_blocked_capture_reads_failed_with_the_reasons(
    served: Served, browser, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    for export_format in registry.names():
        url = f"{served.url}/assets/{export_format}?view=partitions&partition={BLOCKED_KEY}"
        browser.get(url)
        failed = "failed, and did not materialize this asset."
        page = _wait_for_text(browser, export_format, "Failed (1)", "Materialized (1)", failed)
        _dismiss_community_dialog(browser)
        assert "Missing (0)" in page, export_format  # never plain Missing
        assert "Latest materialization\nNone" in page, export_format  # nothing claimed
        view_logs = "//button[normalize-space()='View logs']"
        _click(browser, browser.find_elements(By.XPATH, view_logs)[0])
        logs = _wait_for_text(browser, "STEP_FAILURE", "export blocked by export policy v1: ")
        browser.save_screenshot(str(tmp_path / f"{export_format}_blocked_partition_logs.png"))
        assert "gate\nblocked" in logs or "gate blocked" in logs.splitlines(), export_format
        assert "hand:left/tracking_loss_ratio = 1 (fail > 0.5)" in logs, export_format
        assert f"capture '{BLOCKED_KEY}': export blocked by export policy v1: " in logs


def test_quality_report_s_partition_of_a_blocked_capture_opens_with_its_verdict(
    served: Served, browser, tmp_path: Path
) -> None:
    browser.get(f"{served.url}/assets/quality_report?view=partitions&partition={BLOCKED_KEY}")
    page = _wait_for_text(browser, "Latest materialization", "blocking_reasons", "Metadata")
    _dismiss_community_dialog(browser)
    browser.save_screenshot(str(tmp_path / "quality_report_blocked.png"))
    lines = page.splitlines()
    first = lines.index("Metadata") + 1
    assert lines[first : first + 3] == ["gate", "blocked", "blocking_reasons"]
    assert '  "hand:left/tracking_loss_ratio = 1 (fail > 0.5)"' in lines
    values = _metadata_values(page)
    assert values["quality"] == "fail" and values["policy_version"] == "1"


def test_the_demo_s_release_reads_materialized_with_its_version_episodes_and_bytes(
    served: Served, browser, tmp_path: Path
) -> None:
    manifest = served.release
    browser.get(f"{served.url}/assets/release?view=partitions&partition={DEMO_RELEASE}")
    page = _wait_for_text(browser, "Materialized (1)", "Latest materialization", "episodes")
    _dismiss_community_dialog(browser)
    browser.save_screenshot(str(tmp_path / "release_partition.png"))
    assert "Missing (0)" in page and "Failed (0)" in page
    values = _metadata_values(page)
    assert values["version"] == "1" and values["written"] == "true"
    assert values["episodes"] == str(len(manifest["episodes"])) == "1"
    assert values["bytes"] == str(sum(f["bytes"] for f in manifest["files"]))
    assert values["path"] == str(served.data / "releases" / DEMO_RELEASE / "v1")


def test_the_export_gate_check_says_what_it_gates_beside_non_blocking(
    served: Served, browser, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{served.url}/assets/quality_report?view=checks&checkDetail=export_gate")
    page = _wait_for_text(browser, "This is a non-blocking asset check.", "Gates the exports")
    _dismiss_community_dialog(browser)
    browser.save_screenshot(str(tmp_path / "export_gate_about.png"))
    about = " ".join(page.split())
    names = ", ".join(registry.names())
    assert f"Gates the exports of each episode ({names})" in about
    assert "Non-blocking in Dagster's sense only" in about
    assert "(export: blocked) writes nothing and fails with the reasons" in about
    # the blocked partition names its blocked exports as the assets, each with its policy name
    tab = browser.find_elements(By.XPATH, "//button[normalize-space()='Partitions']")
    _click(browser, tab[-1])
    _wait_for_text(browser, "Failed (1)", BLOCKED_KEY)
    entry = browser.find_elements(By.XPATH, f"//span[normalize-space()='{BLOCKED_KEY}']")[-1]
    _click(browser, entry)
    _wait_for_text(browser, "blocked_exports", "Description")
    show = "//*[normalize-space()='blocked_exports']/following::a[normalize-space()='[Show JSON]']"
    _click(browser, browser.find_elements(By.XPATH, show)[0])
    detail = " ".join(_wait_for_text(browser, *(f.policy_key for f in registry.formats())).split())
    browser.save_screenshot(str(tmp_path / "export_gate_blocked_exports.png"))
    for fmt in registry.formats():
        assert f'"{fmt.name}": "{fmt.policy_key}"' in detail, fmt.name


def test_a_blocked_export_s_logs_show_the_reasons_and_no_stack_trace(
    served: Served, browser, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    for export_format in registry.names():
        url = f"{served.url}/assets/{export_format}?view=partitions&partition={BLOCKED_KEY}"
        browser.get(url)
        _wait_for_text(browser, "failed, and did not materialize this asset.")
        _dismiss_community_dialog(browser)
        view_logs = "//button[normalize-space()='View logs']"
        _click(browser, browser.find_elements(By.XPATH, view_logs)[0])
        reason = (
            f"ExportBlockedError: capture '{BLOCKED_KEY}': export blocked by export policy v1: "
        )
        logs = _wait_for_text(browser, "STEP_FAILURE", reason)
        browser.save_screenshot(str(tmp_path / f"{export_format}_blocked_logs_no_trace.png"))
        assert "hand:left/tracking_loss_ratio = 1 (fail > 0.5)" in logs, export_format
        assert "Stack Trace" not in logs and 'File "' not in logs, export_format
        assert "dagster._core" not in logs and "Traceback" not in logs, export_format
