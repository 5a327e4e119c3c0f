"""A run launcher for one box whose run workers start warm: `WarmRunLauncher`.

Dagster's default launcher asks the code server for a new process per run; that process
imports Dagster and the code location (5-27 s on a busy box), and its first capture then
pays the first use of GX, Rerun and PyAV (about 10 s more). `WarmRunLauncher` keeps, per
code location, one long-lived **warm parent** (``python -m ego_assets.defs.warm``, started
by the launcher on its first run and ended when the launcher's process goes): it has
loaded the code location's repository and warmed the step libraries once, and forks one
child per run. The child executes the run exactly as ``dagster api execute_run`` does
(`dagster_compat.execute_run_here`: the job from the run's own origin, every event,
RUN_START included, written by the child), so a run starts in milliseconds and is
otherwise an ordinary Dagster run:

* the run coordinator queues it and holds it to ``max_concurrent_runs`` and the tag
  limits (the launcher is only asked once the run is dequeued);
* the child's process id is the run's worker (tag `WARM_WORKER_TAG` at launch, then its
  RUN_START event), so `LocalRunLauncher`'s health check and run monitoring see a killed
  child as dead, and run retries launch the run again;
* `terminate` marks the run CANCELING and interrupts the child (SIGINT, what the code
  server's termination does to its run processes): Dagster ends the run CANCELED;
* steps, partitions, per-capture failures and the executor are the job's own.

A run the warm parent cannot take (another Python executable, a module not in
``modules``, the parent failing to start) goes to the default launcher. The parent is
single-threaded when it forks (it imports and builds, but starts no thread and opens no
connection: the instance is opened by each child), and it never runs a step itself.
Kubernetes keeps `K8sRunLauncher`: a pod per run, no warm parent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import IO, Any

import dagster as dg

from ego_assets.dagster_compat import (
    execute_run_here,
    instance_ref_modules,
    launcher_instance,
    load_repository_of_origin,
    serialized_instance_ref,
)
from ego_assets.defs.runs import WARM_WORKER_TAG, LocalRunLauncher, process_alive, warm_worker
from ego_assets.exports.preload import (
    EXPORT_LIBRARIES,
    EXPORT_PACKAGES,
    freeze_loaded,
    import_quietly,
    package_modules,
)

log = logging.getLogger(__name__)

DEFAULT_MODULES = ("ego_assets.definitions",)
# Beyond the exports' (`EXPORT_LIBRARIES`, `EXPORT_PACKAGES`): the other libraries and
# our packages a capture step imports on first use (seconds each on a busy box), imported
# once by the warm parent and shared by every child.
STEP_LIBRARIES = (*EXPORT_LIBRARIES, "pandas", "sqlalchemy")
STEP_PACKAGES = (
    *EXPORT_PACKAGES,
    "ego_assets.capture",
    "ego_assets.quality",
    "ego_assets.pipeline",
)
READY_TIMEOUT_S = 900.0  # the parent's load and warm-up on a starved box
FORK_TIMEOUT_S = 60.0  # one fork's answer


class WarmPoolError(RuntimeError):
    """The warm parent could not take a run (not started, died, did not answer)."""


def warm_steps() -> list[str]:
    """Import the step libraries and packages and build the GX context once, then freeze
    what is loaded (`freeze_loaded`: the children's collections skip it); returns the
    names that failed to import (logged, never fatal: the step imports them itself)."""
    from ego_assets.quality.expectations import warm_up

    failed = import_quietly([*STEP_LIBRARIES, *package_modules(STEP_PACKAGES)])
    warm_up()
    freeze_loaded()
    return failed


def _reap(_signo: int, _frame: Any) -> None:
    """Collect every finished child (no zombies left behind)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(request: dict[str, str]) -> None:
    """In the forked child: execute the run, then leave without returning to the loop."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)  # the parent's request pipe is not the child's
        os.dup2(2, 1)  # nor its answer pipe: the child's output goes where the parent's logs go
        code = execute_run_here(request["instance_ref"], request["run_id"])
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(origin: str, warm: bool, requests: IO[str], answers: IO[str]) -> None:
    """The warm parent: load the repository of ``origin`` (serialized) (and warm the steps), answer
    ``ready <pid>``, then for each request line (``{"run_id", "instance_ref"}``) fork a
    child that executes the run and answer its ``<pid> <epoch s>``; ends at end of input."""
    load_repository_of_origin(origin)
    if warm:
        warm_steps()
    threads = threading.active_count()
    if threads > 1:  # forking copies only this thread: say so, the children still run
        log.warning("warm parent: %d threads at fork time: %s", threads, threading.enumerate())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: the launcher ends us
    signal.signal(signal.SIGCHLD, _reap)
    answers.write(f"ready {os.getpid()}\n")
    answers.flush()
    refs: set[str] = set()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        answers.write(f"{pid} {time.time():.3f}\n")
        answers.flush()
        if request["instance_ref"] not in refs:  # the next children open it warm
            refs.add(request["instance_ref"])
            import_quietly(instance_ref_modules(request["instance_ref"]))


class WarmPool:
    """The launcher's side of one warm parent (one per repository origin)."""

    def __init__(self, origin: str, warm: bool) -> None:
        args = [sys.executable, "-m", "ego_assets.defs.warm", "--origin", origin]
        self._process = subprocess.Popen(
            [*args, *([] if warm else ["--no-warm-up"])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._ready = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.poll() is None

    def _line(self, timeout_s: float) -> str:
        out = self._process.stdout
        assert out is not None
        readable, _, _ = select.select([out], [], [], timeout_s)
        line = out.readline() if readable else ""
        if not line:
            code = self._process.poll()
            raise WarmPoolError(
                f"warm parent {self.pid} "
                + (f"exited ({code})" if code is not None else f"silent for {timeout_s:.0f} s")
            )
        return line

    def start(self, run_id: str, instance_ref: str) -> tuple[int, float]:
        """Fork a child for ``run_id``: (its pid, epoch s right after the fork)."""
        with self._lock:
            if not self._ready:
                line = self._line(READY_TIMEOUT_S)
                if not line.startswith("ready"):
                    raise WarmPoolError(f"warm parent {self.pid}: {line.strip()!r}")
                self._ready = True
            assert self._process.stdin is not None
            try:
                self._process.stdin.write(
                    json.dumps({"run_id": run_id, "instance_ref": instance_ref}) + "\n"
                )
                self._process.stdin.flush()
            except OSError as exc:
                raise WarmPoolError(f"warm parent {self.pid}: {exc}") from exc
            pid, at = self._line(FORK_TIMEOUT_S).split()
            return int(pid), float(at)

    def close(self) -> None:
        """End the parent (end of its input); its children finish their runs."""
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class WarmRunLauncher(LocalRunLauncher):
    """`LocalRunLauncher` whose runs of the code locations in ``modules`` are forked from a
    warm parent (see the module docstring); any other run gets a run worker process of
    its own, as with the default launcher."""

    def __init__(
        self,
        inst_data: Any = None,
        modules: Sequence[str] = DEFAULT_MODULES,
        warm_up: bool = True,
    ) -> None:
        super().__init__(inst_data=inst_data)
        self._modules = tuple(modules)
        self._warm_up = warm_up
        self._pools: dict[str, WarmPool] = {}
        self._pools_lock = threading.Lock()

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {
            "modules": dg.Field(
                [str],
                is_required=False,
                default_value=list(DEFAULT_MODULES),
                description="Code location modules whose runs are forked from a warm parent.",
            ),
            "warm_up": dg.Field(
                bool,
                is_required=False,
                default_value=True,
                description="Import the step libraries and build the GX context in the parent.",
            ),
        }

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: dict[str, Any]) -> WarmRunLauncher:
        return cls(inst_data=inst_data, **config_value)

    def _pool_key(self, run: dg.DagsterRun) -> str | None:
        """The serialized repository origin of ``run`` when a warm parent may take it."""
        origin = run.job_code_origin
        if origin is None:
            return None
        repository = origin.repository_origin
        module = getattr(repository.code_pointer, "module", None)
        same_python = os.path.abspath(repository.executable_path) == os.path.abspath(sys.executable)
        if module not in self._modules or not same_python:
            return None
        return dg.serialize_value(repository)

    def _pool(self, key: str) -> WarmPool:
        with self._pools_lock:
            pool = self._pools.get(key)
            if pool is None or not pool.alive():
                pool = self._pools[key] = WarmPool(key, self._warm_up)
            return pool

    def launch_run(self, context: Any) -> None:
        run = context.dagster_run
        key = self._pool_key(run)
        if key is None:
            super().launch_run(context)
            return
        instance = launcher_instance(self)
        try:
            pid, at = self._pool(key).start(run.run_id, serialized_instance_ref(instance))
        except WarmPoolError as exc:
            log.warning("run %s: %s; starting a run worker process instead", run.run_id, exc)
            instance.report_engine_event(
                f"No warm run worker ({exc}); the run gets a process of its own.",
                run,
                cls=self.__class__,
            )
            super().launch_run(context)
            return
        instance.add_run_tags(run.run_id, {WARM_WORKER_TAG: f"{pid}@{at:.3f}"})

    def terminate(self, run_id: str) -> bool:
        """CANCELING, then SIGINT to the run's warm child (Dagster ends the run CANCELED);
        a run not forked here goes to the default launcher's termination."""
        instance = launcher_instance(self)
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        found = warm_worker(run.tags)
        if found is None:
            return super().terminate(run_id)
        instance.report_run_canceling(run)
        pid, at = found
        if not process_alive(pid, at):
            instance.report_engine_event(
                f"Run worker process {pid} is gone or not visible from here; not signalled.",
                run,
                cls=self.__class__,
            )
            return False
        os.kill(pid, signal.SIGINT)
        return True

    def dispose(self) -> None:
        with self._pools_lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ego_assets.defs.warm")
    parser.add_argument("--origin", required=True, help="serialized repository origin to load")
    parser.add_argument("--no-warm-up", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    serve(args.origin, not args.no_warm_up, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
