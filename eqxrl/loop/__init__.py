"""The training loop: compiled chunks, `train`, `evaluate`, `rollout`, `render`, the progress bar.

`train` is a host shell around two compiled programs (`init_state` and `chunk`,
see `_chunk.py`); PBT traces the same `chunk` into its generation program.
"""

from ._callbacks import EvalLogger as EvalLogger
from ._callbacks import StopAtReturn as StopAtReturn
from ._callbacks import latest_value as latest_value
from ._chunk import MEMBER_AXIS as MEMBER_AXIS
from ._chunk import REQUIRED_METRICS as REQUIRED_METRICS
from ._chunk import Chunk as Chunk
from ._chunk import FlatChunk as FlatChunk
from ._chunk import check_metrics as check_metrics
from ._chunk import chunk as chunk
from ._chunk import compile_chunk as compile_chunk
from ._chunk import compile_train as compile_train
from ._chunk import guarded_leaves as guarded_leaves
from ._chunk import init_state as init_state
from ._chunk import member_sharding as member_sharding
from ._chunk import placeholder as placeholder
from ._chunk import run_chunk as run_chunk
from ._chunk import run_init as run_init
from ._chunk import shard_state as shard_state
from ._evaluate import EpisodeDescriptor as EpisodeDescriptor
from ._evaluate import EvalResult as EvalResult
from ._evaluate import default_eval_steps as default_eval_steps
from ._evaluate import episode_descriptor as episode_descriptor
from ._evaluate import episode_outcomes as episode_outcomes
from ._evaluate import episode_returns as episode_returns
from ._evaluate import evaluate as evaluate
from ._evaluate import rollout as rollout
from ._evaluate import state_batch as state_batch
from ._padding import on_one_device as on_one_device
from ._keys import EVAL_STREAM as EVAL_STREAM
from ._keys import MAX_EVAL_EPISODES as MAX_EVAL_EPISODES
from ._keys import MAX_TOTAL_STEPS as MAX_TOTAL_STEPS
from ._keys import check_eval_episodes as check_eval_episodes
from ._keys import as_keys as as_keys
from ._keys import batch_and_keys as batch_and_keys
from ._keys import eval_iterations_for as eval_iterations_for
from ._keys import eval_key_at as eval_key_at
from ._keys import num_iterations_for as num_iterations_for
from ._progress import Progress as Progress
from ._render import FAST_H264 as FAST_H264
from ._render import VIDEO_SUFFIXES as VIDEO_SUFFIXES
from ._render import Recording as Recording
from ._render import check_video_path as check_video_path
from ._render import precompile_rollout as precompile_rollout
from ._render import render as render
from ._render import require_imageio as require_imageio
from ._render import video_bytes as video_bytes
from ._render import write_video as write_video
from ._results import Checkpoint as Checkpoint
from ._results import HostMetrics as HostMetrics
from ._results import LazyMetrics as LazyMetrics
from ._results import NonFiniteError as NonFiniteError
from ._results import TrainInfo as TrainInfo
from ._results import divergence as divergence
from ._results import finite_flag as finite_flag
from ._results import listing as listing
from ._results import state_is_finite as state_is_finite
from ._pure import TrainFunction as TrainFunction
from ._pure import make_train as make_train
from ._train import train as train
