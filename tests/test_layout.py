"""The package layout, checked by parsing every module of `eqxrl` (no import runs).

- no private name (a segment with a leading underscore) is imported from outside
  the package that owns it;
- no `importlib` reach-arounds;
- no import circle between modules, and the floors import only downwards:
  core → store → components → envs → agents → loop → runs → pbt → testing → cli;
- no module over about 400 lines.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "eqxrl"
MAX_LINES = 420
# Each floor may import the floors before it (and itself), never one after it.
FLOORS = ["core", "store", "components", "envs", "agents", "loop", "runs", "pbt", "testing", "cli"]


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package(module: str) -> str:
    """The package a module belongs to (a package's `__init__` belongs to itself)."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _imports(module: str) -> list[tuple[int, str, str | None]]:
    """`(line, target module, imported name or None)` for every import in `module`, nested ones too."""
    tree = ast.parse(MODULES[module].read_text())
    package = _package(module)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "eqxrl"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "eqxrl":
                continue
            for a in node.names:
                # `from . import x` may import a submodule: resolve it as one.
                if f"{target}.{a.name}" in MODULES:
                    out.append((node.lineno, f"{target}.{a.name}", None))
                else:
                    out.append((node.lineno, target, a.name))
    return out


def _floor(module: str) -> str | None:
    parts = module.split(".")
    return parts[1].lstrip("_") if len(parts) > 1 else None


def test_no_private_import_across_packages():
    bad = []
    for module in MODULES:
        package = _package(module)
        for line, target, name in _imports(module):
            segments = target.split(".") + ([name] if name else [])
            for i, segment in enumerate(segments):
                if segment.startswith("_") and not segment.startswith("__"):
                    owner = ".".join(segments[:i])
                    if owner != package:
                        bad.append(f"{module}:{line} imports {'.'.join(segments)}")
                    break
    assert not bad, "private names imported across a package boundary:\n" + "\n".join(bad)


def test_no_importlib_tricks():
    # importlib may load a user's module (`eqxrl train pkg.mod:Agent`), never eqxrl's own.
    pattern = re.compile(r"""(import_module|__import__)\(\s*(f?["']eqxrl|["']\.)""")
    bad = [m for m, p in MODULES.items() if pattern.search(p.read_text())]
    assert not bad, f"importlib reach-arounds in {bad}"


def test_floors_import_only_downwards():
    bad = []
    for module in MODULES:
        floor = _floor(module)
        if floor not in FLOORS:
            continue
        for line, target, _ in _imports(module):
            other = _floor(target)
            if other is None:
                bad.append(f"{module}:{line} imports the top-level eqxrl package")
            elif other in FLOORS and FLOORS.index(other) > FLOORS.index(floor):
                bad.append(f"{module}:{line} ({floor}) imports {target} ({other})")
    assert not bad, "imports that run up the floors:\n" + "\n".join(bad)


def test_no_import_circle():
    graph = {m: sorted({t for _, t, _ in _imports(m) if t in MODULES and t != m and t != "eqxrl"}) for m in MODULES}
    # A package's `__init__` re-exports its modules: an edge from a module to its own
    # package's `__init__` is what makes a circle, so those count too.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in graph[m]:
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in graph:
        if m not in state and (cycle := visit(m)):
            pytest.fail("import circle: " + " -> ".join(cycle))


def test_no_module_over_400_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# Issue 30's direction: an abstract base declares what it needs (`eqx.AbstractVar`s, abstract
# methods, init-only keywords) and final agents own their fields. No `Abstract*` class may declare
# a concrete field (the replay agents' settings went into `OffPolicyLoop` and `NetworkSpec`s,
# which each final agent declares with its `env`).
ABSTRACT_WITH_FIELDS: dict[str, int] = {}


def test_abstract_classes_declare_no_concrete_fields():
    """No class named `Abstract*` in eqxrl declares a dataclass field of its own: shared state is an
    `AbstractVar` the final class declares (a `dataclasses.KW_ONLY` marker is no field)."""
    found = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.startswith("Abstract"):
                fields = [
                    s.target.id for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    and not re.match(r"(eqx\.|dataclasses\.)?(AbstractVar|AbstractClassVar|ClassVar|InitVar|KW_ONLY)\b", ast.unparse(s.annotation))
                ]  # fmt: skip
                if fields:
                    found[node.name] = len(fields)
    grown = {k: v for k, v in found.items() if v > ABSTRACT_WITH_FIELDS.get(k, 0)}
    assert not grown, f"abstract classes with concrete fields (declare them as eqx.AbstractVar): {grown}"


def test_no_final_agent_is_subclassed():
    import eqxrl.agents as agents

    finals = {n: c for n, c in vars(agents).items() if isinstance(c, type) and issubclass(c, agents.AbstractAgent) and not n.startswith("Abstract")}
    subclassed = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if isinstance(base, ast.Name) and base.id in finals:
                        subclassed.setdefault(base.id, set()).add(node.name)
    assert not subclassed, f"final agents subclassed (compose them, or share an abstract base): {subclassed}"


TESTS = pathlib.Path(__file__).resolve().parent
PROJECT_TESTS = {"test_layout.py", "test_docs.py", "test_docs_site.py"}
"""The test modules of the whole project (layout, executed docs, the docs site), here in tests/."""
_PRIVATE = re.compile(r"^eqxrl(\.\w+)*\._[a-z]\w*")


def test_the_tests_mirror_the_package():
    """Every other test module sits in the folder of the subpackage it tests (tests/agents,
    tests/components, ..., as eqxrl/agents, eqxrl/components, ...)."""
    subpackages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert {p.name for p in TESTS.glob("test_*.py")} == PROJECT_TESTS
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    assert folders <= subpackages, f"test folders that mirror no subpackage of eqxrl: {folders - subpackages}"


def _private_uses(tree: ast.AST):
    """The lines that name a private module of eqxrl: imports, `import_module`/`__import__`
    calls and attribute chains such as `eqxrl.envs._make`."""
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "__import__") and node.args:
            names = [node.args[0].value] if isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) else []
        elif isinstance(node, ast.Attribute):
            names = [ast.unparse(node)]
        if any(_PRIVATE.match(n) for n in names):
            yield node.lineno


def test_a_test_reaches_into_a_private_module_only_saying_why():
    """Tests use eqxrl's public names; a line that must name a private module (to inject a fault
    where the code looks a name up, or to call a command-line parser directly) says why on that
    line, in a `# (private: ...)` comment."""
    unexplained = []
    for path in sorted(TESTS.rglob("test_*.py")):
        lines = path.read_text().splitlines()
        for n in sorted(set(_private_uses(ast.parse("\n".join(lines))))):
            if "(private:" not in lines[n - 1]:
                unexplained.append(f"{path.relative_to(TESTS)}:{n}: {lines[n - 1].strip()}")
    assert not unexplained, "private modules named without a reason:\n" + "\n".join(unexplained)


def test_post_init_converts_and_check_init_checks():
    """One place for each job: a `__post_init__` converts (it assigns a field: defaults that
    depend on other fields, normalised values), a check that changes nothing is `__check_init__`
    (equinox runs it after every converter, also on subclasses)."""
    checks_only = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "__post_init__":
                assigns = any(
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                    for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    for t in ([*t.elts] if isinstance(t, ast.Tuple) else [t])
                ) or any(isinstance(n, ast.Call) and ast.unparse(n.func) == "super().__post_init__" for n in ast.walk(node))  # fmt: skip
                if not assigns:
                    checks_only.append(f"{module}:{node.lineno}")
    assert not checks_only, f"__post_init__ methods that only check (move them to __check_init__): {checks_only}"
