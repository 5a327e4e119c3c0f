"""`make demo`: the whole platform on local files and a local SQLite Dagster instance.

1. Seeds ``<data>/landing`` with a short synthetic capture of every kind and the real
   Project Aria MPS sample (only those not there yet), and one waiver for the Aria
   sample (its known 53 s gap) to show the waiver mechanism; the sample stays blocked
   by its other failing metrics.
2. Evaluates the landing sensor against the instance, registers the partitions it asks
   for and runs ``capture_job`` for each capture whose run key has no run yet (a packed
   request is run capture by capture here: `unpacked`), tagged
   exactly as the sensor daemon tags its runs (``dagster/run_key``,
   ``dagster/sensor_name``). The daemon skips a run key that already has a run of its
   sensor, so ``make dev`` afterwards re-runs none of the demo's captures: one path.
   First, runs of the demo's sensor whose process died (a killed demo) are marked failed
   and their captures run again (`ego_assets.defs.runs`).
3. Refreshes the aggregates (``aggregates_job``: quality catalog, packed datasets, the
   dataset catalog's dbt models) when anything ran or the catalog cannot answer queries
   (never built, unreadable, models missing).
4. Prints (`ego_assets.demo_report`) one captures table whose status is the gate's
   word, every problem whole (blocking reasons, a failed run's error, landing-zone
   entries passed over and why), the exports and merged datasets with absolute paths,
   the dataset catalog's composition and export coverage (`ego-assets catalog`), and a
   closing block: where everything is, what to open, what the blocked captures need.
   Dagster's and dbt's own output goes to ``<data>/logs/demo.log`` meanwhile.
5. Builds the sample dataset release ``demo`` (`build_sample_release`: every episode the
   gate allows, all three formats, spec ``<data>/releases/demo.toml`` written when
   missing) below ``<data>/releases/demo/``, and ``demo-eef``, the same episodes with the
   declared action space ``eef_pose_gripper`` in the head frame; records each version in
   the instance as a materialization of its ``release`` partition (so ``make dev`` shows
   them Materialized, with version, episodes and bytes) and prints both manifest
   summaries.

A second run finds every run key done and only prints the tables.
"""

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import dagster as dg
from tqdm import tqdm

from ego_assets.capture.manifest import write_marker
from ego_assets.catalog.cli import run_catalog
from ego_assets.catalog.warehouse import published_problem
from ego_assets.dagster_compat import instance_at
from ego_assets.definitions import build_defs
from ego_assets.defs.episodes import is_blocked_failure, planned_per_partition
from ego_assets.defs.partitions import (
    CAPTURE_JOB,
    PACKED_TAG,
    all_sets,
    capture_run_request,
    run_captures,
)
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.runs import (
    RUN_KEY_TAG,
    SENSOR_NAME_TAG,
    ensure_local_instance,
    heal_dead_runs,
    rerun_after_death,
)
from ego_assets.demo_report import (
    LOG_FILE,
    capture_status,
    output_to_log,
    print_captures,
    print_closing,
    print_exports,
    print_release,
    skipped_status,
    wrap,
)
from ego_assets.exports.ceres import dataset_location as ceres_dataset_location
from ego_assets.exports.egosmith import egosmith_rows
from ego_assets.fixtures import real_fixture
from ego_assets.landing import skipped_entries
from ego_assets.quality.waivers import add_waiver, read_waivers
from ego_assets.storage import Storage
from ego_assets.synth import check_options, synthesize

if TYPE_CHECKING:
    from ego_assets.releases.build import BuildResult

log = logging.getLogger(__name__)

# (key, kind, seed, fault options): one clean capture per kind, and one whose faults
# the quality gate must catch (its exports are blocked).
DEMO_CAPTURES: tuple[tuple[str, str, int, tuple[str, ...]], ...] = (
    ("demo-holos-visionpro", "holos-visionpro", 0, ()),
    ("demo-holos-iphone", "holos-iphone", 1, ()),
    ("demo-webxr", "webxr", 2, ()),
    ("demo-mano-video", "mano-video", 3, ()),
    ("demo-webxr-faulty", "webxr", 4, ("hand_never_seen", "backwards_timestamps")),
)
ARIA_SAMPLE_KEY = "aria-mps-sample"
# The waiver the demo grants: metric, reason, who.
ARIA_WAIVER = (
    "longest_gap_s",
    "the sample folder joins two recordings; the 53 s gap between them is known, not a dropout",
    "ego-assets demo",
)
# The sample release: every episode the gate allows, in all three formats.
DEMO_RELEASE = "demo"
DEMO_RELEASE_SPEC = """\
[release]
licence = "CC-BY-4.0"
description = "Every demo capture the export gate allows (make demo)."
formats = ["webdataset", "robomimic", "lerobot"]

[split]
by = "episode"
seed = 1
fractions = { train = 0.5, valid = 0.5 }
"""
# The second sample release: the same episodes with a robot-ready action space.
DEMO_EEF_RELEASE = "demo-eef"
DEMO_EEF_RELEASE_SPEC = (
    DEMO_RELEASE_SPEC.replace(
        "Every demo capture the export gate allows (make demo).",
        "Every demo capture the export gate allows, as wrist pose + gripper in the head "
        "frame (make demo).",
    )
    + """
[actions]
space = "eef_pose_gripper"
frame = "head"
"""
)
# (name, spec) of every sample release, built in this order
SAMPLE_RELEASES = ((DEMO_RELEASE, DEMO_RELEASE_SPEC), (DEMO_EEF_RELEASE, DEMO_EEF_RELEASE_SPEC))
DEMO_BUILDER = "ego-assets-demo"  # the ``ego/built_by`` tag of the releases it records
# Keep the terminal for the progress bar and the tables (a blocked export is a table row,
# not a traceback); the UI has the full event log.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def aria_fixture_dir() -> Path:
    """The real Aria MPS sample shipped in the package (ego_assets/recordings)."""
    return real_fixture("aria_mps_hand_tracking")


def seed_landing(landing: Path, seconds: float) -> list[str]:
    """Write the demo captures that are not in ``landing`` yet; return their keys."""
    written = []
    for key, kind, seed, faults in DEMO_CAPTURES:
        if not (landing / key).exists():
            synthesize(
                kind, landing / key, seconds=seconds, seed=seed, faults=faults, capture_id=key
            )
            written.append(key)
    aria = landing / ARIA_SAMPLE_KEY
    if not aria.exists() and aria_fixture_dir().is_dir():
        staging = landing / f".{ARIA_SAMPLE_KEY}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(aria_fixture_dir(), staging)
        write_marker(staging, "aria_mps")
        staging.rename(aria)
        written.append(ARIA_SAMPLE_KEY)
    return written


def open_instance(data_dir: Path) -> dg.DagsterInstance:
    """The persistent local instance: $DAGSTER_HOME, else ``<data>/.dagster_home`` (with
    the local ``dagster.yaml`` when it has none: `ensure_local_instance`)."""
    home = Path(os.environ.get("DAGSTER_HOME") or data_dir / ".dagster_home")
    return instance_at(str(ensure_local_instance(home)))


def seed_waiver(storage: Storage) -> bool:
    """Grant `ARIA_WAIVER` on the Aria sample unless a waiver for it exists already."""
    metric, reason, by = ARIA_WAIVER
    if any(w.capture_key == ARIA_SAMPLE_KEY for w in read_waivers(storage)):
        return False
    add_waiver(storage, ARIA_SAMPLE_KEY, metric, reason, by)
    return True


def sensor_tags(request: dg.RunRequest, sensor_name: str) -> dict[str, str]:
    """The tags the sensor daemon gives the run of ``request``."""
    tags = {str(k): str(v) for k, v in (request.tags or {}).items()}
    if request.run_key:
        tags[RUN_KEY_TAG] = request.run_key
    tags[SENSOR_NAME_TAG] = sensor_name
    return tags


def pending_requests(
    instance: dg.DagsterInstance, requests: Sequence[dg.RunRequest], sensor_name: str
) -> list[dg.RunRequest]:
    """``requests`` without those whose run key already has a run of ``sensor_name``:
    the daemon's own rule, so the demo and the daemon never launch the same capture twice;
    except a run key whose newest run died (`rerun_after_death`)."""
    out = []
    for request in requests:
        if request.run_key:
            tags = {RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: sensor_name}
            if not rerun_after_death(instance.get_runs(dg.RunsFilter(tags=tags), limit=1)):
                continue
        out.append(request)
    return out


def unpacked(request: dg.RunRequest) -> list[dg.RunRequest]:
    """A packed run request as one single-capture request per capture (run key = capture
    key). The demo runs captures in its own process, where a run costs well under a
    second, so packing saves little there, and single runs keep its per-capture run keys:
    a second demo, or ``make dev``'s daemon afterwards, skips every capture already run."""
    if PACKED_TAG not in (request.tags or {}):
        return [request]
    return [capture_run_request(key) for key in run_captures(request.tags)]


@dataclass(frozen=True, slots=True)
class Tick:
    """What one `landing_tick` did: the requests it ran, the first error of each failed
    capture, the run keys whose earlier run had died (marked failed, run again), and the
    captures the sensor's tick took through every asset itself (no run)."""

    requests: list[dg.RunRequest]
    failures: dict[str, str]
    died: list[str]
    inline: list[str]


def landing_tick(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    storage: StorageResource,
    progress: TextIO | None = None,
) -> Tick:
    """One tick of the landing sensor, run here: runs of it whose process died are marked
    failed first (`heal_dead_runs`); the events of a capture the tick took itself are
    recorded as the daemon records them; then each pending request's ``capture_job`` runs
    in this process (a progress bar on ``progress``, none when None)."""
    landing_sensor = defs.get_sensor_def("landing_sensor")
    died = heal_dead_runs(instance, {SENSOR_NAME_TAG: landing_sensor.name}, time.time())
    context = dg.build_sensor_context(
        instance=instance, resources={"storage": storage}, definitions=defs
    )
    result = landing_sensor(context)
    requests: list[dg.RunRequest] = []
    inline: set[str] = set()
    if isinstance(result, dg.SensorResult):
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
            inline.add(str(event.partition))
        for add in result.dynamic_partitions_requests or []:
            name = str(add.partitions_def_name)
            instance.add_dynamic_partitions(name, list(add.partition_keys or []))
        singles = [one for request in result.run_requests or [] for one in unpacked(request)]
        requests = pending_requests(instance, singles, landing_sensor.name)
    failures: dict[str, str] = {}
    bar = tqdm(
        requests,
        desc="materializing captures",
        unit="capture",
        disable=not requests or progress is None,
        file=progress,
    )
    for request in bar:
        key = str(request.partition_key)
        job = defs.resolve_job_def(request.job_name or CAPTURE_JOB)  # the capture's set's
        with planned_per_partition():  # a blocked capture's export partitions read Failed
            run = job.execute_in_process(
                run_config=QUIET_RUN_CONFIG,
                partition_key=key,
                instance=instance,
                tags=sensor_tags(request, landing_sensor.name),
                raise_on_error=False,
            )
        error = _run_error(run)
        if error:
            failures[key] = error
    return Tick(requests, failures, died, sorted(inline))


def run_demo(data_dir: Path, seconds: float = 8.0, out: TextIO = sys.stdout) -> int:
    """Run the demo; return 0 when every capture is materialized, 1 otherwise.

    Dagster's and dbt's own output (banners, warnings, dbt's log lines) goes to
    ``<data>/logs/demo.log``, not to the terminal; the demo says so.
    """
    for _, kind, _, faults in DEMO_CAPTURES:  # a bad length refused before any write
        check_options(kind, seconds, faults)
    data_dir = Path(data_dir).resolve()
    landing = data_dir / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    store = Storage(data_dir)
    swept = store.sweep_leftovers()  # staging folders and temporaries of killed runs
    if swept:
        print(f"removed {len(swept)} leftovers of killed writers", file=out)
    seeded = seed_landing(landing, seconds)
    if seeded:
        print(f"seeded landing zone with {len(seeded)} captures: {', '.join(seeded)}", file=out)
    if ARIA_SAMPLE_KEY in seeded and seed_waiver(store):
        print(f"waived {ARIA_WAIVER[0]} on {ARIA_SAMPLE_KEY} ({ARIA_WAIVER[1]})", file=out)
    log_path = data_dir / LOG_FILE
    with output_to_log(log_path) as terminal:
        storage = StorageResource(root=str(data_dir))
        defs = build_defs(storage)
        with open_instance(data_dir) as instance:
            dagster_home = Path(instance.root_directory)
            tick = landing_tick(defs, instance, storage, progress=terminal)
            requests, failures = tick.requests, tick.failures
            keys = [
                k for cs in all_sets() for k in instance.get_dynamic_partitions(cs.partitions_name)
            ]
            catalog_error = ""
            # nothing built yet, unreadable or half built: build it
            if requests or tick.inline or published_problem(store):
                print("building the dataset catalog (dbt)...", file=terminal, flush=True)
                catalog_error = refresh_aggregates(defs, instance)
            built = {
                name: build_sample_release(data_dir, instance, name, text)
                for name, text in (SAMPLE_RELEASES if not catalog_error else ())
            }
    print(f"Dagster's and dbt's own output: {log_path}", file=out)
    if tick.died:
        print(f"runs whose process died, run again: {', '.join(sorted(tick.died))}", file=out)
    if tick.inline:
        taken = ", ".join(tick.inline)
        print(f"taken through every asset by the sensor's tick (no run): {taken}", file=out)
    elif not requests:
        print("landing zone: nothing new; outputs unchanged", file=out)
    statuses = [capture_status(store, key, failures.get(key, "")) for key in sorted(keys)]
    statuses += [skipped_status(name, why) for name, why in skipped_entries(store)]
    print_captures(statuses, data_dir, out)
    print_exports(store, data_dir, keys, out)
    print_datasets(store, keys, out)
    print(file=out)
    if catalog_error:
        print(wrap(catalog_error, "dataset catalog: FAILED ", "  "), file=out)
    shown = run_catalog(data_dir, out=out)
    release_errors = []
    for name, (release, error) in built.items():
        if release is not None:
            print_release(release.manifest, release.path, release.written, out)
        elif error:
            print(wrap(error, f"sample release {name}: FAILED ", "  "), file=out)
            release_errors.append(error)
    print_closing(data_dir, dagster_home, statuses, out)
    return 1 if failures or catalog_error or shown != 0 or release_errors else 0


def build_sample_release(
    data_dir: Path,
    instance: dg.DagsterInstance,
    name: str = DEMO_RELEASE,
    text: str = DEMO_RELEASE_SPEC,
) -> tuple["BuildResult | None", str]:
    """Build the sample release ``name`` (its spec ``text`` written when missing) and
    record the version in ``instance`` as a materialization of its ``release`` partition
    (`record_release`: Materialized in the UI with version, episodes and bytes, as after
    a run of the asset): (result, "") or (None, the one-line error)."""
    from ego_assets.defs.releases import record_release  # h5py, PyAV: at use only
    from ego_assets.releases.build import build_release
    from ego_assets.releases.spec import spec_path

    spec = spec_path(data_dir, name)
    if not spec.exists():
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(text, encoding="utf-8")
    try:
        result = build_release(data_dir, name)
    except ValueError as exc:
        return None, str(exc)
    record_release(instance, name, result, DEMO_BUILDER)
    return result, ""


def refresh_aggregates(defs: dg.Definitions, instance: dg.DagsterInstance) -> str:
    """Run the aggregates job (quality catalog, packed datasets, catalog staging, dbt
    models and their tests as checks); its first step error, "" when it succeeded."""
    run = defs.resolve_job_def("aggregates_job").execute_in_process(
        run_config=QUIET_RUN_CONFIG, instance=instance, raise_on_error=False
    )
    return _run_error(run) or ("" if run.success else "aggregates_job failed")


def _run_error(run: dg.ExecuteInProcessResult) -> str:
    """First step failure of a run; "" when it succeeded or only its exports of a blocked
    capture failed (`is_blocked_failure`: the gate's verdict, shown as ``blocked``)."""
    for event in run.all_events:
        data = event.step_failure_data if event.is_step_failure else None
        if data is not None and not is_blocked_failure(data):
            error = data.error
            if error is not None:
                return error.message.strip()
    return ""


def print_datasets(storage: Storage, keys: Sequence[str], out: TextIO) -> None:
    """One line per merged dataset: what it holds and where (absolute paths)."""
    print("\ndatasets", file=out)
    for name, text in egosmith_rows(storage, keys):
        if name == "packed dataset":
            print(f"  EgoSmith WebDataset: {text}", file=out)
    info = ceres_dataset_location(storage) / "meta/info.json"
    if info.exists():
        meta = json.loads(info.read_text())
        print(
            f"  CERES LeRobot v3: {meta['total_episodes']} episodes, "
            f"{meta['total_frames']} frames, {meta['total_tasks']} tasks: {info.parent.parent}",
            file=out,
        )
