"""Agents composed from eqxrl components."""

from ._base import AbstractAgent as AbstractAgent
from ._base import Clock as Clock
from ._dads import DADS as DADS
from ._dads import DADSLearner as DADSLearner
from ._dads_report import SkillReport as SkillReport
from ._dads_report import plot_skill_trajectories as plot_skill_trajectories
from ._ppo import PPO as PPO
from ._ppo import PPOState as PPOState
from ._ddpg import DDPG as DDPG
from ._deterministic import DeterministicLearner as DeterministicLearner
from ._dqn import DQN as DQN
from ._dqn import DQNLearner as DQNLearner
from ._off_policy import AbstractOffPolicyAgent as AbstractOffPolicyAgent
from ._off_policy import OffPolicyState as OffPolicyState
from ._sac import SAC as SAC
from ._sac import SACLearner as SACLearner
from ._td3 import TD3 as TD3
from ._mpo import MPO as MPO
from ._mpo import MPOLearner as MPOLearner
from ._registry import AGENTS as AGENTS
from ._registry import agent_class as agent_class
from ._registry import agent_name as agent_name
from ._registry import register_agent as register_agent
from ._stack import Batch as Batch
from ._stack import Stacked as Stacked
from ._stack import stack as stack
