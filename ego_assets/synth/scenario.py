"""The scripted task of a synthetic capture: steps, segments, transcript, VLM notes.

All times are seconds since the capture start and lie inside [0, seconds].
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

STEPS = (
    ("step-pick", "Pick up the bracket"),
    ("step-place", "Place the bracket on the rail"),
    ("step-fasten", "Fasten the two screws"),
)
TASK = "assemble the bracket"
INSTRUCTIONS = ["Pick up the bracket.", "Place it on the rail.", "Fasten the two screws."]
_UTTERANCES = ("now I pick up the bracket", "and fasten the screws")


def _bounds(seconds: float, n: int) -> list[tuple[float, float]]:
    edges = [round(seconds * i / n, 6) for i in range(n + 1)]
    return list(itertools.pairwise(edges))


def procedure_steps(seconds: float, retry: bool) -> dict[str, Any]:
    """events/procedure_steps.json: three steps covering the capture.

    With ``retry`` the second step is visited twice in a row (same ``index`` and
    ``step_id``): the operator redid it.
    """
    order = [0, 1, 1, 2] if retry else [0, 1, 2]
    steps = [
        {
            "index": k,
            "step_id": STEPS[k][0],
            "title": STEPS[k][1],
            "t_start": a,
            "t_end": b,
        }
        for k, (a, b) in zip(order, _bounds(seconds, len(order)), strict=True)
    ]
    return {
        "procedure": {"id": "proc-bracket", "title": "Bracket assembly", "version": "1.2"},
        "steps": steps,
    }


def transcript(seconds: float) -> dict[str, Any]:
    """transcript.json: two utterances, tokens evenly spaced inside each."""
    segments = []
    for (a, b), text in zip(_bounds(seconds, 2), _UTTERANCES, strict=True):
        start, end = a + 0.1 * (b - a), b - 0.1 * (b - a)
        words = text.split()
        step = (end - start) / len(words)
        tokens = [
            {
                "start_s": round(start + i * step, 6),
                "end_s": round(start + (i + 0.8) * step, 6),
                "text": w,
            }
            for i, w in enumerate(words)
        ]
        segments.append(
            {
                "start_s": round(start, 6),
                "end_s": round(end, 6),
                "text": text,
                "is_final": True,
                "tokens": tokens,
            }
        )
    return {"segments": segments}


def vlm_outputs(
    seconds: float, wall: Callable[[float], str], start_mono_s: float
) -> list[dict[str, Any]]:
    """vlm/outputs.json: three notes at 20 %, 50 % and 80 % of the capture."""
    notes = ("A hand reaches for a metal bracket.", "Both hands hold the bracket.", "Screwing.")
    out = []
    for frac, note in zip((0.2, 0.5, 0.8), notes, strict=True):
        t = round(seconds * frac, 6)
        out.append(
            {
                "t_mono": round(start_mono_s + t, 6),
                "t_wall": wall(t),
                "prompt": "Describe what the hands are doing.",
                "output": note,
            }
        )
    return out


def segments(n_slots: int, retry: bool) -> dict[str, Any]:
    """segments.json: three segments covering all slots (end_slot exclusive).

    With ``retry`` the second segment is split into take 1 (``retry``) and take 2
    (``success``) of the same cycle and repetition.
    """
    plan = [(1, 1, 1, "success"), (1, 2, 1, "success"), (2, 1, 1, "completed")]
    if retry:
        plan = [plan[0], (1, 2, 1, "retry"), (1, 2, 2, "success"), plan[2]]
    edges = [round(n_slots * i / len(plan)) for i in range(len(plan) + 1)]
    out = []
    for i, (cycle, rep, take, outcome) in enumerate(plan):
        out.append(
            {
                "segment_id": f"seg-{i:03d}",
                "task": TASK,
                "cycle": cycle,
                "repetition": rep,
                "take": take,
                "outcome": outcome,
                "start_slot": edges[i],
                "end_slot": edges[i + 1],
                "annotations": {"step": STEPS[min(i, len(STEPS) - 1)][0]},
            }
        )
    return {"segments": out}


def task_specification() -> dict[str, Any]:
    """task-specification.json: the canonical, versioned task specification."""
    return {
        "schema": "ceres-task-specification",
        "version": "1.0.0",
        "task": TASK,
        "instructions": INSTRUCTIONS,
        "steps": [{"step_id": s, "title": t} for s, t in STEPS],
        "success_criteria": ["bracket fastened with two screws"],
    }
