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
        # defs/ wires the library into Dagster; api/ is the export API, a client of the
        # Dagster instance (runs by tag, launches through GraphQL, S3Resource presigning)
        if rel.startswith(("defs/", "api/")) or rel == "definitions.py":
            continue
        if {"dagster", "dagster_aws"} & _imports(path):
            offenders.append(rel)
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
