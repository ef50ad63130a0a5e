"""Shared fixtures. jaxtyping + beartype checks are switched on by pytest's addopts (pyproject.toml)."""

import itertools

import jax
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")


def pytest_collection_modifyitems(config, items):
    """Learning tests are slow tests too: the fast tier (`-m "not slow"`) leaves both out."""
    for item in items:
        if item.get_closest_marker("learning") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def getkey():
    """`getkey()` returns a fresh PRNG key on every call (deterministic per test)."""
    counter = itertools.count()
    base = jax.random.key(0)
    return lambda: jax.random.fold_in(base, next(counter))


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module: a worker that keeps
    every module's executables grew past 6 GB by the end of the suite."""
    yield
    import gc

    jax.clear_caches()
    gc.collect()
