"""Headless Debian Chromium driven by selenium, for the browser tests and `bench scale`.

`make system-deps` installs ``chromium`` and ``chromium-driver``; tests skip without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ego_assets_tests.waiting import CEILING_S

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
MISSING = "Debian chromium + chromium-driver not installed (make system-deps)"
# Offline and quiet: no first-run pages, no background downloads or updates.
BASE_ARGS = (
    "--headless",
    "--no-sandbox",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
)


def chromium_available() -> bool:
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


def headless_chromium(
    profile: Path,
    window: tuple[int, int],
    *args: str,
    prefs: dict[str, Any] | None = None,
    capabilities: dict[str, Any] | None = None,
    page_load_timeout_s: float = CEILING_S,
) -> Any:
    """A selenium Chrome driver on headless Chromium with a fresh ``profile`` folder.

    Args:
        profile: the browser's user-data folder (created by Chromium).
        window: window width and height, pixels.
        args: command-line switches beside `BASE_ARGS` (``--headless=new`` replaces
            ``--headless``).
        prefs: Chromium preferences (e.g. the download folder).
        capabilities: WebDriver capabilities (e.g. ``goog:loggingPrefs``).
        page_load_timeout_s: how long ``driver.get`` may wait, seconds (a ceiling for a
            hang on a loaded machine).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    base = [a for a in BASE_ARGS if not (a == "--headless" and "--headless=new" in args)]
    for arg in (*base, *args, f"--window-size={window[0]},{window[1]}"):
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={profile}")
    if prefs:
        options.add_experimental_option("prefs", prefs)
    for name, value in (capabilities or {}).items():
        options.set_capability(name, value)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(page_load_timeout_s)
    # every WebDriver command waits up to the ceiling, not selenium's fixed 120 s: on a
    # loaded laptop a busy renderer answers late, it is not stuck
    driver.command_executor.client_config.timeout = max(page_load_timeout_s, CEILING_S)
    return driver
