"""The built-in environment suite (installed as ``jaxrl_envs``), one env per module.

``register_all`` is this package's entry point in the ``jaxrl.envs`` group: the registry
calls it on first lookup, exactly as it calls a third-party package's.
"""

from __future__ import annotations

from jaxrl.core import registry

_BUILTIN = [
    # (id, entry point, description)
    ("CartPole-v1", "jaxrl_envs.cartpole:CartPole", "Gymnasium cart-pole, discrete push left/right, 500-step limit"),
    ("Acrobot-v1", "jaxrl_envs.acrobot:Acrobot", "Gymnasium acrobot swing-up, RK4 book dynamics, discrete torque, 500-step limit"),
    ("CartPole-POMDP-v1", "jaxrl_envs.cartpole_pomdp:CartPolePOMDP", "CartPole-v1 observing (x, theta) only: velocities hidden, needs memory"),
    ("MountainCar-v0", "jaxrl_envs.mountain_car:MountainCar", "Gymnasium mountain car, discrete push, 200-step limit"),
    ("MountainCarContinuous-v0", "jaxrl_envs.mountain_car_continuous:MountainCarContinuous", "Gymnasium mountain car, continuous force in [-1, 1], 999-step limit"),
    ("Pendulum-v1", "jaxrl_envs.pendulum:Pendulum", "Gymnasium pendulum swing-up, continuous torque in [-2, 2], 200-step limit"),
    ("ProbeConstant-v0", "jaxrl_envs.probes:ProbeConstant", "probe: one step, reward +1, constant obs; V = 1"),
    ("ProbeTwoStep-v0", "jaxrl_envs.probes:ProbeTwoStep", "probe: reward 0 then +1, obs 0 then 1; V(0) = gamma, V(1) = 1"),
    ("ProbeObsReward-v0", "jaxrl_envs.probes:ProbeObsReward", "probe: random obs +-1, reward = obs, one step; V(obs) = obs"),
    ("ProbeActionMatch-v0", "jaxrl_envs.probes:ProbeActionMatch", "probe: random obs +-1, reward +1 iff action == (obs > 0) else -1, one step"),
    ("ProbeTimeLimit-v0", "jaxrl_envs.probes:ProbeTimeLimit", "probe: reward +1 forever, truncated at 10 steps; V = 1/(1-gamma) with bootstrapping"),
    ("ProbeContinuous-v0", "jaxrl_envs.probes:ProbeContinuous", "probe: continuous action, reward -(a - target)^2, one step; best a = target"),
    ("MemoryCue-v0", "jaxrl_envs.memory_cue:MemoryCue", "memory probe: cue +-1 shown at t=0 only, asked for at t=delay (4); +1 if named, else -1"),
    ("text/Reverse-v0", "jaxrl_envs.text.reverse:Reverse", "token task: reverse 8 digits; dense verifier reward"),
    ("text/Sort-v0", "jaxrl_envs.text.sort:Sort", "token task: sort 6 digits ascending; dense verifier reward"),
    ("text/AlphabetSort-v0", "jaxrl_envs.text.alphabet_sort:AlphabetSort", "token task: sort 3 two-letter names; similarity**4 reward"),
    ("text/Addition-v0", "jaxrl_envs.text.addition:Addition", "token task: 2+2-digit addition, answer LSD first; dense reward"),
    ("text/Parity-v0", "jaxrl_envs.text.parity:Parity", "token task: the parity of 6 bits (answer 0 or 1); dense verifier reward"),
    ("text/AlphabetSortTurns-v0", "jaxrl_envs.text.alphabet_sort_turns:AlphabetSortTurns", "dialogue: 3 turns of alphabet-sort, a name more each turn; mean similarity**4"),
    ("text/ToolAddition-v0", "jaxrl_envs.text.tool_addition:ToolAddition", "dialogue: 3+3-digit addition with a calculator call; exact-match reward"),
    ("text/GuessRange-v0", "jaxrl_envs.text.guess_range:GuessRange", "dialogue: find a number in the prompt's range [lo, hi] (9-16 values) told higher/lower; reward falls with turns"),
    ("text/GuessNumberText-v0", "jaxrl_envs.text.guess_number_text:GuessNumberText", "dialogue in text (project tokenizer): guess a number in 1..32 told 'Higher than N.'/'Lower than N.' (phrasebook replies); reward falls with turns"),
    ("text/WordProblems-v0", "jaxrl_envs.text.word_problems:WordProblems", "text: arithmetic word problems (operands 0-20, + and -), answer in <answer> tags; numeric rubric"),
    ("text/AlphabetSortText-v0", "jaxrl_envs.text.alphabet_sort_text:AlphabetSortText", "text: sort 3-4 comma-separated names; similarity**4 rubric (Environments Hub alphabet-sort)"),
    ("text/File-v0", "jaxrl_envs.text.text_file:TextFile", "text: prompts and answers from a JSONL/Parquet file (env.text.train); rubric env.text.reward"),
]


def register_all() -> None:
    """Register every built-in env (idempotent)."""
    known = set(registry._REGISTRY)
    for env_id, entry_point, description in _BUILTIN:
        if env_id not in known:
            registry.register(env_id, entry_point, description=description)
    # Physics envs register only when their simulators are installed (the [physics] extra);
    # neither call imports brax or mujoco.
    from jaxrl.adapters.brax import register_brax_envs
    from jaxrl_envs.mjx_cartpole import register as register_mjx_cartpole

    register_brax_envs()
    register_mjx_cartpole()
