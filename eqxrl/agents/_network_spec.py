"""`NetworkSpec`: how a replay agent builds and trains one of its networks (the critic, the actor), as
one module the agent stores (`agent.critic`, `agent.actor`). The constructor builds it from the
init-only keywords it had before (`critic_torso`, `hidden_sizes`, `critic_optimizer`,
`critic_loss_terms`; `actor_torso`, `actor_optimizer`, `policy_loss_terms`), or takes it given whole."""

import dataclasses
from typing import Any

import equinox as eqx

from ..components import (
    Adam,
    AbstractLossTerm,
    AbstractOptimizer,
    AbstractTorso,
    as_torso,
    auto_torso,
    check_loss_terms,
    check_learning_rate,
    check_optimizer,
    check_torso,
    get_activation,
    loss_terms,
    optimizer_slot,
)
from ..core import check_hyperparameter, is_positive_int
from ._keywords import module_from_keywords

NETWORK_KEYWORDS = {
    "critic": {"critic_torso": "torso", "hidden_sizes": "hidden_sizes", "activation": "activation",
               "critic_optimizer": "optimizer", "critic_loss_terms": "loss_terms"},
    "actor": {"actor_torso": "torso", "hidden_sizes": "hidden_sizes", "activation": "activation",
              "actor_optimizer": "optimizer", "policy_loss_terms": "loss_terms"},
}  # fmt: skip
"""For each network an agent may hold: its init-only keywords, and the `NetworkSpec` field each sets
(`hidden_sizes` and `activation` set both networks' default torsos)."""


class NetworkSpec(eqx.Module):
    """One of an agent's networks, as the agent builds and trains it:

    - `torso`: what turns observations (for a critic of continuous actions: observation and action)
      into features, any `eqxrl.components.AbstractTorso` spec; None: the default one,
      `auto_torso` of the env's observation space with `hidden_sizes` and `activation`;
    - `optimizer`: an eqxrl optimizer (or an optax transformation); None: Adam with the agent's
      learning rate for this network and its `max_grad_norm`;
    - `loss_terms`: extra terms added to this network's loss (`eqxrl.components.AbstractLossTerm`).
    """

    torso: AbstractTorso | None = eqx.field(static=True, default=None, converter=as_torso)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256), converter=tuple)
    activation: str = eqx.field(static=True, default="relu")
    optimizer: AbstractOptimizer | None = optimizer_slot()
    loss_terms: tuple[AbstractLossTerm, ...] = loss_terms()

    def torso_for(self, agent: Any) -> AbstractTorso:
        """**Returns:** `torso`, or (None) `auto_torso` of `agent.env`'s observation space with
        `hidden_sizes` and `activation` (and the agent's `normalize_observations`)."""
        if self.torso is not None:
            return self.torso
        normalized = bool(getattr(agent, "normalize_observations", False))
        return auto_torso(agent.env.observation_space, self.hidden_sizes, self.activation, normalized=normalized)


def spec_from_keywords(agent: Any, network: str, keywords: dict[str, Any]) -> NetworkSpec:
    """The `NetworkSpec` an agent stores as `network` (`"critic"`, `"actor"`): the one given, with
    each of its keywords (`NETWORK_KEYWORDS`) left unset or agreeing with it, or one built from them."""
    names, spec = NETWORK_KEYWORDS[network], getattr(agent, network)
    given = {keyword: keywords[keyword] for keyword in names}
    if spec is not None and not isinstance(spec, NetworkSpec):
        raise ValueError(f"{type(agent).__name__}({network}) must be an eqxrl.agents.NetworkSpec or None (built from the keywords), got {spec!r}")
    if spec is not None:
        return module_from_keywords(agent, network, given, f"the {network} network's spec", lambda: None)
    return NetworkSpec(**{field: given[keyword] for keyword, field in names.items()})


def check_spec(agent: Any, network: str) -> None:
    """Raise a one-line ValueError naming the agent's keyword (`SAC(actor_torso)`) for a part of its
    `network` spec it cannot build."""
    owner, spec = type(agent).__name__, getattr(agent, network)  # (a NetworkSpec: `spec_from_keywords` refused anything else)
    field_names = {field: keyword for keyword, field in NETWORK_KEYWORDS[network].items()}
    sizes = spec.hidden_sizes
    if not sizes or not all(is_positive_int(h) for h in sizes):
        raise ValueError(f"{owner}(hidden_sizes) must be a non-empty tuple of positive ints, got {sizes!r}")
    get_activation(spec.activation, owner)  # an unknown name fails here, not in init
    check_torso(owner, field_names["torso"], spec.torso)
    check_optimizer(owner, field_names["optimizer"], spec.optimizer)
    check_loss_terms(owner, field_names["loss_terms"], spec.loss_terms)


def optimizers_from_keywords(agent: Any, given: dict[str, Any], resolved: dict[str, Any]) -> None:
    """Fill in the optimizers `agent.rates` names (`{"critic.optimizer": "critic_learning_rate",
    "alpha_optimizer": "alpha_learning_rate"}`: a `NetworkSpec`'s, or an optimizer field of the
    agent, with the init-only keyword of its learning rate) that were not given: Adam with that rate
    (from the `resolved` keywords), `max_grad_norm` and the agent's `adam_options`, each keyword
    checked under the agent's name. A rate keyword `given` beside an optimizer given is refused in
    one line unless it agrees with it."""
    owner = type(agent).__name__
    for path, rate in agent.rates.items():
        if rate not in given:
            raise ValueError(f"{owner}.rates names {rate!r} for {path}, which is no init-only keyword of {owner} (declare `{rate}: InitVar[float] = ...`)")
        network, _, attr = path.rpartition(".")
        holder = getattr(agent, network) if network else agent
        current = getattr(holder, attr)
        if current is not None:
            module_from_keywords(agent, path.replace(".", "_"), {rate: given[rate]}, "the optimizer", lambda: None, current=current)
            continue
        check_learning_rate(owner, rate, resolved[rate])
        check_hyperparameter(owner, "max_grad_norm", resolved["max_grad_norm"], lambda v: v > 0, "> 0 (inf disables clipping)")
        built = Adam(resolved[rate], **{"max_grad_norm": resolved["max_grad_norm"], **agent.adam_options(path, resolved)})
        if network:
            setattr(agent, network, dataclasses.replace(holder, optimizer=built))
        else:
            setattr(agent, attr, built)
