"""The docs site (mkdocs.yml, `pip install -e ".[docs]"`): `mkdocs build --strict` passes, its
API reference renders every public name of every public module, and a broken reference fails
the build (so this check can fail). CI runs these in its slow tier.

A public module is one whose dotted path has no segment with a leading underscore; its public
names are its `__all__` if it has one, otherwise what it defines at the top level and what it
re-exports with a redundant alias (`from ._ppo import PPO as PPO`), submodules and underscore
names left out. `docs/griffe_eqxrl.py` gives mkdocstrings the same rule.
"""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "eqxrl"
NOT_IN_REFERENCE = {
    # `main` and the parser behind `eqxrl train|evaluate|pbt`: documented by `eqxrl --help` and
    # docs/getting-started.md, not as Python API.
    "eqxrl.cli",
}
HEADING = re.compile(r'<h\d id="(eqxrl[\w.]*)" class="doc doc-heading"')
MODULE = re.compile(r'<a id="(eqxrl[\w.]*)"></a>')  # (a module's docstring follows its page's title)


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def public_modules() -> dict[str, pathlib.Path]:
    return {
        name: path
        for name, path in _modules().items()
        if not any(part.startswith("_") for part in name.split("."))
        and not any(name == m or name.startswith(m + ".") for m in NOT_IN_REFERENCE)
    }


def public_names(module: str, path: pathlib.Path) -> list[str]:
    """**Returns:** the public names of `module` (see this file's docstring), read from its source."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    modules = _modules()
    names = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [a.name for a in node.names if a.asname == a.name and f"{module}.{a.name}" not in modules]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def mkdocs_build(config: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # (Material's notice about MkDocs 2)
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_site_builds_strictly_with_every_public_name(tmp_path):
    built = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-3000:]}"
    assert "not included in the \"nav\"" not in built.stderr, f"docs pages left out of mkdocs.yml's nav:\n{built.stderr}"

    headings, modules_rendered = set(), set()
    for page in (tmp_path / "site" / "api").rglob("*.html"):
        text = page.read_text()
        headings |= set(HEADING.findall(text))
        modules_rendered |= set(MODULE.findall(text))
    modules = public_modules()
    assert {"eqxrl", "eqxrl.agents", "eqxrl.testing.probes"} <= set(modules)
    names = [f"{m}.{n}" for m, path in modules.items() for n in public_names(m, path)]
    assert len(names) > 400  # (479 public names in 13 modules when this test was written)
    missing = [m for m in modules if m not in modules_rendered] + [n for n in names if n not in headings]
    assert not missing, f"public names the API reference (docs/api/) does not render: {', '.join(missing)}"


def _site_config(tmp_path: pathlib.Path, page: str) -> pathlib.Path:
    """mkdocs.yml with one page, `page`, as its docs (paths it names made absolute)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(page)
    config.update(docs_dir=str(tmp_path / "docs"), nav=["index.md"])
    python = next(p for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    python = python["mkdocstrings"]["handlers"]["python"]
    python["paths"] = [str(ROOT / p) for p in python["paths"]]
    options = python["options"]
    options["extensions"] = [str(ROOT / e) for e in options["extensions"]]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize(
    "page",
    [
        "# API\n\n::: eqxrl.core.one_line\n\n::: eqxrl.does_not_exist\n",
        "# API\n\n::: eqxrl.core.one_line\n\nSee [the function][eqxrl.core.does_not_exist].\n",
    ],
    ids=["missing object", "broken cross-reference"],
)
def test_broken_reference_fails_the_build(tmp_path, page):
    built = mkdocs_build(_site_config(tmp_path, page), tmp_path / "site")
    assert built.returncode != 0, f"the build passed with a broken reference:\n{built.stderr[-3000:]}"
    assert "does_not_exist" in built.stderr, built.stderr[-3000:]
