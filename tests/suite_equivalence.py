"""What the suite adapters' tests share: rolling an adapter out to compare it with the suite's
own steps, listing one suite's ids without importing every other installed suite, and the
checks of `make`'s answers to a mistyped id and to a suite that is not installed.

Imported by its bare name (`import suite_equivalence`): pgx installs a top-level `tests` package."""

import re
import sys

import jax
import numpy as np
import pytest

from eqxrl.envs import _make, make, registered


def adapter_rollout(env, key, actions):
    """`env.reset(key)`, then one `env.step` per action (under `jax.lax.scan`, step key fixed:
    the suites draw from their own states). **Returns:** `(first_obs, (obs, reward, terminated,
    truncated))`, the latter stacked along the steps."""
    state, first = env.reset(key)

    def step(state, action):
        state, ts = env.step(jax.random.key(0), state, action)
        return state, (ts.obs, ts.reward, ts.terminated, ts.truncated)

    return first.obs, jax.lax.scan(step, state, actions)[1]


def first_done(done):
    """Per env (rows), the index of the first done step, or the last step when none."""
    return np.where(done.any(axis=1), done.argmax(axis=1), done.shape[1] - 1)


def only_suite(monkeypatch, prefix):
    """`registered()` without the other suites (importing brax and JaxMARL for their ids takes ~10 s)."""
    monkeypatch.setattr(_make, "_suites", {prefix: _make._suites[prefix]})


def _prefix(name):
    return name.split("/")[0] + "/"


def assert_suggests(monkeypatch, typo, suggested):
    """`make(typo)` refuses the unknown id and suggests `suggested`, which `registered()` lists."""
    only_suite(monkeypatch, _prefix(typo))
    assert suggested in registered()
    match = rf"unknown environment {re.escape(repr(typo))}; did you mean one of \[.*{re.escape(repr(suggested))}"
    with pytest.raises(ValueError, match=match):
        make(typo)


def assert_missing_suite(monkeypatch, name, message, modules):
    """With `modules` unimportable, `make(name)` raises the `ImportError` `message` (a regex) and
    `registered()` lists none of the suite's ids."""
    only_suite(monkeypatch, _prefix(name))
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # `import module` fails
    with pytest.raises(ImportError, match=message):
        make(name)
    assert not _make._suite_ids(_prefix(name))
