"""The tutorial's custom agent (A2C, docs/tutorial.md), read from the page itself: its first
two python blocks (the state and the agent) run in a fresh namespace, so the tests of
`eqxrl.testing` check exactly the code the tutorial shows."""

import pathlib
import re

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def load_tutorial_agent() -> dict:
    """**Returns:** the namespace of the tutorial's agent blocks (`A2C`, `A2CState`, and the
    names they use, such as `gae`: a test may replace one there to seed a bug)."""
    blocks = _BLOCK.findall((DOCS / "tutorial.md").read_text())
    namespace = {"__name__": "tutorial_agent"}
    for i, block in enumerate(blocks[:2]):
        exec(compile(block, f"docs/tutorial.md [python block {i + 1}]", "exec"), namespace)
    assert "A2C" in namespace, "docs/tutorial.md's second python block no longer defines A2C"
    return namespace
