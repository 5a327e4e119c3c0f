"""The web viewer on loopback, in headless Debian Chromium (WebGL 2 through SwiftShader).

`ego_assets.viewer.episode.serve_web` serves Rerun's web viewer and gRPC server on
127.0.0.1 with one episode's recording; Chromium opens the page. The check that the page
loaded the recording asks the running viewer itself: ``window._handle.save_recording()``
(Rerun's web handle) returns the recording it holds as RRD bytes, which are read back
with `rerun.chunk.RrdReader` and compared with the file served. A screenshot is saved.
Chromium resolves no host but loopback, so the viewer page cannot reach the internet.
"""

from __future__ import annotations

import base64
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from rerun.chunk import RrdReader
from selenium.common.exceptions import TimeoutException

from ego_assets.capture import read_capture
from ego_assets.synth import synthesize
from ego_assets.viewer.episode import serve_web
from ego_assets.viewer.recording import build_recording
from ego_assets_tests.browser import MISSING, chromium_available, headless_chromium
from ego_assets_tests.processes import free_port
from ego_assets_tests.waiting import CEILING_S

# ceilings for a hang (software WebGL on 2 loaded cores is slow, not stuck)
LOAD_WAIT_S = SCREENSHOT_WAIT_S = CEILING_S
# Read the viewer's active recording as base64 (chunked: String.fromCharCode limits).
SAVED_RECORDING_JS = """
const h = window._handle;
if (!h) { return null; }
let bytes;
try { bytes = h.save_recording(); } catch (e) { return null; }
let text = "";
for (let i = 0; i < bytes.length; i += 8192) {
  text += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
}
return btoa(text);
"""


def _wait_page(url: str, process, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the rerun web server exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {timeout_s} s")


def _entities(path: Path) -> set[str]:
    return {c.entity_path for c in RrdReader(path).stream() if not c.is_static}


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    if not chromium_available():
        pytest.skip(MISSING)
    driver = headless_chromium(
        tmp_path / "chromium-profile",
        (1024, 640),
        "--headless=new",
        # WebGL 2 on the CPU (SwiftShader): the machine has no GPU
        "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader",
        "--ignore-gpu-blocklist",
        # nothing but loopback resolves: the page's fonts and Rerun's telemetry stay off
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        page_load_timeout_s=CEILING_S,
    )
    driver.set_script_timeout(CEILING_S)
    try:
        yield driver
    finally:
        driver.quit()


def test_web_viewer_loads_the_recording(
    browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")  # the rerun binary sends no usage analytics on CI
    capture = synthesize("webxr", tmp_path / "capture", seconds=2.0, seed=3)
    rrd = build_recording(
        read_capture("web-webxr", capture), tmp_path / "episode.rrd", media_dir=capture
    ).path
    web_port, grpc_port = free_port(), free_port()
    process, url = serve_web(rrd, web_port, grpc_port)
    try:
        assert url.startswith(f"http://127.0.0.1:{web_port}/")
        _wait_page(f"http://127.0.0.1:{web_port}/", process, timeout_s=CEILING_S)
        browser.get(url)
        saved = tmp_path / "from-browser.rrd"
        deadline = time.monotonic() + LOAD_WAIT_S
        expected = _entities(rrd)
        got: set[str] = set()
        while time.monotonic() < deadline and not expected <= got:
            time.sleep(5)
            try:
                encoded = browser.execute_script(SAVED_RECORDING_JS)
            except Exception:  # the renderer is busy compiling shaders on the CPU
                continue
            if encoded:
                saved.write_bytes(base64.b64decode(encoded))
                try:
                    got = _entities(saved)
                except ValueError:  # no recording store yet (welcome screen)
                    continue
        assert expected <= got, f"viewer holds {sorted(got)}"
        (recording,) = RrdReader(saved).recordings()
        assert recording.recording_id == "web-webxr"
        shot = tmp_path / "web-viewer.png"
        deadline = time.monotonic() + SCREENSHOT_WAIT_S
        while not shot.exists() and time.monotonic() < deadline:
            try:  # software WebGL keeps the renderer busy: a capture may time out
                browser.save_screenshot(str(shot))
            except TimeoutException:
                time.sleep(5)
        assert shot.read_bytes()[:4] == b"\x89PNG"
    finally:
        process.terminate()
        process.wait(timeout=30)
