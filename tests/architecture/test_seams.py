"""The seams hold: the hub and the admin tools ask an engine, never check which one it is.

A new engine (a Kubernetes one, say) should need its adapter and nothing else: a hub or
admin module that picks a code path with `isinstance(x, SwarmEngine)` would have to learn
of every new engine. The engine adapters themselves (`gpuspawner/hub/engines/`) know theirs.
Nor do they, or the config layer, ask which GPU source they have, or probe an adapter or a
source with `getattr`/`hasattr` for a part it may lack: what a seam offers is on its protocol
(`EngineAdapter`, `GPUSource`), and every implementation offers all of it
(test_conformance.py).
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


SOURCE_CLASSES = {"NvmlSource", "SimulatedSource", "SwarmSource"}
SEAM_OBJECTS = {"spawner", "source", "engine", "site.spawner", "site.source", "broker.site.source"}
PROBED = [
    path
    for layer in ("hub", "admin", "config")
    for path in sorted((PACKAGE / layer).rglob("*.py"))
    if path.name != "seams.py"  # the check of a protocol's members, at the config's boundary
]


def source_type_checks(text: str) -> list[str]:
    """Each isinstance or issubclass on a GPU source's class, as "line name"."""
    found = []
    for node in ast.walk(ast.parse(text)):
        calls = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        if calls and node.func.id in {"isinstance", "issubclass"} and len(node.args) == 2:
            names = set(class_names(node.args[1])) & SOURCE_CLASSES
            found += [f"{node.lineno} {name}" for name in sorted(names)]
    return found


def probes(text: str) -> list[str]:
    """Each getattr or hasattr of a literal name on an adapter, a source or an engine, as
    "line object.name"."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in {"getattr", "hasattr"} or len(node.args) < 2:
            continue
        target, name = ast.unparse(node.args[0]), node.args[1]
        if target in SEAM_OBJECTS and isinstance(name, ast.Constant):
            found.append(f"{node.lineno} {target}.{name.value}")
    return found


@pytest.mark.parametrize("path", PROBED, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_asks_which_gpu_source_it_has_or_probes_a_seam(path):
    text = path.read_text()
    assert (source_type_checks(text), probes(text)) == ([], [])


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ("isinstance(site.source, SwarmSource)", (["1 SwarmSource"], [])),
        ('getattr(source, "process_owners", owners)', ([], ["1 source.process_owners"])),
        ('hasattr(site.spawner, "make_engine")', ([], ["1 site.spawner.make_engine"])),
        ('getattr(self.handler, "xsrf_token", None)', ([], [])),
    ],
)
def test_the_probe_check_finds_probes_on_seams_and_only_those(code, found):
    assert (source_type_checks(code), probes(code)) == found


def test_the_check_covers_the_modules_that_once_switched_on_engines():
    assert {"doctor.py", "parts.py", "server.py"} <= {p.name for p in CHECKED}


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
