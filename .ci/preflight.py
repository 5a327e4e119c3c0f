"""What `make test` needs, said before it installs anything (Python standard library only:
it runs before any virtualenv exists).

    python3 .ci/preflight.py [--lerobot-python PATH] [--lerobot-version V] PACKAGE...

Prints what `make test` installs and why and what it expects running, then exits 1 with
one line ("make test: cannot run: ...") when something is missing that it cannot install:
a system package without apt-get (or without root or sudo), PostgreSQL not reachable,
too little disk for the virtualenvs still to build. Exits 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Why each Debian package is needed, and a file that shows it is there without dpkg.
PACKAGES = {
    "chromium": ("headless browser for the UI, API-page and viewer tests", "/usr/bin/chromium"),
    "chromium-driver": ("its WebDriver", "/usr/bin/chromedriver"),
    "ffmpeg": ("FFmpeg libraries for lerobot's torchcodec decoder", "ffmpeg"),
    "hdf5-tools": ("h5dump for the HDF5 reader test", "h5dump"),
}
# Virtualenv folder -> (what it holds and why, size on disk when built, GB).
VENVS = {
    ".venv": ("the platform with its dev tools (pyproject.toml, constraints.txt)", 2.5),
    ".venv-lerobot": ("", 6.5),  # filled in by `plan` (version and Python)
    ".venv-robomimic": ("robomimic 0.3.0, torch 2.14: Holos HDF5 reader test, train.py", 5.6),
}
POSTGRES = ("127.0.0.1", 5432)
REDIS = ("127.0.0.1", 6379)


def installed(package: str) -> bool:
    """dpkg's word where dpkg exists, else the package's main file or command."""
    if shutil.which("dpkg-query"):
        run = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
        )
        return "ok installed" in run.stdout
    probe = PACKAGES.get(package, ("", package))[1]
    return Path(probe).exists() if probe.startswith("/") else shutil.which(probe) is not None


def can_install() -> str:
    """ "" when apt-get can run as root here; else why not."""
    if not shutil.which("apt-get"):
        return "no apt-get on this machine (install them with its package manager)"
    if os.geteuid() == 0:
        return ""
    if not shutil.which("sudo"):
        return "not root and no sudo"
    if subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
        return "sudo asks for a password (run `sudo true` first, or install them yourself)"
    return ""


def reachable(address: tuple[str, int]) -> str:
    """ "" when a TCP connection to ``address`` opens within 3 s; else the error."""
    try:
        socket.create_connection(address, timeout=3).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 .ci/preflight.py", description=__doc__)
    parser.add_argument("packages", nargs="*", default=list(PACKAGES))
    parser.add_argument("--lerobot-python", default="", help="the Python 3.12 for lerobot")
    parser.add_argument("--lerobot-version", default="0.6.1")
    parser.add_argument("--postgres", default=f"{POSTGRES[0]}:{POSTGRES[1]}", help="HOST:PORT")
    parser.add_argument("--redis", default=f"{REDIS[0]}:{REDIS[1]}", help="HOST:PORT")
    args = parser.parse_args(argv)

    lerobot = f"lerobot {args.lerobot_version} with CUDA torch (~4 GB download), the reader the "
    lerobot += "CERES conformance test checks against, on "
    lerobot += args.lerobot_python or "this Python"
    if args.lerobot_version != "0.6.1":
        lerobot += " (no Python 3.12 found: 0.4.4 is the newest lerobot for 3.11)"
    venvs = {**VENVS, ".venv-lerobot": (lerobot, VENVS[".venv-lerobot"][1])}
    missing = [p for p in args.packages if not installed(p)]
    pg_host, _, pg_port = args.postgres.rpartition(":")
    redis_host, _, redis_port = args.redis.rpartition(":")
    pg_error = reachable((pg_host, int(pg_port)))
    redis_error = reachable((redis_host, int(redis_port)))

    print("make test: lint, types, the Dagster definitions check and the suite. It needs:")
    print(f"  Python {sys.version.split()[0]} ({sys.executable}) for .venv")
    to_build = [name for name in venvs if not (REPO / name / ".installed-stamp").exists()]
    for name, (what, _) in venvs.items():
        state = "to install (pip)" if name in to_build else "installed"
        print(f"  {name}: {what}: {state}")
    for package in args.packages:
        why = PACKAGES.get(package, ("",))[0]
        state = "to install (apt-get)" if package in missing else "installed"
        print(f"  system package {package}{f' ({why})' if why else ''}: {state}")
    print(
        f"  PostgreSQL on {args.postgres}, user postgres, trust auth (deployment, API and "
        f"scale tests): {'reachable' if not pg_error else 'NOT reachable: ' + pg_error}"
    )
    print(
        f"  Redis on {args.redis} (the celery scale-out test; skipped without it): "
        f"{'reachable' if not redis_error else 'not reachable, that test will be skipped'}"
    )

    problems = []
    if sys.version_info < (3, 11):  # noqa: UP036 (runs on whatever python3 the machine has)
        problems.append(f"Python {sys.version.split()[0]} is too old: install Python 3.11")
    if missing and (why_not := can_install()):
        problems.append(f"system packages {' '.join(missing)} are missing and {why_not}")
    if pg_error:
        problems.append(
            f"PostgreSQL is not reachable on {args.postgres} ({pg_error}): start it, with "
            "trust auth for user postgres on 127.0.0.1"
        )
    need_gb = sum(venvs[name][1] for name in to_build)
    free_gb = shutil.disk_usage(REPO).free / 1e9
    if need_gb > free_gb:
        problems.append(
            f"{free_gb:.1f} GB free beside the repository; {' '.join(to_build)} need about "
            f"{need_gb:.1f} GB"
        )
    if problems:
        print(f"make test: cannot run: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
