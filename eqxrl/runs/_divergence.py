"""A run that diverged: what of it is kept (`metrics.csv`, the learning curve,
`config.json` with `"status": "diverged"` and the last checkpoint with finite
parameters), its one-line error, and the line that refuses to resume it."""

import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..agents import Batch
from ..loop import Checkpoint, NonFiniteError, SinkGroup, divergence, finite_flag, listing, state_is_finite
from ..store import CheckpointError, write_json
from ._checkpoint import checkpoint_steps, load_checkpoint
from ._config import diverged_record
from ._files import CONFIG, METRICS
from ._run_sinks import run_file_sinks

__all__ = ["DivergenceCheck", "diverged_advice", "diverged_error", "last_finite_checkpoint"]


class DivergenceCheck:
    """The divergence check of a run without the non-finite guard, called at every chunk
    boundary: `check(checkpoint, now)` returns None or `(iteration, quantities)`.

    The state's finiteness (`finite_flag`) is dispatched at each boundary and read at
    the next one, while the chunk after it runs: reading it at once made the host wait
    for every chunk, and the device then idled while the host dispatched the next (a
    third more time for a PPO CartPole run). With `now` (where a checkpoint is due, and
    at the end) it is read at once, before the checkpoint is submitted, and the
    metrics since the last such read are checked too (an Inf with a finite state, the
    guard's other rule): no checkpoint of a non-finite state is written.

    **Arguments:** `done`, the iterations done before (a resumed run's).
    """

    def __init__(self, done: int):
        self.checked = done  # iterations whose metrics were checked
        self.finite_at = done  # the last boundary whose state was read as finite
        self.flags: list[tuple[int, Any]] = []  # (iteration, device flag) not yet read

    def __call__(self, checkpoint: Checkpoint, now: bool) -> tuple[int, list[str]] | None:
        self.flags.append((checkpoint.iteration, finite_flag(checkpoint.state)))
        while len(self.flags) > (0 if now else 1):
            iteration, flag = self.flags.pop(0)
            if not bool(flag):
                return divergence(checkpoint, self.finite_at, iteration, finite=False)
            self.finite_at = iteration
        if now:
            found = divergence(checkpoint, self.checked, finite=True)
            self.checked = checkpoint.iteration
            return found
        return None


def last_finite_checkpoint(run_dir: pathlib.Path, agent: Any, num_seeds: int) -> int | None:
    """The newest checkpoint that reads back and whose state is finite (as the non-finite
    guard checks it): its env step, or None."""
    for entry in reversed(checkpoint_steps(run_dir)):
        try:
            checkpoint = load_checkpoint(run_dir, agent, num_seeds, which=entry["step"])
        except (CheckpointError, ValueError):
            continue  # damaged, or not this run's: not one to continue from
        if state_is_finite(checkpoint.state):
            return entry["step"]
    return None


def diverged_error(
    run_dir: pathlib.Path, agent: Any, config: dict[str, Any], metrics: Mapping[str, Any] | None,
    iteration: int, quantities: list[str], stopped: int,
) -> NonFiniteError:  # fmt: skip
    """Record a diverged run, so that nothing of it is lost: `metrics.csv` and the learning
    curve of the iterations done (NaN as `nan`), and `config.json` with `"status":
    "diverged"`, where and what, and the last checkpoint with finite parameters (which
    `eqxrl evaluate` then reads). No `state.eqx` or `eval.json`: the state is not finite.

    **Returns:** the `NonFiniteError` to raise, its message one line.
    """
    per_iteration = Batch.of(agent).agent.steps_per_iteration
    step = last_finite_checkpoint(run_dir, agent, config["seeds"])
    config["status"] = "diverged"
    config["diverged"] = {
        "iteration": int(iteration),
        "env_steps": int(iteration) * per_iteration,
        "quantities": list(quantities),
        "stopped_at": int(stopped) * per_iteration,
        "last_finite_checkpoint": step,
    }
    if metrics is not None and len(np.asarray(metrics["env_steps"])):
        # The same sinks as a finished run's, given the iterations done (no state: it is not finite).
        SinkGroup(run_file_sinks(run_dir, agent, config, diverged=True)).result(None, metrics)
    write_json(run_dir / CONFIG, config)
    where = (
        f"its last checkpoint with finite parameters is env step {step:,}, which `eqxrl evaluate {run_dir}` evaluates"
        if step is not None else "no checkpoint with finite parameters was written before it"
    )  # fmt: skip
    message = (
        f"training diverged: non-finite values after iteration {iteration} of {config['total_steps'] // per_iteration} "
        f"(env step {int(iteration) * per_iteration:,} per member): {listing(quantities, limit=3)}; {run_dir} is kept "
        f"({METRICS}, {CONFIG} status 'diverged'), {where}"
    )
    return NonFiniteError(message, int(iteration), int(iteration) * per_iteration, list(quantities), None)


def diverged_advice(run_dir: pathlib.Path, config: dict[str, Any]) -> str:
    """The one line that refuses to resume a diverged run, and says how to go on."""
    record = diverged_record(config) or {}
    what = f"after iteration {record.get('iteration')} ({listing(list(record.get('quantities') or []), limit=3)})"
    step = record.get("last_finite_checkpoint")
    if step is None:
        return (
            f"{str(run_dir)!r} diverged {what} before any checkpoint with finite parameters: resuming it would "
            f"diverge again; train anew with other hyperparameters (edit a copy of {run_dir / CONFIG} and give it to "
            "`eqxrl train --config FILE`)"
        )
    return (
        f"{str(run_dir)!r} diverged {what}: resuming it would diverge again. Continue from its last checkpoint with "
        f"finite parameters (env step {step}) with other hyperparameters in Python: "
        f"`checkpoint = eqxrl.runs.load_checkpoint({str(run_dir)!r}, eqxrl.runs.load_agent({str(run_dir)!r}), which={step})`, "
        f"then `eqxrl.train(changed_agent, eqxrl.runs.seed_keys({config.get('seed')}, {config.get('seeds')}), "
        f"total_steps, resume=checkpoint)`; or train anew: edit a copy of {run_dir / CONFIG} and give it to "
        "`eqxrl train --config FILE`"
    )
