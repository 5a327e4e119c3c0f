"""Build a Rerun recording (``.rrd``) of one episode from its canonical `Trajectory`.

Timelines: ``time`` (seconds since capture start, shared by every stream, each stream
logged on its own sample times, nothing resampled) and, for each camera,
``frame_<role>`` (the frame index in its video file). Units are the trajectory's
(metres, the capture's world frame).

The parts of the recording come from four modules: `rerun_log` (the logging core),
`tracks` (poses, hands, objects, signals), `video` (camera frustums, videos, camera
poses, 2D landmarks) and `overlays` (gaps, faults, annotations, the quality verdict).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import rerun as rr
import rerun.blueprint as rrb

from ego_assets.fileio import atomic_output
from ego_assets.quality.gate import Gate
from ego_assets.quality.report import QualityReport, compute_report
from ego_assets.trajectory.model import Trajectory
from ego_assets.viewer import APPLICATION_ID, overlays, tracks, video
from ego_assets.viewer.rerun_log import PLOTS, TIME, RecordingLog, RecordingSummary


def blueprint(videos: Sequence[str], plots: dict[str, list[str]]) -> rrb.Blueprint:
    """Default layout: the 3D world over one time-series plot per unit on the left; the
    camera videos over the events, quality and annotations on the right."""
    charts = [
        rrb.TimeSeriesView(origin="signals", contents=plots[title], name=title)
        for title in PLOTS
        if plots.get(title)
    ]
    left: list[rrb.View | rrb.Container] = [rrb.Spatial3DView(origin="world", name="world")]
    if charts:
        left.append(rrb.Grid(*charts, name="signals"))
    right: list[rrb.View | rrb.Container] = [
        rrb.Spatial2DView(origin=path, name=path.rsplit("/", 1)[-1]) for path in videos
    ]
    right.append(
        rrb.Tabs(
            rrb.TextLogView(origin="events", name="events"),
            rrb.TextDocumentView(origin="quality", name="quality"),
            rrb.TextDocumentView(origin="annotations", name="annotations"),
        )
    )
    return rrb.Blueprint(
        rrb.Horizontal(
            rrb.Vertical(*left, row_shares=[3, 2][: len(left)]),
            rrb.Vertical(*right),
            column_shares=[3, 2],
        ),
        rrb.TimePanel(timeline=TIME),
        collapse_panels=False,
    )


def build_recording(
    trajectory: Trajectory,
    out: Path,
    *,
    media_dir: Path | None = None,
    report: QualityReport | None = None,
    gate: Gate | None = None,
) -> RecordingSummary:
    """Write the Rerun recording of ``trajectory`` to ``out`` (temporary file + rename).

    Args:
        trajectory: the episode.
        out: the ``.rrd`` file to write.
        media_dir: the raw capture folder that the `MediaRef` paths are relative to;
            without it the recording has no video.
        report: its quality report (computed here when not given).
        gate: its export gate, for the blocking reasons (omitted when None).
    """
    out = Path(out)
    summary = RecordingSummary(out)
    report = report if report is not None else compute_report(trajectory)
    media = Path(media_dir) if media_dir is not None else None
    rec = rr.RecordingStream(APPLICATION_ID, recording_id=trajectory.info.capture_id)
    try:
        with atomic_output(out) as tmp:
            rec.save(tmp)
            log = RecordingLog(rec, summary)
            placement = tracks.Placement(trajectory, log)
            tracks.log_world(log, trajectory)
            overlays.log_instructions(log, trajectory.annotations)
            tracks.log_poses(log, trajectory, placement)
            video.log_camera_frustums(log, trajectory)
            tracks.log_hands(log, trajectory, placement)
            tracks.log_objects(log, trajectory)
            shown = video.log_videos(log, trajectory, media)
            video.log_landmarks_2d(log, trajectory, shown)
            tracks.log_device_signals(log, trajectory)
            overlays.log_gaps_and_faults(log, trajectory, report)
            overlays.log_annotations(log, trajectory)
            overlays.log_quality(log, report, gate)
            rec.send_blueprint(blueprint([path for path, _ in shown.values()], summary.plots))
            rec.flush()
            rec.disconnect()  # the file is complete before it is renamed into place
    except BaseException:
        rec.disconnect()
        raise
    return summary
