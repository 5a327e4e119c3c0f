import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ego_assets"


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` of ``path``, parsed again when CPython 3.11 raises its spurious
    ``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905: the AST
    converter's depth counter is shared across threads, so a thread an earlier test left
    in this worker can trip it mid-parse); a real syntax error is never retried."""
    source = path.read_text()
    for attempt in range(3):
        try:
            return ast.parse(source, filename=str(path))
        except SystemError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _imports(path: Path) -> set[str]:
    tree = _parse(path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_outside_defs_imports_dagster():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        # defs/ wires the library into Dagster; the API and the CLI reach it through
        # dagster_client.py; private Dagster names live in dagster_compat.py only
        if rel.startswith("defs/") or rel in DAGSTER_MODULES:
            continue
        if any(name.startswith("dagster") for name in _imports(path)):
            offenders.append(rel)
    assert offenders == []


DAGSTER_MODULES = (
    "definitions.py",
    "catalog_definitions.py",
    "dagster_client.py",
    "dagster_compat.py",
)


def test_the_api_and_the_cli_reach_dagster_only_through_the_client():
    modules = [*PACKAGE.joinpath("api").rglob("*.py"), *PACKAGE.joinpath("cli").rglob("*.py")]
    offenders = {
        path.relative_to(PACKAGE).as_posix(): sorted(
            m for m in _full_imports(path) if m.startswith(("ego_assets.defs", "dagster"))
        )
        for path in modules
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_private_dagster_names_are_used_only_in_dagster_compat():
    offenders = []
    for path in [*PACKAGE.rglob("*.py")]:
        if path.name == "dagster_compat.py":
            continue
        if any(m.startswith("dagster._") or ".dagster._" in m for m in _full_imports(path)):
            offenders.append(path.relative_to(PACKAGE).as_posix())
    assert offenders == []


def test_great_expectations_is_never_imported_at_module_level():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        tree = _parse(path)
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                mods = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                )
                if any(m and m.startswith("great_expectations") for m in mods):
                    offenders.append(path.relative_to(PACKAGE).as_posix())
    assert offenders == []


def _full_imports(path: Path) -> set[str]:
    """Every module ``path`` imports by absolute name, at any depth (lazy imports too)."""
    names = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


# The rooms of the package and which other rooms each may import (any depth, lazy
# imports too): docs/architecture.md draws the same table. A room is a subpackage or a
# top-level module; ``exports.registry`` is a room of its own (a leaf everyone may read).
# Adding an import across rooms means adding it here, on purpose.
ROOMS: dict[str, set[str]] = {
    "errors": set(),
    "fileio": set(),
    "progress": set(),
    "fixtures": set(),
    "trajectory": set(),
    "exports.registry": set(),
    "keys": {"errors"},
    "formats": {"fileio", "trajectory", "progress"},
    "actions": {"fileio", "formats", "trajectory"},
    "storage": {"fileio", "keys", "progress", "trajectory"},
    "capture": {"errors", "fileio", "formats", "keys", "progress", "storage", "trajectory"},
    "importers": {"capture", "errors", "fileio", "formats", "keys", "storage", "trajectory"},
    "synth": {"capture", "fixtures", "progress", "trajectory"},
    "landing": {"capture", "errors", "keys", "storage"},
    "capture_sets": {"exports.registry", "keys"},
    "quality": {"exports.registry", "fileio", "keys", "storage", "trajectory"},
    "viewer": {"fileio", "quality", "storage", "trajectory"},
    "pipeline": {"actions", "capture", "quality", "storage", "trajectory", "viewer"},
    "catalog": {
        "capture", "exports.registry", "fileio", "keys", "pipeline", "quality", "storage",
        "trajectory",
    },
    "exports": {
        "catalog", "exports.registry", "formats", "keys", "pipeline", "progress", "quality",
        "storage", "trajectory",
    },
    "defs": {
        "capture", "capture_sets", "catalog", "dagster_compat", "definitions", "demo_report",
        "exports", "exports.registry", "importers",
        "fixtures", "formats", "keys", "landing", "pipeline", "progress", "quality",
        "releases", "storage", "synth", "trajectory", "viewer",
    },
    "definitions": {"catalog_definitions", "defs", "exports.registry"},
    "catalog_definitions": {"definitions", "defs"},
    "releases": {
        "actions", "catalog", "exports", "exports.registry", "fileio", "formats", "keys",
        "storage", "trajectory",
    },
    "demo_report": {"catalog", "exports.registry", "pipeline", "quality", "storage", "trajectory"},
    "dagster_compat": set(),
    "dagster_client": {"dagster_compat", "defs"},
    "api": {
        "catalog", "dagster_client", "errors", "exports", "exports.registry",
        "pipeline", "quality", "storage", "trajectory",
    },
    "cli": {
        "releases", "api", "capture", "capture_sets", "catalog", "dagster_client", "errors",
        "formats", "keys",
        "importers", "pipeline", "progress", "quality", "storage", "synth", "trajectory",
        "viewer",
    },
}  # fmt: skip


def _room(module: str) -> str | None:
    """The room of ``ego_assets.<...>`` (None: the package itself or not ours)."""
    parts = module.split(".")
    if parts[0] != "ego_assets" or len(parts) < 2:
        return None
    if parts[1] == "exports" and len(parts) > 2 and parts[2] == "registry":
        return "exports.registry"
    if parts[1] == "exports" and len(parts) == 2:
        return None  # `from ego_assets.exports import x`: x's room is named by the alias
    top = parts[1]
    return top if (PACKAGE / top).is_dir() or (PACKAGE / f"{top}.py").exists() else None


def test_every_room_imports_only_the_rooms_it_may():
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".")
        if rel == "__init__":
            continue
        own = _room(f"ego_assets.{rel}")
        assert own is not None, rel
        targets = {_room(m) for m in _full_imports(path)} - {None, own}
        found.setdefault(own, set()).update(t for t in targets if t is not None)
    assert set(found) <= set(ROOMS), f"rooms missing from ROOMS: {sorted(set(found) - set(ROOMS))}"
    extra = {room: sorted(found[room] - ROOMS[room]) for room in found}
    assert {room: names for room, names in extra.items() if names} == {}


def test_the_export_registry_imports_no_writer_and_no_dagster():
    """The CLI, the policy and the API read the registry without loading a writer."""
    code = (
        "import sys, ego_assets.exports.registry as r; r.names(); r.policy_keys();"
        "heavy = {'h5py', 'av', 'pandas', 'dagster', 'ego_assets.formats'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_import_cycle_in_the_dagster_layer():
    """Among ``defs/``, ``definitions``, the client and compat modules no module imports
    itself back through others (lazy imports count)."""
    paths = [*PACKAGE.joinpath("defs").glob("*.py")]
    paths += [
        PACKAGE / f"{name}.py" for name in ("definitions", "dagster_client", "dagster_compat")
    ]
    modules = {
        "ego_assets." + p.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", "."): p
        for p in paths
        if p.name != "__init__.py"
    }
    graph = {
        m: {i for i in _full_imports(p) if i in modules and i != m} for m, p in modules.items()
    }
    cycles = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], {start}
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    cycles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert cycles == []


MAX_MODULE_LINES = 900
MAX_FUNCTION_LINES = 100


def test_no_module_over_900_lines_and_no_long_function_outside_defs_and_cli():
    """Issue #34 item 5: a module stays under 900 lines and, outside ``defs/`` (Dagster
    wiring) and ``cli/``, a function under about 100."""
    long_modules, long_functions = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        lines = path.read_text().count("\n")
        if lines > MAX_MODULE_LINES:
            long_modules.append(f"{rel}: {lines} lines")
        if rel.startswith(("defs/", "cli/")):
            continue
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    assert long_modules == []
    assert long_functions == []
