"""The per-capture steps as plain functions over a `Storage`: what the assets and CLI call.

* `ingest_raw`: landing -> immutable raw copy + manifest (idempotent: an existing
  raw copy is kept as it is). The capture's files land below ``raw/<key>/capture/``,
  the platform's manifest beside them (`ego_assets.capture.manifest`).
* `normalize`: raw copy -> canonical trajectory, skipped when the stored trajectory
  was made from the same raw content by the same normalizer version and is stored in
  the current store layout (`ego_assets.trajectory.store.STORE_LAYOUT`; an older one is
  written again, with the same data version).
* `assess_quality`: trajectory -> quality report, timeline PNG and the export gate
  (export policy + waivers, Great Expectations results), skipped likewise when nothing
  changed (trajectory, quality code, policy, thresholds and the episode's waivers). The
  episode's Rerun recording is built when someone opens it (``ego-assets view``,
  `ego_assets.viewer.episode`), not here: most recordings are never opened.
* `rejudge_gate`: re-decide a stored gate after its waivers changed (``ego-assets waive``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ego_assets.capture.files import CaptureFiles
from ego_assets.capture.manifest import (
    MANIFEST_FILE,
    MANIFEST_VERSION,
    RawManifest,
    copy_capture,
    raw_capture_dir,
)
from ego_assets.quality.gate import GATE_FILE, Gate
from ego_assets.quality.policy import default_policy
from ego_assets.quality.report import REPORT_VERSION
from ego_assets.quality.thresholds import default_thresholds
from ego_assets.quality.waivers import read_waivers, waivers_digest, waivers_for
from ego_assets.storage import QUARANTINE_DIR, Storage, is_local, write_file
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.store import (
    CAPTURE_JSON,
    STORE_LAYOUT,
    read_trajectory,
    remember_written,
    write_trajectory_files,
)

# 2: media_frames declare camera_axes; 3: the raw copy's capture files below capture/
NORMALIZER_VERSION = "normalize-3"
# The trajectory asset's code version: what it makes (the normalizer) and how it stores it.
# The data version (`trajectory_version`, the releases' trajectory digest) names only the
# normalizer and the raw content, so a new store layout rewrites the stored bytes but
# leaves the trajectory, and everything downstream of it, current.
TRAJECTORY_CODE_VERSION = f"{NORMALIZER_VERSION}+store-{STORE_LAYOUT}"
LINEAGE_FILE = "lineage.json"
TIMELINE_FILE = "timeline.png"
# The last viewer version whose recording the quality step wrote (``episode.rrd``, until
# issue #34 made it lazy). It stays in the quality code version so that stored gates, and
# the data versions every export's lineage names, stay current: the step's report,
# timeline and gate are what they were. A new viewer version changes only recordings
# built from now on.
QUALITY_RECORDING_VERSION = "viewer-2"


@dataclass(frozen=True, slots=True)
class StepResult:
    """What a step did: its data version, whether it reused a stored result, figures."""

    key: str
    data_version: str
    reused: bool
    figures: dict[str, float | int | str]


def ingest_raw(storage: Storage, key: str) -> StepResult:
    """Check and copy ``landing/<key>`` to ``raw/<key>`` with a SHA-256 manifest (once).

    A raw copy in an older layout (manifest version < 2) is made again from the landing
    zone.
    """
    target = storage.stage_path("raw", key)
    manifest_path = target / MANIFEST_FILE
    if manifest_path.exists():
        manifest = RawManifest.from_json(manifest_path.read_text())
        if manifest.version == MANIFEST_VERSION:
            return StepResult(key, manifest.content_sha256, True, _raw_figures(manifest))
    if (storage.root / QUARANTINE_DIR / key).exists():
        raise ValueError(
            f"capture {key}: quarantined ({QUARANTINE_DIR}/{key}/: consent withdrawn, "
            "consent/withdrawals/); not ingested again"
        )
    with (
        storage.read_dir(storage.landing_path(key)) as landing,
        storage.write_dir("raw", key, index_file=MANIFEST_FILE) as stage,
    ):
        manifest = copy_capture(CaptureFiles(key, landing), stage)
    return StepResult(key, manifest.content_sha256, False, _raw_figures(manifest))


def trajectory_version(raw_content_sha256: str) -> str:
    """Data version of the trajectory normalized from raw content ``raw_content_sha256``."""
    return f"{NORMALIZER_VERSION}:{raw_content_sha256}"


def _raw_figures(manifest: RawManifest) -> dict[str, float | int | str]:
    return {"kind": manifest.kind, "files": len(manifest.files), "bytes": manifest.total_bytes}


def normalize(storage: Storage, key: str) -> StepResult:
    """Read ``raw/<key>`` into the canonical model and store it in ``trajectory/<key>``."""
    raw = storage.stage_path("raw", key)
    manifest = RawManifest.from_json((raw / MANIFEST_FILE).read_text())
    version = trajectory_version(manifest.content_sha256)
    lineage_path = storage.stage_path("trajectory", key) / LINEAGE_FILE
    stored = json.loads(lineage_path.read_text()) if lineage_path.exists() else {}
    if stored.get("data_version") == version and stored.get("store_layout", 1) == STORE_LAYOUT:
        header = json.loads((storage.stage_path("trajectory", key) / CAPTURE_JSON).read_text())
        return StepResult(key, version, True, _trajectory_figures(header))
    from ego_assets.capture import read_capture  # the readers: only when one reads

    with storage.read_dir(raw_capture_dir(raw)) as capture_dir:
        trajectory = read_capture(key, capture_dir, manifest.content_sha256)
    with storage.write_dir("trajectory", key, index_file=LINEAGE_FILE) as stage:
        table = write_trajectory_files(trajectory, stage)
        _write_action_sources(trajectory, stage)
        lineage = {
            "data_version": version,
            "raw_content_sha256": manifest.content_sha256,
            "store_layout": STORE_LAYOUT,
        }
        (stage / LINEAGE_FILE).write_text(json.dumps(lineage, sort_keys=True) + "\n")
        header = json.loads((stage / CAPTURE_JSON).read_text())
    published = storage.stage_path("trajectory", key)
    if is_local(published):  # the next step in this process (quality) reads it from memory
        remember_written(Path(published.path), table)
    return StepResult(key, version, False, _trajectory_figures(header))


def _write_action_sources(trajectory: Trajectory, stage: Path) -> None:
    """``action_sources.arrow`` beside the streams: what a release's declared action space
    reads of them, once (`ego_assets.actions.stored`). A trajectory whose hands the
    derivation cannot read gets none: a release reads its streams and says why."""
    from ego_assets.actions.sources import action_sources
    from ego_assets.actions.stored import write_sources

    try:
        sources = action_sources(trajectory)
    except (KeyError, ValueError):
        return
    write_sources(sources, stage)


def _trajectory_figures(header: dict) -> dict[str, float | int | str]:
    streams = header["streams"]
    return {
        "source_kind": header["info"]["source_kind"],
        "duration_s": round(float(header["duration_s"]), 3),
        "streams": len(streams),
        "samples": int(sum(s["rows"] for s in streams)),
    }


def quality_version() -> str:
    """Code version of the quality step: report schema + thresholds + export policy versions.

    A new policy version therefore makes every stored gate stale in Dagster (code version
    changed) and in the pipeline (data version), so the next run decides again.
    """
    return (
        f"{REPORT_VERSION}+thresholds-{default_thresholds().version}"
        f"+policy-{default_policy().version}+{QUALITY_RECORDING_VERSION}"
    )


def _quality_data_version(storage: Storage, key: str) -> tuple[str, tuple]:
    """(data version of ``quality/<key>``, the episode's waivers)."""
    lineage = json.loads((storage.stage_path("trajectory", key) / LINEAGE_FILE).read_text())
    waivers = waivers_for(read_waivers(storage), key)
    return _gate_version(quality_version(), lineage["data_version"], waivers), waivers


def _gate_version(quality_code: str, trajectory: str, waivers: tuple) -> str:
    return f"{quality_code}:{trajectory}:waivers-{waivers_digest(waivers)}"


def expected_gate_version(
    storage: Storage, key: str, quality_code: str | None = None
) -> str | None:
    """The gate data version of ``key`` once trajectory and gate follow the raw copy now.

    Built from the raw manifest's content hash, the normalizer and quality code versions
    and the episode's waivers, without reading the trajectory or the gate: an export
    whose receipt names another ``input_data_version`` is stale (e.g. the capture was
    copied again with an edited transcript). None when there is no raw copy.
    ``quality_code``: `quality_version` computed once by a long-lived caller.
    """
    path = storage.stage_path("raw", key) / MANIFEST_FILE
    if not path.exists():
        return None
    manifest = RawManifest.from_json(path.read_text())
    waivers = waivers_for(read_waivers(storage), key)
    version = trajectory_version(manifest.content_sha256)
    return _gate_version(quality_code or quality_version(), version, waivers)


def assess_quality(storage: Storage, key: str) -> StepResult:
    """Report, timeline and gate of ``trajectory/<key>`` into ``quality/<key>``."""
    source = storage.stage_path("trajectory", key)
    version, waivers = _quality_data_version(storage, key)
    target = storage.stage_path("quality", key)
    if (target / GATE_FILE).exists():
        gate = Gate.from_json((target / GATE_FILE).read_text())
        if gate.data_version == version:
            return StepResult(key, version, True, _gate_figures(gate))
    # pandas and GX take seconds to import: loaded by the first capture judged
    from ego_assets.quality.expectations import run_expectations
    from ego_assets.quality.report import compute_report, write_report
    from ego_assets.quality.timeline import timeline_png

    with storage.read_dir(source) as folder:
        trajectory = read_trajectory(folder)
    report = compute_report(trajectory)
    gate = Gate.build(report, run_expectations(report), version, default_policy(), waivers)
    with storage.write_dir("quality", key, index_file=GATE_FILE) as stage:
        write_report(report, stage)
        (stage / TIMELINE_FILE).write_bytes(timeline_png(trajectory, report))
        (stage / GATE_FILE).write_text(gate.to_json())
    return StepResult(key, version, False, _gate_figures(gate))


def _gate_figures(gate: Gate) -> dict[str, float | int | str]:
    """One key per fact: the verdict (``gate``), the report's worst status (``quality``);
    the policy version is a label (text), not a figure to plot."""
    return {
        "gate": gate.verdict,
        "quality": gate.status,
        "worst_metric": gate.worst_metric,
        "policy_version": str(gate.policy_version),
        "waived_metrics": len(gate.waived),
    }


def seconds_setting(environ: Mapping[str, str], name: str, default: float) -> float:
    """A duration in seconds, 0 or more, from the environment variable ``name``
    (``default`` when unset or blank). Raises ValueError naming the variable."""
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={text!r}: expected seconds, 0 or more")
    return value


def stored_duration_s(storage: Storage, key: str) -> float | None:
    """The stored trajectory's duration of ``key`` in seconds (one object read), or None
    before its trajectory step ran."""
    path = storage.stage_path("trajectory", key) / CAPTURE_JSON
    if not path.exists():
        return None
    return float(json.loads(path.read_text())["duration_s"])


def stored_gate(storage: Storage, key: str) -> Gate | None:
    """The stored gate of ``key`` (one object read), or None before its quality step ran."""
    path = storage.stage_path("quality", key) / GATE_FILE
    if not path.exists():
        return None
    return Gate.from_json(path.read_text())


def rejudge_gate(storage: Storage, key: str) -> Gate | None:
    """Decide the stored gate of ``key`` again with its current waivers.

    Only the waivers changed, so the findings (report + policy) are reused and only
    ``gate.json`` is rewritten, with the new data version: the next quality run finds it
    current. None when ``key`` has no gate yet (its first quality run applies the waivers).
    """
    gate = stored_gate(storage, key)
    if gate is None:
        return None
    version, waivers = _quality_data_version(storage, key)
    new = gate.with_waivers(waivers, version)
    write_file(storage.stage_path("quality", key) / GATE_FILE, new.to_json().encode("utf-8"))
    return new
