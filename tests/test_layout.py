"""The tree's shape, checked: no import cycle between the stages of grpo_lab/ or analysis/, the layers
point one way (grpo_lab never imports Hydra, analysis or experiments; analysis never grpo_lab or torch),
no module grows past about 400 lines and no function past 80."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 420  # "about 400": a module past it holds more than one idea


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included), but those under
    `if TYPE_CHECKING:`: annotations only, never run."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def unit(package: str, module: str) -> str | None:
    """The stage a dotted module belongs to: `grpo_lab.rollout.generate` -> `rollout`; a top-level module
    (`grpo_lab.config`) is its own unit."""
    parts = module.split(".")
    if parts[0] != package or len(parts) < 2:
        return None
    return parts[1]


def graph(package: str) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        here = unit(package, rel.removesuffix(".__init__"))
        if here is None:
            continue
        for module in imports(path):
            there = unit(package, module)
            if there is not None and there != here and (ROOT / package / there).exists() | (
                    ROOT / package / f"{there}.py").exists():
                edges.setdefault(here, set()).add(there)
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("package", ["grpo_lab", "analysis"])
def test_no_import_cycle_between_stages(package):
    assert cycle(graph(package)) is None, " -> ".join(cycle(graph(package)))


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}}) is None


@pytest.mark.parametrize("package,forbidden", [("grpo_lab", ("hydra", "analysis", "experiments")),
                                               ("analysis", ("torch", "grpo_lab", "experiments")),
                                               ("fixtures", ("experiments",))])
def test_layers_point_one_way(package, forbidden):
    bad = {f"{p.relative_to(ROOT)}: {m}" for p in (ROOT / package).rglob("*.py") for m in imports(p)
           if m.split(".")[0] in forbidden}
    assert not bad, sorted(bad)


@pytest.mark.parametrize("package", ["grpo_lab", "analysis", "experiments", "fixtures"])
def test_no_module_over_about_400_lines(package):
    long = {p.relative_to(ROOT).as_posix(): n for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_the_records_are_a_ground_floor():
    """The records every stage hands the next (grpo_lab/records.py) import nothing of the project, so any stage
    may use them without reaching above itself."""
    assert not {m for m in imports(ROOT / "grpo_lab" / "records.py") if m.split(".")[0] == "grpo_lab"}


MAX_FUNCTION_LINES = 80  # a function past it does more than one thing: split it by concern


@pytest.mark.parametrize("package", ["grpo_lab", "analysis"])
def test_no_function_over_80_lines(package):
    """Every function and method, nested ones included, from its `def` (decorators aside) to its last line."""
    long = sorted(f"{p.relative_to(ROOT).as_posix()}:{node.lineno} {node.name} ({length} lines)"
                  for p in (ROOT / package).rglob("*.py") for node in ast.walk(ast.parse(p.read_text()))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and (length := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES)
    assert not long, long
