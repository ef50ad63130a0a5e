"""Shared fixtures. jaxtyping + beartype checks are switched on by pytest's addopts (pyproject.toml)."""

import itertools
import os
import pathlib
import shutil
import sys
import tempfile

# The tests mirror the package (tests/agents, tests/components, ...; the shared helpers, workers and
# data stay here in tests/). Every folder is on sys.path, whichever file pytest is given, so a test
# module imports the helpers (`from typecheck import ...`) and another module's fixtures by module
# name (module names are unique across the folders).
_TESTS = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(d) for d in sorted(_TESTS.iterdir()) if d.is_dir() and any(d.glob("test_*.py"))] + [str(_TESTS)]

# Tests check what programs compute, not how fast they run: XLA compiles them with most of its
# optimisations off (level 0, no expensive LLVM passes) and, on CPU, with its older fusion
# emitters (`--xla_cpu_use_fusion_emitters=false`), here and in every subprocess a test starts
# (they inherit the environment). Level 0: ~20% less time for the suite (test_product +
# test_off_policy fast tier 48 -> 38 s on 2 cores). The older emitters: ~2.5x less XLA compile
# time for these programs (PBT-TD3 7.4 -> 2.9 s, DADS 10.6 -> 4.9 s), the fast tier 189 -> 170 s and
# the whole suite 26-30 -> 22 min on 2 cores;
# the current emitters run compiled programs ~30% faster, which is what eqxrl's users get.
# Learning tests, which train for minutes, and tests marked `optimised` compile as users do
# (`_compile_settings_by_marker`). The older emitters can round differently (by an ulp) in two
# differently structured programs that compute the same numbers (a run chunked two ways, jit of
# train against train, eval during training or not), so a test that compares such programs bit
# for bit is marked `bitwise`: still unoptimised, with the current emitters, as users get them.
# JAX_DISABLE_MOST_OPTIMIZATIONS=0 in the environment runs the whole suite optimised.
_NO_OPT_ENV = "JAX_DISABLE_MOST_OPTIMIZATIONS"
os.environ.setdefault(_NO_OPT_ENV, "1")
_NO_OPT = os.environ[_NO_OPT_ENV].lower() in ("1", "true", "yes", "on")
_EMITTERS = "xla_cpu_use_fusion_emitters"
if _NO_OPT and _EMITTERS not in os.environ.get("XLA_FLAGS", ""):
    # Read when the backend starts (after this file). A test that sets XLA_FLAGS for a subprocess
    # appends to this value (test_train_devices, test_pbt_devices); a `bitwise` test that starts
    # one would append `--xla_cpu_use_fusion_emitters=true` (the last occurrence of a flag counts).
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_EMITTERS}=false".strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
# (Also here: a plugin may have imported jax before this file set the environment.)
jax.config.update("jax_disable_most_optimizations", _NO_OPT)
_CURRENT_EMITTERS = {"bitwise test": False}  # set by `_compile_settings_by_marker`


def _emitters_chosen_program_by_program():
    """In this process the fusion emitters are chosen program by program (XLA_FLAGS above holds
    for the whole process): the older ones for an unoptimised program, unless a `bitwise` test
    compiles it; the current ones otherwise. Through JAX's private `get_compile_options`, as
    there is no public default for compiler options: should JAX rename it, this fails here, at
    the start of the run."""
    from jax._src import compiler

    original = compiler.get_compile_options
    if getattr(original, "_eqxrl_tests", False):
        return

    def get_compile_options(*args, **kwargs):
        options = original(*args, **kwargs)
        older = jax.config.read("jax_disable_most_optimizations") and not _CURRENT_EMITTERS["bitwise test"]
        overrides = dict(options.env_option_overrides)
        overrides.setdefault(_EMITTERS, not older)
        options.env_option_overrides = list(overrides.items())
        return options

    get_compile_options._eqxrl_tests = True
    compiler.get_compile_options = get_compile_options


_emitters_chosen_program_by_program()
# The CLI's persistent compilation cache stays off in tests (in-process `main()` calls and the
# subprocesses they start), so no test writes to the user's cache home; test_compile_cache.py
# switches it on in a temporary directory.
os.environ.setdefault("EQXRL_COMPILE_CACHE", "off")

_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def pytest_configure(config):
    """One compilation cache for the whole run, in a temporary directory: the xdist workers and the
    subprocesses that the tests start (the CLI, kill -9, several devices) inherit it through the
    environment, so a program that several modules, workers or processes compile (the same agent
    on the same env: identical HLO) is compiled once and read back after. Only programs that took
    at least JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS are written. The run starts cold, as CI
    does; a directory already set in the environment is used as it is and kept."""
    if not hasattr(config, "workerinput") and not os.environ.get(_CACHE_ENV):
        config._jax_cache_dir = tempfile.mkdtemp(prefix="eqxrl-tests-jax-cache-")
        os.environ[_CACHE_ENV] = config._jax_cache_dir
        os.environ.setdefault(_MIN_TIME_ENV, "0.2")
    if os.environ.get(_CACHE_ENV):
        jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_ENV])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ.get(_MIN_TIME_ENV, "1.0")))


def pytest_unconfigure(config):
    directory = getattr(config, "_jax_cache_dir", None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Learning tests are slow tests too: the fast tier (`-m "not slow"`) leaves both out.

    Under xdist they also start first, shared out between the workers. Each takes minutes:
    left in file order, the last of them start near the end of the run and one worker
    trains alone while the other sits idle."""
    from tiers import OPTIONAL_SUITES_PREFIX, SECONDARY_MODULES

    for item in items:
        if item.path.name.startswith(OPTIONAL_SUITES_PREFIX) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("learning") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is not None and item.path.name in SECONDARY_MODULES:
            item.add_marker(pytest.mark.exhaustive)  # (tests/tiers.py: CI's time)
    if "exhaustive" not in (config.getoption("markexpr") or ""):
        # Exhaustive tests (tens of minutes: every agent's programs at every key count) run only
        # when `-m` names them (`python -m pytest -m exhaustive`), never in the README's command.
        kept = [item for item in items if item.get_closest_marker("exhaustive") is None]
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("exhaustive") is not None])
        items[:] = kept
    yield  # -m and -k deselect here
    workers = getattr(config, "workerinput", {}).get("workercount")
    if workers and workers > 1:
        items[:] = _learning_tests_first(items, workers)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n`'s default scheduler, `--dist load`, becomes `worksteal`: an idle worker takes tests
    queued on a busy one, so no worker waits while another still has a backlog. (Here and not
    as `--dist` in pyproject.toml's addopts, which `-p no:xdist` would reject.)"""
    if config.getvalue("dist") == "load":
        from xdist.scheduler import WorkStealingScheduling

        return WorkStealingScheduling(config, log)
    return None


def _learning_tests_first(items, workers):
    """The collection reordered for worksteal (pytest_xdist_make_scheduler): that scheduler first
    hands each worker a contiguous share, len(pending) // workers_left tests, then lets idle
    workers take tests queued on busy ones. Each share starts with its turn of the learning
    tests; the other tests keep their order. Every worker computes the same order."""
    learning = [item for item in items if item.get_closest_marker("learning") is not None]
    rest = [item for item in items if item.get_closest_marker("learning") is None]
    order, pending = [], len(items)
    for w in range(workers):
        share = pending // (workers - w)
        head = learning[w::workers]
        if share < len(head):
            return items  # too few other tests to go around: leave the order alone
        order += head + rest[: share - len(head)]
        rest = rest[share - len(head) :]
        pending -= share
    assert len(order) == len(items)
    return order


@pytest.fixture(autouse=True)
def _compile_settings_by_marker(request):
    """A learning test's programs (and an `optimised` test's) are compiled with XLA's
    optimisations, a `bitwise` test's unoptimised with XLA:CPU's current fusion emitters (see
    the top of this file). JAX's in-memory caches are cleared on the way in and out, so no
    program compiled one way is reused by a test of another kind (their keys do not hold the
    emitters; the persistent cache keys them apart already): a test that compares a program
    run here with one run in a subprocess gets the same emitters on both sides."""
    marked = lambda *names: any(request.node.get_closest_marker(m) is not None for m in names)  # noqa: E731
    optimised, bitwise = marked("learning", "optimised"), marked("bitwise")
    if not _NO_OPT or not (optimised or bitwise):
        yield
        return
    jax.config.update("jax_disable_most_optimizations", not optimised)
    _CURRENT_EMITTERS["bitwise test"] = bitwise  # (optimised programs get the current emitters anyway)
    jax.clear_caches()
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", True)
        _CURRENT_EMITTERS["bitwise test"] = False
        jax.clear_caches()


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
