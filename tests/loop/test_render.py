"""Episode recording: `eqxrl.render`, `eqxrl render RUN_DIR` and `eqxrl train --record-every`.

Frames are compared with frames drawn from `eqxrl.rollout`'s states of the same key, and the files
written are read back with imageio (the library that wrote them)."""

import gc
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import imageio.v3 as iio
import jax
import numpy as np
import pytest
from cli_calls import main_captured, usage_error
from typecheck import no_runtime_typecheck
from tensorboard_events import summary_values

import eqxrl
from eqxrl.agents import IPPO, PPO
from eqxrl.envs import render_frames
from eqxrl.loop import Checkpoint
from eqxrl.runs import VideoBudget, VideoRecorder

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = dict(num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
TINY_FLAGS = ["--num-envs", "2", "--rollout-length", "8", "--num-epochs", "1", "--num-minibatches", "1", "--hidden-sizes", "8"]


@pytest.fixture(scope="module")
def cartpole():
    agent = PPO("CartPole-v1", **TINY)
    return agent, agent.init(jax.random.key(0))


def _read_mp4(path) -> tuple[np.ndarray, float]:
    """An MP4's frames and frame rate, read by imageio's ffmpeg plugin (JAX warns when the ffmpeg
    process is forked, which the tests' warning filter makes an error: it runs exec at once)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
        # (imageio 2.38's ffmpeg reader leaves the pipes of its ffmpeg process to the collector)
        warnings.filterwarnings("ignore", "unclosed file", ResourceWarning)
        with iio.imopen(path, "r", plugin="FFMPEG") as f:
            frames, fps = f.read(index=None), f.metadata()["fps"]
        gc.collect()
    return frames, fps


def _merged(frames: np.ndarray) -> np.ndarray:
    """`frames` with each run of identical consecutive frames kept once (as Pillow writes a GIF)."""
    keep = [0] + [t for t in range(1, len(frames)) if not np.array_equal(frames[t], frames[t - 1])]
    return frames[keep]


def test_frames_are_the_rollout_states_drawn(cartpole):
    """One frame per step of each episode, equal to the frames drawn from `eqxrl.rollout`'s states
    of the same key up to the step the episode ends on."""
    agent, state = cartpole
    key = jax.random.key(3)
    rec = eqxrl.render(agent, state, key, episodes=2)
    traj = eqxrl.rollout(agent, state, key, 500, num_envs=2, states=True)
    done = traj["terminated"] | traj["truncated"]
    for i in range(2):
        length = int(np.argmax(done[:, i])) + 1
        assert rec.lengths[i] == length < 500  # (an untrained policy drops the pole)
        assert rec.frames[i].shape == (length, 400, 600, 3) and rec.frames[i].dtype == np.uint8
        expected = render_frames(agent.eval_env, jax.tree.map(lambda x: x[:length, i], traj["state"]))
        np.testing.assert_array_equal(rec.frames[i], expected)
        assert rec.returns[i] == pytest.approx(float(traj["reward"][:length, i].sum()))
        assert len(_merged(rec.frames[i])) > length // 2  # the cart and pole move: frames differ
    assert rec.lengths[0] != rec.lengths[1] or not np.array_equal(rec.frames[0], rec.frames[1])
    # The first frame is the state the episode starts in: the pole upright at the centre.
    assert rec.frames[0][0].std() > 0 and rec.fps == 50 and rec.path is None


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_gif_and_mp4_read_back(cartpole, tmp_path):
    agent, state = cartpole
    # (cut at 12 steps, which keeps the test fast: Pillow takes ~20 ms a frame)
    rec = eqxrl.render(agent, state, jax.random.key(1), tmp_path / "a.gif", episodes=2, max_steps=12)
    frames = np.concatenate(rec.frames)
    assert rec.path == tmp_path / "a.gif" and len(frames) == sum(rec.lengths) and max(rec.lengths) == 12
    gif = iio.imread(rec.path, index=None)[..., :3]
    want = _merged(frames)
    assert gif.shape == want.shape  # (Pillow merges identical consecutive frames, shown longer)
    assert np.abs(gif.astype(int) - want).mean() < 1.0  # (a palette of 256 colours)
    durations = [iio.immeta(rec.path, index=i)["duration"] for i in range(len(gif))]
    assert sum(durations) == pytest.approx(len(frames) * 1000 / rec.fps, abs=len(gif))
    rec = eqxrl.render(agent, state, jax.random.key(1), tmp_path / "a.mp4", episodes=2, max_steps=12, fps=25)
    mp4, fps = _read_mp4(rec.path)
    assert fps == 25
    assert mp4.shape == frames.shape
    assert np.abs(mp4.astype(int) - frames).mean() < 3.0  # (H.264 is lossy)


def test_bad_arguments(cartpole, tmp_path, monkeypatch):
    agent, state = cartpole
    key = jax.random.key(0)
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^render\(out\) must end in \.gif, \.mp4 or \.html, got '.*a\.avi'$"):
            eqxrl.render(agent, state, key, tmp_path / "a.avi")
        with pytest.raises(ValueError, match=r"^render\(out\) must be in an existing directory"):
            eqxrl.render(agent, state, key, tmp_path / "nope" / "a.gif")
        with pytest.raises(ValueError, match=r"^render\(episodes\) must be a positive int, got 0"):
            eqxrl.render(agent, state, key, episodes=0)
        with pytest.raises(ValueError, match=r"^render\(max_steps\) must be a positive int"):
            eqxrl.render(agent, state, key, max_steps=0)
        with pytest.raises(ValueError, match=r"^render\(member\) needs a batched state"):
            eqxrl.render(agent, state, key, member=1)
        with pytest.raises(ValueError, match=r"^render\(out\): an \.html file is brax's interactive viewer, and env 'CartPole-v1' is not a brax env"):
            eqxrl.render(agent, state, key, tmp_path / "a.html")
        deep = PPO("DeepSea-bsuite", **TINY)
        with pytest.raises(ValueError, match=r"^render: env 'DeepSea-bsuite' has no renderer \(eqxrl draws"):
            eqxrl.render(deep, deep.init(key), key)
        with pytest.raises(ValueError, match=r"^record_every: env 'DeepSea-bsuite' has no renderer \(eqxrl draws"):
            eqxrl.runs.check_recordable(deep)
        assert eqxrl.runs.check_recordable(eqxrl.stack([agent, agent])).env.name == "CartPole-v1"
        # Without the video extra: one line naming it, before any episode runs.
        monkeypatch.setitem(sys.modules, "imageio", None)
        monkeypatch.setitem(sys.modules, "imageio.v3", None)
        with pytest.raises(ValueError, match=r"^render needs imageio and imageio-ffmpeg to write videos: pip install 'eqxrl\[video\]'$"):
            eqxrl.render(agent, state, key, tmp_path / "a.gif")
        with pytest.raises(ValueError, match=r"^--record-every needs imageio and imageio-ffmpeg to write videos: pip install 'eqxrl\[video\]'$"):
            eqxrl.runs.check_recordable(agent, owner="--record-every")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_gymnax_and_mpe_visualisers():
    """MinAtar through gymnax's matplotlib Visualizer, MPE through JaxMARL's MPEVisualizer:
    one frame per step, the frames of different states different."""
    key = jax.random.key(0)
    for agent in (PPO("Breakout-MinAtar", **TINY), IPPO("jaxmarl/MPE_simple_spread_v3", **TINY)):
        state = agent.init(key)
        rec = eqxrl.render(agent, state, key, max_steps=6)
        traj = eqxrl.rollout(agent, state, key, 6, states=True)
        done = traj["terminated"][:, 0] | traj["truncated"][:, 0]
        n = int(np.argmax(done)) + 1 if done.any() else 6
        assert rec.lengths == [n] and rec.frames[0].shape[0] == n
        np.testing.assert_array_equal(rec.frames[0], render_frames(agent.eval_env, jax.tree.map(lambda x: x[:n, 0], traj["state"])))
        assert len(_merged(rec.frames[0])) > 1


def _tensorboard_images(run_dir: pathlib.Path) -> list[tuple[int, bytes]]:
    """The `(step, encoded image)` of every image summary in a run's TensorBoard event files."""
    return [(step, v.image.encoded_image_string) for step, v in summary_values(run_dir / "tensorboard") if v.HasField("image")]


def _train_recording(run_dir: pathlib.Path, *flags: str) -> None:
    """`eqxrl train` of a tiny PPO on CartPole, 320 steps, into `run_dir`, with `flags`."""
    code, _, err = main_captured(
        ["train", "ppo", "--env", "CartPole-v1", *TINY_FLAGS, "--total-steps", "320", "--run-dir", str(run_dir),
         "--eval-episodes", "2", "--quiet", *flags]
    )  # fmt: skip
    assert code == 0, err


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_record_every_and_render_command(tmp_path, capsys):
    run_dir = tmp_path / "run"
    _train_recording(run_dir, "--record-every", "80", "--tensorboard")
    config = eqxrl.runs.load_config(run_dir)
    assert config["record_every"] == 80
    written = sorted(int(p.stem) for p in (run_dir / "videos").iterdir())
    assert config["videos"]["written"] == len(written) and 320 in written and written[0] == 80
    for step in written:
        video, _ = _read_mp4(run_dir / "videos" / f"{step}.mp4")
        assert video.shape[1:] == (400, 600, 3) and 1 <= len(video) <= 500
    images = _tensorboard_images(run_dir)
    assert sorted(s for s, _ in images) == written
    gif = iio.imread(images[-1][1], index=None, extension=".gif")
    assert gif.shape[1:3] == (400, 600)
    # The last video is the final state's episode with the recorder's key.
    agent, state, _ = eqxrl.runs.load_run(run_dir)
    key = jax.random.fold_in(eqxrl.runs.eval_key(0), config["total_steps"] // agent.steps_per_iteration)
    rec = eqxrl.render(agent, state, key)
    last, _ = _read_mp4(run_dir / "videos" / "320.mp4")
    assert len(last) == rec.lengths[0] and np.abs(last.astype(int) - rec.frames[0]).mean() < 3.0

    # Without STEPS: the time budget. Milliseconds of training afford no video at the quarters,
    # and the final one is written all the same. (Two seeds: with the suite's default of a CPU
    # device per core, the recorder takes member 0 of a state sharded over them.)
    auto_dir = tmp_path / "auto"
    _train_recording(auto_dir, "--record-every", "--seeds", "2")
    config = eqxrl.runs.load_config(auto_dir)
    assert config["record_every"] == "auto" and sorted(p.name for p in (auto_dir / "videos").iterdir()) == ["320.mp4"]
    assert config["videos"]["written"] == 1 and config["videos"]["skipped"] == 3 and config["videos"]["seconds"] > 0

    out_file = tmp_path / "episodes.mp4"
    code, out, err = main_captured(["render", str(run_dir), "--episodes", "2", "--out", str(out_file), "--checkpoint", "last"])
    assert code == 0, err
    assert out.startswith(f"wrote {out_file} (2 episode(s) of ")
    assert len(_read_mp4(out_file)[0]) == sum(int(n) for n in out.split(" of ")[1].split(" steps")[0].split(", "))
    code, out, err = main_captured(["render", str(run_dir)])
    assert code == 0 and (run_dir / "episode.gif").is_file(), err

    with no_runtime_typecheck():
        assert usage_error(["render", str(tmp_path / "nope")], capsys) == f"eqxrl render: error: run directory '{tmp_path / 'nope'}' does not exist"
        assert usage_error(["render", str(run_dir), "--checkpoint", "soon"], capsys) == (
            "eqxrl render: error: argument --checkpoint: must be best, last or an env step (an int), got 'soon'"
        )
        assert usage_error(["render", str(run_dir), "--checkpoint", "7"], capsys).startswith(
            f"eqxrl render: error: '{run_dir}' has no checkpoint at env step 7; it has ["
        )
        assert usage_error(["render", str(run_dir), "--episodes", "0"], capsys) == (
            "eqxrl render: error: argument --episodes: expected a positive integer, got '0'"
        )
        assert usage_error(["render", str(run_dir), "--out", "x.avi"], capsys) == (
            "eqxrl render: error: --out must end in .gif, .mp4 or .html, got 'x.avi'"
        )
        train = ["train", "ppo", *TINY_FLAGS, "--total-steps", "320", "--run-dir", str(tmp_path / "other"), "--quiet"]
        assert usage_error([*train, "--record-every", "0"], capsys) == (
            "eqxrl train ppo: error: argument --record-every: expected a positive integer, got '0'"
        )
        assert usage_error([*train, "--record-every", "8"], capsys) == (
            "eqxrl train ppo: error: --record-every 8 must be between one iteration of PPO (16 env steps) and --total-steps 320"
        )
        assert usage_error([*train, "--env", "DeepSea-bsuite", "--record-every"], capsys).startswith(
            "eqxrl train ppo: error: --record-every: env 'DeepSea-bsuite' has no renderer"
        )
    assert not (tmp_path / "other").exists()


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_brax_html_and_frames(tmp_path):
    """brax's HTML viewer in this process; its frames (MuJoCo's OpenGL renderer) in a process started
    with MUJOCO_GL=egl, as `eqxrl render` sets it on a host without a display."""
    script = textwrap.dedent(
        """
        import json, sys, jax, numpy as np, imageio.v3 as iio, eqxrl
        from eqxrl.agents import PPO
        agent = PPO("brax/inverted_pendulum", num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
        state = agent.init(jax.random.key(0))
        rec = eqxrl.render(agent, state, jax.random.key(1), sys.argv[1] + "/p.gif", max_steps=5)
        html = eqxrl.render(agent, state, jax.random.key(1), sys.argv[1] + "/p.html", max_steps=5)
        assert html.lengths == rec.lengths and html.frames == []
        gif = iio.imread(sys.argv[1] + "/p.gif", index=None)
        colours = len(np.unique(rec.frames[0].reshape(-1, 3), axis=0))
        print(json.dumps(dict(length=rec.lengths[0], shape=rec.frames[0].shape, gif=gif.shape, fps=rec.fps, colours=colours)))
        """
    )
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    n = got["length"]
    assert got["shape"] == [n, 240, 320, 3] and 1 <= got["gif"][0] <= n and got["gif"][1:3] == [240, 320]
    assert got["colours"] > 10 and got["fps"] == 25  # (a drawn scene; inverted_pendulum's dt is 0.04 s)
    text = (tmp_path / "p.html").read_text()
    assert "<html" in text.lower() and "brax" in text.lower()


def test_video_budget_accounting():
    """`VideoBudget`: a video is allowed while what recording cost, plus this video and the final
    one at the estimated cost, fits the fraction of the training time; the estimate is the prior
    per frame until a video is measured, then the costliest frame measured."""
    budget = VideoBudget(max_frames=8, fraction=0.25, frame_seconds=0.125)
    assert budget.estimate() == 1.0 and budget.spent == 0.0
    assert not budget.allows(7.0) and budget.allows(8.0)  # 0 + 2 * 1.0 <= 0.25 * 8
    budget.spend(0.5)  # (compiling: no frames, the estimate stays)
    assert budget.estimate() == 1.0 and not budget.allows(9.0) and budget.allows(10.0)
    budget.spend(1.5, frames=8)  # a video measured: 0.1875 s a frame replaces the prior
    assert budget.spent == 2.0 and budget.estimate() == 1.5
    assert not budget.allows(19.0) and budget.allows(20.0)  # 2 + 2 * 1.5 <= 0.25 * 20
    budget.spend(0.5, frames=8)  # a cheaper video: the costliest frame still estimates
    assert budget.estimate() == 1.5
    budget.spend(2.0, frames=8)
    assert budget.estimate() == 2.0 and budget.spent == 4.5


def _fake_recorder(tmp_path, agent, fraction, seconds_per_chunk=2.0, video_seconds=1.5):
    """A `VideoRecorder` whose clock advances `seconds_per_chunk` per chunk (`tick`) and whose
    videos cost `video_seconds` of its cost clock (8 frames each, nothing drawn)."""
    clock, cost = [0.0], [0.0]
    recorder = VideoRecorder(tmp_path, agent, 0, 1, agent.steps_per_iteration, fraction=fraction,
                             clock=lambda: clock[0], precompile=False)  # fmt: skip
    recorder.steps = 8  # (a short episode: the rollout runs for real)
    recorder.budget = VideoBudget(max_frames=8, fraction=fraction or 1.0, frame_seconds=0.125)
    recorder.cost = lambda: cost[0]

    def draw(trajectory, step):
        cost[0] += video_seconds
        recorder.written.append(step)
        return 8

    recorder._draw = draw

    def tick():
        clock[0] += seconds_per_chunk

    return recorder, tick


def test_recorder_keeps_to_the_time_budget(cartpole, tmp_path):
    """With a fraction, a due video is written only while the budget allows it after the training
    time elapsed (an injected clock: 2 s a chunk, so 2 * i s at chunk i; each video costs 1.5 s on
    an injected cost clock), and the final one always; without, every due video is written."""
    agent, state = cartpole
    n = 11

    def run(fraction):
        recorder, tick = _fake_recorder(tmp_path, agent, fraction)
        for i in range(1, n + 1):
            tick()
            recorder(Checkpoint(state, i, n, 1, {}), final=i == n)
            recorder.close()  # (the drawing thread is done before the next chunk: nothing is busy)
        return recorder

    recorder = run(0.25)
    # Allowed when spent + 2 * estimate <= 0.25 * 2i: before any video 2 * 1.0 <= 0.5i (i = 4);
    # then 1.5 + 2 * 1.5 <= 0.5i (i = 9); then 3 + 3 <= 0.5i needs i = 12, past the end:
    # the final video (i = 11) is written over the budget.
    per = agent.steps_per_iteration
    assert recorder.written == [4 * per, 9 * per, 11 * per]
    assert recorder.skipped == n - 3 and recorder.budget.spent == 4.5
    recorder = run(None)
    assert recorder.written == [i * per for i in range(1, n + 1)] and recorder.skipped == 0
