"""Griffe extensions for the docs site's API reference (mkdocs.yml, `mkdocstrings` options).

- `PublicRedundantAliases`: `from ._ppo import PPO as PPO` in a package's `__init__.py` makes
  `PPO` public, as it does for type checkers (the redundant alias is how eqxrl re-exports a name;
  only `eqxrl.runs` has an `__all__`). Without it griffe counts every imported name as private and
  `::: eqxrl.agents` renders an empty page, the public names being defined in private modules
  (`eqxrl/agents/_ppo.py`). The rule of the griffe-public-redundant-alias package, which is not
  on the package index this project installs from.
- `SourceAnnotations`: annotations as written in the source. Griffe reads the string in a
  jaxtyping annotation as a forward reference, so `Float[Array, "T *batch"]` would be shown as
  `Float[Array, T * batch]`. An attribute that `__init__` assigns (`self.capacity = capacity`)
  is shown without that value, an expression over `__init__`'s arguments (`capacity: int`, not
  `capacity: int = capacity`).
"""

import ast

import griffe


class PublicRedundantAliases(griffe.Extension):
    def on_alias_instance(self, *, node, alias, agent, **kwargs) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(name.asname == name.name == alias.name for name in node.names):
                alias.public = True


class SourceAnnotations(griffe.Extension):
    def on_function_instance(self, *, node, func, agent, **kwargs) -> None:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        a = node.args
        for arg in [*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg]:
            if arg is not None and arg.annotation is not None and arg.arg in func.parameters:
                func.parameters[arg.arg].annotation = ast.unparse(arg.annotation)
        if node.returns is not None:
            func.returns = ast.unparse(node.returns)

    def on_attribute_instance(self, *, node, attr, agent, **kwargs) -> None:
        if isinstance(node, ast.AnnAssign):
            attr.annotation = ast.unparse(node.annotation)
        if getattr(agent, "current", None) is not None and agent.current.is_function:
            attr.value = None
