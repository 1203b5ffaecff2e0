"""The layers hold: surfaces → handlers → engine → models → floor, and no module takes part in an import cycle.

Read from the source (every import statement, module-level or not), so a newcomer's shortcut fails here
rather than in review. A module may import its own layer or a lower one; the floor imports no app.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("promises", "tasks", "schedules", "outbox", "timeouts")
PACKAGES = ("floor", "resonate_site", "api", "console", *APPS)
FLOOR, MODELS, ENGINE, HANDLERS, SURFACES = range(5)
NAMES = ("floor", "models", "engine", "handlers", "surfaces")


def layer(module):
    parts = module.split(".")
    if parts[0] == "floor":
        return FLOOR
    if parts[0] in APPS and len(parts) > 1:
        if parts[1] == "models":
            return MODELS
        if parts[1] == "handlers":
            return HANDLERS
        if parts[1] not in ("apps", "__init__"):
            return ENGINE
    return SURFACES  # resonate_site (the protocol's endpoint, the SSE view, the commands), api, console


def modules():
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                yield name.removesuffix(".__init__"), path


def imports(path):
    """The project modules a file imports (`from package import module` counts as the module)."""
    known = dict(modules())
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in known else node.module for name in names]
        else:
            continue
        yield from (name for name in names if name.split(".")[0] in PACKAGES and name in known)


GRAPH = {module: set(imports(path)) - {module} for module, path in modules()}


def test_the_floor_imports_no_app():
    leaks = {
        module: sorted(other for other in others if layer(other) != FLOOR)
        for module, others in GRAPH.items()
        if layer(module) == FLOOR and any(layer(other) != FLOOR for other in others)
    }
    assert not leaks, leaks


def test_no_module_imports_a_higher_layer():
    upward = sorted(
        f"{module} ({NAMES[layer(module)]}) imports {other} ({NAMES[layer(other)]})"
        for module, others in GRAPH.items()
        for other in others
        if layer(other) > layer(module) and other != module.rsplit(".", 1)[0]
    )
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    cycles, done = [], set()

    def visit(module, path):
        if module in path:
            cycles.append(" -> ".join(path[path.index(module) :] + [module]))
            return
        if module in done:
            return
        for other in sorted(GRAPH.get(module, ())):
            visit(other, [*path, module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])
    assert not cycles, "\n".join(cycles)


# Packages use each other one way, with one pair as the protocol binds them: a promise's creation makes its
# task and its settlement fulfils it (promises → tasks), and tasks are tasks of promises (tasks → promises).
# Each side goes through the other's lower layer, so no module is in a cycle.
ENTWINED = {frozenset({"promises", "tasks"})}


def test_packages_form_no_cycle_but_promises_and_tasks():
    uses = {}
    for module, others in GRAPH.items():
        package = module.split(".")[0]
        uses.setdefault(package, set()).update(o.split(".")[0] for o in others if o.split(".")[0] != package)

    def reaches(start, goal, seen=()):
        return any(p == goal or (p not in seen and reaches(p, goal, (*seen, p))) for p in uses.get(start, ()))

    cycles = sorted(
        f"{a} <-> {b}" for a in uses for b in uses[a] if reaches(b, a) and frozenset({a, b}) not in ENTWINED
    )
    assert not cycles, cycles
