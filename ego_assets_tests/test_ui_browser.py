"""The Dagster UI in a real browser: headless Debian Chromium driven by selenium.

One capture is materialized in-process into a local SQLite instance; dagster-webserver
serves that instance on loopback. The asset graph must show every asset, and the quality
report partition page must show the capture's quality verdict and duration.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from ego_assets.definitions import ASSETS
from ego_assets.defs.partitions import CAPTURES_PARTITIONS_NAME
from ego_assets.defs.resources import StorageResource
from ego_assets.synth import synthesize
from ego_assets_tests.processes import free_port, start, stop, wait_http_ok, webserver_args

log = logging.getLogger(__name__)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CAPTURE_KEY = "ui-webxr-0001"
ASSET_NAMES = ("raw_capture", "trajectory", "quality_report")
WAIT_S = 60


@dataclass
class Served:
    url: str
    data: Path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A webserver over an instance holding one materialized capture; stopped by its pid."""
    home, data = tmp_path / "dagster_home", tmp_path / "data"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    synthesize("webxr", data / "landing" / CAPTURE_KEY, seconds=2.0, seed=7, capture_id=CAPTURE_KEY)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(CAPTURES_PARTITIONS_NAME, [CAPTURE_KEY])
        result = dg.materialize(
            ASSETS,
            partition_key=CAPTURE_KEY,
            resources={"storage": StorageResource(root=str(data))},
            instance=instance,
        )
        assert result.success
    port = free_port()
    env = {"DAGSTER_HOME": str(home), "EGO_DATA_DIR": str(data)}
    web = start("dagster-webserver", webserver_args(port), env, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{url}/server_info", web, timeout_s=120)
        yield Served(url, data)
    finally:
        stop([web])


@pytest.fixture
def browser(tmp_path: Path):
    """Headless Chromium with a fresh profile, quit after the test."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("Debian chromium + chromium-driver not installed (make system-deps)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1920,1080",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(WAIT_S)
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


def _expand_asset_groups(driver) -> None:
    """The global graph starts with groups collapsed: open them one by one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    collapsed = "[aria-label='unfold_more']"
    for _ in range(10):  # a few groups at most
        buttons = driver.find_elements(By.CSS_SELECTOR, collapsed)
        if not buttons:
            return
        before = len(buttons)
        _click(driver, buttons[0])
        WebDriverWait(driver, WAIT_S).until(
            lambda d, n=before: len(d.find_elements(By.CSS_SELECTOR, collapsed)) < n
        )


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


def test_asset_graph_and_partition_quality_page_show_assets_and_figures(
    served: Served, browser, tmp_path: Path
) -> None:
    browser.get(f"{served.url}/asset-groups")
    _wait_for_text(browser, "Global asset lineage", "capture", "quality")
    _dismiss_community_dialog(browser)
    _expand_asset_groups(browser)
    _hide_navigation(browser)
    graph = _wait_for_text(browser, *ASSET_NAMES)
    assert "1 partition" in graph
    assert "1 / 1 Passed" in graph  # quality_report's GX check on the graph node
    browser.save_screenshot(str(tmp_path / "asset_graph.png"))

    browser.get(f"{served.url}/assets/quality_report?view=partitions&partition={CAPTURE_KEY}")
    page = _wait_for_text(browser, "Latest materialization", "duration_s", "worst_metric")
    _dismiss_community_dialog(browser)
    browser.save_screenshot(str(tmp_path / "quality_report_partition.png"))
    lines = page.splitlines()
    # Metadata renders as label line then value line.
    values = {lines[i]: lines[i + 1] for i in range(len(lines) - 1)}
    assert CAPTURE_KEY in lines
    assert values["status"] == "warn"
    assert values["worst_metric"] == "episode/duration_s"
    assert float(values["duration (s)"]) == pytest.approx(1.967, abs=1e-9)
    assert values["report"] == str(served.data / "quality" / CAPTURE_KEY / "quality.json")
    log.info("screenshots in %s", tmp_path)
