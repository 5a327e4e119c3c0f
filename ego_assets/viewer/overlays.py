"""What the recording lays over the tracks: gaps, faults, annotations, the quality verdict.

* ``signals/gaps/<s>`` (1 inside each gap the quality report found in stream ``<s>``)
  and ``signals/segments/retry`` (1 inside each retried segment), in the 0/1 plot.
* ``events/...``: text logs of gaps, timestamp faults, segments, procedure steps,
  transcript and VLM outputs.
* ``annotations/...``: the current segment and procedure step as text documents, the
  instructions.
* ``quality/report``: the quality verdict, export gate and blocking reasons (markdown).

Times are seconds since the capture start.
"""

from __future__ import annotations

import numpy as np
import rerun as rr

from ego_assets.quality.gate import Gate
from ego_assets.quality.report import QualityReport
from ego_assets.trajectory.model import Annotations, Trajectory
from ego_assets.trajectory.streams import SampleFlag
from ego_assets.viewer.rerun_log import RecordingLog, entity

TIMESTAMP_FAULTS = (
    (SampleFlag.DUPLICATE_TIMESTAMP, "duplicate timestamp"),
    (SampleFlag.BACKWARDS_TIMESTAMP, "timestamp goes backwards"),
)


def log_instructions(log: RecordingLog, notes: Annotations) -> None:
    """``annotations/instructions``: the capture's instructions as a markdown list."""
    if notes.instructions:
        items = "\n".join(f"- {i}" for i in notes.instructions)
        text = f"## Instructions ({notes.language})\n\n{items}"
        log.static("annotations/instructions", rr.TextDocument(text, media_type="text/markdown"))


def log_gaps_and_faults(log: RecordingLog, trajectory: Trajectory, report: QualityReport) -> None:
    """Each stream's gaps (a 0/1 series and log lines) and its timestamp faults."""
    times: list[float] = []
    texts: list[str] = []
    for sq in report.streams:
        spans = [(g.start_s, g.start_s + g.length_s) for g in sq.gaps]
        log.step_series(entity("signals/gaps", sq.name), spans, f"{sq.name} gap")
        for g, (start, end) in zip(sq.gaps, spans, strict=True):
            times.append(start)
            texts.append(f"{sq.name}: gap of {g.length_s:.3f} s, {start:.3f}-{end:.3f} s")
    log.text_log("events/gaps", times, texts, ["WARN"] * len(texts))
    times, texts = [], []
    for stream in trajectory.streams:
        for flag, label in TIMESTAMP_FAULTS:
            rows = np.flatnonzero(stream.flags & np.uint8(flag))
            times += stream.time[rows].tolist()
            texts += [f"{stream.name}: {label} at row {r}" for r in rows]
    log.text_log("events/faults", times, texts, ["ERROR"] * len(texts))


def log_annotations(log: RecordingLog, trajectory: Trajectory) -> None:
    """Segments, procedure steps, transcript and VLM outputs as logs and current text."""
    notes = trajectory.annotations
    if notes.segments:
        _log_segments(log, notes, trajectory.info.start_ns)
    if notes.procedure_steps:
        steps = notes.procedure_steps
        log.text_log(
            "events/procedure_steps",
            [s.t_start for s in steps],
            [
                f"step {s.index} {s.step_id}: {s.title} ({s.t_start:.3f}-{s.t_end:.3f} s)"
                for s in steps
            ],
            ["INFO"] * len(steps),
        )
        spans = [(s.t_start, s.t_end, f"{s.step_id}: {s.title}") for s in steps]
        log.text_spans("annotations/procedure_step", spans)
    if notes.transcript:
        log.text_log(
            "events/transcript",
            [s.start_s for s in notes.transcript],
            [s.text if s.is_final else f"{s.text} (partial)" for s in notes.transcript],
            ["INFO" if s.is_final else "DEBUG" for s in notes.transcript],
        )
    if notes.vlm:
        log.text_log(
            "events/vlm",
            [v.time for v in notes.vlm],
            [f"{v.prompt} -> {v.output}" for v in notes.vlm],
            ["INFO"] * len(notes.vlm),
        )


def _log_segments(log: RecordingLog, notes: Annotations, start_ns: int) -> None:
    """Segment starts and ends (retries as warnings), the retry series, the current one."""
    times: list[float] = []
    texts: list[str] = []
    levels: list[str] = []
    spans: list[tuple[float, float, str]] = []
    retries: list[tuple[float, float]] = []
    for seg in notes.segments:
        start, end = (seg.start_ns - start_ns) / 1e9, (seg.end_ns - start_ns) / 1e9
        label = (
            f"segment {seg.segment_id}: {seg.task} cycle {seg.cycle} repetition "
            f"{seg.repetition} take {seg.take}, {seg.outcome}"
        )
        times += [start, end]
        texts += [f"{label} ({start:.3f}-{end:.3f} s)", f"end of {seg.segment_id}"]
        levels += ["WARN" if seg.outcome == "retry" else "INFO", "DEBUG"]
        spans.append(
            (start, end, f"{seg.segment_id} · {seg.task} · take {seg.take} · {seg.outcome}")
        )
        if seg.outcome == "retry":
            retries.append((start, end))
    log.text_log("events/segments", times, texts, levels)
    log.step_series("signals/segments/retry", retries, "retried segment")
    log.text_spans("annotations/segment", spans)


def log_quality(log: RecordingLog, report: QualityReport, gate: Gate | None) -> None:
    """``quality/report``: the quality document (`quality_markdown`)."""
    text = quality_markdown(report, gate)
    log.static("quality/report", rr.TextDocument(text, media_type="text/markdown"))


def quality_markdown(report: QualityReport, gate: Gate | None) -> str:
    """The quality verdict, export gate, blocking reasons and flagged metrics as markdown."""
    lines = [
        f"# Quality: {report.status.upper()}",
        "",
        f"capture `{report.capture_id}` ({report.source_kind}), report {report.report_version}, "
        f"thresholds v{report.thresholds_version}",
        "",
        f"worst metric: `{report.worst_metric or '-'}`; "
        f"{report.count('fail')} fail, {report.count('warn')} warn, {report.count('pass')} pass",
        "",
        *_gate_lines(gate),
        *_flagged_metric_lines(report),
    ]
    return "\n".join(lines) + "\n"


def _gate_lines(gate: Gate | None) -> list[str]:
    if gate is None:
        return ["## Export gate: not evaluated (no gate stored with this trajectory)", ""]
    lines = [f"## Export gate: {gate.verdict.upper()}", "", gate.summary(), ""]
    if gate.blocked_exports:
        lines += [f"Blocked exports: {', '.join(gate.blocked_exports)}", ""]
    if gate.reasons:
        lines += ["Blocking reasons:", "", *(f"- {r}" for r in gate.reasons), ""]
    for f in gate.waived:
        lines.append(f"- waived: {f.text()} by {f.waived_by} ({f.waiver_reason})")
    failed = (*gate.errors, *gate.warnings)
    if failed:
        lines += ["", "Expectations not met:", ""]
        lines += [f"- {o.severity} {o.description}: {', '.join(o.observed)}" for o in failed]
        lines.append("")
    return lines


def _flagged_metric_lines(report: QualityReport) -> list[str]:
    flagged = [m for m in report.metrics if m.status != "pass"]
    if not flagged:
        return []
    return [
        "## Metrics out of bounds",
        "",
        "| scope | metric | value | unit | warn | fail | status |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {m.scope} | {m.name} | {m.value:.4g} | {m.unit} | {m.threshold_warn:g} | "
            f"{m.threshold_fail:g} | {m.status} |"
            for m in flagged
        ),
    ]
