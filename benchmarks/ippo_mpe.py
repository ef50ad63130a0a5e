"""IPPO on MPE simple_spread: eqxrl versus JaxMARL's own IPPO (``ippo_ff_mpe.py``), same config and budget.

Measures compile time, team env steps per second after compilation and the final team return (the
sum of the agents' episode returns, which is what JaxMARL's ``MPELogWrapper`` logs), each the median
of ``--runs`` runs with the two sides interleaved (eqxrl, JaxMARL, JaxMARL, eqxrl, ...).

Configuration: JaxMARL's ``config/ippo_ff_mpe.yaml`` (16 envs x 128 steps, 4 epochs x 4 minibatches,
Adam 2.5e-4 annealed, gamma 0.99, GAE 0.95, clip 0.2, entropy 0.01, value 0.5, global-norm clipping
0.5, (64, 64) tanh actor and critic), one network shared by the agents, without agent ids (as
JaxMARL's script). The yaml's 1e7 steps take hours on 2 shared cores: the budget is ``--steps``
(default 409,600 team env steps = 200 updates) on both sides, which is a reduced, identical budget.

Deliberate differences (each library's design): eqxrl bootstraps through MPE's time limit (a
truncation; JaxMARL treats the done as terminal), and eqxrl runs ~50 compiled chunks with host round
trips (JaxMARL one program). The JaxMARL side is ``peers/jaxmarl_ippo.py``.
"""

from __future__ import annotations

import jax
import numpy as np

from _common import fresh_caches, time_train, turn_order
from _report import Metric, Report, compare, parser, table
from eqxrl.agents import IPPO

ENV = "MPE_simple_spread_v3"
DEFAULT_STEPS = 200 * 16 * 128


def make_eqxrl(cfg: dict) -> IPPO:
    return IPPO(
        "jaxmarl/" + ENV, num_envs=cfg["NUM_ENVS"], rollout_length=cfg["NUM_STEPS"], num_epochs=cfg["UPDATE_EPOCHS"],
        num_minibatches=cfg["NUM_MINIBATCHES"], hidden_sizes=(64, 64), activation=cfg["ACTIVATION"],
        learning_rate=cfg["LR"], anneal_lr=cfg["ANNEAL_LR"], gamma=cfg["GAMMA"], gae_lambda=cfg["GAE_LAMBDA"],
        clip_eps=cfg["CLIP_EPS"], ent_coef=cfg["ENT_COEF"], vf_coef=cfg["VF_COEF"], max_grad_norm=cfg["MAX_GRAD_NORM"],
        share_parameters=True, agent_ids=False,
    )  # fmt: skip


def run_eqxrl(cfg: dict, key) -> dict:
    state, info, out = time_train(make_eqxrl(cfg), key, cfg["TOTAL_TIMESTEPS"])
    out["steps"] = info.env_steps
    out["sps"] = info.steps_per_second
    # The peer's quantity: the last iteration's finished episodes' mean team return (IPPO's
    # accumulators hold the last iteration's episodes when training ends).
    finished = float(state.env_state.finished)
    out["team_return"] = float(np.asarray(state.env_state.finished_return).sum()) / max(finished, 1.0)
    return out


def run_peer(cfg: dict, key) -> dict:
    from peers import jaxmarl_ippo

    _, out = jaxmarl_ippo.time_train(cfg, key)
    out["sps"] = out["steps"] / out["run"]
    return out


def main() -> None:
    p = parser(__doc__, "ippo_mpe", runs=3, quick="a smoke test: 20 updates, 1 run")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"team env steps per run on both sides (default {DEFAULT_STEPS:,}; JaxMARL's yaml: 10,000,000)")  # fmt: skip
    args = p.parse_args()
    if args.steps < 16 * 128:
        p.error("--steps must be at least one update (2,048 team env steps)")
    if args.quick:
        args.steps, args.runs = 20 * 16 * 128, 1
    report = Report(__file__)
    from peers import jaxmarl_ippo

    cfg = jaxmarl_ippo.config(TOTAL_TIMESTEPS=args.steps)
    runs = {"eqxrl": [], "JaxMARL": []}
    for r in range(args.runs):
        for side in turn_order(r, list(runs)):
            fresh_caches()
            key = jax.random.key(r) if side == "eqxrl" else jax.random.PRNGKey(r)
            out = run_eqxrl(cfg, key) if side == "eqxrl" else run_peer(cfg, key)
            print(side, r, {k: round(v, 2) for k, v in out.items() if isinstance(v, (int, float))}, flush=True)
            runs[side].append(out)
    assert runs["eqxrl"][0]["steps"] == runs["JaxMARL"][0]["steps"], (runs["eqxrl"][0]["steps"], runs["JaxMARL"][0]["steps"])
    metrics = [
        Metric("compile (s)", lambda o: o["compile"], "{:.1f}", higher=False),
        Metric("team env steps / s (after compile)", lambda o: o["sps"], "{:.0f}", bold=True),
        Metric("final team return", lambda o: o["team_return"], "{:.1f}", higher=None, bold=True),
    ]
    lines = report.header("IPPO on MPE simple_spread: eqxrl vs JaxMARL's IPPO", packages=("jaxmarl",))
    lines += [
        f"- JaxMARL IPPO: `{jaxmarl_ippo.SCRIPT}` at mirror revision {jaxmarl_ippo.revision()}, its yaml config, "
        f"TOTAL_TIMESTEPS = {args.steps:,} ({'the yaml' + chr(39) + 's own' if args.steps >= 10**7 else 'reduced from 1e7'}, identical on both sides)",
        f"- medians of {args.runs} interleaved runs; compile time separate from steps per second",
        "",
        *table(["metric", "eqxrl", "JaxMARL", "eqxrl / JaxMARL"], compare(metrics, runs["eqxrl"], runs["JaxMARL"])),
    ]
    report.emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
