"""Training with a run directory: `config.json` first, checkpoints while training,
then the final state, metrics, learning curve and evaluation; resuming an interrupted
run and continuing a finished one with a larger budget."""

import json
import math
import pathlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jaxtyping import PyTree

from ..agents import Batch
from ..core import check_positive_int, one_line
from ..loop import (
    Checkpoint, NonFiniteError, RunInfo, SinkGroup, TrainInfo, eval_iterations_for, evaluate, make_sinks, num_iterations_for, train,
)  # fmt: skip
from ._best import DEFAULT_BEST, best_of_config, best_record, check_best
from ._checkpoint import DEFAULT_KEEP, CheckpointWriter, checkpoint_steps, load_checkpoint, run_record
from ._config import agent_from_config, diverged_record, eval_key, load_config, recorded_sinks, run_config, seed_keys, timings_record
from ._divergence import diverged_advice, diverged_error
from ..store import read_text_bounded, write_json
from ._files import CHECKPOINTS, CONFIG, CURVE, EVAL, METRICS, STATE, TENSORBOARD, PathLike
from ._lock import RunDirectoryError, holds_run_lock
from ._metrics import _batch_size, evaluation_summary
from ._reports import write_reports
from ._checkpoint_sink import CheckpointSink
from ._run_sinks import run_file_sinks
from ._state import STATE_RECORD, save_state, template_state
from ._video import RECORD_AUTO, RECORD_BUDGET, VIDEOS, VideoRecorder, check_recordable, close_recorder, default_record_every

__all__ = ["resume_run", "save_run", "train_run"]

_RUN_FILES = (CONFIG, METRICS, STATE, CURVE, EVAL, CHECKPOINTS, TENSORBOARD, VIDEOS, "pbt.json", "population", "history.csv")
"""What a run (or a PBT run) leaves in its directory: `train_run` refuses a directory holding one."""


@holds_run_lock("save_run(run_dir)")
def save_run(
    run_dir: PathLike,
    agent: Any,
    state: PyTree,
    metrics: Mapping[str, Any],
    *,
    total_steps: int,
    seed: int = 0,
    env_name: str | None = None,
    info: TrainInfo | None = None,
    command: str | None = None,
    _outputs: SinkGroup | None = None,
) -> pathlib.Path:
    """Save a finished training run: `config.json`, `metrics.csv`, `state.eqx`, `learning_curve.png`.

    **Arguments:**

    - `run_dir`: the directory to write (created if missing; files in it are replaced).
    - `agent`: the agent that was trained (one agent, not `eqxrl.stack`).
    - `state`, `metrics`: as returned by `eqxrl.train`; a leading seed axis on
      both means a batch of seeds.
    - `total_steps`: the env-step budget passed to `eqxrl.train`.
    - `seed`: the base seed; the keys were `eqxrl.runs.seed_keys(seed, num_seeds)`.
    - `env_name`: the name `eqxrl.envs.make` builds the env from (default `agent.env.name`).
    - `info`: the `TrainInfo` of `train(..., return_info=True)`, for the timings.
    - `command`: the command line that made the run, recorded for reference.

    Holds the run directory's lock while it writes (`RunDirectoryError` when another
    process is writing it).

    **Returns:** the run directory as a `pathlib.Path`.
    """
    stacked = Batch.of(agent, owner="save_run(agent)").stacked
    run_dir = pathlib.Path(run_dir)
    if "env_steps" not in metrics or "episode_return" not in metrics:
        raise ValueError(f"save_run(metrics) must include 'env_steps' and 'episode_return', got {sorted(metrics)}")
    rows = _batch_size(metrics)
    num_seeds = 1 if rows is None else rows
    if stacked and num_seeds != agent.size:
        raise ValueError(f"save_run(metrics) must have a leading axis of {agent.size} for the stacked agents, got {num_seeds}")
    template = template_state(agent, num_seeds)
    got, want = jax.tree.leaves(state), jax.tree.leaves(template)
    if len(got) != len(want) or tuple(got[0].shape) != tuple(want[0].shape):
        raise ValueError(
            f"save_run(state) does not match the agent and the {num_seeds} seed(s) of the metrics: "
            f"first leaf has shape {tuple(got[0].shape) if got else None}, expected {tuple(want[0].shape)}"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    env_name = Batch.of(agent).agent.env.name if env_name is None else env_name
    config = run_config(agent, env_name=env_name, total_steps=total_steps, seed=seed, num_seeds=num_seeds)
    if (run_dir / CONFIG).is_file():  # keep what train_run recorded at the start (chunking, flags)
        try:
            earlier = json.loads(read_text_bounded(run_dir / CONFIG))
            config = {**earlier, **{k: v for k, v in config.items() if k != "created"}}
        except ValueError:  # (not JSON, not UTF-8, too large: nothing of it is kept)
            pass
    config["status"] = "complete"
    if info is not None:
        config["timings"] = timings_record(info)
    if command is not None:
        config["command"] = command
    _complete(run_dir, config, state, metrics, _outputs if _outputs is not None else SinkGroup(run_file_sinks(run_dir, agent, config)))
    return run_dir


def _complete(run_dir: pathlib.Path, config: dict[str, Any], state: PyTree, metrics: Mapping[str, Any], outputs: SinkGroup) -> None:
    """`state.eqx`, then the sinks' `result` (`metrics.csv`, the learning curve, and those of
    `log=`), then `config.json` with `"status": "complete"`, last: it marks a finished run."""
    config[STATE_RECORD] = save_state(run_dir / STATE, state)  # (its size and CRC-32, which loads check)
    outputs.result(state, metrics)
    write_json(run_dir / CONFIG, config)


@holds_run_lock("train_run(run_dir)")
def train_run(
    run_dir: PathLike,
    agent: Any,
    *,
    total_steps: int,
    seed: int = 0,
    num_seeds: int = 1,
    checkpoint_every: int | None = None,
    keep_checkpoints: int = DEFAULT_KEEP,
    nan_guard: bool = False,
    tensorboard: bool = False,
    progress: bool = True,
    eval_episodes: int = 32,
    env_name: str | None = None,
    command: str | None = None,
    _resume: Checkpoint | None = None,
    eval_every: int | None = None,
    record_every: int | str | None = None,
    log: Any = (),
    _restart: bool = False,
    best: Any = DEFAULT_BEST,
) -> tuple[PyTree, dict[str, np.ndarray], TrainInfo, dict[str, Any]]:
    """Train with a run directory: `config.json` first, checkpoints in
    `RUN_DIR/checkpoints/` while training, TensorBoard events if asked, then the
    final state, metrics, learning curve and evaluation (`eval.json`), and
    `"status": "complete"` in `config.json` last.

    **Arguments:**

    - `run_dir`: the directory (created; it must not hold another run).
    - `agent`: an agent, or `eqxrl.stack([...])` (a sweep, one key per member).
    - `total_steps`, `seed`, `num_seeds`: the budget per seed/member and the keys
      (`seed_keys(seed, num_seeds)`; a sweep uses one seed per member).
    - `checkpoint_every`: env steps between checkpoints (default: about 10 per run).
      Checkpoints are taken at chunk boundaries (a chunk is at least 1/200 of the
      run, so a shorter interval acts as that) and written in the background, one
      at a time: a checkpoint due while the previous one is still being written is
      skipped (training never waits for the disk); the final one is always written.
    - `keep_checkpoints`: the newest checkpoints kept (besides the best one).
    - `best`: what "best" means for the checkpoint kept besides the newest (`best_fn`): a
      metric the run logs, highest best (`"eval_return"`, the default, with `eval_every`;
      `"-value_loss"`: the lowest), or `f(metrics: dict[str, float]) -> float` of the logged
      row at a checkpoint (each metric's mean over the seeds), higher best; NaN scores no
      checkpoint. Each chunk boundary that beats the best so far is written as a checkpoint.
      `config.json` records the name (of a function, only its name: `resume_run(best=f)`).
    - `nan_guard`, `progress`: as for `eqxrl.train`.
    - `log`: sinks besides the files every run writes (`metrics.csv`, checkpoints, plots,
      `eval.json`: sinks too, `MetricsCsvSink`, `CheckpointSink`, ..., after these in one
      `SinkGroup`; a sink that asks to stop is an error): names from `eqxrl.loop.SINKS` (`"tensorboard"`, `"wandb"`, `"mlflow"`, or a
      registered one) or `eqxrl.loop.AbstractSink` instances, e.g. `log=["tensorboard",
      MlflowSink("sqlite:///mlflow.db")]`. Each gets every metric row at each chunk boundary, the
      final evaluation, the recorded videos and how the run ended; a registered sink is
      recorded in `config.json` (with what its `start` returned, such as a tracker's run id)
      and `resume_run` builds it again. `tensorboard=True` is `"tensorboard"` in `log`.
    - `eval_episodes`: deterministic evaluation episodes per seed at the end (and at
      each in-training evaluation).
    - `eval_every`: env steps per seed between in-training evaluations (`eval_return`
      in `metrics.csv`, TensorBoard and the learning curve; see `eqxrl.train`).
      Evaluations fall on chunk boundaries, so it is rounded down to a multiple of
      the chunk length (`config.json` records the value used, and `--resume` keeps
      it); an evaluated state that beats the best so far is written as a
      checkpoint (waiting for the disk if need be), and the best by mean
      evaluation return (or by `best`) is kept (`load_run(run_dir, checkpoint="best")`).
    - `record_every`: videos of one deterministic episode of member 0
      (`RUN_DIR/videos/<env steps>.mp4`, and to every sink of `log`;
      drawn on a background thread, see `eqxrl.runs.VideoRecorder`), always one of the
      final policy. `"auto"` (`RECORD_AUTO`, `--record-every` without STEPS): a time
      budget, a video at each in-training evaluation (each quarter of the run without
      `eval_every`) only while recording has cost at most `RECORD_BUDGET` (5%) of the
      training time elapsed, reserving the final video's cost (`eqxrl.runs.VideoBudget`;
      a short run may get the final video alone, whose cost is not bounded). An int: env
      steps per seed between videos, at the first chunk boundary past each multiple,
      skipped only while the previous one is still being drawn. `config.json` says how
      many were written and skipped, and what they cost (`"videos"`). Needs an env with
      a renderer and imageio (`pip install 'eqxrl[video]'`).

    **Returns:** `(state, metrics, info, evaluation summary)`.
    `resume_run(run_dir)` continues an interrupted call exactly, or a finished one
    with a larger budget.

    Raises `RunDirectoryError` (a `ValueError`) before writing anything when
    `run_dir` already holds a run, when another process is writing it (the run
    directory's lock, `RUN_DIR/.lock`, names its process id) or when a symbolic
    link lies below it.
    """
    run_dir = pathlib.Path(run_dir)
    if _resume is None and not _restart:  # (resume_run continues a run here: its files are the run's)
        found = [name for name in _RUN_FILES if (run_dir / name).exists() or (run_dir / name).is_symlink()]
        if found:
            raise RunDirectoryError(
                f"train_run(run_dir) must be a new or empty directory, got {str(run_dir)!r}, which holds a run ({found[0]}): "
                "continue it with resume_run(run_dir, total_steps=N) (`eqxrl train --resume RUN_DIR --total-steps N`)"
            )
    batch = Batch.of(agent, owner="train_run(agent)")
    if batch.stacked:
        num_seeds = batch.size
    check_positive_int("train_run", "keep_checkpoints", keep_checkpoints)
    if record_every is not None:
        if record_every != RECORD_AUTO:
            if isinstance(record_every, str):
                raise ValueError(f"train_run(record_every) must be a positive int or {RECORD_AUTO!r}, got {record_every!r}")
            check_positive_int("train_run", "record_every", record_every)
        check_recordable(agent)
    logged, names = make_sinks([*(log if isinstance(log, (list, tuple)) else [log]), *(["tensorboard"] if tensorboard else [])])
    keys = seed_keys(seed, num_seeds)
    per_iteration = batch.agent.steps_per_iteration
    num_iterations = num_iterations_for("train_run", batch.agent, total_steps)
    if _resume is None:
        every = max(1, num_iterations // 10) if checkpoint_every is None else max(1, int(checkpoint_every) // per_iteration)
        # About 50 chunks, fewer iterations where checkpoints are due more often, but at
        # least 1/200 of the run: a chunk is a host round trip (a few ms), and checkpoints
        # come no faster than the disk writes them anyway.
        chunk = max(1, math.ceil(num_iterations / 200), min(math.ceil(num_iterations / 50), every))
        evals = None
        if eval_every is not None:
            # Evaluations fall on chunk boundaries, so that each evaluated state is a checkpoint
            # (the best one is kept): eval_every rounds down to a multiple of the chunk.
            evals = eval_iterations_for("train_run", agent, int(total_steps), eval_every, eval_episodes)
            chunk = min(chunk, evals)
            evals = evals // chunk * chunk
        config = run_config(
            agent, env_name=env_name, total_steps=total_steps, seed=seed, num_seeds=num_seeds,
            chunk_iterations=chunk, checkpoint_every=every * per_iteration, keep_checkpoints=int(keep_checkpoints),
            nan_guard=bool(nan_guard), tensorboard="tensorboard" in names, log=names, eval_episodes=int(eval_episodes),
            status="running",
            eval_every=None if evals is None else evals * per_iteration,
            record_every=record_every if record_every in (None, RECORD_AUTO) else int(record_every),
        )  # fmt: skip
        check_best(best, agent, evals is not None)  # (an unknown metric: refused before the directory is written)
        config["best"] = best_record(best)
        if command is not None:
            config["command"] = command
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        config = load_config(run_dir)
        chunk, every = config["chunk_iterations"], max(1, config["checkpoint_every"] // per_iteration)
        if int(total_steps) != config["total_steps"] or config.get("status") != "running":
            # Continuing a run with a larger budget: the config says so before training goes on.
            config["continued_from"] = [*config.get("continued_from", []), config["total_steps"]]
            config["total_steps"], config["status"] = int(total_steps), "running"
        config.update(log=names, tensorboard="tensorboard" in names)  # (resume_run(log=) may add sinks)
    done = _resume.iteration if _resume is not None else 0
    write_json(run_dir / CONFIG, config)
    # One group of sinks: those of `log=` (started first: a tracker that cannot start fails before
    # anything else is written), then the run directory's own files: checkpoints, eval.json,
    # metrics.csv and the learning curve. Checkpoints are scored where `best` can score them: at
    # evaluations for eval_return, else at every chunk.
    keep = config.get("keep_checkpoints", keep_checkpoints)
    checkpoints = CheckpointSink(
        lambda: CheckpointWriter(run_dir, agent, run_record(config), keep, best), every=every, best=best, nan_guard=nan_guard,
        scoring=config.get("eval_every") is not None or best != DEFAULT_BEST, done=done,
    )  # fmt: skip
    sinks = SinkGroup([*logged, checkpoints, *run_file_sinks(run_dir, agent, config)], names)
    records = config.get("sinks", {})
    started = {**records, **sinks.start(RunInfo(run_dir.name, config, run_dir, done, per_iteration, records))}
    if started != records:  # (a tracker's run id, for resume_run)
        config["sinks"] = started
        write_json(run_dir / CONFIG, config)
    record, recorder = config.get("record_every"), None
    if record is not None:
        # The time budget considers a video at each evaluation (each quarter without them).
        auto = record == RECORD_AUTO
        every = (config.get("eval_every") or default_record_every(config["total_steps"])) if auto else record
        recorder = VideoRecorder(run_dir, agent, seed, num_seeds, every, sinks, done, RECORD_BUDGET if auto else None)
    logged = [done]

    def on_chunk(checkpoint: Checkpoint) -> bool:
        sinks.rows_of(checkpoint.metrics, logged[0], checkpoint.iteration)  # (the rows, to the sinks that take them)
        logged[0] = checkpoint.iteration
        if sinks.checkpoint(checkpoint) and checkpoints.diverged is not None:
            return True
        if sinks.stopped_by:  # (a run directory trains to its budget, which resume_run and config.json hold)
            label = sinks.stopped_by[0].name or type(sinks.stopped_by[0]).__name__
            raise ValueError(
                f"train_run(log): the {label} sink asked to stop training at iteration {checkpoint.iteration}; a run "
                "directory trains to its budget (total_steps): stop a bare eqxrl.train(callback=...) instead"
            )
        if recorder is not None:
            recorder(checkpoint, checkpoint.iteration == checkpoint.num_iterations)
        return False

    try:
        try:
            state, metrics, info = train(
                agent, keys, int(total_steps), progress=progress, chunk_iterations=chunk, return_info=True,
                nan_guard=nan_guard, callback=on_chunk, resume=_resume,
                eval_every=config.get("eval_every"), eval_episodes=int(config.get("eval_episodes", eval_episodes)),
            )  # fmt: skip
        finally:
            if recorder is not None:
                recorder.close()  # (its thread hands the last video to the sinks; it raises nothing)
    except BaseException as e:
        stopped = isinstance(e, NonFiniteError) and e.iteration is not None  # the guard stopped it
        # (the checkpoint writer is closed too; the training error is the one to report)
        sinks.finish("diverged" if stopped else "interrupted" if isinstance(e, KeyboardInterrupt) else "failed")
        if stopped:
            last = e.checkpoint
            metrics = None if last is None else {k: np.asarray(v) for k, v in last.metrics.items()}
            raise diverged_error(run_dir, agent, config, metrics, e.iteration, e.quantities, e.iteration) from None
        raise
    try:
        # What this call's writer did (a checkpoint due while the previous was still being written is skipped).
        config["checkpoints"] = checkpoints.close()
    except BaseException:
        sinks.finish("failed")
        raise
    if checkpoints.diverged is not None:
        close_recorder(recorder, config)
        sinks.finish("diverged")
        iteration, quantities = checkpoints.diverged
        stopped = info.stopped_at if info.stopped_at is not None else info.num_iterations
        raise diverged_error(run_dir, agent, config, metrics, iteration, quantities, stopped)
    try:
        write_json(run_dir / CONFIG, config)
        # Every output first, config.json's "status": "complete" last (in save_run): a run
        # killed before that is still unfinished, and --resume continues it.
        returns = evaluate(agent, state, eval_key(seed), num_episodes=int(config.get("eval_episodes", eval_episodes)))
        summary = evaluation_summary(returns, deterministic=True, seed=seed)
        sinks.evaluation(summary, int(np.atleast_2d(metrics["env_steps"])[0, -1]))  # (eval.json among them)
        if not batch.stacked:
            title = f"{type(agent).__name__} on {config['env']}:"
            summary["report_files"] = write_reports(run_dir, agent.report(state, eval_key(seed)), title=title)
        if recorder is not None:  # (the final video was drawn while the policy was evaluated)
            close_recorder(recorder, config)
            write_json(run_dir / CONFIG, config)
        save_run(run_dir, agent, state, metrics, total_steps=total_steps, seed=seed, env_name=config["env"], info=info,
                 command=config.get("command"), _outputs=sinks)  # fmt: skip
    except BaseException as e:
        sinks.finish("interrupted" if isinstance(e, KeyboardInterrupt) else "failed")
        raise
    sinks.finish("complete")
    return state, metrics, info, summary


@holds_run_lock("resume_run(run_dir)", create=False)
def resume_run(
    run_dir: PathLike, *, total_steps: int | None = None, progress: bool = True, trust: Any = (), log: Any = (), best: Any = None
) -> tuple[PyTree, dict[str, np.ndarray], TrainInfo, dict[str, Any]]:
    """Continue a `train_run` (or `eqxrl train`) from its last checkpoint.

    An interrupted run ends with the same metrics and parameters as the
    uninterrupted one (on CPU, bit for bit); one killed before its first
    checkpoint starts again from the beginning. With `total_steps` larger than the
    run's budget, a finished or interrupted run continues to the new budget (see
    `eqxrl.train(resume=)` for how schedules behave; with constant rates, N steps
    then M more equal one run of N + M). `trust`: modules whose classes `config.json`
    may name besides eqxrl's own and registered ones (`trust=("my_pkg",)`; see `load_run`).
    The run's registered sinks (`train_run(log=)`) are built again from `config.json` and go on
    where they were (the same tracker run); `log` adds sinks, e.g. an unregistered one's instance.
    The best checkpoint stays chosen as `config.json` records (`train_run(best=)`); `best`: that
    metric name, or for a run that chose by a function, the function again (required).

    Raises `RunDirectoryError` (a `ValueError`) when another process is writing
    `run_dir` (naming its process id) or a symbolic link lies below it.

    **Returns:** as `train_run`.
    """
    run_dir = pathlib.Path(run_dir)
    config = load_config(run_dir)
    if diverged_record(config) is not None:
        raise ValueError(diverged_advice(run_dir, config))
    if "chunk_iterations" not in config:
        raise ValueError(f"{str(run_dir)!r} was not written with checkpoints (no 'chunk_iterations' in {CONFIG})")
    try:
        agent = agent_from_config(config, trust=trust)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{run_dir / CONFIG}: {one_line(e)}") from None
    old_total = config["total_steps"]
    if total_steps is None:
        total_steps = old_total
    elif isinstance(total_steps, bool) or not isinstance(total_steps, (int, np.integer)) or total_steps < old_total:
        raise ValueError(f"resume_run(total_steps) must be an int of at least the run's {old_total:,}, got {total_steps!r}")
    if config.get("status") == "complete" and total_steps == old_total:
        raise ValueError(
            f"{str(run_dir)!r}: the run is already complete ({old_total:,} env steps); "
            "give a larger total_steps (`--total-steps N`) to continue it"
        )
    options = dict(
        seed=config["seed"], num_seeds=config["seeds"], nan_guard=config.get("nan_guard", False),
        log=[*recorded_sinks(config), *(log if isinstance(log, (list, tuple)) else [log])], progress=progress,
        env_name=config["env"], record_every=config.get("record_every"), best=best_of_config(config, best),
    )  # fmt: skip
    if not checkpoint_steps(run_dir):
        if config.get("status") == "complete":
            raise ValueError(f"{str(run_dir)!r} has no checkpoint to continue from (it was written by an older eqxrl)")
        # Killed before its first checkpoint: nothing of it survives but config.json; start again.
        return train_run(
            run_dir, agent, total_steps=total_steps, checkpoint_every=config["checkpoint_every"],
            keep_checkpoints=config.get("keep_checkpoints", DEFAULT_KEEP), eval_episodes=config.get("eval_episodes", 32),
            command=config.get("command"), _restart=True, **options,
        )  # fmt: skip
    checkpoint = load_checkpoint(run_dir, agent, config["seeds"], run=run_record(config))
    return train_run(run_dir, agent, total_steps=int(total_steps), _resume=checkpoint, **options)
