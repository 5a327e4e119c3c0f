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
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from rerun.chunk import RrdReader
from selenium.common.exceptions import TimeoutException

from ego_assets.capture import read_capture
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import write_trajectory
from ego_assets.viewer.episode import serve_web
from ego_assets.viewer.recording import build_recording
from ego_assets_tests.browser import MISSING, chromium_available, headless_chromium
from ego_assets_tests.processes import free_port
from ego_assets_tests.waiting import CEILING_S, wait_for

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


def tcp_listeners(ports: set[int]) -> set[tuple[str, int]]:
    """(local address, port) of every TCP socket listening on one of ``ports`` (IPv4 and
    IPv6), from ``/proc/net/tcp*``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port = local.rsplit(":", 1)
            if state == "0A" and int(port, 16) in ports:  # 0A: LISTEN
                found.add((address, int(port, 16)))
    return found


LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp prints it


def _gone(pid: int) -> bool:
    """The process ended (no /proc entry, or a zombie waiting for its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.parametrize(
    ("sent", "status"),
    [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 0), (signal.SIGKILL, -9)],
)
def test_view_web_listens_on_loopback_only_and_its_viewer_ends_with_it(
    tmp_path: Path, sent: signal.Signals, status: int
) -> None:
    """`ego-assets view --web`: both servers on 127.0.0.1 only; SIGTERM, Ctrl-C and the
    command's death (SIGKILL) end the rerun child and free both ports."""
    capture = synthesize("webxr", tmp_path / "raw" / "sig" / "capture", seconds=2.0, seed=4)
    folder = tmp_path / "trajectory" / "sig"
    write_trajectory(read_capture("sig", capture), folder)
    web_port, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "ego_assets.cli", "view", str(folder), "--web"]
    command += ["--web-port", str(web_port), "--grpc-port", str(grpc_port)]
    log = tmp_path / "view.log"
    env = {**os.environ, "CI": "true"}  # the rerun binary sends no usage analytics on CI
    with log.open("wb") as sink:
        view = subprocess.Popen(command, cwd=tmp_path, stdout=sink, stderr=sink, env=env)
    try:

        def serving() -> bool:
            assert view.poll() is None, f"view exited: {log.read_text()}"
            return len(tcp_listeners({web_port, grpc_port})) == 2

        wait_for("the web viewer and gRPC server listening", serving, state=log.read_text)
        assert tcp_listeners({web_port, grpc_port}) == {
            (LOOPBACK_HEX, web_port),
            (LOOPBACK_HEX, grpc_port),
        }
        children = Path(f"/proc/{view.pid}/task/{view.pid}/children").read_text().split()
        (viewer,) = [int(c) for c in children]
        assert (tmp_path / "sig.rrd").is_file()  # --out's default, ./<name>.rrd
        view.send_signal(sent)
        assert wait_for("the view command to exit", view.poll, state=log.read_text) == status
        wait_for(f"the rerun child {viewer} to end", lambda: _gone(viewer))
        wait_for("both ports free", lambda: not tcp_listeners({web_port, grpc_port}))
    finally:
        if view.poll() is None:
            view.kill()
            view.wait()
