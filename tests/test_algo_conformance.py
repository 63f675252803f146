"""Every registered algorithm, and the example plugin ``examples/reinforce``, through
:func:`jaxrl.run.conformance.check_algorithm` on a tiny config: the chunk compiles once,
chunked equals scanned, vmapped seeds equal separate runs, resume is bit-exact, and the env
split over two devices equals one device.

The split needs two JAX devices before JAX starts, so a subprocess
(``python tests/test_algo_conformance.py OUT.json CASE,CASE``, forcing two host devices)
checks cases of :data:`CASES` and writes one JSON report; the tests read it. This file runs
:data:`HERE`; tests/test_algo_conformance_lm_marl.py the rest (two files, so that
``pytest -n 2 --dist loadfile`` can give them to two workers). The subprocess compiles with
tests/fast_compile.py's settings, but for the cases in :data:`TRAINER_OPTIONS`. A newly
registered algorithm without a tiny config in :data:`CASES` fails
:func:`test_every_registered_algorithm_has_a_case`. The last tests feed the check broken
variants of the fake algorithm of tests/test_trainer.py (trace-time Python state, a dtype
that ``update`` changes, a lossy restore) and expect each failure, named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "reinforce")

TINY_CONTROL = ["train.checkpoint_every=0", "train.progress=false"]

#: PPO's tiny run, feed-forward and recurrent.
TINY_PPO = ["ppo.num_envs=4", "ppo.num_steps=8", "ppo.total_env_steps=160", "ppo.update_epochs=1",
            "ppo.num_minibatches=2", "ppo.hidden=[8]"]

#: Per case: (the algorithm, a recipe under configs/ or a raw config dict, overrides): tiny
#: networks, a few envs, 5 updates (chunks of 2, 2 and 1).
CASES = {
    "ppo": ("ppo", "ppo_cartpole.yaml", TINY_PPO),
    "ppo_recurrent": ("ppo", "ppo_rnn_cartpole_pomdp.yaml", [*TINY_PPO, "ppo.network.cell_size=4"]),
    "dqn": ("dqn", "dqn_cartpole.yaml", [
        "dqn.num_envs=4", "dqn.steps_per_update=2", "dqn.total_env_steps=40", "dqn.gradient_steps=2",
        "dqn.batch_size=8", "dqn.buffer_size=32", "dqn.learning_starts=8", "dqn.n_step=2", "dqn.hidden=[8]"]),
    "pqn": ("pqn", "pqn_cartpole.yaml", [
        "pqn.num_envs=4", "pqn.num_steps=4", "pqn.total_env_steps=80", "pqn.update_epochs=1",
        "pqn.num_minibatches=2", "pqn.hidden=[8]"]),
    "sac": ("sac", "sac_pendulum.yaml", [
        "sac.num_envs=2", "sac.steps_per_update=2", "sac.total_env_steps=20", "sac.batch_size=8",
        "sac.buffer_size=16", "sac.learning_starts=4", "sac.hidden=[8]"]),
    "grpo_token": ("grpo", "grpo_reverse.yaml", [
        "grpo.num_prompts=2", "grpo.group_size=2", "grpo.num_updates=5", "grpo.num_minibatches=1",
        "grpo.model.d_model=8", "grpo.model.n_layers=1", "grpo.model.n_heads=2", "env.params.num_digits=2",
        "train.stop_at=null", "grpo.loss.beta=0.0"]),  # beta > 0: see KL_NOISE
    # GRPO on a control env, asynchronous (docs/async_grpo.md): the parameter ring, the batch in
    # flight and, on two devices, generation and learning on one device each (on one: one after
    # the other). It replaced the on-policy control case (the same recipe without the two
    # off_policy keys), whose program it contains but for the ring; staleness 0 is on-policy
    # GRPO bit for bit (tests/test_grpo_async.py).
    "grpo_async": ("grpo", "grpo_cartpole.yaml", [
        "grpo.num_prompts=2", "grpo.group_size=2", "grpo.num_updates=5", "grpo.num_epochs=1",
        "grpo.num_minibatches=1", "grpo.sampling.max_steps=16", "grpo.model.hidden=[8]",
        "grpo.off_policy.staleness=2", "grpo.off_policy.overlap=true"]),
    "sft": ("sft", "sft_alphabet_sort_text.yaml", [
        "sft.batch_size=4", "sft.num_updates=5", "sft.model.lora.rank=2", "sft.optim.warmup_updates=0"]),
    # MAPPO and IPPO are one program (jaxrl.algos.mappo.build, one config class; the critic
    # reads the global state or each agent's own observation): ippo checks the feed-forward
    # torso, mappo_recurrent the centralised critic, the GRU torso, two minibatches and one
    # optimiser per network, so a feed-forward mappo case would add no code path.
    "mappo_recurrent": ("mappo", "mappo_mpe_simple_spread.yaml", [
        "mappo.num_envs=2", "mappo.num_steps=4", "mappo.total_env_steps=40", "mappo.update_epochs=1",
        "mappo.num_minibatches=2", "mappo.hidden=[8]", "mappo.torso=gru", "mappo.cell_size=4",
        "mappo.clip_per_network=true"]),
    "ippo": ("ippo", "ippo_mpe_simple_spread.yaml", [
        "ippo.num_envs=2", "ippo.num_steps=4", "ippo.total_env_steps=40", "ippo.update_epochs=1",
        "ippo.num_minibatches=1", "ippo.hidden=[8]"]),
    "reinforce": ("reinforce", {
        "algo": "reinforce", "env": {"id": "CartPole-v1"},
        "reinforce": {"num_envs": 4, "num_steps": 8, "total_env_steps": 160, "hidden": [8]},
    }, []),
}
#: Why ``grpo_token`` runs without the KL term: with every group's rewards equal (a tiny
#: random policy), the only gradient of update 1 is the KL term's at policy == reference,
#: zero but for float32 round-off (~1e-9, measured), which Adam (eps 1e-8) scales to an
#: lr-sized step; another summation order (the env split) then moves the weights by ~1e-3.
KL_NOISE = "grpo.loss.beta=0.0"
#: Cases of algorithms that are not registered in the test process (the example plugin,
#: registered in the subprocess from examples/reinforce).
PLUGINS = {"reinforce"}
#: The cases this file checks; tests/test_algo_conformance_lm_marl.py checks the others.
HERE = ("ppo", "ppo_recurrent", "dqn", "pqn", "sac", "reinforce", "grpo_async")
#: The subprocess compiles with tests/fast_compile.py's ``OPTIONS`` (XLA at -O0: compiling is
#: nearly all of the check's cost; every comparison is between programs compiled alike) in
#: place of the trainer's ``COMPILER_OPTIONS``, but for these cases, as a sentinel; the sabotage
#: tests at the end of this file run in-process (at -O0, as tests/conftest.py compiles the trainer there).
TRAINER_OPTIONS = {"ppo"}


def _config(case: str):
    from jaxrl.run import config as config_lib

    _, source, sets = CASES[case]
    if isinstance(source, dict):
        return config_lib.with_overrides(config_lib.config_from_dict(source), [*sets, *TINY_CONTROL])
    return config_lib.load_config(os.path.join(REPO, "configs", source), [*sets, *TINY_CONTROL])


def main(out_path: str, cases: list[str]) -> None:
    """Check ``cases`` in this process (two forced host devices); write the JSON report."""
    import importlib

    import fast_compile

    from jaxrl.algos import registry
    from jaxrl.algos.common import train
    from jaxrl.run.conformance import check_algorithm

    sys.path.insert(0, EXAMPLE)
    if "reinforce" not in registry.algorithms():
        registry.register_algorithm(importlib.import_module("jaxrl_reinforce").ENTRY)
    trainer_options = dict(train.COMPILER_OPTIONS)
    results = {}
    for case in cases:
        print(f"== {case}", file=sys.stderr, flush=True)
        train.COMPILER_OPTIONS.clear()  # read by every jit the check creates for this case
        train.COMPILER_OPTIONS.update(trainer_options if case in TRAINER_OPTIONS else {**trainer_options, **fast_compile.OPTIONS})
        try:
            results[case] = check_algorithm(_config(case), devices=2, verbose=True).to_dict()
        except Exception as exc:  # noqa: BLE001 (reported per case)
            results[case] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"  ERROR {results[case]['error']}", file=sys.stderr, flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main(sys.argv[1], sys.argv[2].split(",") if len(sys.argv) > 2 else list(CASES))
    sys.exit(0)


import pytest  # noqa: E402

from jaxrl.run.conformance import CHECKS  # noqa: E402


def run_report(tmp_path_factory, cases) -> dict:
    """The subprocess's report on ``cases``: ``{case: {"checks": {name: [status, message]}}}``."""
    out = tmp_path_factory.mktemp("conformance") / "report.json"
    from fast_compile import subprocess_env

    proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(out), ",".join(cases)], capture_output=True,
                          text=True, env=subprocess_env(), timeout=1500, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def check_case(report: dict, case: str, check: str | None = None) -> None:
    """``case`` ran every check of :data:`CHECKS`, in order, and passed ``check`` (all of
    them when None)."""
    result = report[case]
    assert "error" not in result, f"{case}: {result.get('error')}"
    checks = result["checks"]
    assert list(checks) == list(CHECKS)
    bad = [f"{name}: {status} {message}" for name, (status, message) in checks.items()
           if status != "PASS" and check in (None, name)]
    assert not bad, f"{case} ({result['algo']} on {result['env']}):\n" + "\n".join(bad)


def case_checks(cases) -> list[tuple[str, str]]:
    """One test per case and check: a failure names both, and a file of many tests is handed
    out early by ``pytest -n 2 --dist loadfile`` (xdist sends files with the most tests
    first), so the subprocess does not run alone at the end of the suite."""
    return [(case, check) for case in cases for check in CHECKS]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    return run_report(tmp_path_factory, HERE)


def test_every_registered_algorithm_has_a_case():
    from jaxrl.algos import registry

    covered = {algo for algo, _, _ in CASES.values()}
    missing = sorted(set(registry.algorithms()) - covered)
    assert not missing, f"registered without a tiny config in CASES of {__file__}: {missing}"
    assert {"grpo_async", "grpo_token", "ppo_recurrent", "mappo_recurrent", "ippo"} <= set(CASES)


@pytest.mark.parametrize("case, check", case_checks(HERE))
def test_algorithm_conforms(report, case, check):
    check_case(report, case, check)


# ---------------------------------------------------------- the check fails when it should


def _sabotaged(monkeypatch, update=None, init=None):
    """``algo: fake`` (tests/test_trainer.py) with its ``update`` or ``init`` replaced."""
    import dataclasses
    import test_trainer as fake

    def build(envs, cfg):
        program = fake.make_fake(envs, cfg)
        return dataclasses.replace(program, update=update or program.update, init=init or program.init)

    from jaxrl.algos import registry

    registry.register_algorithm(dataclasses.replace(fake.FAKE, build=build), overwrite=True)
    monkeypatch.setattr(fake, "FAKE", registry.get_algorithm("fake"))
    return fake.fake_config(fake.FakeConfig(num_updates=5))


@pytest.fixture
def fake_registered():
    from jaxrl.algos import registry

    yield
    registry.deregister_algorithm("fake")


def test_an_honest_algorithm_passes_and_the_split_is_skipped_on_one_device(fake_registered, monkeypatch):
    report = check_algorithm_fake(monkeypatch)
    assert report.passed, str(report)
    assert report["resume_bit_exact"].message.endswith("bit for bit")
    assert report["chunked_equals_scanned"].message.endswith("bit for bit")
    assert report["env_split"].status == "SKIP" and "xla_force_host_platform_device_count=2" in report["env_split"].message


def test_python_state_at_trace_time_is_caught(fake_registered, monkeypatch):
    """An update that reads a Python counter bumped at each trace: every separately compiled
    program (the scan, the one-seed chunk) computes something else."""
    import test_trainer as fake

    traces = []

    def update(state):
        traces.append(1)
        new, metrics = fake._fake_update(fake.FakeConfig(num_updates=5), state)
        return new.replace(w=new.w + 1e-3 * len(traces)), metrics

    report = check_algorithm_fake(monkeypatch, update=update, only=["chunked_equals_scanned", "seeds_equal_separate", "resume_bit_exact"])
    assert set(report.failed_names()) == {"chunked_equals_scanned", "seeds_equal_separate"}, str(report)
    assert "metric 'episode_return' at update 2 (seed 0)" in report["chunked_equals_scanned"].message  # w moved after update 1
    assert report["resume_bit_exact"].passed  # one program, continued from the same bytes


def check_algorithm_fake(monkeypatch, only=None, **sabotage):
    from jaxrl.run.conformance import check_algorithm

    return check_algorithm(_sabotaged(monkeypatch, **sabotage), only=only)


def test_an_update_that_changes_a_dtype_is_caught(fake_registered, monkeypatch):
    """``update`` returning its counter as int16 where ``init`` made int32: no scan can carry
    that state; the check names the leaf and both types."""
    import jax.numpy as jnp
    import test_trainer as fake

    def update(state):
        new, metrics = fake._fake_update(fake.FakeConfig(num_updates=5), state)
        return new.replace(count=new.count.astype(jnp.int16)), metrics

    report = check_algorithm_fake(monkeypatch, update=update, only=["compiles_once"])
    assert report.failed_names() == ["compiles_once"], str(report)
    assert "leaf .count: int32[] -> int16[]" in report["compiles_once"].message


def test_a_lossy_checkpoint_is_caught(fake_registered, monkeypatch):
    """A restore that is one float32 step off in one weight: the resume check names the leaf."""
    import numpy as np

    from jaxrl.run import checkpoint

    real = checkpoint.Checkpoints.restore_verified

    def lossy(self, template, step=None):
        restored = real(self, template, step)
        w = np.asarray(restored.state.w).copy()
        w[1, 2] = np.nextafter(w[1, 2], np.float32(1))
        return restored._replace(state=restored.state.replace(w=w))

    monkeypatch.setattr(checkpoint.Checkpoints, "restore_verified", lossy)
    report = check_algorithm_fake(monkeypatch, only=["resume_bit_exact"])
    assert report.failed_names() == ["resume_bit_exact"], str(report)
    assert "state leaf .w (seed 1, index (2,))" in report["resume_bit_exact"].message
