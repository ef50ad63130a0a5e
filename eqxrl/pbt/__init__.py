"""Population Based Training: one population abstraction for every agent.

```python
import jax, eqxrl
from eqxrl.agents import SAC
from eqxrl.pbt import PBT, LogUniform

pbt = PBT(SAC("Pendulum-v1"), {"actor_learning_rate": LogUniform(1e-4, 1e-2)}, population_size=8, ready=5_000)
population, history = pbt.run(jax.random.key(0), total_steps=50_000)
agent, state = population.member(history.best()[0])
```
"""

from ._exploit import Exploit as Exploit
from ._exploit import Tournament as Tournament
from ._exploit import Truncation as Truncation
from ._io import load_checkpoint as load_checkpoint
from ._io import pbt_config as pbt_config
from ._io import pbt_from_config as pbt_from_config
from ._io import plot_history as plot_history
from ._io import read_history_csv as read_history_csv
from ._io import resume as resume
from ._io import save_checkpoint as save_checkpoint
from ._io import write_history_csv as write_history_csv
from ._pbt import PBT as PBT
from ._pbt import EvaluationReturn as EvaluationReturn
from ._pbt import History as History
from ._pbt import Population as Population
from ._pbt import exploit_and_explore as exploit_and_explore
from ._pbt import history_from_records as history_from_records
from ._spaces import Choice as Choice
from ._spaces import Domain as Domain
from ._spaces import IntLogUniform as IntLogUniform
from ._spaces import IntUniform as IntUniform
from ._spaces import LogUniform as LogUniform
from ._spaces import Uniform as Uniform
