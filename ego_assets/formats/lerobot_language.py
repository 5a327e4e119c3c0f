"""lerobot 0.6's per-frame language columns for a CERES episode's rows.

lerobot 0.6 reads two optional frame columns beside ``task_index``
(``lerobot.datasets.language``; ``dtype: "language"`` in ``meta/info.json``):
``language_persistent``, the list of rows (``role``, ``content``, ``style``,
``timestamp``, ``camera``, ``tool_calls``) in force over an episode, the same list on
every frame of it, and ``language_events``, rows emitted at one frame. A CERES episode's
retained segments (its ``ceres/episode-metadata.json``: ``task``, ``frame_start``) map
onto persistent rows of style ``subtask``: role ``user``, content the segment's text,
timestamp its first frame's time (s, ``frame_start / fps``), no camera, no tool calls.
There are no events: every frame's ``language_events`` is empty.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

PERSISTENT, EVENTS = "language_persistent", "language_events"
FEATURES: dict[str, dict[str, Any]] = {
    PERSISTENT: {"dtype": "language", "shape": [1], "names": None},
    EVENTS: {"dtype": "language", "shape": [1], "names": None},
}
# lerobot's row structs, with the tool calls typed as its own writer leaves them when
# none are given (null)
_PERSISTENT_ROW = pa.struct(
    [
        pa.field("role", pa.string()),
        pa.field("content", pa.string()),
        pa.field("style", pa.string()),
        pa.field("timestamp", pa.float32()),
        pa.field("camera", pa.string()),
        pa.field("tool_calls", pa.null()),
    ]
)
_EVENT_ROW = pa.struct(
    [
        pa.field("role", pa.string()),
        pa.field("content", pa.string()),
        pa.field("style", pa.string()),
        pa.field("camera", pa.string()),
        pa.field("tool_calls", pa.null()),
    ]
)


def language_columns(metadata: dict[str, Any], rows: int) -> dict[str, pa.Array]:
    """``language_persistent`` and ``language_events`` for the ``rows`` frames of the
    episode whose CERES metadata is ``metadata`` (see the module docstring)."""
    fps = float(metadata["episode"]["fps"])
    segments = metadata.get("segments") or []
    subtasks = pa.array(
        [
            {
                "role": "user",
                "content": str(s["task"]),
                "style": "subtask",
                "timestamp": int(s["frame_start"]) / fps,
                "camera": None,
                "tool_calls": None,
            }
            for s in segments
        ],
        type=_PERSISTENT_ROW,
    )
    k = len(subtasks)
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * k)
    every_frame = subtasks.take(pa.array(np.tile(np.arange(k), rows)))
    no_events = pa.array([], type=_EVENT_ROW)
    return {
        PERSISTENT: pa.ListArray.from_arrays(offsets, every_frame),
        EVENTS: pa.ListArray.from_arrays(pa.array(np.zeros(rows + 1, np.int32)), no_events),
    }
