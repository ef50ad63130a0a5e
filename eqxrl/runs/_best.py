"""What "best" means for a run's kept checkpoint (`train_run(best=...)`, `eqxrl train --best
METRIC`; jaxagents' `best_fn`): a metric the run logs, highest best (`"-NAME"`: lowest), or a
function of the logged row at a checkpoint. The checkpoint writer scores each checkpoint by it
(the score is in the checkpoint's meta record, so `load_run(checkpoint="best")` needs nothing
but the files), and `config.json` records it (a metric name, or a function's name only: loading
a config runs no code, so a resumed run is given the function again)."""

import math
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..agents import Batch, Clock

__all__ = ["DEFAULT_BEST", "best_of_config", "best_record", "best_score", "check_best", "metric_names"]

DEFAULT_BEST = "eval_return"
"""The default criterion: the mean evaluation return (a run with `eval_every`)."""

BestFn = str | Callable[[dict[str, float]], float]


def check_best(best: Any, agent: Any, evaluating: bool, owner: str = "train_run(best)") -> None:
    """Raise a ValueError (one line, naming `owner`) unless `best` is a metric the run of `agent`
    logs (`"eval_return"` needs `evaluating`, a run with `eval_every`; otherwise no checkpoint
    is scored, as before), optionally after a `-`, or a callable."""
    if callable(best):
        return
    expected = "a metric name of the run (e.g. 'eval_return', or '-value_loss' for the lowest) or a function of its metrics"
    if not isinstance(best, str) or not best.lstrip("-") or best.startswith("--"):
        raise ValueError(f"{owner} must be {expected}, got {best!r}")
    name = best.removeprefix("-")
    if name == DEFAULT_BEST:
        return
    names = metric_names(agent)
    if name not in names:
        evaluated = "'eval_return' (with eval_every) or one of " if not evaluating else "one of "
        raise ValueError(f"{owner} must name a metric of the run, {evaluated}{sorted(names)}, got {best!r}")


def metric_names(agent: Any) -> list[str]:
    """**Returns:** the metrics one training iteration of `agent` (or of a stack's members)
    logs, found by tracing it (`eqx.filter_eval_shape`: nothing is compiled or run)."""
    batch = Batch.of(agent)
    one = batch.member(0)

    def iteration(key):
        return one.train_iteration(one.init(key), Clock(jnp.zeros((), jnp.int32), jnp.ones((), jnp.int32)))[1]

    return sorted(eqx.filter_eval_shape(iteration, jax.random.key(0)))


def best_record(best: BestFn) -> str | dict[str, str]:
    """What `config.json` records of `best`: the metric name, or `{"function": "module.name"}`
    for a callable (a name to tell the user, never imported)."""
    if isinstance(best, str):
        return best
    name = getattr(best, "__qualname__", None) or type(best).__qualname__
    return {"function": f"{getattr(best, '__module__', None) or '?'}.{name}"}


def best_of_config(config: Mapping[str, Any], given: Any, owner: str = "resume_run(best)") -> BestFn:
    """The criterion a resumed run goes on with: the metric name its `config.json` records
    (`given` None or the same), or, for a run that chose a function, `given`, that function again."""
    recorded = config.get("best", DEFAULT_BEST)
    if isinstance(recorded, dict):
        if not callable(given):
            raise ValueError(
                f"{owner}: the run kept its best checkpoint by a function ({recorded.get('function')}), which "
                "config.json cannot hold: give it again, eqxrl.runs.resume_run(run_dir, best=that_function)"
            )
        return given
    if given is not None and given != recorded:
        raise ValueError(f"{owner} must be the run's own, {recorded!r} (its config.json), or None, got {given!r}")
    return recorded


def metrics_row(metrics: Mapping[str, Any], iteration: int) -> dict[str, float]:
    """The logged row after `iteration` iterations: each metric's mean over the seeds or members."""
    return {k: float(np.mean(np.asarray(v)[..., iteration - 1])) for k, v in metrics.items()}


def best_score(best: BestFn, metrics: Mapping[str, Any], iteration: int) -> float | None:
    """The score (higher is better) of the checkpoint after `iteration` iterations of a run whose
    metrics so far are `metrics`, by `best`; None when it has none there (NaN: an iteration that
    was not evaluated, no episode finished, ...): only a scored checkpoint can be the best."""
    if iteration < 1:
        return None
    if isinstance(best, str):
        name = best.removeprefix("-")
        values = metrics.get(name)
        if values is None:
            return None
        value = float(np.mean(np.asarray(values)[..., iteration - 1]))  # (as eval_return_at: in the metric's dtype)
        value = -value if best.startswith("-") else value
    else:
        value = best(metrics_row(metrics, iteration))
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"train_run(best) must return a number (higher is better), got {value!r}")
        value = float(value)
    return None if math.isnan(value) else value
