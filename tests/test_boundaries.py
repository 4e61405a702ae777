"""The layer rules hold: engine knows no Qt, app never touches llama_cpp, one module wraps llama_cpp."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tree import ROOT



def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is part of the test extra"
    result = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = (ROOT / "pyproject.toml").read_text(encoding="utf-8").count("[[tool.importlinter.contracts]]")
    assert contracts >= 10 and f"Contracts: {contracts} kept, 0 broken" in result.stdout, result.stdout


def test_only_the_llama_room_imports_llama_cpp():
    users = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("engine/**/*.py") if "llama_cpp" in imported_modules(p))
    assert users and all(u.startswith("engine/llama/") for u in users), users
    # the wrapper, and the drafters that ride the target (llama_cpp_ext's nextn calls): a new one is named here
    assert users == ["engine/llama/backend.py", "engine/llama/mtp.py"]


def test_app_never_imports_llama_cpp_even_indirectly_named():
    offenders = [p for p in ROOT.glob("app/**/*.py") if "llama_cpp" in imported_modules(p)]
    assert offenders == []


def _package_imports(path: Path, package: str) -> set[str]:
    """Modules of `package` that `path` imports, lazily inside functions included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith(package):
            for a in node.names:  # `from engine.models import modelstore` names a module
                full = f"{node.module}.{a.name}"
                out.add(full if (ROOT / (full.replace(".", "/") + ".py")).exists() else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith(package)}
    return out


@pytest.mark.parametrize("package", ["engine", "app"])
def test_no_import_loops(package: str):
    graph = {}
    for p in ROOT.glob(f"{package}/**/*.py"):
        mod = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        graph[mod] = _package_imports(p, package) - {mod}
    loops = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                loops.append(path[path.index(nxt):] + [nxt])
            elif len(path) < 12:
                visit(nxt, path + [nxt])

    for m in sorted(graph):
        visit(m, [m])
    assert loops == [], loops[:3]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_modules_private_names():
    """A leading underscore keeps a name to its own module: a part of app/ or engine/ that another needs has a
    public name (llama-cpp-python's `_ggml`, which it offers no public way to, is outside this rule)."""
    offenders = []
    for p in [*ROOT.glob("app/**/*.py"), *ROOT.glob("engine/**/*.py")]:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            ours = node.level > 0 or (node.module or "").split(".")[0] in ("app", "engine")
            parts = (node.module or "").split(".")
            if ours and (any(_private(s) for s in parts) or any(_private(a.name) for a in node.names)):
                offenders.append(f"{p.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert offenders == []
