"""The command handlers live in their command modules (:mod:`jaxrl.commands`), the CLI
table reaches them lazily, and their old import paths (``jaxrl.run.evaluate.main_eval``,
``jaxrl.cli.check_env_main``, ``jaxrl.run.commands.main_train``,
``jaxrl.run.eval_command.main_render``, ...) still give the same objects with a
``DeprecationWarning`` naming the new path (:data:`jaxrl._compat.MOVED_NAMES`,
:data:`jaxrl._compat.MOVED_MODULES`).
The handlers' behaviour and messages are tested through the CLI (tests/test_cli.py,
tests/test_cli_train.py, tests/test_render.py)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings

import pytest

from jaxrl import _compat, cli


@pytest.mark.parametrize("old", sorted(_compat.MOVED_NAMES))
def test_moved_name_warns_and_gives_the_new_object(old):
    new, moved, removed = _compat.MOVED_NAMES[old]
    old_module, _, old_name = old.rpartition(".")
    new_module, _, new_name = new.rpartition(".")
    target = getattr(importlib.import_module(new_module), new_name)
    message = f"{old} moved to {new} in jaxrl {moved}; the old path goes away in {removed}"
    with pytest.warns(DeprecationWarning, match=re.escape(message)) as caught:
        got = getattr(importlib.import_module(old_module), old_name)
    assert got is target
    assert caught[0].filename == __file__  # the warning points at the caller's line


def test_the_old_eval_command_module_gives_every_old_name():
    """0.5.0's ``jaxrl.run.eval_command`` names (handlers and the remote play) load from their
    new modules with a warning naming them."""
    from jaxrl.commands import eval as eval_cmd, render
    from jaxrl.run import remote

    sys.modules.pop("jaxrl.run.eval_command", None)
    vars(sys.modules["jaxrl.run"]).pop("eval_command", None)
    with pytest.warns(DeprecationWarning, match=r"jaxrl\.run\.eval_command moved to jaxrl\.commands\.eval / "
                                                r"jaxrl\.commands\.render / jaxrl\.run\.remote in jaxrl 0\.7\.0"):
        from jaxrl.run.eval_command import (
            check_render_args, main_eval, main_remote, main_render, main_sampled, remote_completions,
        )
    assert (main_eval, main_sampled, main_remote) == (eval_cmd.main_eval, eval_cmd.main_sampled, eval_cmd.main_remote)
    assert (main_render, check_render_args) == (render.main_render, render.check_render_args)
    assert remote_completions is remote.remote_completions


def test_other_missing_names_are_still_attribute_errors():
    from jaxrl.run import evaluate

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for module in (cli, evaluate):
            assert not hasattr(module, "no_such_name")
            with pytest.raises(AttributeError, match="no_such_name"):
                module.no_such_name


#: Every sub-command and the handler the CLI table names for it.
HANDLERS = {
    "list": ("jaxrl.commands.listing", "main_list"),
    "check-env": ("jaxrl.commands.check_env", "main_check_env"),
    "train": ("jaxrl.commands.train", "main_train"),
    "eval": ("jaxrl.commands.eval", "main_eval"),
    "render": ("jaxrl.commands.render", "main_render"),
    "export-hf": ("jaxrl.commands.export_hf", "main_export_hf"),
    "config": ("jaxrl.commands.config", "main_config"),
    "serve": ("jaxrl.commands.serve", "main_serve"),
    "compare": ("jaxrl.commands.compare", "main_compare"),
}


def test_the_cli_table_reaches_the_command_modules():
    sub = cli.build_parser("train")._subparsers._group_actions[0].choices
    where = {name: (p.get_default("func").module, p.get_default("func").attr) for name, p in sub.items()}
    assert where == HANDLERS
    for module, attr in where.values():
        assert callable(getattr(importlib.import_module(module), attr))


def test_every_main_handler_lives_on_the_commands_floor():
    """``def main_*`` only in :mod:`jaxrl.commands`."""
    import pathlib

    root = pathlib.Path(cli.__file__).parent
    found = sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*.py")
        if re.search(r"^def main_", p.read_text(), re.M) and p.parent.name != "commands"
    )
    assert found == []


def test_the_handler_modules_import_no_jax():
    """``jaxrl check-env``, ``list`` and ``config`` import JAX only when they run."""
    code = "import sys; import jaxrl.commands.check_env, jaxrl.commands.listing, jaxrl.commands.config; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_actor_factory_gives_fresh_carries_sharing_one_compile():
    import jax
    import jax.numpy as jnp

    from jaxrl.algos.contract import Policy
    from jaxrl.core import registry
    from jaxrl.run.evaluate import actor_factory

    traces = []

    def act(agent, carry, obs, key, det):
        traces.append(1)  # runs once per trace
        return carry + 1, carry + 1

    env, _ = registry.make("CartPole-v1")
    factory = actor_factory(Policy(env, lambda s: s, lambda agent: jnp.zeros((), jnp.int32), act), None)
    for _ in range(2):  # each episode's actor starts from the init carry
        actor = factory()
        assert [int(actor(jax.random.PRNGKey(0), None)) for _ in range(3)] == [1, 2, 3]
    assert len(traces) == 1


def test_eval_remote_scores_the_run_against_a_served_env(tmp_path):
    """``jaxrl eval RUN --remote URL`` end to end: the returns in ``eval.json`` equal an
    in-process replay (the served env's documented seed rule) of the run's greedy policy as
    :func:`jaxrl.load_policy` exports it."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pytest.importorskip("websockets")
    import json
    import os

    import jax
    import numpy as np

    from jaxrl.core import registry
    from jaxrl.run.evaluate import EVAL_SEED_OFFSET
    from jaxrl.run.export import load_policy
    from jaxrl.serve.app import Server
    from jaxrl.serve.main import Background
    from jaxrl.serve.pool import SlotPool
    from test_serve import reference

    run = str(tmp_path / "run")
    tiny = ["ppo.total_env_steps=128", "ppo.num_envs=4", "ppo.num_steps=32", "ppo.hidden=[8]", "ppo.eval_episodes=2", "train.progress=false"]
    config = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "ppo_cartpole.yaml")
    assert cli.main(["train", config, "--out", run, *[a for s in tiny for a in ("--set", s)]]) == 0
    env, params = registry.make("CartPole-v1", max_steps_in_episode=100)
    with Background(Server(SlotPool(env, params, 1), "CartPole-v1", window_s=0.002)) as url:
        assert cli.main(["eval", run, "--remote", url, "--episodes", "2", "--seed", "3"]) == 0
    remote = json.load(open(os.path.join(run, "eval.json")))["remote"]
    assert remote["policies"]["deterministic"]["episodes"] == 2 and remote["remote"] == url
    assert remote["policies"]["deterministic"]["label"] == "remote deterministic return"
    policy, want = load_policy(run), []
    for i in range(2):
        actions = []
        while True:  # replay: the greedy action on the in-process observation, until the end
            steps = reference(env, params, 3 + EVAL_SEED_OFFSET + i, actions)
            if actions and bool(steps[-1].terminated[0] | steps[-1].truncated[0]):
                break
            actions.append(int(policy(np.asarray(steps[-1].obs[0]), jax.random.PRNGKey(0))))
        want.append(sum(float(ts.reward[0]) for ts in steps[1:]))
    got = remote["policies"]["deterministic"]
    assert (got["mean"], got["std"]) == pytest.approx((np.mean(want), np.std(want, ddof=1)))
