"""The refresher process: ``python -m ego_assets.api.refresher STATE_DIR [PARENT_PID]``.

Started (and restarted) by ``ego-assets serve``, and stops when that process is gone;
keeps the snapshots in ``STATE_DIR`` fresh for the server workers
(`ego_assets.api.snapshot.Refresher`), reading the Dagster instance (``DAGSTER_HOME``) and
the storage (``EGO_DATA_DIR``) outside their interpreter lock. Stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import warnings


def main(argv: list[str]) -> int:
    from ego_assets.api.app import service_from_env
    from ego_assets.api.snapshot import Refresher, SnapshotStore

    if len(argv) not in (1, 2) or (len(argv) == 2 and not argv[1].isdigit()):
        print("usage: python -m ego_assets.api.refresher STATE_DIR [PARENT_PID]", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    warnings.filterwarnings("ignore", message=".*(beta|preview).*")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    refresher = Refresher(service_from_env(None), SnapshotStore(argv[0]))
    logging.getLogger(__name__).info("refresher: state folder %s", argv[0])
    # the serving process that started this one (given: it may be gone before this line)
    parent = int(argv[1]) if len(argv) == 2 else os.getppid()
    refresher.run(stop, parent=parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
