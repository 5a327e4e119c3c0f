"""The language of a release episode, from the trajectory store, as the packings write it.

A trajectory's annotations (``capture.json``) carry the episode's language (the task
text a recorder or dataset states: a WebXR session's task, EgoDex's chosen
``llm_description``), its instructions (every description or step instruction, in
order) and its task segments (a text over a source-clock span, end exclusive; retried
attempts are dropped, as every exporter drops them). `demo_attrs` turns those into a
robomimic demo's attributes over the demo's own samples.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ego_assets.fileio import json_loads
from ego_assets.releases.derived import trajectory_folder
from ego_assets.trajectory.store import CAPTURE_JSON


@dataclass(frozen=True, slots=True)
class EpisodeLanguage:
    """``task``: the episode's task text; ``instructions``; ``segments``: (text,
    start_ns, end_ns) of each retained segment, source clock, end exclusive."""

    task: str
    instructions: tuple[str, ...]
    segments: tuple[tuple[str, int, int], ...]


def read_language(root: Path, key: str, task: str | None) -> EpisodeLanguage:
    """``key``'s language from its stored trajectory; its task is the annotations'
    language, else ``task`` (the catalog's task text), else empty."""
    folder = trajectory_folder(root, key)
    try:
        annotations = json_loads((folder / CAPTURE_JSON).read_bytes())["annotations"]
        segments = tuple(
            (str(s["task"]), int(s["start_ns"]), int(s["end_ns"]))
            for s in annotations.get("segments", [])
            if s.get("outcome") != "retry"
        )
        instructions = tuple(str(i) for i in annotations.get("instructions", []))
        language = str(annotations.get("language", ""))
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"capture {key}: trajectory {folder}: annotations: {exc}") from None
    return EpisodeLanguage(language or task or "", instructions, segments)


def segment_ranges(language: EpisodeLanguage, sample_ns: np.ndarray) -> list[dict[str, Any]]:
    """Each segment as ``{"task", "start", "end"}``: the samples (indices into
    ``sample_ns``, source-clock ns, ascending) inside its span, end exclusive; segments
    that hold no sample are left out."""
    times = np.asarray(sample_ns, dtype=np.int64)
    out = []
    for text, start_ns, end_ns in language.segments:
        start, end = np.searchsorted(times, [start_ns, end_ns], side="left").tolist()
        if end > start:
            out.append({"task": text, "start": start, "end": end})
    return out


def demo_attrs(language: EpisodeLanguage, sample_ns: np.ndarray) -> dict[str, str]:
    """A robomimic demo's language attributes: ``ego_task`` (text), ``ego_instructions``
    (JSON list) and ``ego_segments`` (JSON list of `segment_ranges` over the demo's
    ``sample_ns``)."""
    return {
        "ego_task": language.task,
        "ego_instructions": _compact(list(language.instructions)),
        "ego_segments": _compact(segment_ranges(language, sample_ns)),
    }


def _compact(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
