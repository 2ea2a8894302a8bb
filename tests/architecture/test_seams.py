"""The seams hold: the hub and the admin tools ask an engine, never check which one it is.

A new engine (a Kubernetes one, say) should need its adapter and nothing else: a hub or
admin module that picks a code path with `isinstance(x, SwarmEngine)` would have to learn
of every new engine. The engine adapters themselves (`gpuspawner/hub/engines/`) know theirs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "gpuspawner"
ENGINE_MODULES = ("gpuspawner.engine", "dockerspawner", "docker")
CHECKED = [
    path
    for layer in ("hub", "admin")
    for path in sorted((PACKAGE / layer).rglob("*.py"))
    if "engines" not in path.relative_to(PACKAGE).parts
]


def imported_from(tree: ast.Module, module: str) -> dict[str, str]:
    """Each name a module imports with `from … import`, and from where (relative imports
    resolved against `module`)."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = module.split(".")
            base = ".".join(parts[: len(parts) - node.level]) if node.level else ""
            source = ".".join(p for p in (base, node.module or "") if p)
            for alias in node.names:
                found[alias.asname or alias.name] = source
    return found


def class_names(node: ast.expr) -> list[str]:
    """The names a class argument of isinstance uses: `A`, `(A, B)`, `A | B`."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in class_names(element)]
    if isinstance(node, ast.BinOp):
        return class_names(node.left) + class_names(node.right)
    return []


def engine_type_checks(text: str, module: str) -> list[str]:
    """Each isinstance or issubclass on an engine's class, as "line name"."""
    tree = ast.parse(text)
    sources = imported_from(tree, module)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in {"isinstance", "issubclass"} or len(node.args) != 2:
            continue
        found += [
            f"{node.lineno} {name}"
            for name in class_names(node.args[1])
            if sources.get(name, "").startswith(ENGINE_MODULES)
        ]
    return found


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def test_the_check_covers_the_modules_that_once_switched_on_engines():
    assert {"doctor.py", "startup.py", "server.py"} <= {p.name for p in CHECKED}


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_hub_or_admin_module_chooses_a_path_by_engine_type(path):
    assert engine_type_checks(path.read_text(), module_of(path)) == []


@pytest.mark.parametrize(
    ("check", "found"),
    [
        ("isinstance(e, SwarmEngine)", ["4 SwarmEngine"]),
        ("isinstance(e, (int, SwarmEngine))", ["4 SwarmEngine"]),
        ("issubclass(e, Pool | SS)", ["4 SS"]),
        ("isinstance(e, Pool)", []),
    ],
)
def test_the_check_finds_engine_type_checks_and_only_those(check, found):
    text = (
        "from ..engine.swarm import SwarmEngine\n"
        "from dockerspawner import SwarmSpawner as SS\n"
        "from ..core.pool import Pool\n"
        f"def chooses(e): return {check}\n"
    )
    assert engine_type_checks(text, "gpuspawner.admin.doctor") == found
