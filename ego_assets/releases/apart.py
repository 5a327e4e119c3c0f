"""Run one packing function in an interpreter of its own (`run_apart`).

The three release formats are packed side by side in threads, but Python work in one
thread holds the GIL the others need between their C calls. A large WebDataset copy is
therefore run in a fresh ``python -m ego_assets.releases.apart`` process: its arguments
and its result (or its exception) go through pickle files that this module writes and
reads itself, in a temporary folder of its own. A fresh interpreter, not
`multiprocessing`: its spawn would import the caller's ``__main__`` again, and its fork
would copy the locks of whatever threads the caller runs (a Dagster run worker has some).
The process's derivation CPU seconds (`derived.derivation_cpu_s`) come back with the
answer and are added to this process's count.
"""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ego_assets.releases.derived import add_derivation_cpu_s, derivation_cpu_s

REQUEST, ANSWER = "request.pickle", "answer.pickle"
# From this many episodes on, a packing's heavy Python side runs apart (a fresh
# interpreter costs about a second to start): the WebDataset copy, a derived robomimic
# packing, a LeRobot split's video merge; below, in a thread.
PROCESS_MIN_EPISODES = 1000


class ApartError(RuntimeError):
    """The process running the function ended without an answer (killed, crashed)."""


def run_apart(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a fresh interpreter; its result, or its exception raised here.
    ``function`` must be importable by module and name, ``args`` and the result picklable.
    Raises `ApartError` when the process gives no answer (its stderr's end in the message)."""
    with tempfile.TemporaryDirectory(prefix="ego-apart-") as folder:
        request, answer = Path(folder) / REQUEST, Path(folder) / ANSWER
        call = (function.__module__, function.__qualname__, args)
        request.write_bytes(pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL))
        done = subprocess.run(
            [sys.executable, "-m", __name__, folder], capture_output=True, text=True, check=False
        )
        if not answer.exists():
            raise ApartError(
                f"{function.__module__}.{function.__qualname__} in its own process: exit "
                f"{done.returncode} without an answer: {done.stderr.strip()[-2000:]}"
            )
        ok, value, spent = pickle.loads(answer.read_bytes())  # written by main() below only
    add_derivation_cpu_s(spent)
    if not ok:
        raise value
    return value


def main(argv: Sequence[str]) -> int:
    """The process's side: read the call from ``argv[0]``/request.pickle, run it, write
    (True, result) or (False, exception) to answer.pickle, with its derivation seconds."""
    folder = Path(argv[0])
    module, name, args = pickle.loads((folder / REQUEST).read_bytes())
    function: Any = importlib.import_module(module)
    for part in name.split("."):
        function = getattr(function, part)
    try:
        outcome: tuple[bool, Any] = (True, function(*args))
    except Exception as exc:
        outcome = (False, exc)
    answer = (*outcome, derivation_cpu_s())
    (folder / ANSWER).write_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
