"""The shape the code keeps (issue 12): small modules, thin servicers, no import cycles, and
``gpu_kernels`` standing alone. Each check names the offender, so a failure says what to split.

The import graph is read from the source with :mod:`ast` (nothing is imported): every
``import``/``from ... import`` of a ``graphfeed`` module, at any depth (a lazy import inside a
function is still a dependency), except those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("services", "trainer", "gpu_kernels", "bench")  # the portions of the graphfeed namespace
MAX_MODULE_LINES = 400
MAX_SERVICER_METHOD_LINES = 15


def _modules() -> dict[str, Path]:
    """``graphfeed.x.y`` -> its file, over every portion of the namespace."""
    out = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("graphfeed/**/*.py")):
            rel = path.relative_to(REPO / root).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _generated(path: Path) -> bool:
    return path.name.endswith(("_pb2.py", "_pb2_grpc.py"))


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """The graphfeed modules ``tree`` imports, outside ``if TYPE_CHECKING:`` blocks."""
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # `from pkg import name`: name may be a module or an attribute
                name = name.rpartition(".")[0]
            if name.startswith("graphfeed") and name != "graphfeed":
                yield name


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        if _generated(path):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[module] = {m for m in _imports(tree, module, path.name == "__init__.py") if m != module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_namespace_map_finds_the_packages() -> None:
    # Guards the checks below against an empty scan (a moved root would make them pass vacuously).
    for module in (
        "graphfeed.cli",
        "graphfeed.loader.core",
        "graphfeed.trainer.dataloader",
        "graphfeed.gpu_kernels.reference",
    ):
        assert module in MODULES, module


def test_no_module_over_400_lines() -> None:
    scanned = [p for p in MODULES.values() if not _generated(p) and "bench" not in p.relative_to(REPO).parts[:1]]
    scanned += sorted((REPO / "tests").rglob("*.py"))
    long = {
        str(p.relative_to(REPO)): n
        for p in scanned
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by role): {long}"


def test_servicer_methods_are_thin() -> None:
    """decode -> one core call -> encode; shared memory and metrics live elsewhere."""
    servicers = [p for m, p in MODULES.items() if m.endswith(".servicer")]
    assert servicers
    long = {}
    for path in servicers:
        for cls in ast.parse(path.read_text(encoding="utf-8")).body:
            if not (isinstance(cls, ast.ClassDef) and any("Servicer" in ast.unparse(b) for b in cls.bases)):
                continue
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name[:1].isupper():  # an RPC method
                    lines = fn.end_lineno - fn.lineno + 1  # type: ignore[operator]
                    if lines > MAX_SERVICER_METHOD_LINES:
                        long[f"{path.relative_to(REPO)}:{cls.name}.{fn.name}"] = lines
    assert not long, f"servicer methods over {MAX_SERVICER_METHOD_LINES} lines: {long}"


def test_no_import_cycles_between_modules() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycles_between_packages() -> None:
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for module, deps in _graph().items():
        graph.setdefault(package(module), set()).update(package(d) for d in deps if package(d) != package(module))
    cycle = _cycle(graph)
    assert cycle is None, "packages import each other: " + " -> ".join(cycle or [])


def test_the_loader_knows_where_bytes_go_not_how() -> None:
    """Shared memory is behind the placement type and the transport: nothing in the loader (nor
    the sampler, nor the trainer's job code) imports the shared-memory machinery itself."""
    reach = {
        f"{m} -> {d}"
        for m, deps in _graph().items()
        if m.startswith(("graphfeed.loader", "graphfeed.sampler"))
        for d in deps
        if d.startswith("graphfeed.common.shm")
    }
    assert not reach, f"imports of graphfeed.common.shm outside the transport: {sorted(reach)}"


@pytest.mark.parametrize("package", ["graphfeed.gpu_kernels"])
def test_gpu_kernels_stand_alone(package: str) -> None:
    """Kernels, their launchers and references import nothing else of graphfeed: the bare GPU
    image runs them without the services' dependencies."""
    outside = {
        f"{m} -> {d}"
        for m, deps in _graph().items()
        if m.startswith(package)
        for d in deps
        if not d.startswith(package)
    }
    assert not outside, f"{package} imports the rest of graphfeed: {sorted(outside)}"
