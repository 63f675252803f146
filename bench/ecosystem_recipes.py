"""Ecosystem recipes against the peers' own loops, each side a fresh whole process.

``minatar``  ``configs/ppo_minatar_breakout.yaml`` (gymnax-blines' published Breakout-MinAtar
             PPO settings) for ``--minatar-steps`` env steps per seed, ``--seeds`` seeds
             vmapped in one jitted program (train + evaluate), against rejax 0.1.3's PPO at
             the same settings (``PPO.create(...)``, ``jit(vmap(PPO.train))``; its Python from
             ``--rejax-python``: rejax needs gymnax < 1.0, so it lives in its own venv) with its
             periodic evaluation reduced to one at the end. Reported per side: process wall
             time, compile, run, env steps/s of the run, final training return (mean
             episodic return of the last tenth of updates) and evaluation return.
``craftax``  Craftax-Classic (symbolic) env stepping, random actions, vmap + scan over
             ``--craftax-envs`` envs x 64 steps: Craftax's own auto-reset env (its
             ``EnvironmentAutoReset``: a reset, i.e. a new world, computed every step and
             selected on ``done``) against the jaxrl adapter under ``VmapEnv(AutoReset(...))``
             (same scheme), ``VectorEnv`` (draws for finished envs, in chunks of 16) and
             ``ResetPoolVectorEnv`` (``env.vector: pool``: start states drawn 2N at a time
             ahead of need), interleaved in one process, compile apart; every output feeds
             the timed result. Then PPO at the settings of ``configs/ppo_craftax_classic.yaml``
             for ``--craftax-ppo-steps`` steps with ``--craftax-ppo-envs`` envs, each side a
             whole process: jaxrl on the recipe's env path, and (with ``--rejax-python``, whose
             venv needs craftax too) rejax 0.1.3's PPO on Craftax's own auto-reset env at the
             same settings, its evaluation callback removed (its default reads gymnax's
             ``max_steps_in_episode``, which Craftax's params do not have). jaxrl's side also
             reports the return and the achievements unlocked by the trained (stochastic)
             policy over 32 envs x 500 steps with episodes capped at 500 steps (Craftax
             reports them on the step an episode ends).

Run: ``nice -n 5 python bench/ecosystem_recipes.py --rejax-python /work/venv-rejax-lead/bin/python``
(needs the [gymnax] and [craftax] extras). Results, one record per benchmark, each written when
it finishes: ``bench/results/ecosystem_minatar.{json,csv}``, ``ecosystem_craftax.{json,csv}`` (env
stepping) and ``ecosystem_craftax_ppo.{json,csv}``; ``--only`` runs one of them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MINATAR_CFG = ROOT / "configs" / "ppo_minatar_breakout.yaml"
CRAFTAX_CFG = ROOT / "configs" / "ppo_craftax_classic.yaml"


def _now() -> float:
    return time.perf_counter()


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


# ------------------------------------------------------------------------- MinAtar: jaxrl
def child_minatar_jaxrl(steps: int, seeds: int) -> dict:
    t_start = _now()
    import jax
    import numpy as np

    from bench import common
    from jaxrl.algos.common.train import COMPILER_OPTIONS

    cfg, acfg, program, run = common.ppo_recipe(MINATAR_CFG, steps)
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    t0 = _now()
    compiled = jax.jit(jax.vmap(run), compiler_options=COMPILER_OPTIONS).lower(keys).compile()
    t1 = _now()
    curve, ev, ev_stochastic = jax.device_get(compiled(keys))
    t2 = _now()
    tail = max(1, curve.shape[1] // 10)
    return {
        "impl": "jaxrl", "env": cfg.env.id, "seeds": seeds, "env_steps_per_seed": acfg.total_env_steps,
        "import_and_build_s": t0 - t_start, "compile_s": t1 - t0, "run_s": t2 - t1,
        "env_steps_per_s": seeds * acfg.total_env_steps / (t2 - t1),
        "train_return_last_tenth": float(np.mean(curve[:, -tail:])),
        "train_return_per_seed": np.mean(curve[:, -tail:], axis=1).round(2).tolist(),
        "eval_return_deterministic": float(np.mean(ev)),
        "eval_return_stochastic": float(np.mean(ev_stochastic)),
    }


# ------------------------------------------------------------------------- MinAtar: rejax
def child_minatar_rejax(steps: int, seeds: int) -> dict:
    t_start = _now()
    import importlib.metadata

    import jax
    import numpy as np
    import yaml
    from rejax import PPO

    p = yaml.safe_load(MINATAR_CFG.read_text())["ppo"]
    config = {
        "env": "Breakout-MinAtar",
        "agent_kwargs": {"activation": p["activation"], "hidden_layer_sizes": list(p["hidden"])},
        "num_envs": p["num_envs"], "num_steps": p["num_steps"], "num_epochs": p["update_epochs"],
        "num_minibatches": p["num_minibatches"], "learning_rate": p["optim"]["lr"], "max_grad_norm": p["optim"]["max_grad_norm"],
        "total_timesteps": steps, "eval_freq": steps, "skip_initial_evaluation": True,
        "gamma": p["gamma"], "gae_lambda": p["gae_lambda"], "clip_eps": p["clip_eps"],
        "ent_coef": p["ent_coef"], "vf_coef": p["vf_coef"],
    }
    algo = PPO.create(**config)
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    t0 = _now()
    compiled = jax.jit(jax.vmap(PPO.train, in_axes=(None, 0))).lower(algo, keys).compile()
    t1 = _now()
    _, (lengths, returns) = jax.device_get(compiled(algo, keys))
    t2 = _now()
    return {
        "impl": "rejax", "env": "Breakout-MinAtar", "seeds": seeds, "env_steps_per_seed": steps,
        "import_and_build_s": t0 - t_start, "compile_s": t1 - t0, "run_s": t2 - t1,
        "env_steps_per_s": seeds * steps / (t2 - t1),
        "eval_return_stochastic": float(np.mean(returns[:, -1])),
        "versions": {n: importlib.metadata.version(n) for n in ("rejax", "gymnax", "jax", "flax")},
    }


# ------------------------------------------------------------------- Craftax env stepping
def _craftax_sides(num_envs: int, steps: int):
    """Jitted ``f(key) -> float32[]`` per side, stepping ``num_envs`` envs for ``steps`` random steps."""
    import jax
    import jax.numpy as jnp
    from craftax.craftax_env import make_craftax_env_from_name

    import jaxrl
    from jaxrl.core.reset_pool import ResetPoolVectorEnv
    from jaxrl.core.vector import VectorEnv
    from jaxrl.core.wrappers import AutoReset, VmapEnv

    raw = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=True)
    raw_params = raw.default_params
    env, params = jaxrl.make("craftax/Craftax-Classic-Symbolic-v1")

    def theirs_run(key):
        obs, state = jax.vmap(raw.reset, (0, None))(jax.random.split(key, num_envs), raw_params)

        def body(carry, key):
            state, acc = carry
            k_act, k_step = jax.random.split(key)
            action = jax.random.randint(k_act, (num_envs,), 0, 17)
            obs, state, reward, done, _ = jax.vmap(raw.step, (0, 0, 0, None))(
                jax.random.split(k_step, num_envs), state, action, raw_params)
            return (state, acc + obs.sum() + reward.sum() + done.sum()), None

        return jax.lax.scan(body, (state, jnp.float32(0)), jax.random.split(key, steps))[0][1]

    def ours_run(ours, key):
        state, _ = ours.reset(key, params)

        def body(carry, key):
            state, acc = carry
            k_act, k_step = jax.random.split(key)
            action = jax.random.randint(k_act, (num_envs,), 0, 17)
            state, ts = ours.step(k_step, state, action, params)
            done = ts.terminated | ts.truncated
            return (state, acc + ts.obs.sum() + ts.reward.sum() + done.sum()), None

        return jax.lax.scan(body, (state, jnp.float32(0)), jax.random.split(key, steps))[0][1]

    vmapped, vector = VmapEnv(AutoReset(env), num_envs), VectorEnv(env, num_envs, episode_stats=False)
    return {
        "craftax": jax.jit(theirs_run),
        "jaxrl_vmap_autoreset": jax.jit(functools.partial(ours_run, vmapped)),
        "jaxrl_vector_env": jax.jit(functools.partial(ours_run, vector)),
        "jaxrl_reset_pool": jax.jit(functools.partial(ours_run, ResetPoolVectorEnv(env, num_envs))),
    }


def child_craftax_env(sizes: list[int], repeats: int) -> list[dict]:
    import jax

    from bench import common

    steps, out = 64, []
    for n in sizes:
        sides = _craftax_sides(n, steps)
        key = jax.random.PRNGKey(0)
        compiles = {}
        for name, fn in sides.items():
            start = _now()
            compiled = fn.lower(key).compile()
            compiles[name] = _now() - start
            sides[name] = (lambda c: (lambda: c(key)))(compiled)
        timed = common.time_interleaved(sides, repeats=repeats)
        for name in sides:
            best = min(timed.wall[name])
            out.append({"impl": name, "env": "Craftax-Classic-Symbolic-v1", "num_envs": n, "steps": steps,
                        "compile_s": compiles[name], "best_s": best, "env_steps_per_s": n * steps / best,
                        "times_s": timed.wall[name]})
    return out


# ----------------------------------------------------------------------- Craftax: PPO
def _achievements(env, params, policy, agent, key, num_envs: int = 32, steps: int = 500) -> dict:
    """Fraction of finished episodes (capped at ``steps``) that unlocked each achievement.

    ``VectorEnv`` generates a new world only for the envs that finished (a per-step reset of
    every env, as ``AutoReset`` under ``vmap`` does, would dominate the rollout)."""
    import jax
    import jax.numpy as jnp

    from jaxrl.core.vector import VectorEnv

    capped = params.replace(max_steps_in_episode=steps)
    venv = VectorEnv(env, num_envs, episode_stats=False)
    carry = policy.init_carry(agent)
    act = jax.vmap(lambda obs, k: policy.act(agent, carry, obs, k, False)[1])

    def body(carry, key):
        state, obs, sums, ends = carry
        k_act, k_step = jax.random.split(key)
        state, ts = venv.step(k_step, state, act(obs, jax.random.split(k_act, num_envs)), capped)
        done = ts.terminated | ts.truncated
        names = [k for k in ts.info if k.startswith("Achievements/")]
        got = {k: jnp.sum(jnp.where(done, ts.info[k] > 0, False)) for k in names}
        sums = {k: sums[k] + got[k] for k in names}
        return (state, ts.obs, sums, ends + done.sum()), None

    def run(key):
        state, ts = venv.reset(key, capped)
        names = [k for k in ts.info if k.startswith("Achievements/")]
        zeros = {k: jnp.int32(0) for k in names}
        # Every env finishes at least one episode: the cap is ``steps``.
        (_, _, sums, ends), _ = jax.lax.scan(body, (state, ts.obs, zeros, jnp.int32(0)), jax.random.split(key, steps))
        return sums, ends

    sums, ends = jax.device_get(jax.jit(run)(key))
    return {"episodes": int(ends), **{k.split("/", 1)[1]: round(int(v) / max(int(ends), 1), 3) for k, v in sums.items() if v > 0}}


def child_craftax_ppo(steps: int, num_envs: int) -> dict:
    t_start = _now()
    import dataclasses

    import jax
    import numpy as np

    import jaxrl
    from jaxrl.algos import ppo
    from jaxrl.algos.common.train import COMPILER_OPTIONS, program_on, train_on
    from jaxrl.run.config import load_config

    cfg = load_config(str(CRAFTAX_CFG))
    acfg = dataclasses.replace(cfg.algo_config, num_envs=num_envs, total_env_steps=steps)
    env, params = jaxrl.make(cfg.env.id)
    program = program_on(ppo, env, params, acfg, vector=cfg.env.vector)
    train = train_on(ppo, env, params, acfg, vector=cfg.env.vector)

    def run(key):
        state, metrics = train(key)
        return state, metrics["episode_return"]

    key = jax.random.PRNGKey(0)
    t0 = _now()
    compiled = jax.jit(run, compiler_options=COMPILER_OPTIONS).lower(key).compile()
    t1 = _now()
    state, curve = compiled(key)
    curve = np.asarray(jax.device_get(curve))
    t2 = _now()
    agent = program.policy.params(state)
    ach = _achievements(program.policy.env, params, program.policy, agent, jax.random.PRNGKey(1))
    t3 = _now()
    return {
        "impl": "jaxrl", "env": cfg.env.id, "env_vector": cfg.env.vector, "num_envs": num_envs,
        "env_steps": acfg.total_env_steps,
        "import_and_build_s": t0 - t_start, "compile_s": t1 - t0, "run_s": t2 - t1,
        "env_steps_per_s": acfg.total_env_steps / (t2 - t1), "return_curve": curve.round(3).tolist(),
        "train_return_last_update": float(curve[-1]), "achievements_s": t3 - t2, "achievements": ach,
    }


def child_craftax_ppo_rejax(steps: int, num_envs: int) -> dict:
    t_start = _now()
    import importlib.metadata

    import gymnax
    import jax
    import yaml
    from craftax.craftax_env import make_craftax_env_from_name
    from rejax import PPO

    raw = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=True)

    class Env(type(raw)):
        """Craftax's auto-reset env; rejax tells discrete actions by gymnax's own ``Discrete``
        class, and Craftax ships a copy of it."""

        def action_space(self, params=None):
            return gymnax.environments.spaces.Discrete(raw.action_space(params).n)

    p = yaml.safe_load(CRAFTAX_CFG.read_text())["ppo"]
    algo = PPO.create(
        env=Env(), env_params=raw.default_params,
        agent_kwargs={"activation": p["activation"], "hidden_layer_sizes": list(p["hidden"])},
        num_envs=num_envs, num_steps=p["num_steps"], num_epochs=p["update_epochs"],
        num_minibatches=p["num_minibatches"], learning_rate=p["optim"]["lr"], max_grad_norm=p["optim"]["max_grad_norm"],
        total_timesteps=steps, eval_freq=steps, skip_initial_evaluation=True, gamma=p["gamma"],
        gae_lambda=p["gae_lambda"], clip_eps=p["clip_eps"], ent_coef=p["ent_coef"], vf_coef=p["vf_coef"],
    )
    algo = algo.replace(eval_callback=lambda algo, ts, rng: ts.global_step)
    key = jax.random.PRNGKey(0)
    t0 = _now()
    compiled = jax.jit(PPO.train).lower(algo, key).compile()
    t1 = _now()
    _, global_step = jax.device_get(compiled(algo, key))
    t2 = _now()
    return {
        "impl": "rejax", "env": "Craftax-Classic-Symbolic-v1", "num_envs": num_envs, "env_steps": int(global_step[-1]),
        "import_and_build_s": t0 - t_start, "compile_s": t1 - t0, "run_s": t2 - t1,
        "env_steps_per_s": int(global_step[-1]) / (t2 - t1),
        "versions": {n: importlib.metadata.version(n) for n in ("rejax", "gymnax", "jax", "flax", "craftax")},
    }


# ------------------------------------------------------------------------------- parent
def _spawn(python: str, args: list[str]) -> tuple[object, float]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env.setdefault("JAX_PLATFORMS", "cpu")
    start = _now()
    out = subprocess.run([python, __file__, *args], capture_output=True, text=True, env=env, cwd=str(ROOT))
    wall = _now() - start
    if out.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["minatar", "craftax", "craftax_env", "craftax_ppo"], default=None,
                   help="one group; craftax is both craftax_env and craftax_ppo")
    p.add_argument("--minatar-steps", type=int, default=491_520, help="env steps per seed (a multiple of 8,192)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--rejax-python", default=None, help="a Python with rejax 0.1.3 installed")
    p.add_argument("--craftax-envs", type=int, nargs="+", default=[16, 64])
    p.add_argument("--craftax-ppo-steps", type=int, default=32_768)
    p.add_argument("--craftax-ppo-envs", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child == "minatar_jaxrl":
        return _emit(child_minatar_jaxrl(args.minatar_steps, args.seeds))
    if args.child == "minatar_rejax":
        return _emit(child_minatar_rejax(args.minatar_steps, args.seeds))
    if args.child == "craftax_env":
        return _emit(child_craftax_env(args.craftax_envs, args.repeats))
    if args.child == "craftax_ppo":
        return _emit(child_craftax_ppo(args.craftax_ppo_steps, args.craftax_ppo_envs))
    if args.child == "craftax_ppo_rejax":
        return _emit(child_craftax_ppo_rejax(args.craftax_ppo_steps, args.craftax_ppo_envs))

    from bench import common

    common_args = ["--minatar-steps", str(args.minatar_steps), "--seeds", str(args.seeds),
                   "--craftax-envs", *map(str, args.craftax_envs), "--repeats", str(args.repeats),
                   "--craftax-ppo-steps", str(args.craftax_ppo_steps), "--craftax-ppo-envs", str(args.craftax_ppo_envs)]
    groups = {}
    if args.only in (None, "minatar"):
        groups["minatar"] = [(sys.executable, "minatar_jaxrl")] + (
            [(args.rejax_python, "minatar_rejax")] if args.rejax_python else [])
    if args.only in (None, "craftax", "craftax_env"):
        groups["craftax"] = [(sys.executable, "craftax_env")]
    if args.only in (None, "craftax", "craftax_ppo"):
        groups["craftax_ppo"] = [(sys.executable, "craftax_ppo")] + (
            [(args.rejax_python, "craftax_ppo_rejax")] if args.rejax_python else [])
    for group, jobs in groups.items():
        records = []
        for python, child in jobs:
            result, wall = _spawn(python, ["--child", child, *common_args])
            for rec in result if isinstance(result, list) else [result]:
                rec = {"benchmark": child, **rec}
                if not isinstance(result, list):
                    rec["process_wall_s"] = wall
                records.append(rec)
                print(json.dumps({k: v for k, v in rec.items() if k not in ("return_curve", "times_s")}), flush=True)
        meta = common.run_meta(libraries=(*common.DEFAULT_LIBRARIES, "craftax"))
        meta["load_average_at_end"] = os.getloadavg()
        if max(meta["load_average_at_end"][0], meta.get("load_average_1m") or 0.0) > 2.5:
            meta["note"] = "measured while other jobs shared the 2-core machine: wall times are inflated"
        paths = common.write_results(f"ecosystem_{group}", records, meta)
        print(f"wrote {paths['json']}", flush=True)


if __name__ == "__main__":
    main()
