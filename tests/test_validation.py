"""Bad input is refused in one line, and valid but odd input stays finite and in range.

Env params are typed and bounded (``replace_params``, so ``make`` and the config); counts
given to ``VectorEnv`` and the wrappers are positive ints; NaN and wrongly shaped actions
follow each env's invalid-action rule or are refused at trace time; verifiers are total on
empty completions and float answer lengths.
"""

from __future__ import annotations

import dataclasses
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxrl
import jaxrl_envs
from jaxrl import verifiers as V
from jaxrl.core import spaces
from jaxrl.core.env import Range, replace_params
from jaxrl.core.vector import VectorEnv
from jaxrl.core.wrappers import AutoReset, RescaleAction, TimeLimit, VmapEnv
from jaxrl.run import config as C
from jaxrl.verifiers import EOS, PAD

SUITE = [env_id for env_id, _, _ in jaxrl_envs._BUILTIN]  # the suite in envs/ (no adapters)
TEXT = [i for i in SUITE if i.startswith("text/")]
DIGIT_TASKS = ["text/Reverse-v0", "text/Sort-v0", "text/Addition-v0"]


def _one_line(exc: pytest.ExceptionInfo, *words: str) -> str:
    message = str(exc.value)
    assert "\n" not in message and len(message) < 300, message
    for word in words:
        assert word in message, (word, message)
    return message


# ---------------------------------------------------------------------------------------
# Env params: kinds
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, error, words",
    [
        ({"max_steps_in_episode": 2.5}, TypeError, ["max_steps_in_episode", "int", "2.5"]),
        ({"max_steps_in_episode": True}, TypeError, ["max_steps_in_episode", "int", "True"]),
        ({"max_steps_in_episode": "1e-1"}, TypeError, ["max_steps_in_episode", "int", "'1e-1'"]),
        ({"max_steps_in_episode": 2**40}, ValueError, ["max_steps_in_episode", "int32"]),
        ({"length": "a"}, TypeError, ["CartPoleParams.length", "float", "'a'"]),
        ({"length": None}, TypeError, ["length", "float", "None"]),
        ({"length": [0.5, 0.6]}, TypeError, ["length", "float", "[0.5, 0.6]"]),
        ({"length": float("nan")}, ValueError, ["length", "finite", "nan"]),
        ({"gravity": float("inf")}, ValueError, ["gravity", "finite", "inf"]),
        ({"max_steps_in_episode": np.array([3.0, 4.5])}, TypeError, ["max_steps_in_episode", "int"]),
    ],
)
def test_wrong_kinds_are_refused_in_one_line(overrides, error, words):
    with pytest.raises(error) as exc:
        jaxrl.make("CartPole-v1", **overrides)
    _one_line(exc, *words)


def test_bad_value_is_abbreviated():
    with pytest.raises(TypeError) as exc:
        jaxrl.make("CartPole-v1", length="x" * 5000)
    assert "..." in _one_line(exc, "length")


def test_integral_and_numeric_string_values_are_converted():
    _, params = jaxrl.make("CartPole-v1", max_steps_in_episode=3.0, length="5e-1", masscart=2)
    assert params.max_steps_in_episode == 3 and type(params.max_steps_in_episode) is int
    assert params.length == 0.5 and type(params.length) is float
    assert params.masscart == 2.0 and type(params.masscart) is float
    _, params = jaxrl.make("CartPole-v1", max_steps_in_episode="1e2")  # YAML's string for 1e2
    assert params.max_steps_in_episode == 100 and type(params.max_steps_in_episode) is int
    _, params = jaxrl.make("CartPole-v1", max_steps_in_episode=np.array([3.0, 4.0], np.float32))
    assert params.max_steps_in_episode.dtype == np.int32 and params.max_steps_in_episode.tolist() == [3, 4]


def test_int_field_episode_length_is_the_integer_asked_for():
    """``max_steps_in_episode=3.0`` truncates after exactly 3 steps (2.5 used to give 3 in
    training and 2 at eval, depending on how the limit was compared)."""
    env, params = jaxrl.make("ProbeTimeLimit-v0", max_steps_in_episode=3.0)
    assert type(params.max_steps_in_episode) is int
    state, _ = env.reset(jax.random.PRNGKey(0), params)
    flags = []
    for _ in range(3):
        state, ts = env.step(None, state, 0, params)
        flags.append(bool(ts.truncated))
    assert flags == [False, False, True]


@pytest.mark.parametrize("value, expected", [(True, True), (1, True), (0.0, False), (np.int32(1), True)])
def test_bool_fields_take_bools_and_zero_one(value, expected):
    _, params = jaxrl.make("text/Reverse-v0", held_out=value)
    assert np.asarray(params.held_out).dtype == np.bool_ and bool(params.held_out) is expected


@pytest.mark.parametrize("value", [2, -1, 0.5, "1", "yes"])
def test_bool_fields_refuse_other_values(value):
    with pytest.raises(TypeError) as exc:
        jaxrl.make("text/Reverse-v0", held_out=value)
    _one_line(exc, "DigitParams.held_out", "bool")


def test_valid_overrides_are_stored_unchanged():
    """``make`` with valid values of the field's own kind gives what it always gave."""
    env, params = jaxrl.make("CartPole-v1")
    assert params == env.default_params
    length = np.float32(0.7)
    limit = jnp.asarray([10, 20], jnp.int32)
    _, params = jaxrl.make("CartPole-v1", length=0.7, masspole=length, max_steps_in_episode=limit)
    assert params.length == 0.7 and params.masspole is length and params.max_steps_in_episode is limit


def test_traced_values_must_have_the_field_dtype():
    _, params = jaxrl.make("CartPole-v1")
    set_limit = jax.jit(lambda v: replace_params(params, max_steps_in_episode=v).max_steps_in_episode)
    assert int(set_limit(jnp.int32(7))) == 7
    with pytest.raises(TypeError) as exc:
        set_limit(jnp.float32(7.0))
    _one_line(exc, "max_steps_in_episode", "int", "traced float32")
    lengths = jax.vmap(lambda v: replace_params(params, length=v).length)(jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(np.asarray(lengths), [0.1, 0.2])


# ---------------------------------------------------------------------------------------
# Env params: declared ranges
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_id, overrides, words",
    [
        ("CartPole-v1", {"length": -1}, ["CartPoleParams.length", "> 0", "-1"]),
        ("CartPole-v1", {"max_steps_in_episode": -5}, ["max_steps_in_episode", ">= 1", "-5"]),
        ("CartPole-v1", {"max_steps_in_episode": 0}, ["max_steps_in_episode", ">= 1"]),
        ("CartPole-v1", {"masspole": np.array([0.1, 0.0])}, ["masspole", "> 0"]),
        ("Acrobot-v1", {"link_mass_1": 0.0}, ["link_mass_1", "> 0"]),
        ("Pendulum-v1", {"l": -2.0}, ["PendulumParams.l", "> 0"]),
        ("MountainCar-v0", {"max_steps_in_episode": -1}, ["max_steps_in_episode", ">= 1"]),
        ("ProbeTimeLimit-v0", {"max_steps_in_episode": 0}, ["max_steps_in_episode", ">= 1"]),
        ("text/AlphabetSort-v0", {"num_letters": 27}, ["num_letters", "<= 26"]),
        ("text/AlphabetSort-v0", {"shaping": 1.5}, ["shaping", "<= 1"]),
        ("text/Addition-v0", {"min_digits": 0}, ["min_digits", ">= 1"]),
    ],
)
def test_out_of_range_values_are_refused_in_one_line(env_id, overrides, words):
    with pytest.raises(ValueError) as exc:
        jaxrl.make(env_id, **overrides)
    _one_line(exc, *words)


@pytest.mark.parametrize("env_id", DIGIT_TASKS)
def test_digit_tasks_refuse_zero_digits(env_id):
    with pytest.raises(ValueError) as exc:
        jaxrl.make(env_id, num_digits=0)
    _one_line(exc, "num_digits", ">= 1", "0")


#: The token tasks' size params and the env field their buffers are built for: a value
#: above it was clipped silently (text/Reverse-v0 num_digits=100 trained on 8 digits).
SIZES = [
    ("text/Reverse-v0", "num_digits", "max_digits"),
    ("text/Sort-v0", "num_digits", "max_digits"),
    ("text/Addition-v0", "num_digits", "max_digits"),
    ("text/Addition-v0", "min_digits", "max_digits"),
    ("text/AlphabetSort-v0", "num_names", "max_names"),
]


@pytest.mark.parametrize("env_id, name, size", SIZES)
def test_token_task_sizes_above_the_buffers_are_refused_with_the_range(env_id, name, size):
    env, params = jaxrl.make(env_id)
    limit = getattr(env, size)  # the env's own field, not the params' copy
    low = type(params).bounds[name].ge
    jaxrl.make(env_id, **{name: limit})  # the largest size still fits
    with pytest.raises(ValueError) as exc:
        jaxrl.make(env_id, **{name: limit + 1})
    _one_line(exc, f"{name}: must be <= {limit}", f"its range is [{low}, {limit}]")
    with pytest.raises(TypeError, match=f"{size} is fixed by the env"):
        jaxrl.make(env_id, **{size: limit + 1})


def test_the_largest_digit_count_is_what_the_prompt_holds():
    """At the bound, nothing is clipped: the prompt of Reverse-v0 carries num_digits digits."""
    from jaxrl_envs.text.vocab import DIGIT0

    env, params = jaxrl.make("text/Reverse-v0", num_digits=8)
    prompt = np.asarray(env.generate(jax.random.key(0), params).prompt)
    assert int(((prompt >= DIGIT0) & (prompt < DIGIT0 + 10)).sum()) == 8 == env.max_digits


WITH_PARAMS = [i for i in SUITE if dataclasses.fields(jaxrl.make(i)[1])]


@pytest.mark.parametrize("env_id", WITH_PARAMS)
def test_every_builtin_declares_consistent_bounds(env_id):
    """Every built-in with params declares bounds; they name real fields and hold the
    defaults; every episode limit and digit count is declared ``>= 1``."""
    env, params = jaxrl.make(env_id)
    fields = {f.name for f in dataclasses.fields(params)}
    bounds = getattr(type(params), "bounds", {})
    assert bounds and set(bounds) <= fields
    replace_params(params, **{name: getattr(params, name) for name in bounds})  # defaults in range
    for name in ("max_steps_in_episode", "num_digits"):
        if name in fields:
            with pytest.raises(ValueError, match=f"{name}: must be >= 1"):
                replace_params(params, **{name: 0})


@struct.dataclass
class _TypoParams:
    length: float = 1.0
    bounds = {"lenght": Range(gt=0)}


def test_a_bounds_typo_is_reported():
    with pytest.raises(TypeError) as exc:
        replace_params(_TypoParams(), length=2.0)
    _one_line(exc, "_TypoParams.bounds", "'lenght'")


# ---------------------------------------------------------------------------------------
# The config: env params as YAML gives them
# ---------------------------------------------------------------------------------------

_BASE = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"num_envs": 8, "num_steps": 64, "total_env_steps": 5120}}


def test_config_accepts_scientific_notation_for_float_env_params():
    cfg = C.config_from_dict(C.apply_overrides(_BASE, ["env.params.length=5e-1"]))
    _, params = jaxrl.make(cfg.env.id, **cfg.env.params)
    assert params.length == 0.5


@pytest.mark.parametrize(
    "setting, words",
    [
        ("env.params.max_steps_in_episode=2.5", ["env.params", "max_steps_in_episode", "int", "2.5"]),
        ("env.params.length=-1", ["env.params", "length", "> 0"]),
    ],
)
def test_config_reports_bad_env_params_in_one_line(setting, words):
    from jaxrl.run.build import build

    with pytest.raises(C.ConfigError) as exc:  # parse -> validate -> build once: make checks params
        build(C.config_from_dict(C.apply_overrides(_BASE, [setting])))
    _one_line(exc, *words)


# ---------------------------------------------------------------------------------------
# Counts given to VectorEnv and the wrappers
# ---------------------------------------------------------------------------------------

_CP = jaxrl.make("CartPole-v1")[0]


@pytest.mark.parametrize(
    "build, words",
    [
        (lambda: VectorEnv(_CP, 2.5), ["VectorEnv", "num_envs", "2.5"]),
        (lambda: VectorEnv(_CP, True), ["VectorEnv", "num_envs", "True"]),
        (lambda: VectorEnv(_CP, "4"), ["VectorEnv", "num_envs", "'4'"]),
        (lambda: VectorEnv(_CP, 4.0), ["VectorEnv", "num_envs", "4.0"]),
        (lambda: VectorEnv(_CP, 4, episode_stats="no"), ["episode_stats", "'no'"]),
        (lambda: VmapEnv(_CP, 2.5), ["VmapEnv", "num_envs", "2.5"]),
        (lambda: VmapEnv(_CP, 4, params_axis=1), ["VmapEnv", "params_axis", "1"]),
        (lambda: TimeLimit(_CP, 2.5), ["TimeLimit", "max_steps", "2.5"]),
        (lambda: TimeLimit(_CP, True), ["TimeLimit", "max_steps", "True"]),
        (lambda: RescaleAction(_CP, "0", "1"), ["RescaleAction", "low", "'0'"]),
    ],
)
def test_bad_counts_are_refused_in_one_line(build, words):
    with pytest.raises(ValueError) as exc:
        build()
    _one_line(exc, *words)


def test_integer_counts_of_any_int_type_are_accepted():
    assert VectorEnv(_CP, np.int64(3)).num_envs == 3
    assert VmapEnv(_CP, np.int32(2)).num_envs == 2
    assert TimeLimit(_CP, 7).max_steps == 7


def test_wrapping_a_non_environment_is_refused():
    with pytest.raises(TypeError) as exc:
        AutoReset("CartPole-v1")
    _one_line(exc, "AutoReset", "Environment", "'CartPole-v1'")


# ---------------------------------------------------------------------------------------
# Actions: NaN follows the rule, wrong shapes are refused at trace time
# ---------------------------------------------------------------------------------------


def _step_once(env_id, action):
    env, params = jaxrl.make(env_id)
    state, _ = env.reset(jax.random.PRNGKey(3), params)
    return env.step(jax.random.PRNGKey(4), state, action, params)


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "MountainCar-v0"])
@pytest.mark.parametrize("action, same_as", [(np.nan, 1), (np.inf, 2), (-np.inf, 0), (1.6, 2), (-0.4, 0)])
def test_discrete_clip_rule_covers_float_and_nan_actions(env_id, action, same_as):
    state, ts = _step_once(env_id, jnp.float32(action))
    ref_state, ref_ts = _step_once(env_id, jnp.int32(same_as))
    for leaf in jax.tree_util.tree_leaves((state, ts.obs, ts.reward)):
        assert np.all(np.isfinite(np.asarray(leaf)))
    for got, want in zip(jax.tree_util.tree_leaves((state, ts)), jax.tree_util.tree_leaves((ref_state, ref_ts))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _wrong_shapes(space) -> list[tuple]:
    shape = tuple(space.shape)
    return [(2,), (1, 1)] if shape == () else [(), shape + (1,), (2,) + shape]


@pytest.mark.parametrize("env_id", SUITE)
def test_wrongly_shaped_actions_are_refused_at_trace_time(env_id):
    env, params = jaxrl.make(env_id)
    space = env.action_space(params)
    key = jax.random.PRNGKey(0)
    state, _ = jax.eval_shape(env.reset, key, params)
    dtype = space.dtype if isinstance(space, spaces.Box) else jnp.int32
    good = jax.ShapeDtypeStruct(tuple(space.shape), dtype)
    out_state, _ = jax.eval_shape(env.step, key, state, good, params)
    assert jax.tree_util.tree_structure(out_state) == jax.tree_util.tree_structure(state)
    assert [x.shape for x in jax.tree_util.tree_leaves(out_state)] == [x.shape for x in jax.tree_util.tree_leaves(state)]
    for shape in _wrong_shapes(space):
        with pytest.raises(ValueError) as exc:
            jax.eval_shape(env.step, key, state, jax.ShapeDtypeStruct(shape, dtype), params)
        _one_line(exc, env.name, str(shape), f"expected {tuple(space.shape)}")


# ---------------------------------------------------------------------------------------
# Verifiers: empty completions and float answer lengths
# ---------------------------------------------------------------------------------------

_BASE_VERIFIERS = {
    "exact_match": V.exact_match,
    "token_accuracy": V.token_accuracy,
    "similarity": V.similarity,
    "length_match": V.length_match,
    "has_eos": V.has_eos,
    "gate_power": V.gate(V.has_eos, V.power(V.similarity, 4.0)),
}


def _task(answer, answer_len, width=4):
    a = list(answer) + [PAD] * (width - len(answer))
    return V.Task(jnp.zeros((3,), jnp.int32), jnp.array(a, jnp.int32), answer_len)


@pytest.mark.parametrize("name", sorted(_BASE_VERIFIERS))
@pytest.mark.parametrize("answer_len", [jnp.int32(3), jnp.int32(0), jnp.float32(2.5)])
def test_verifiers_are_total_on_empty_completions(name, answer_len):
    v = _BASE_VERIFIERS[name]
    reward, metrics = v(_task([7, 8, 9], answer_len), jnp.zeros((0,), jnp.int32))
    assert np.isfinite(float(reward)) and v.low <= float(reward) <= v.high
    assert all(np.isfinite(float(m)) for m in metrics.values())


def test_empty_completion_against_an_answer_scores_the_minimum():
    t = _task([7, 8, 9], jnp.int32(3))
    empty = jnp.zeros((0,), jnp.int32)
    for name in ("exact_match", "token_accuracy", "similarity", "length_match", "gate_power"):
        assert float(_BASE_VERIFIERS[name](t, empty)[0]) == 0.0, name


@pytest.mark.parametrize(
    "answer_len, completion, expected",
    [
        (jnp.float32(2.5), [7, 8, 9, EOS], 2 * 2 / 5),  # 2.5 answer tokens are 2: LCS([7, 8], [7, 8, 9])
        (jnp.float32(2.5), [7, 8, EOS], 1.0),
        (jnp.float32(np.nan), [EOS], 1.0),  # NaN counts as 0 tokens: both empty
        (jnp.float32(np.inf), [7, 8, 9, EOS], 2 * 3 / 7),  # at most the 4 answer tokens [7, 8, 9, PAD]
    ],
)
def test_similarity_with_a_float_answer_len_stays_in_range(answer_len, completion, expected):
    c = jnp.array(completion + [PAD] * (6 - len(completion)), jnp.int32)
    r = float(V.similarity(_task([7, 8, 9], answer_len), c)[0])
    assert 0.0 <= r <= 1.0
    assert r == pytest.approx(expected)


def _single_turn(env_id: str) -> bool:
    from jaxrl_envs.text.base import TokenEnv

    return isinstance(jaxrl.make(env_id)[0], TokenEnv)


SINGLE_TURN = [i for i in TEXT if _single_turn(i)]
DIALOGUES = [i for i in TEXT if not _single_turn(i)]


@pytest.mark.parametrize("env_id", DIALOGUES)
def test_dialogue_turns_of_zero_tokens_score_in_range(env_id):
    """Every policy turn ends at once (EOS first): the env replies and the episode ends with
    finite rewards and info, whatever the task's rubric makes of empty answers."""
    env, params = jaxrl.make(env_id)
    state, ts = env.reset(jax.random.PRNGKey(0), params)
    step = jax.jit(env.step)
    total, steps = 0.0, 0
    while not (bool(ts.terminated) or bool(ts.truncated)):
        state, ts = step(jax.random.PRNGKey(steps + 1), state, jnp.int32(env.end_of_turn), params)
        total, steps = total + float(ts.reward), steps + 1
        assert np.isfinite(float(ts.reward))
        assert steps <= env.max_turns, "a dialogue of empty turns must end within max_turns steps"
    assert np.isfinite(total) and all(np.isfinite(np.asarray(x)).all() for x in ts.info.values())


@pytest.mark.parametrize("env_id", SINGLE_TURN)
def test_text_env_verifiers_on_zero_length_completions(env_id):
    env, params = jaxrl.make(env_id)
    state, ts = env.reset(jax.random.PRNGKey(0), params)
    v = env.verifier
    full = jnp.full((env.max_completion_len,), env.pad_id, jnp.int32)
    for completion in (jnp.zeros((0,), jnp.int32), full.at[0].set(env.end_of_turn)):  # no tokens; end of turn first
        reward, metrics = v(state.task, completion)
        assert np.isfinite(float(reward)) and v.low <= float(reward) <= v.high
        assert set(metrics) == set(ts.info) and all(np.isfinite(float(m)) for m in metrics.values())
    float_task = state.task.replace(answer_len=state.task.answer_len.astype(jnp.float32) + 0.5)
    reward, _ = v(float_task, jnp.zeros((0,), jnp.int32))
    assert v.low <= float(reward) <= v.high
    # An episode whose first token is EOS: the zero-length completion, scored through step.
    _, ts = env.step(None, state, jnp.int32(EOS), params)
    assert bool(ts.terminated) and np.isfinite(float(ts.reward))
    assert v.low <= float(ts.reward) <= v.high
    assert all(np.isfinite(np.asarray(x)).all() for x in ts.info.values())


# ---------------------------------------------------------------------------------------
# Config leftovers of round 3 (issue 40): one line each, nothing built
# ---------------------------------------------------------------------------------------

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


@pytest.mark.parametrize("config, override, words", [
    ("grpo_addition.yaml", "train=[]", ["train: expected a mapping, got []"]),
    ("grpo_addition.yaml", "mesh=[]", ["mesh: expected a mapping"]),
    ("grpo_addition.yaml", "grpo.sampling.temperature=.inf", ["grpo.sampling.temperature", "finite", "inf"]),
    ("grpo_addition.yaml", "grpo.sampling.overlong_penalty=-1", ["grpo.sampling.overlong_penalty", ">= 0", "-1"]),
    ("grpo_addition.yaml", "env.curriculum.threshold=.nan", ["env.curriculum.threshold: must be a finite number, got nan"]),
    ("dqn_cartpole.yaml", "dqn.eval_max_steps=0", ["dqn.eval_max_steps", "positive integer", "0"]),
    ("pqn_cartpole.yaml", "pqn.eval_max_steps=0", ["pqn.eval_max_steps", "positive integer", "0"]),
    ("sac_pendulum.yaml", "sac.eval_max_steps=-1", ["sac.eval_max_steps", "positive integer", "-1"]),
])
def test_round3_config_leftovers_are_refused_in_one_line(config, override, words):
    with pytest.raises(C.ConfigError) as exc:
        C.load_config(f"{_CONFIGS}/{config}", [override])
    _one_line(exc, *words)


def test_a_fifo_config_file_is_refused_without_blocking(tmp_path):
    def stuck(*_):
        raise AssertionError("blocked on a FIFO config")

    os.mkfifo(tmp_path / "c.yaml")
    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(20)
    try:
        with pytest.raises(C.ConfigError) as exc:
            C.load_config(str(tmp_path / "c.yaml"))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    _one_line(exc, "c.yaml", "is a FIFO, not a regular file")
