"""A run's checkpoints: `RUN_DIR/checkpoints/<env_steps>/`, written by orbax-checkpoint.

Each checkpoint holds the training state (PRNG keys as key data), the metrics so
far, and a JSON record of where the run stands (iteration, budget, chunking, the
agent's configuration, the run's seeds, the eqxrl version, the evaluation return
when there was one) with a CRC-32 of every array, so a resume knows it reads what
was written. orbax writes each checkpoint into a temporary directory and renames
it when complete, so a crash leaves the earlier checkpoints as they were.

Kept: the newest `keep` checkpoints and the best by the run's criterion, by default the
evaluation return (`train_run(best=...)`, `eqxrl.runs._best`; `AnyPreservationPolicy([LatestN,
BestN])`). `CheckpointWriter` writes in a
background thread: training waits only for a host copy of the state.
"""

import concurrent.futures
import contextlib
import pathlib
import warnings
from typing import Any

import jax
import numpy as np

from ..agents import Batch, agent_name
from ..core import __version__, keys_as_data, one_line, version_note
from ..loop import Checkpoint
from ..store import CheckpointError, check_stored, checkpoint_write_error, crc32_of, is_step_name, meta_crc32, read_meta, remove_temporary
from ._best import DEFAULT_BEST, best_score
from ._config import config_mismatch, load_config, member_configs
from ._files import CHECKPOINTS, CONFIG, PathLike
from ._state import state_array_template, unflatten_state
from ._stored import metrics_template

__all__ = ["DEFAULT_KEEP", "CheckpointWriter", "checkpoint_steps", "eval_return_at", "load_checkpoint", "run_record", "save_checkpoint", "state_arrays"]

DEFAULT_KEEP = 2
"""Checkpoints kept besides the best: the newest, and one before it in case the newest is damaged."""


def _orbax():
    import orbax.checkpoint as ocp  # imported when a checkpoint is written or read: it is heavy

    return ocp


def _manager(directory: pathlib.Path, keep: int, read_only: bool = False) -> Any:
    ocp = _orbax()
    policies = ocp.checkpoint_managers
    preservation = policies.AnyPreservationPolicy([
        policies.LatestN(keep),
        # (a checkpoint of an older eqxrl has only its eval_return, the default criterion's score)
        policies.BestN(get_metric_fn=lambda m: m.get("best", m.get("eval_return")), reverse=False, n=1, keep_checkpoints_without_metrics=False),
    ])  # fmt: skip
    options = ocp.CheckpointManagerOptions(
        enable_async_checkpointing=False,  # CheckpointWriter runs saves on its own thread
        preservation_policy=preservation,
        cleanup_tmp_directories=not read_only,
        read_only=read_only,
        create=not read_only,
    )
    return ocp.CheckpointManager(directory.absolute(), options=options)


def state_arrays(state: Any) -> dict[str, np.ndarray]:
    """The state's array leaves (PRNG keys as key data) as host copies, named by
    position (`unflatten_state` puts them back)."""
    leaves = [x for x in jax.tree.leaves(keys_as_data(state)) if hasattr(x, "shape")]
    return {f"{i:05d}": np.array(x) for i, x in enumerate(leaves)}


def eval_return_at(checkpoint: Checkpoint) -> float | None:
    """The mean evaluation return at the checkpoint's own iteration (None when the
    last iteration was not evaluated): only such a checkpoint can be the best."""
    values = checkpoint.metrics.get("eval_return")
    if values is None or checkpoint.iteration < 1:
        return None
    last = np.asarray(values)[..., checkpoint.iteration - 1]
    return None if np.isnan(last).any() else float(np.mean(last))


class _Payload:
    """What one checkpoint writes, copied to the host (the state is donated to the next chunk)."""

    def __init__(self, agent: Any, checkpoint: Checkpoint, run: dict[str, Any], best: Any = DEFAULT_BEST):
        self.state = state_arrays(checkpoint.state)
        self.metrics = {k: np.array(v) for k, v in checkpoint.metrics.items()}
        self.eval_return = eval_return_at(checkpoint)
        self.best = best_score(best, self.metrics, checkpoint.iteration)
        per_iteration = Batch.of(agent).agent.steps_per_iteration
        self.step = checkpoint.iteration * per_iteration
        self.meta = {
            "iteration": checkpoint.iteration,
            "num_iterations": checkpoint.num_iterations,
            "chunk_iterations": checkpoint.chunk_iterations,
            "env_steps": self.step,
            "eval_return": self.eval_return,
            "best": self.best,  # (the run's criterion's score, higher is better; None: not scored)
            "agent": agent_name(agent),
            "members": member_configs(agent),
            "run": run,
            "eqxrl_version": __version__,
            "state_crc32": crc32_of(self.state),
            "metrics_crc32": crc32_of(self.metrics),
        }
        self.meta["meta_crc32"] = meta_crc32(self.meta)


def _write(manager: Any, payload: _Payload) -> None:
    ocp = _orbax()
    args = ocp.args.Composite(
        state=ocp.args.StandardSave(payload.state),
        history=ocp.args.StandardSave(payload.metrics),  # ("metrics" is orbax's own item)
        meta=ocp.args.JsonSave(payload.meta),
    )
    metrics = None if payload.best is None else {"best": payload.best}
    manager.save(payload.step, args=args, metrics=metrics, force=True)
    manager.wait_until_finished()


def _write_error(directory: pathlib.Path, step: int, error: BaseException, previous: int | None) -> CheckpointError:
    kept = f"the checkpoint of env step {previous:,} is intact" if previous is not None else "no earlier checkpoint exists"
    return checkpoint_write_error(directory / str(step), error, kept, "eqxrl train --resume RUN_DIR")


class CheckpointWriter:
    """Writes a run's checkpoints in a background thread, one at a time.

    `submit` copies the state to the host and returns; the write runs while training
    goes on. A checkpoint submitted while the previous one is still being written is
    skipped unless `wait=True` (so training never waits for the disk, and a very
    short interval gives checkpoints as often as the disk allows). A failed write
    raises `CheckpointError` at the next `submit` or at `close`, after removing its
    temporary files; the earlier checkpoints are kept.

    **Arguments:** the `run_dir`, the `agent`, the `run` record (seeds, budget, env)
    that a resume checks, `keep` (the newest checkpoints kept besides the best) and `best`,
    what best means (a metric name or a function of the logged row: see `train_run`).
    """

    def __init__(self, run_dir: PathLike, agent: Any, run: dict[str, Any], keep: int = DEFAULT_KEEP, best: Any = DEFAULT_BEST):
        self.directory = pathlib.Path(run_dir) / CHECKPOINTS
        self.agent, self.run, self.best = agent, run, best
        try:
            self.manager = _manager(self.directory, keep)
        except OSError as e:
            raise _write_error(self.directory, 0, e, None) from None
        self.last_written: int | None = self.manager.latest_step()
        self.written = 0
        self.skipped = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="eqxrl-checkpoint")
        self._pending: tuple[concurrent.futures.Future, int] | None = None

    def _settle(self, block: bool) -> bool:
        """Collect the pending write (waiting for it when `block`); **returns** whether none is pending."""
        if self._pending is None:
            return True
        future, step = self._pending
        if not block and not future.done():
            return False
        self._pending = None
        try:
            future.result()
        except BaseException as e:
            remove_temporary(self.directory)
            raise _write_error(self.directory, step, e, self.last_written) from None
        self.last_written = step
        self.written += 1
        return True

    def submit(self, checkpoint: Checkpoint, *, wait: bool = False) -> bool:
        """Start writing `checkpoint`. **Returns:** whether it was taken (False: skipped,
        the previous write still running and `wait` False)."""
        if not self._settle(block=wait):
            self.skipped += 1
            return False
        payload = _Payload(self.agent, checkpoint, self.run, self.best)
        self._pending = (self._pool.submit(_write, self.manager, payload), payload.step)
        return True

    def wait(self) -> None:
        """Wait for the pending write; raise `CheckpointError` if it failed."""
        self._settle(block=True)

    def close(self) -> None:
        """Wait for the pending write (raising `CheckpointError` if it failed) and stop the thread."""
        try:
            self._settle(block=True)
        finally:
            self._pool.shutdown(wait=True)
            with contextlib.suppress(Exception):
                self.manager.close()


def save_checkpoint(run_dir: PathLike, agent: Any, checkpoint: Checkpoint, run: dict[str, Any] | None = None,
                    keep: int = DEFAULT_KEEP, best: Any = DEFAULT_BEST) -> int:  # fmt: skip
    """Write one checkpoint to `RUN_DIR/checkpoints/<env_steps>` and wait for it.

    **Arguments:** the `run_dir`, the `agent` being trained, a `Checkpoint` from
    `eqxrl.train(..., callback=...)`, the `run` record a resume checks (default: read
    from `config.json` when there is one), `keep` and `best` (see `CheckpointWriter`).

    **Returns:** the checkpoint's step (env steps per member).
    """
    if run is None:
        run = run_record(load_config(run_dir)) if (pathlib.Path(run_dir) / CONFIG).is_file() else {}
    writer = CheckpointWriter(run_dir, agent, run, keep, best)
    try:
        writer.submit(checkpoint, wait=True)
    finally:
        writer.close()
    return checkpoint.iteration * Batch.of(agent).agent.steps_per_iteration


def run_record(config: dict[str, Any]) -> dict[str, Any]:
    """What of a run's `config.json` its checkpoints record, so that a resume can check
    that the config it reads is the one they were written under: env, seed, seeds."""
    return {k: config.get(k) for k in ("env", "seed", "seeds")}


def _remedy(path: pathlib.Path) -> str:
    return f"delete {path} to resume from the checkpoint before it (`eqxrl train --resume RUN_DIR`)"


def checkpoint_steps(run_dir: PathLike) -> list[dict[str, Any]]:
    """The finished checkpoints of a run directory, oldest first.

    **Returns:** one dict per checkpoint: `step` (env steps per member), `iteration`,
    `eval_return` (None when that iteration was not evaluated), `best` (its score by the
    run's criterion, higher is better; None when not scored) and `path`.
    """
    directory = pathlib.Path(run_dir) / CHECKPOINTS
    out = []
    if directory.is_dir():
        for p in sorted((p for p in directory.iterdir() if is_step_name(p.name)), key=lambda p: int(p.name)):
            if not (p / "commit_success.txt").is_file() and not (p / "_CHECKPOINT_METADATA").is_file():
                continue  # an unfinished write
            try:
                meta = read_meta(p, "iteration", _remedy(p))
            except CheckpointError:
                meta = {"iteration": None, "eval_return": None}
            best = meta.get("best", meta.get("eval_return"))  # (an older eqxrl's: scored by eval_return)
            out.append({"step": int(p.name), "iteration": meta["iteration"], "eval_return": meta.get("eval_return"), "best": best, "path": p})
    return out


def _choose(run_dir: pathlib.Path, which: Any) -> pathlib.Path:
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise CheckpointError(f"{str(run_dir)!r} has no checkpoint in {CHECKPOINTS}/")
    if which == "last":
        return steps[-1]["path"]
    if which == "best":
        scored = [s for s in steps if s["best"] is not None]
        if not scored:
            raise CheckpointError(
                f"{str(run_dir)!r} has no evaluated checkpoint to call best: train with eval_every (`--eval-every STEPS`), "
                "or choose a metric logged at every iteration with best= (`--best METRIC`)"
            )
        return max(scored, key=lambda s: s["best"])["path"]
    if isinstance(which, (int, np.integer)) and not isinstance(which, bool):
        for s in steps:
            if s["step"] == which:
                return s["path"]
        raise CheckpointError(f"{str(run_dir)!r} has no checkpoint at env step {which}; it has {[s['step'] for s in steps]}")
    raise ValueError(f"checkpoint must be 'last', 'best' or an env step (int), got {which!r}")


def load_checkpoint(
    run_dir: PathLike, agent: Any, num_seeds: int | None = None, which: Any = "last", run: dict[str, Any] | None = None
) -> Checkpoint:
    """Read a checkpoint of a run directory back for `agent`.

    **Arguments:** the `run_dir`, the `agent` it belongs to, `num_seeds` (default:
    `seeds` in `config.json`), `which`: `"last"`, `"best"` (the best by the run's
    criterion, `train_run(best=...)`: by default the highest evaluation return) or an env step listed by `checkpoint_steps`, and `run`: the
    `run_record` of the config being resumed, which must be the checkpoint's.

    Raises `CheckpointError` (a `ValueError`) naming the path when the checkpoint is
    damaged (every array is checked against its CRC-32) and `ValueError` naming
    the first mismatched field when it belongs to another configuration; warns
    when another eqxrl version wrote it.

    **Returns:** a `Checkpoint` for `eqxrl.train(..., resume=...)`.
    """
    run_dir = pathlib.Path(run_dir)
    if num_seeds is None:
        num_seeds = load_config(run_dir)["seeds"]
    path = _choose(run_dir, which)
    meta = read_meta(path, "iteration", _remedy(path))
    wrote = version_note(meta)  # (another eqxrl's checkpoint: a refusal says which)
    mismatch = config_mismatch(meta.get("agent"), meta.get("members", []), agent, "the checkpoint")
    if mismatch is not None:
        raise ValueError(f"{path}{wrote} does not match the agent: {mismatch}")
    seeds = (meta.get("run") or {}).get("seeds")
    if seeds is not None and seeds != num_seeds:
        raise ValueError(f"{path} does not match the run: {seeds} seed(s) in the checkpoint, {num_seeds} in the run")
    if run is not None and meta.get("run") != run:
        raise ValueError(f"{path} does not match the run's {CONFIG}: {meta.get('run')} in the checkpoint, {run} in {CONFIG}")
    # Restored through templates, checked first: the state's from the agent, the metrics'
    # of the run's shape; a file that claims other arrays is refused before any is read.
    states, batch = state_array_template(agent, num_seeds)
    check_stored(path / "state", states, f"{path}{wrote} does not match {batch.name} with {num_seeds} seed(s)", _remedy(path))
    iteration = meta["iteration"]
    if not 0 <= iteration <= meta.get("num_iterations", -1):
        raise CheckpointError(f"{path} is damaged (iteration {iteration} of {meta.get('num_iterations')}): {_remedy(path)}")
    histories = metrics_template(path / "history", batch.size if batch.batched else None, iteration, _remedy(path))
    check_stored(path / "history", histories, f"{path} does not match the run's metrics", _remedy(path))
    if meta.get("eqxrl_version") != __version__:  # (it fits this eqxrl's agent: read, with a warning)
        warnings.warn(f"{path} was written by eqxrl {meta.get('eqxrl_version')}, this is eqxrl {__version__}", stacklevel=2)
    ocp = _orbax()
    try:
        reader = ocp.StandardCheckpointer()
        try:
            state_arrays = {k: np.asarray(v) for k, v in reader.restore((path / "state").absolute(), states).items()}
            metrics = {k: np.asarray(v) for k, v in reader.restore((path / "history").absolute(), histories).items()}
        finally:
            reader.close()
    except Exception as e:  # orbax and tensorstore raise many kinds for a damaged file
        raise CheckpointError(f"{path} is damaged ({one_line(e)[:200]}): {_remedy(path)}") from None
    if crc32_of(state_arrays) != meta.get("state_crc32") or crc32_of(metrics) != meta.get("metrics_crc32"):
        raise CheckpointError(f"{path} is damaged (its arrays do not match their CRC-32): {_remedy(path)}")
    leaves = [state_arrays[k] for k in sorted(state_arrays)]
    state = unflatten_state(leaves, path, agent, num_seeds)
    return Checkpoint(state, meta["iteration"], meta["num_iterations"], meta["chunk_iterations"], metrics)
