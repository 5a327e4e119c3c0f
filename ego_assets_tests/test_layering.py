import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ego_assets"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
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


DAGSTER_MODULES = ("definitions.py", "dagster_client.py", "dagster_compat.py")


def test_the_api_and_the_cli_reach_dagster_only_through_the_client():
    modules = [*PACKAGE.joinpath("api").rglob("*.py"), PACKAGE / "cli.py"]
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
        tree = ast.parse(path.read_text())
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
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_exporters_and_the_viewer_never_import_the_capture_package():
    """Exporters read the trajectory and the gate, and locate an episode's raw files via
    ``ego_assets.storage``; the capture readers and manifest stay out of them."""
    modules = [
        *PACKAGE.joinpath("formats").rglob("*.py"),
        *PACKAGE.glob("*_export.py"),
        *PACKAGE.joinpath("viewer").rglob("*.py"),
    ]
    assert {p.name for p in modules} >= {"egosmith_export.py", "ceres_export.py", "episode.py"}
    assert "holos_export.py" in {p.name for p in modules}
    offenders = {
        path.relative_to(PACKAGE).as_posix(): sorted(
            m
            for m in _full_imports(path)
            if m == "ego_assets.capture" or m.startswith("ego_assets.capture.")
        )
        for path in modules
    }
    assert {k: v for k, v in offenders.items() if v} == {}
