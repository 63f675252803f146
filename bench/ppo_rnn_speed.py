"""Where recurrent PPO's time goes, and what the GRU torso's layout saves.

Builds the recipe (``configs/ppo_rnn_cartpole_pomdp.yaml`` by default) for ``--seeds``
vmapped seeds and times, interleaved in one process (so load from other processes hits
every side alike), with compile time apart:

* ``update``: ``--updates`` whole PPO updates (rollout, GAE, epochs x minibatches over the
  stored sequences) in one jitted scan, as the trainer's chunk runs them;
* ``rollout``: the rollout of one update alone (env steps, the GRU's per-step forward,
  the bootstrap values), repeated ``--updates`` times, to split the update's time;

each with the library's GRU (input transforms before the scan, one fused recurrent matmul
per step) and with flax's ``GRUCell`` scanned step by step (the same params and maths).
Every output is consumed (the states and metrics are blocked on). Writes
``bench/results/ppo_rnn_speed.json`` (and ``.csv``) with the machine, versions, load and
command. Usage::

    python bench/ppo_rnn_speed.py --seeds 16 --updates 8 --repeats 5
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from bench import common  # noqa: E402
from jaxrl.algos.common.train import COMPILER_OPTIONS  # noqa: E402
from jaxrl.algos.ppo import update as ppo_update  # noqa: E402
from jaxrl.models import recurrent  # noqa: E402
from jaxrl.models.networks import ACTIVATIONS, MLP, RECURRENT_SCOPE, _dense  # noqa: E402
from jaxrl.run import config as config_lib  # noqa: E402
from jaxrl.run.build import build, seed_keys  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


class FlaxCellActorCritic(recurrent.RecurrentActorCritic):
    """The same network with flax's ``GRUCell`` under ``nn.scan`` (the reference layout)."""

    @recurrent.nn.compact
    def __call__(self, carry, obs, start):
        x = jnp.asarray(obs, jnp.float32)
        x = jnp.reshape(x, x.shape[: x.ndim - self.obs_ndim] + (-1,))
        x = ACTIVATIONS[self.activation](_dense(self.hidden[0], "embed", self.deferred_kernels)(x))
        scan = recurrent._ScannedCell(self.cell, self.cell_size, self.deferred_kernels, name=RECURRENT_SCOPE)
        carry, h = scan(carry, (x, jnp.asarray(start, bool)))
        pi_h = MLP(self.hidden[1:], self.activation, self.deferred_kernels, name="actor")(h)
        v_h = MLP(self.hidden[1:], self.activation, self.deferred_kernels, name="critic")(h)
        value = _dense(1, "value_head", self.deferred_kernels)(v_h)[..., 0]
        return carry, self._dist(pi_h), value


def _updates(setup, k: int, states):
    body = lambda s, _: ppo_update.update(setup, s)  # noqa: E731
    return jax.vmap(lambda s: jax.lax.scan(body, s, None, length=k))(states)


def _rollouts(setup, k: int, states):
    def one(s):
        def body(s, key):
            env, memory, traj, values, _ = ppo_update._collect(setup, s, key)
            return s.replace(env=env, memory=memory), (traj.reward.sum() + values.sum())

        return jax.lax.scan(body, s, jax.random.split(s.key, k))

    return jax.vmap(one)(states)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "ppo_rnn_cartpole_pomdp.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    cfg = config_lib.load_config(args.config, args.set)
    program = build(cfg).program
    setup = program.update.args[0]
    reference = setup._replace(network=FlaxCellActorCritic(**{
        f: getattr(setup.network, f) for f in setup.network.__dataclass_fields__ if f not in ("parent", "name")
    }))
    states = jax.vmap(program.init)(seed_keys(0, args.seeds))
    sides, compile_s = {}, {}
    for label, s in (("fused", setup), ("flax_cell", reference)):
        for what, fn in (("update", _updates), ("rollout", _rollouts)):
            jitted = jax.jit(functools.partial(fn, s, args.updates), compiler_options=COMPILER_OPTIONS)
            compiled, seconds = common.compile_fn(jitted, states)
            sides[f"{what}_{label}"] = functools.partial(compiled, states)
            compile_s[f"{what}_{label}"] = round(seconds, 2)
    timings = common.time_interleaved(sides, args.repeats)
    steps = args.updates * program.plan.env_steps_per_update * args.seeds
    records = []
    for name in sides:
        wall, cpu = timings.wall[name], timings.cpu[name]
        records.append({
            "side": name, "seeds": args.seeds, "updates": args.updates, "env_steps": steps,
            "compile_s": compile_s[name], "wall_median_s": round(statistics.median(wall), 4),
            "wall_best_s": round(min(wall), 4), "cpu_median_s": round(statistics.median(cpu), 4),
            "env_steps_per_s_best": round(steps / min(wall), 1),
        })
        print(records[-1], flush=True)
    meta = common.run_meta()
    meta["config"] = args.config
    meta["overrides"] = args.set
    meta["note"] = "interleaved repeats in one process; best and median wall time; the machine may be shared"
    common.write_results("ppo_rnn_speed", records, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
