"""Write one episode with lerobot's own API and time it (run in the lerobot venv).

``python _lerobot_writer.py VIDEO ARRAYS.npz ROOT RESULT.json``: decodes VIDEO frame by
frame and feeds every frame with its ``observation.state`` / ``action`` row to
``LeRobotDataset.create`` + ``add_frame`` + ``save_episode`` + ``finalize`` (lerobot's
defaults: PNG scratch frames, libsvtav1), timing from ``create`` to the end of
``finalize``. Must not import ego_assets: it runs beside lerobot's pins.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import av
import numpy as np


def _cpu_seconds() -> float:
    """User + system CPU time of this process (every thread) and its children."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str]) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    video, arrays, root, result = argv
    data = np.load(arrays)
    state, action = data["state"], data["action"]
    with av.open(video) as probe:
        stream = probe.streams.video[0]
        height, width = stream.codec_context.height, stream.codec_context.width
    features = {
        "observation.state": {"dtype": "float32", "shape": (state.shape[1],), "names": None},
        "action": {"dtype": "float32", "shape": (2,), "names": None},
        "observation.images.passthrough": {
            "dtype": "video",
            "shape": (height, width, 3),
            "names": ["height", "width", "channels"],
        },
    }
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    ds = LeRobotDataset.create("bench/ceres", fps=30, features=features, root=root)
    frames = 0
    with av.open(video) as inp:
        for frame in inp.decode(video=0):
            if frames >= len(state):
                break
            ds.add_frame(
                {
                    "observation.state": state[frames],
                    "action": action[frames],
                    "observation.images.passthrough": frame.to_ndarray(format="rgb24"),
                    "task": "bench",
                }
            )
            frames += 1
    ds.save_episode()
    ds.finalize()
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    with open(result, "w") as fh:
        json.dump({"seconds": seconds, "cpu_seconds": cpu, "frames": frames}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
