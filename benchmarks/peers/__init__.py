"""Adapters for the libraries the benchmarks compare eqxrl against, one module per peer.

Each adapter builds the peer's trainer from a configuration given in the benchmark script (in the peer's
own terms), times it and reads its results back (steps, updates, returns, parameter counts), with the
patches the peer needs under this environment's JAX. The scripts import them lazily, so that a script
runs its other parts where a peer is not installed:

- ``rejax_adapter``: rejax 0.1.3 (PPO for ``ppo_cartpole.py``; SAC, TD3 and DQN for ``offpolicy_throughput.py``).
- ``brax_sac``: brax 0.14.2's ``brax.training.agents.sac`` (``offpolicy_throughput.py``).
- ``qdax_pbt``: QDax 0.5.0's ``PBTSAC`` + ``PBT`` (``pbt_qdax.py``, run in QDax's own virtual environment).
"""
