"""Run directories: a training run on disk (config, metrics, states, checkpoints,
TensorBoard, plots) and back (`load_run`, `load_policy`, `resume_run`).

A run directory holds

- `config.json`: the agent (registry name), the env name, every agent field,
  the budget, the seeds, the eqxrl version and the timings;
- `metrics.csv`: one row per (seed, iteration), one column per metric;
- `state.eqx`: the final training state (`eqx.tree_serialise_leaves`);
- `checkpoints/<env_steps>/`: orbax checkpoints (the newest few and the best
  one, by evaluation return or by the run's `best`), to resume an interrupted run,
  continue a finished one, or evaluate the best;
- `learning_curve.png`: mean training episode return against env steps;
- `eval.json`: evaluation returns and their statistics (written by `save_evaluation`);
- `videos/<env_steps>.mp4`: episodes recorded while training (`record_every`);
- `tensorboard/`, `wandb/`: the sinks' files, where a run logs to them (`log=`);
- `.lock`: only while a process writes the directory (`run_lock`): a second
  writer is refused, naming the first's process id.

```python
import jax, eqxrl

agent, state, config = eqxrl.runs.load_run("runs/ppo-CartPole-v1-20250101-120000")
returns = eqxrl.evaluate(agent, state, jax.random.key(0), num_episodes=32)
```
"""

from ..agents import AGENTS as AGENTS
from ..agents import agent_name as agent_name
from ._best import DEFAULT_BEST as DEFAULT_BEST
from ._best import best_of_config as best_of_config
from ._best import check_best as check_best
from ._best import metric_names as metric_names
from ..store import CheckpointError as CheckpointError
from ._checkpoint import CheckpointWriter as CheckpointWriter
from ._checkpoint import checkpoint_steps as checkpoint_steps
from ._checkpoint import load_checkpoint as load_checkpoint
from ._checkpoint import run_record as run_record
from ._saved import load as load
from ._saved import save as save
from ._checkpoint import save_checkpoint as save_checkpoint
from ._config import MAX_SEED as MAX_SEED
from ._config import agent_config as agent_config
from ._config import agent_from_config as agent_from_config
from ._config import check_config as check_config
from ._config import eval_key as eval_key
from ._config import float_fields as float_fields
from ._config import load_agent as load_agent
from ._config import load_config as load_config
from ._config import member_configs as member_configs
from ._config import run_config as run_config
from ._config import seed_keys as seed_keys
from ._export import FORMATS as EXPORT_FORMATS  # noqa: F401
from ._export import export as export
from ._export import export_run as export_run
from ._export import read_description as read_description
from ._files import CHECKPOINTS as CHECKPOINTS
from ._files import CONFIG as CONFIG
from ._files import CURVE as CURVE
from ._files import EVAL as EVAL
from ._files import METRICS as METRICS
from ._files import STATE as STATE
from ._files import TENSORBOARD as TENSORBOARD
from ._lock import LOCK as LOCK
from ._lock import RunDirectoryError as RunDirectoryError
from ._lock import check_no_links as check_no_links
from ._lock import holds_run_lock as holds_run_lock
from ._lock import run_lock as run_lock
from ._metrics import load_evaluation as load_evaluation
from ._metrics import load_metrics as load_metrics
from ._metrics import evaluation_summary as evaluation_summary
from ._metrics import save_evaluation as save_evaluation
from ._metrics import save_metrics as save_metrics
from ._metrics import summarize_returns as summarize_returns
from ._plots import figure as figure
from ._plots import plot_learning_curve as plot_learning_curve
from ._plots import plot_skill_trajectories as plot_skill_trajectories
from ._plots import png_bytes as png_bytes
from ._reports import REPORT_PLOTS as REPORT_PLOTS
from ._reports import register_report_plot as register_report_plot
from ._reports import write_reports as write_reports
from ._policy import Policy as Policy
from ._policy import diverged_checkpoint as diverged_checkpoint
from ._policy import load_policy as load_policy
from ._policy import load_run as load_run
from ._state import load_state as load_state
from ._state import save_state as save_state
from ._state import template_state as template_state
from ._state import state_array_template as state_array_template
from ._state import unflatten_state as unflatten_state
from ._mlflow import MlflowSink as MlflowSink
from ._checkpoint_sink import CheckpointSink as CheckpointSink
from ._run_sinks import EvalJsonSink as EvalJsonSink
from ._run_sinks import LearningCurveSink as LearningCurveSink
from ._run_sinks import MetricsCsvSink as MetricsCsvSink
from ._mlflow import flat_params as flat_params
from ._tensorboard import TensorBoardSink as TensorBoardSink
from ._wandb import WandbSink as WandbSink
from ._config import recorded_sinks as recorded_sinks
from ._config import tracked_config as tracked_config
from ._train_run import resume_run as resume_run
from ._train_run import save_run as save_run
from ._train_run import train_run as train_run
from ._video import DEFAULT_RECORDINGS as DEFAULT_RECORDINGS
from ._video import FIRST_FRAME_SECONDS as FIRST_FRAME_SECONDS
from ._video import RECORD_AUTO as RECORD_AUTO
from ._video import RECORD_BUDGET as RECORD_BUDGET
from ._video import VIDEOS as VIDEOS
from ._video import VideoBudget as VideoBudget
from ._video import VideoRecorder as VideoRecorder
from ._video import check_recordable as check_recordable
from ._video import default_record_every as default_record_every
from ._video import render_run as render_run

__all__ = [
    "AGENTS",
    "agent_name",
    "CheckpointError",
    "CheckpointWriter",
    "checkpoint_steps",
    "load_checkpoint",
    "run_record",
    "load",
    "save",
    "save_checkpoint",
    "MAX_SEED",
    "agent_config",
    "agent_from_config",
    "check_config",
    "eval_key",
    "float_fields",
    "load_agent",
    "load_config",
    "member_configs",
    "run_config",
    "seed_keys",
    "EXPORT_FORMATS",
    "export",
    "export_run",
    "read_description",
    "CHECKPOINTS",
    "CONFIG",
    "CURVE",
    "EVAL",
    "METRICS",
    "STATE",
    "TENSORBOARD",
    "LOCK",
    "RunDirectoryError",
    "check_no_links",
    "holds_run_lock",
    "run_lock",
    "load_evaluation",
    "load_metrics",
    "evaluation_summary",
    "save_evaluation",
    "save_metrics",
    "summarize_returns",
    "plot_learning_curve",
    "Policy",
    "load_policy",
    "diverged_checkpoint",
    "load_run",
    "load_state",
    "save_state",
    "template_state",
    "state_array_template",
    "unflatten_state",
    "MlflowSink",
    "CheckpointSink",
    "EvalJsonSink",
    "LearningCurveSink",
    "MetricsCsvSink",
    "flat_params",
    "TensorBoardSink",
    "WandbSink",
    "recorded_sinks",
    "tracked_config",
    "resume_run",
    "save_run",
    "train_run",
    "DEFAULT_RECORDINGS",
    "FIRST_FRAME_SECONDS",
    "RECORD_AUTO",
    "RECORD_BUDGET",
    "VIDEOS",
    "VideoBudget",
    "VideoRecorder",
    "check_recordable",
    "default_record_every",
    "render_run",
]
