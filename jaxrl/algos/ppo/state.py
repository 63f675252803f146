"""PPO's typed state containers: the train state, the learner's carry, a batch, the setup."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from flax import struct

from jaxrl.algos.contract import Plan
from jaxrl.algos.ppo.config import PPOConfig, PPOHyperparams
from jaxrl.algos.common.optim import Schedule
from jaxrl.core import rollout
from jaxrl.core.env import Environment
from jaxrl.models import normalize
from jaxrl.models.networks import ActorCritic


@struct.dataclass
class AgentState:
    """Everything a trained policy needs to act (saved with it, used at eval).

    Attributes:
      params: the :class:`~jaxrl.models.networks.ActorCritic` params pytree.
      obs_stats: running statistics of observations (identity while ``count == 0`` or
        when ``normalize_obs`` is off).
      reward_stats: running statistics of discounted returns (reward scaling).
    """

    params: Any
    obs_stats: normalize.RunningStats
    reward_stats: normalize.RunningStats


@struct.dataclass
class PPOTrainState:
    """Everything a PPO run depends on; every leaf is a jax array.

    Attributes:
      agent: params and normaliser statistics.
      opt_state: state of :func:`jaxrl.algos.common.optim.adam` (holds the traced
        ``learning_rate`` and ``max_grad_norm``), over the params flattened into one
        vector (``ravel_pytree`` order).
      env: batched env state and the current observations ``[B, *obs_shape]``.
      return_acc: float32 ``[B]``, running discounted return per env (reward scaling).
      key: the PRNG key the next update splits.
      update_step: int32 ``[]``, updates done so far.
      hyper: the traced loss hyperparameters.
      memory: a recurrent torso's :class:`~jaxrl.core.rollout.PolicyMemory` (carry
        leaves ``[B, ...]``, start flags bool ``[B]``); ``None`` (no leaves) for an MLP.
    """

    agent: AgentState
    opt_state: Any
    env: rollout.EnvCarry
    return_acc: jax.Array
    key: jax.Array
    update_step: jax.Array
    hyper: PPOHyperparams
    memory: rollout.PolicyMemory | None = None


@struct.dataclass
class Batch:
    """A flat learning batch (``[N]`` leading axis: a minibatch or the whole rollout).

    Attributes:
      obs: ``[N, *obs_shape]``, raw observations.
      action: ``[N, *action_shape]``.
      log_prob: float32 ``[N]``, behaviour log-probabilities.
      value: float32 ``[N]``, behaviour value estimates.
      advantage: float32 ``[N]``, GAE advantages.
      target: float32 ``[N]``, value targets ``advantage + value``.
    """

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array


@struct.dataclass
class SequenceBatch:
    """Whole env sequences for a recurrent torso, env-major (``[N]`` envs).

    Attributes:
      steps: a :class:`Batch` whose leaves are ``[N, T, ...]``.
      start: bool ``[N, T]``, the step's observation starts an episode (carry reset).
      carry: the policy's carry before step 0 of each sequence, leaves ``[N, ...]``.
    """

    steps: Batch
    start: jax.Array
    carry: Any


@struct.dataclass
class LearnerState:
    """The part of the state an SGD step changes (the ``scan`` carry of an epoch).

    ``params`` is the network's params as one flat float32 vector (``ravel_pytree``) for
    the whole update: unravelled once per step for the loss, never re-flattened.
    """

    params: jax.Array  # float32 [P]
    opt_state: Any


class Setup(NamedTuple):
    """Static pieces bound into the pure functions with ``functools.partial``."""

    env: Environment  # batched, auto-resetting training env
    env_params: Any
    network: ActorCritic
    cfg: PPOConfig
    plan: Plan
    schedule: Schedule  # the learning-rate schedule (static)
    optimizer: Any  # optax.GradientTransformation of jaxrl.algos.common.optim.adam
