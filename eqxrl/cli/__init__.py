"""The `eqxrl` command line: `eqxrl train`, `eqxrl evaluate` and `eqxrl pbt`.

```
eqxrl train                                   # PPO on CartPole-v1, 500k steps, 1 seed
eqxrl train ppo --env Acrobot-v1 --total-steps 1e6 --seeds 4 --learning-rate 3e-4 --anneal-lr false
eqxrl evaluate runs/ppo-CartPole-v1-20250101-120000 --episodes 100
eqxrl pbt sac --env Pendulum-v1 --population 16 --ready 5000 --total-steps 5e4 --tune actor_learning_rate=log:1e-4:1e-2
eqxrl pbt --resume runs/pbt-sac-Pendulum-v1-20250101-120000
```

Every field of an agent's dataclass except `env` is a flag, generated from
`dataclasses.fields`: `PPO.num_minibatches` is `--num-minibatches`, parsed as
the type of its default (int, float with `inf`, bool as `true`/`false`, a tuple
of ints as `64,64`, str). Fields of other types are not flags.

Modules: `_parse` (value parsers), `_flags` (flags from fields), `_common`
(run directories, printing), one module per command (`_train`, `_evaluate`,
`_pbt`), and `_main` (the parser and `main`).
"""

from ._flags import DEFAULT_AGENT as DEFAULT_AGENT
from ._flags import DEFAULT_ENV as DEFAULT_ENV
from ._flags import agent_flags as agent_flags
from ._main import build_parser as build_parser
from ._main import main as main
from ._main import with_default_agent as with_default_agent
