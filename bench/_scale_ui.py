"""`bench scale`'s instruments for the webserver, the UI and the daemon: load averages,
peak resident memory of a process (and its children), the UI's GraphQL documents timed
against a running ``dagster-webserver``, and headless Chromium loading the asset's
partitions page (`ui_figures`)."""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def load_averages() -> list[float]:
    """1, 5 and 15-minute load averages (the machine is shared)."""
    return [round(x, 2) for x in os.getloadavg()]


def rss_mb(pid: int) -> dict[str, float]:
    """Current and peak resident memory of ``pid`` (MB), from /proc."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = round(int(value.split()[0]) / 1024, 1)
    return out


def children_rss_mb(pid: int) -> float:
    """Peak RSS (MB) summed over the direct children of ``pid`` (code servers)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(FileNotFoundError):
                total += rss_mb(int(child)).get("VmHWM", 0.0)
    return round(total, 1)


class GraphQL:
    """POSTs GraphQL documents to a webserver; records each call's wall time."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + "/graphql"

    def __call__(self, query: str, variables: dict[str, Any] | None = None) -> tuple[Any, float]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}
        )
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=900) as response:
            payload = response.read()
        elapsed = time.perf_counter() - start
        data = json.loads(payload)
        if data.get("errors"):
            raise RuntimeError(f"GraphQL errors: {str(data['errors'])[:500]}")
        return data["data"], elapsed


def best_of(call: Callable[[], float], repeat: int) -> tuple[float, list[float]]:
    times = [call() for _ in range(repeat)]
    return min(times), times


# The asset page's partition health document, as dagster-webserver 1.13.27's UI sends it
# (ui-core/src/assets/usePartitionHealthData.tsx); used when no browser recorded it.
PARTITION_HEALTH_QUERY = """
query PartitionHealthQuery($assetKey: AssetKeyInput!) {
    assetNodeOrError(assetKey: $assetKey) {
      ... on AssetNode {
        id
        partitionKeysByDimension {
          name
          type
          partitionKeys
        }
        assetPartitionStatuses {
          ... on TimePartitionStatuses {
            ranges {
              status
              startTime
              endTime
              startKey
              endKey
            }
          }
          ... on DefaultPartitionStatuses {
            materializedPartitions
            materializingPartitions
            failedPartitions
          }
          ... on MultiPartitionStatuses {
            primaryDimensionName
            ranges {
              primaryDimStartKey
              primaryDimEndKey
              primaryDimStartTime
              primaryDimEndTime
              secondaryDim {
                ... on TimePartitionStatuses {
                  ranges {
                    status
                    startTime
                    endTime
                    startKey
                    endKey
                  }
                }
                ... on DefaultPartitionStatuses {
                  materializedPartitions
                  materializingPartitions
                  failedPartitions
                }
              }
            }
          }
        }
      }
    }
  }
"""

SENSOR_TICKS = """
query SensorTicks($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { ticks(limit: 50) { status timestamp endTimestamp runIds } } }
  }
}
"""


def sensor_tick_times(gql: GraphQL, sensor_name: str) -> list[dict[str, Any]]:
    """Finished ticks of a sensor (oldest first): duration and runs launched."""
    selector = {
        "repositoryLocationName": "ego_assets",
        "repositoryName": "__repository__",
        "sensorName": sensor_name,
    }
    data, _ = gql(SENSOR_TICKS, {"selector": selector})
    state = data["sensorOrError"].get("sensorState") or {}
    ticks = [t for t in state.get("ticks", []) if t["endTimestamp"]]
    return [
        {
            "status": t["status"],
            "duration_s": round(t["endTimestamp"] - t["timestamp"], 2),
            "runs": len(t["runIds"]),
        }
        for t in reversed(ticks)
    ]


class Browser:
    """Headless Chromium (selenium) recording the GraphQL documents the UI posts."""

    def __init__(self, profile: Path) -> None:
        from ego_assets_tests.browser import headless_chromium

        self.driver = headless_chromium(
            profile,
            (1600, 1000),
            "--disable-gpu",
            capabilities={"goog:loggingPrefs": {"performance": "ALL"}},
            page_load_timeout_s=900,
        )
        self._posts: list[dict[str, Any]] = []
        self._request_ids: dict[str, str | None] = {}
        self._finished: set[str] = set()

    @classmethod
    def available(cls) -> bool:
        from ego_assets_tests.browser import chromium_available

        return chromium_available()

    def _drain(self) -> None:
        """Move new performance-log entries into the recorded posts and finished ids."""
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            method, params = message.get("method"), message.get("params", {})
            if method in ("Network.loadingFinished", "Network.loadingFailed"):
                self._finished.add(params.get("requestId"))
            if method != "Network.requestWillBeSent":
                continue
            request = params["request"]
            if request.get("method") == "POST" and "/graphql" in request.get("url", ""):
                with contextlib.suppress(KeyError, ValueError):
                    post = json.loads(request["postData"])
                    self._posts.append(post)
                    self._request_ids[params["requestId"]] = post.get("operationName")

    def graphql_posts(self) -> list[dict[str, Any]]:
        """GraphQL bodies posted since the last call (operationName, query, variables)."""
        self._drain()
        posts, self._posts = self._posts, []
        return posts

    def wait_response(self, operation: str, timeout_s: float = 900) -> None:
        """Until a response to a posted ``operation`` has been fully received."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._drain()
            if any(
                name == operation and rid in self._finished
                for rid, name in self._request_ids.items()
            ):
                return
            time.sleep(0.1)
        raise TimeoutError(f"no {operation} response within {timeout_s} s")

    def wait_text(self, *needles: str, timeout_s: float = 900) -> float:
        """Seconds until the page's text holds every needle."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        start = time.perf_counter()
        WebDriverWait(self.driver, timeout_s, poll_frequency=0.1).until(
            lambda d: all(n in d.find_element(By.TAG_NAME, "body").text for n in needles),
            message=f"page never showed {needles}",
        )
        return time.perf_counter() - start

    def load(self, url: str, *needles: str, operation: str = "PartitionHealthQuery") -> float:
        """Seconds until the page shows ``needles`` and ``operation``'s data has arrived."""
        self._request_ids.clear()
        self._finished.clear()
        start = time.perf_counter()
        self.driver.get(url)
        self.wait_text(*needles)
        self.wait_response(operation)
        return time.perf_counter() - start

    def open_materialize_dialog(self) -> float:
        """Click the asset page's Materialize button; seconds until the dialog lists partitions."""
        from selenium.webdriver.common.by import By

        for skip in self.driver.find_elements(By.XPATH, "//button[normalize-space()='Skip']"):
            skip.click()
        buttons = [
            b
            for b in self.driver.find_elements(By.TAG_NAME, "button")
            if b.text.strip().startswith("Materialize") and "all" not in b.text
        ]
        if not buttons:
            raise RuntimeError("no Materialize button on the asset page")
        start = time.perf_counter()
        self._request_ids.clear()
        self._finished.clear()
        try:
            buttons[0].click()
        except Exception:  # covered by a toast or tooltip: click it the way a script does
            self.driver.execute_script("arguments[0].click();", buttons[0])
        self.wait_text("Launch")
        self._drain()  # the dialog re-asks for partition health unless the page's is cached
        if "PartitionHealthQuery" in self._request_ids.values():
            self.wait_response("PartitionHealthQuery")
        return time.perf_counter() - start

    def quit(self) -> None:
        self.driver.quit()


def ui_figures(
    url: str,
    gql: GraphQL,
    profile: Path,
    size: int,
    repeat: int,
    browser: bool,
    asset_path: Sequence[str] = ("raw_capture",),
) -> dict[str, Any]:
    """Asset page + materialize dialog of the per-capture asset ``asset_path`` (one capture
    set's): the browser's own load, then the UI's GraphQL documents replayed (best of
    ``repeat``)."""
    out: dict[str, Any] = {"ui_asset": "/".join(asset_path)}
    documents: dict[str, dict[str, Any]] = {}
    if browser and Browser.available():
        chrome = Browser(profile)
        try:
            page = f"{url}/assets/{'/'.join(asset_path)}?view=partitions"
            out["ui_asset_page_browser_cold_s"] = round(chrome.load(page, "Partitions"), 2)
            for post in chrome.graphql_posts():
                documents.setdefault(post.get("operationName") or "?", post)
            out["ui_asset_page_browser_s"] = round(chrome.load(page, "Partitions"), 2)
            chrome.graphql_posts()
            try:
                out["ui_materialize_dialog_browser_s"] = round(chrome.open_materialize_dialog(), 2)
            except Exception as exc:  # a UI change must not lose the run
                out["ui_materialize_dialog_browser_error"] = f"{type(exc).__name__}: {exc}"[:300]
            for post in chrome.graphql_posts():
                name = post.get("operationName") or "?"
                documents.setdefault(f"dialog:{name}", post)
        finally:
            chrome.quit()
    documents.setdefault(
        "PartitionHealthQuery",
        {"query": PARTITION_HEALTH_QUERY, "variables": {"assetKey": {"path": list(asset_path)}}},
    )
    out["ui_graphql_operations"] = sorted(documents)
    for wanted, label in (
        ("PartitionHealthQuery", "ui_partition_status_s"),
        ("AssetViewDefinitionQuery", "ui_asset_definition_s"),
        ("dialog:LaunchAssetLoaderQuery", "ui_materialize_dialog_loader_s"),
    ):
        post = documents.get(wanted) or documents.get(wanted.removeprefix("dialog:"))
        if post is None:
            continue

        def call(p: dict[str, Any] = post) -> float:
            return gql(p["query"], p.get("variables"))[1]

        best, times = best_of(call, repeat)
        out[label] = round(best, 3)
        out[f"{label}_runs"] = [round(t, 3) for t in times]
    return out
