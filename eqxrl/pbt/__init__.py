"""Population Based Training: one population abstraction for every agent.

```python
import jax, eqxrl
from eqxrl.agents import SAC
from eqxrl.pbt import PBT, LogUniform

pbt = PBT(SAC("Pendulum-v1"), {"actor_learning_rate": LogUniform(1e-4, 1e-2)}, population_size=8, ready=5_000)
population, history = pbt.run(jax.random.key(0), total_steps=50_000)
agent, state = population.member(history.best()[0])
```

Modules: `_spaces` (search domains), `_exploit` (selection), `_population`
(Population, History), `_generation` (the compiled programs), `_pbt` (PBT and
its loop), `_checkpoint` (the population's orbax checkpoints), `_rundir` (the
run directory, a callback of `PBT.run`), `_resume`.
"""

from ._checkpoint import PopulationWriter as PopulationWriter
from ._checkpoint import population_generations as population_generations
from ._checkpoint import load_population as load_population
from ._checkpoint import load_records as load_records
from ._checkpoint import save_population as save_population
from ._exploit import AbstractExploit as AbstractExploit
from ._exploit import Tournament as Tournament
from ._exploit import Truncation as Truncation
from ._generation import EvaluationReturn as EvaluationReturn
from ._generation import exploit_and_explore as exploit_and_explore
from ._generation import generation as generation
from ._generation import init_population as init_population
from ._generation import Novelty as Novelty
from ._generation import novelty as novelty
from ._generation import run_generation as run_generation
from ._generation import run_init_population as run_init_population
from ._pbt import PBT as PBT
from ._pbt import Fitness as Fitness
from ._population import History as History
from ._population import Population as Population
from ._population import gather as gather
from ._population import history_from_records as history_from_records
from ._resume import pbt_from_config as pbt_from_config
from ._resume import resume as resume
from ._rundir import HistorySink as HistorySink
from ._rundir import PopulationSink as PopulationSink
from ._rundir import RunDirectory as RunDirectory
from ._rundir import generation_checkpoint as generation_checkpoint
from ._rundir import generation_records as generation_records
from ._rundir import generation_rows as generation_rows
from ._rundir import pbt_config as pbt_config
from ._rundir import plot_history as plot_history
from ._rundir import read_history_csv as read_history_csv
from ._rundir import write_history_csv as write_history_csv
from ._spaces import Choice as Choice
from ._spaces import AbstractDomain as AbstractDomain
from ._spaces import IntLogUniform as IntLogUniform
from ._spaces import IntUniform as IntUniform
from ._spaces import LogUniform as LogUniform
from ._spaces import Uniform as Uniform
