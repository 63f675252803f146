"""The checks every PPO-style config shares (PPO, MAPPO, IPPO): loop counts that divide,
the objective's ranges, the optimiser section, the MLP and the evaluation cap.

Each algorithm's ``validate`` calls :func:`check_ppo_family` first and then checks its own
keys; the messages name the key (``num_minibatches: 3 does not divide ...``), and the run
config prefixes the section (``ppo.``).
"""

from __future__ import annotations

from jaxrl.algos.contract import check, check_mlp

COUNTS = ("num_envs", "num_steps", "total_env_steps", "update_epochs", "num_minibatches", "eval_episodes")


def check_ppo_family(cfg) -> None:
    """Raise ``ValueError("<key>: ...")`` for the first impossible shared setting of ``cfg``
    (fields: the :data:`COUNTS`, ``gamma``, ``gae_lambda``, ``clip_eps``, ``vf_clip_eps``,
    ``ent_coef``, ``vf_coef``, ``optim``, ``hidden``, ``activation``, ``eval_max_steps``)."""
    for key in COUNTS:
        value = getattr(cfg, key)
        check(isinstance(value, int) and not isinstance(value, bool) and value > 0, key,
              f"expected a positive integer, got {value!r}")
    batch = cfg.num_envs * cfg.num_steps
    if cfg.total_env_steps % batch:
        lo = max(cfg.total_env_steps // batch, 1) * batch
        check(False, "total_env_steps",
              f"{cfg.total_env_steps} is not a multiple of num_envs * num_steps = {batch} (e.g. use {lo} or {lo + batch})")
    check(batch % cfg.num_minibatches == 0, "num_minibatches",
          f"{cfg.num_minibatches} does not divide the batch num_envs * num_steps = {batch}")
    check(0.0 < cfg.gamma <= 1.0, "gamma", f"expected 0 < gamma <= 1, got {cfg.gamma}")
    check(0.0 <= cfg.gae_lambda <= 1.0, "gae_lambda", f"expected 0 <= gae_lambda <= 1, got {cfg.gae_lambda}")
    check(cfg.clip_eps > 0.0, "clip_eps", f"expected clip_eps > 0, got {cfg.clip_eps}")
    check(cfg.vf_clip_eps is None or cfg.vf_clip_eps > 0.0, "vf_clip_eps",
          f"expected null (no value clipping) or > 0, got {cfg.vf_clip_eps}")
    for key in ("ent_coef", "vf_coef"):
        check(getattr(cfg, key) >= 0.0, key, f"expected {key} >= 0, got {getattr(cfg, key)}")
    cfg.optim.validate()
    check_mlp(cfg.hidden, cfg.activation)
    check(cfg.eval_max_steps is None or (isinstance(cfg.eval_max_steps, int) and cfg.eval_max_steps > 0),
          "eval_max_steps", f"expected null or a positive integer, got {cfg.eval_max_steps!r}")
