"""Execute the Python code of the user documentation.

`docs/tutorial.md`, `docs/getting-started.md`, `docs/jax-native.md`, `docs/composing.md`, `docs/logging.md` and others are run block by block: their
```python blocks, in order, in one namespace per page, skipping every block
whose first line is `# not run by the tests` (long trainings, extra compiled
programs). The tests then check what the pages claim.
"""

import ast
import dataclasses
import math
import pathlib
import re

import numpy as np
import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
SKIP_MARK = "# not run by the tests"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(page: str) -> list[str]:
    """**Returns:** the ```python blocks of `docs/<page>` in order, without the skipped ones."""
    text = (DOCS / page).read_text()
    blocks = BLOCK.findall(text)
    assert blocks, f"docs/{page} has no python blocks"
    return [b for b in blocks if not b.lstrip().startswith(SKIP_MARK)]


def run_page(page: str, namespace: dict) -> dict:
    for i, block in enumerate(python_blocks(page)):
        code = compile(block, f"docs/{page} [python block {i + 1}]", "exec")
        exec(code, namespace)
    return namespace


@pytest.mark.slow
def test_tutorial_runs_and_learns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything the page writes lands here
    ns = run_page("tutorial.md", {"__name__": "docs_tutorial"})

    # One seed: the training return goes up (a random policy scores about 22).
    returns = ns["metrics"]["episode_return"]
    assert returns.shape == (390,)
    first, last = np.nanmean(returns[:20]), np.nanmean(returns[-20:])
    assert first < 60 and last > 150 and last > 3 * first, (first, last)
    np.testing.assert_array_equal(ns["metrics"]["env_steps"], 128 * np.arange(1, 391))
    assert ns["eval_returns"].shape == (16,)
    assert float(ns["eval_returns"].mean()) > 100

    # Four seeds: leading axis 4 everywhere, and every seed learns.
    seed_returns = ns["seed_metrics"]["episode_return"]
    assert seed_returns.shape == (4, 390)
    per_seed = np.nanmean(seed_returns[:, -20:], axis=1)
    assert per_seed.mean() > 150 and np.all(per_seed > 60), per_seed
    assert ns["seed_eval"].shape == (4, 16)

    # PBT: five generations of four members, fitness improves, the best member is usable.
    history = ns["history"]
    assert history.fitness.shape == (5, 4)
    assert history.fitness[-1].max() > history.fitness[0].max() or history.fitness[-1].max() >= 450
    assert history.fitness[-1].max() > 100
    lr = history.hyperparameters["learning_rate"]
    assert np.all((lr >= 1e-4 * (1 - 1e-6)) & (lr <= 1e-2 * (1 + 1e-6)))
    assert math.isfinite(ns["best_fitness"])
    assert float(ns["best_agent"].learning_rate) == pytest.approx(lr[-1, ns["best"]], rel=1e-6)


@pytest.mark.slow
@pytest.mark.optimised  # 800k env steps of training: 40 s optimised, 52 s unoptimised on 2 cores
def test_getting_started_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = run_page("getting-started.md", {"__name__": "docs_getting_started"})
    assert "metrics" in ns


@pytest.mark.slow
def test_jax_native_page_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = run_page("jax-native.md", {"__name__": "docs_jax_native"})
    assert ns["metrics"]["episode_return"].shape == (16,)
    assert ns["seed_metrics"]["episode_return"].shape == (8, 16)
    np.testing.assert_allclose(np.asarray(ns["sweep_metrics"]["learning_rate"][:, 0]), [1e-4, 3e-4, 1e-3], rtol=1e-6)
    assert np.asarray(ns["steps"]).tolist() == [2048, 2048]


@pytest.mark.slow
def test_composing_page_runs(tmp_path, monkeypatch):
    """docs/composing.md: every example runs (tiny budgets: well under a minute on CPU)."""
    monkeypatch.chdir(tmp_path)
    ns = run_page("composing.md", {"__name__": "docs_composing"})
    # The CNN PPO trained; the user torso and the separate actor/critic sizes are what the agents build.
    assert ns["metrics"]["env_steps"][-1] == 4096 and np.isfinite(ns["metrics"]["loss"]).all()
    assert type(ns["shapes"].actor.torso.net).__name__ == "LayerNormMLP"
    assert ns["count"](ns["learner"].actor) < ns["count"](ns["learner"].critic)
    # The custom buffer stored the clipped rewards; both loss terms were logged per member.
    assert float(ns["states"].buffer.data.rewards.max()) == pytest.approx(0.5)
    for name in ("critic_loss_terms/l2_penalty", "critic_loss_terms/q_penalty/q_squared"):
        assert ns["sweep_metrics"][name].shape[0] == 2, name
    np.testing.assert_allclose(np.asarray(ns["sweep"].agent.critic_loss_terms[1].coef), [1e-3, 1e-2], rtol=1e-6)
    paths = [p for p in ns["dqn"].hyperparameters() if "loss_terms" in p]
    assert paths == ["critic.loss_terms.0.coef", "critic.loss_terms.1.coef"]
    # PBT tuned the nested path within its domain.
    lr = ns["history"].hyperparameters["learning_rate.init_value"]
    assert lr.shape == (2, 2) and np.all((lr >= 1e-4 * (1 - 1e-6)) & (lr <= 1e-2 * (1 + 1e-6)))


@pytest.mark.slow
def test_testing_page_runs(tmp_path, monkeypatch):
    """docs/testing.md, after the tutorial's agent blocks (the page tests that A2C): the kit passes
    it, learns the probes the page names, and catches the seeded truncation bug."""
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs_testing"}
    for i, block in enumerate(python_blocks("tutorial.md")[:2]):
        exec(compile(block, f"docs/tutorial.md [python block {i + 1}]", "exec"), namespace)
    ns = run_page("testing.md", namespace)
    assert ns["report"]["time_limit"]["V(+1)"] == pytest.approx(2.0, abs=0.3)
    assert "truncation is treated as termination" in ns["caught"]
    assert ns["gae"] is ns["real_gae"]


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_environments_page_spaces_run():
    """The Spaces section of docs/components/environments.md (the rest of the page builds and
    steps gymnax envs, so only its blocks compile): its examples run and say what they claim."""
    text = (DOCS / "components" / "environments.md").read_text()
    section = text[text.index("\n## Spaces\n") : text.index("\n## Dict and Tuple observations and action masks\n")]
    blocks = BLOCK.findall(section)
    assert len(blocks) == 3
    namespace = {"__name__": "docs_environments_spaces"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/components/environments.md [Spaces, python block {i + 1}]", "exec"), namespace)
    assert namespace["obs"]["grid"].shape == (4, 3, 3, 2)


@pytest.mark.slow
def test_environments_page_masks_run():
    """The masks section of docs/components/environments.md: PPO on `MaskedActions` takes no illegal action."""
    text = (DOCS / "components" / "environments.md").read_text()
    section = text[text.index("\n## Dict and Tuple observations and action masks\n") : text.index("\n## Adapters\n")]
    blocks = BLOCK.findall(section)
    assert len(blocks) == 1
    namespace = {"__name__": "docs_environments_masks"}
    exec(compile(blocks[0], "docs/components/environments.md [masks, python block 1]", "exec"), namespace)
    assert int(namespace["eqxrl"].envs.innermost_state(namespace["state"].env_state).illegal.sum()) == 0


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_logging_page_runs(tmp_path, monkeypatch):
    """docs/logging.md: the trackers in a script, a user's sink by name and as a train callback."""
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    monkeypatch.chdir(tmp_path)
    ns = run_page("logging.md", {"__name__": "docs_logging"})
    assert len(ns["history"]) >= 1 and ns["lines"][-1] == '{"status": "complete"}' and len(ns["lines"]) == 33
    assert ns["rows"][:3] == [128, 256, 384]
    assert (tmp_path / "runs" / "logged" / "wandb").is_dir() and (tmp_path / "runs" / "logged" / "tensorboard").is_dir()
    from eqxrl.loop import SINKS

    SINKS.pop("jsonl")


@pytest.mark.slow
def test_ippo_page_runs():
    """docs/agents/ippo.md's examples: MPE's team act, and every agent's action legal under its own mask."""
    import eqxrl  # noqa: F401  (first, as the page does: it chooses its CPU devices before jaxmarl's import starts JAX)

    pytest.importorskip("jaxmarl")
    ns = run_page("agents/ippo.md", {"__name__": "docs_agents_ippo"})
    assert ns["agent"].learner.layout.entries == (("agent_id", (2,)), ("legal", (4,))) and ns["actions"].shape == (2,)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_mappo_page_runs():
    """docs/agents/mappo.md's example: the centralised critic's input, and the team act."""
    import eqxrl  # noqa: F401  (first, as the page does: it chooses its CPU devices before jaxmarl's import starts JAX)

    pytest.importorskip("jaxmarl")
    ns = run_page("agents/mappo.md", {"__name__": "docs_agents_mappo"})
    assert ns["agent"].global_state_kind == "observations"


# docs/suites/<suite>.md pages: the module each needs (the page's name unless listed here). The
# navix, xminigrid and playground pages run in their suites' test files, which check what they print.
_SUITE_MODULES: dict[str, str] = {}
_RUN_ELSEWHERE = {"navix", "xminigrid", "playground"}


@pytest.mark.parametrize(
    "suite",
    [p.stem for p in sorted((DOCS / "suites").glob("*.md")) if p.stem not in _RUN_ELSEWHERE],
)
@pytest.mark.slow  # (an optional suite each: tests/tiers.py, OPTIONAL_SUITES_PREFIX)
def test_suite_pages_run(suite):
    """Every docs/suites page's examples run (one make and reset each), where its suite is installed."""
    pytest.importorskip(_SUITE_MODULES.get(suite, suite))
    run_page(f"suites/{suite}.md", {"__name__": f"docs_suites_{suite}"})


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_architecture_pages_extension_examples_run(tmp_path, monkeypatch):
    """docs/architecture.md, "Adding an agent, a replay buffer or a logger": each is one class of
    public names plus a registration line, passes its eqxrl.testing check, and runs."""
    from eqxrl.agents import AGENTS, agent_name
    from eqxrl.loop import SINKS

    monkeypatch.chdir(tmp_path)  # (the sink writes rows.txt here)
    section = (DOCS / "architecture.md").read_text().split("### Adding an agent, a replay buffer or a logger")[1].split("\n## ")[0]
    blocks = BLOCK.findall(section)
    assert len(blocks) == 3
    ns = {"__name__": "docs_architecture_extensions"}
    try:
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/architecture.md [extensions, python block {i + 1}]", "exec"), ns)
        assert agent_name(ns["agent"]) == "reinforce" and SINKS["lines"] is ns["Lines"]
    finally:  # (the registries are the process's: leave them as the other tests expect)
        AGENTS.pop("reinforce", None)
        SINKS.pop("lines", None)
    assert ns["metrics"]["episode_return"].shape == (4096 // 64,)
    assert type(ns["dqn"].replay_buffer).__name__ == "ClippedRewards"
    rows = (tmp_path / "rows.txt").read_text().splitlines()
    assert len(rows) == 2048 // 64 and rows[0].startswith("64 ")


@pytest.mark.parametrize(
    "page", sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if p.name != "tutorial.md")
)
def test_pages_compile(page):
    """Every python block of every page is at least valid Python."""
    text = (DOCS / page).read_text()
    for i, block in enumerate(BLOCK.findall(text)):
        compile(block, f"docs/{page} [python block {i + 1}]", "exec")


def test_relative_links_resolve():
    """Every relative link between the pages points to an existing file."""
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    missing = []
    for page in DOCS.rglob("*.md"):
        for target in link.findall(page.read_text()):
            if re.match(r"^[a-z]+://", target):
                continue
            if not (page.parent / target).resolve().exists():
                missing.append(f"{page.relative_to(DOCS)} -> {target}")
    assert not missing, missing



def _field_table(page: str) -> dict[str, str]:
    """The `| field | default | meaning |` table under `## Fields` of an agent page."""
    text = (DOCS / page).read_text()
    section = text.split("## Fields", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1].strip("`")
    return rows


def _documented_default(text: str):
    if text in ("inf", "-inf"):
        return float(text)
    return ast.literal_eval(text)


@pytest.mark.parametrize("name", ["PPO", "DQN", "PQN", "DDPG", "TD3", "SAC", "CrossQ", "MPO", "DADS", "IPPO", "MAPPO"])
def test_agent_field_tables_match_the_code(name):
    """Each agent page lists `env` and every keyword of the constructor (`cls.keywords()`: the
    dataclass fields, or for IPPO PPO's and its own), in order, with its default."""
    import eqxrl.agents

    cls = getattr(eqxrl.agents, name, None)
    page = f"agents/{name.lower()}.md"
    if cls is None or not (DOCS / page).exists():
        pytest.skip(f"{name} or docs/{page} does not exist")
    fields = list(cls.keywords().values())
    table = _field_table(page)
    assert list(table) == ["env", *(f.name for f in fields)]
    for f in fields:
        if f.default is not dataclasses.MISSING:
            expected = f.default
        elif f.default_factory is not dataclasses.MISSING:
            expected = f.default_factory()
        else:
            assert table[f.name] == "required", f.name
            continue
        got = _documented_default(table[f.name])
        if isinstance(expected, float) or isinstance(got, float):
            assert float(got) == pytest.approx(float(expected), rel=1e-9), f.name
        else:
            assert got == expected, f.name
