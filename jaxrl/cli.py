"""The ``jaxrl`` command line: a table of argparse sub-commands.

This module is the parser only. Each sub-command is one small ``_add_<name>(subparsers)``
function that declares its arguments and sets ``func`` to the handler, plus one line in
:data:`COMMANDS`. Handlers take the parsed ``argparse.Namespace`` and return an exit code;
they live in :mod:`jaxrl.commands` (``jaxrl.commands.config.main_config`` for ``config``),
imported lazily so that
``jaxrl --help`` does not pay for importing JAX.

To add a command::

    def _add_train(sub):
        p = sub.add_parser("train", help="train from a YAML config")
        p.add_argument("config")
        p.set_defaults(func=_lazy("jaxrl.commands.train", "main_train"))

    COMMANDS = [..., _add_train]

Every failure is one line on stderr (:func:`failure` maps exceptions to lines) and an exit
code: 0 success; 1 the run failed (a non-finite loss or state; a damaged run); 2 bad input
(config, arguments, a run directory that cannot be used); 3 I/O or resources (disk full,
permission denied, not enough memory); 130 interrupted (Ctrl-C; ``train`` saves a checkpoint
and names the ``--resume`` command).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
from typing import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_IO, EXIT_INTERRUPTED = 1, 2, 3, 130
EPILOG = """exit codes: 0 success; 1 the run failed (non-finite loss or state, damaged checkpoints);
2 bad input (config, arguments, run directory); 3 I/O or resources (disk full, permission,
memory); 130 interrupted (train saves a checkpoint: continue with jaxrl train --resume RUN)"""
MAX_LINE = 600  # characters of a failure line


class _Parser(argparse.ArgumentParser):
    """An argument error is one line (what is wrong and where to look), exit 2."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


def count(text: str) -> int:
    """An integer argument; ``1e6``-style spellings are accepted when they are exact."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if not value.is_integer() or abs(value) >= 2**53:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}")
    return int(value)


def _lazy(module: str, attr: str) -> Handler:
    """A handler that imports ``module.attr`` only when the command runs."""
    return _LazyHandler(module, attr)


class _LazyHandler:
    """Callable stand-in for ``module:attr`` (a class, so no nested closure is needed)."""

    def __init__(self, module: str, attr: str):
        self.module, self.attr = module, attr

    def __call__(self, args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(self.module), self.attr)(args)


# ---------------------------------------------------------------------------- list


def _add_list(sub) -> None:
    p = sub.add_parser("list", help="list registered algorithms, environments and recipe configs")
    p.set_defaults(func=_lazy("jaxrl.commands.listing", "main_list"))


# ----------------------------------------------------------------------- check-env


def _add_check_env(sub) -> None:
    p = sub.add_parser("check-env", help="run check_env on a registered env; exit 1 if a check fails")
    p.add_argument("env_id", metavar="ENV_ID", help="a registered id, e.g. CartPole-v1 (see `jaxrl list`)")
    p.add_argument("--steps", type=int, default=500, help="steps of the random rollout (default 500)")
    p.add_argument("--envs", type=int, default=16, help="envs in the random rollout (default 16)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
    p.add_argument("--only", metavar="CHECK[,CHECK]", help="run just these checks (comma-separated names)")
    p.set_defaults(func=_lazy("jaxrl.commands.check_env", "main_check_env"))


# ------------------------------------------------------------ train / eval / render


TRAIN_EPILOG = """every config key, with type, default and meaning: `jaxrl config ALGO` (e.g. jaxrl config ppo)
or docs/config_reference.md; override one with --set key=value"""


def _add_train(sub) -> None:
    p = sub.add_parser(
        "train", help="train from a YAML config (or --resume a run)", epilog=TRAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", help="a YAML run config, e.g. configs/ppo_cartpole.yaml")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key, e.g. ppo.optim.lr=1e-3")
    p.add_argument("--seeds", type=count, help="train N seeds together in one vmapped program")
    p.add_argument("--out", help="run directory (default: <train.out_dir>/<algo>_<env>_<time>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    p.add_argument(
        "--init-from", metavar="RUN_DIR",
        help="start a new run from the learned parameters of RUN_DIR's last checkpoint (fresh optimiser and envs)",
    )
    p.add_argument(
        "--accept-config-change", action="store_true",
        help="with --resume: continue although RUN_DIR/config.yaml differs from the config of the checkpoint "
        "(the change is recorded in RUN_DIR/config_changes.jsonl)",
    )
    p.add_argument(
        "--accept-data-change", action="store_true",
        help="with --resume: continue although a data file or the tokenizer differs from what the checkpoint "
        "was trained on (recorded in RUN_DIR/config_changes.jsonl)",
    )
    p.set_defaults(func=_lazy("jaxrl.commands.train", "main_train"))
    # --coordinator-address / --num-processes / --process-id come from jaxrl.parallel.distributed,
    # which imports JAX: build_parser adds them only when the command is `train`.


def _add_eval(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a run's last checkpoint (mean, std, 95%% CI of the return)")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--episodes", type=count, help="episodes per policy mode (default: the config's eval_episodes)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed of the evaluation episodes")
    p.add_argument("-n", "--prompts", type=count, help="token tasks: sample this many held-out prompts (with -r)")
    p.add_argument("-r", "--rollouts", type=count, help="token tasks: completions sampled per prompt: mean, std, pass@k (with -n)")
    p.add_argument("--step", type=count, metavar="N", help="evaluate checkpoint N (updates done) instead of the newest")
    p.add_argument(
        "--remote", metavar="URL",
        help="step the policy against an env served at URL (e.g. ws://host:8000 from `jaxrl serve RUN --held-out`), "
        "host-stepped; a language-model run sends its greedy completions",
    )
    p.set_defaults(func=_lazy("jaxrl.commands.eval", "main_eval"))


def _add_render(sub) -> None:
    p = sub.add_parser("render", help="roll a run's trained policy and write a GIF")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--out", required=True, metavar="FILE.gif")
    p.add_argument("--steps", type=count, default=500, help="at most this many env steps, >= 1 (default 500)")
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of acting greedily")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed of the episode")
    p.add_argument("--fps", type=int, default=30, help="frames per second of the GIF, >= 1 (default 30)")
    p.add_argument("--step", type=count, metavar="N", help="roll checkpoint N (updates done) instead of the newest")
    p.set_defaults(func=_lazy("jaxrl.commands.render", "main_render"))


def _add_export_hf(sub) -> None:
    p = sub.add_parser("export-hf", help="write a run's trained language model as a Hugging Face directory")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--out", required=True, metavar="DIR", help="the directory to write (transformers' from_pretrained reads it)")
    p.add_argument("--adapters-only", action="store_true", help="LoRA runs: PEFT's adapter files instead of merged weights")
    p.add_argument("--seed", type=int, default=0, help="which seed of the run")
    p.add_argument("--step", type=count, metavar="N", help="export checkpoint N (updates done) instead of the newest")
    p.add_argument(
        "--force", action="store_true",
        help="replace an existing non-empty --out directory (never the run, the current directory or the base model)",
    )
    p.set_defaults(func=_lazy("jaxrl.commands.export_hf", "main_export_hf"))


def _add_compare(sub) -> None:
    p = sub.add_parser(
        "compare", help="compare runs over seeds and tasks: IQM, mean, median, optimality gap, P(X > Y), "
        "stratified bootstrap 95%% intervals (docs/compare.md)",
    )
    p.add_argument("runs", nargs="*", metavar="RUN", help="run directories; runs equal apart from env and seeds form one method")
    p.add_argument("--method", action="append", metavar="NAME=RUN,RUN", help="name a method and its runs (repeatable)")
    p.add_argument("--normalize", action="append", metavar="TASK=LOW:HIGH", help="score range of a task, e.g. Acrobot-v1=-500:0")
    p.add_argument("--raw", action="store_true", help="aggregate raw scores, not normalised ones")
    p.add_argument("--gamma", type=float, help="optimality-gap threshold (default 1 on normalised scores)")
    p.add_argument("--metric", help="score runs by this metrics.jsonl metric instead of eval.json")
    p.add_argument("--last", type=count, default=1, help="with --metric: average its last N records (default 1)")
    p.add_argument("--reps", type=count, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed of the bootstrap (default 0)")
    p.add_argument("--plot", metavar="FILE.png", help="write an interval plot")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.set_defaults(func=_lazy("jaxrl.commands.compare", "main_compare"))


def _add_serve(sub) -> None:
    p = sub.add_parser(
        "serve", help="serve a registered env over OpenEnv's HTTP/WebSocket protocol, sessions batched on device",
        epilog="needs pip install 'jaxrl[serve]'; protocol, seeds and limits: docs/serving.md",
    )
    p.add_argument("env_id", metavar="ENV_ID|RUN", nargs="?",
                   help="a registered id, e.g. CartPole-v1 (see `jaxrl list`), or a run directory: serve its config's env section")
    p.add_argument("--config", metavar="CONFIG", help="serve the env section of this YAML run config (instead of ENV_ID)")
    p.add_argument("--held-out", action="store_true",
                   help="serve the evaluation params (a token task's held-out prompts, env.eval_params), as jaxrl eval plays them")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="configure the env as in train, e.g. env.params.max_steps_in_episode=200")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one, printed on the ready line)")
    p.add_argument("--max-sessions", type=count, default=64, help="concurrent sessions (WebSocket clients), the pool's capacity (default 64)")
    p.add_argument("--slots-per-session", type=count, default=1, help="envs each session steps together (default 1)")
    p.add_argument("--window-ms", type=float, default=2.0, help="batching window: steps arriving within it share one device call (default 2)")
    p.add_argument("--idle-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="close a WebSocket session that sends no message for this long, freeing its slot (default 600; 0: never)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"], help="uvicorn's log level (default warning)")
    p.add_argument(
        "--ws-deflate", default="off", choices=["on", "off"],
        help="on: accept WebSocket permessage-deflate when a client offers it (uvicorn's WebSocket stack); "
        "off (default): decline it and serve /ws with jaxrl's lean framing (a third of the server CPU per message)",
    )
    p.set_defaults(func=_lazy("jaxrl.commands.serve", "main_serve"))


def _add_config(sub) -> None:
    p = sub.add_parser("config", help="print every config key of a run of ALGO: type, default, meaning")
    p.add_argument("algo", metavar="ALGO", help="a registered algorithm, e.g. ppo or grpo")
    p.set_defaults(func=_lazy("jaxrl.commands.config", "main_config"))


# ----------------------------------------------------------------------- the table

#: One entry per sub-command; each adds its parser to the sub-parser group.
COMMANDS: list[Callable] = [
    _add_list,
    _add_check_env,
    _add_train,
    _add_eval,
    _add_render,
    _add_export_hf,
    _add_config,
    _add_serve,
    _add_compare,
]


def _version() -> str:
    """The package's version (``jaxrl --version``); reading it imports nothing heavy."""
    from jaxrl._version import __version__

    return __version__


def command_word(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (its first word that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = "train") -> argparse.ArgumentParser:
    """The whole parser. ``command`` is the sub-command about to run: only ``train`` (the
    default, for a complete parser) adds the multi-process options, whose module imports JAX;
    ``--version``, ``--help``, ``list`` and ``config`` stay free of it."""
    parser = _Parser(
        prog="jaxrl", description="pure-JAX, on-device reinforcement learning", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"jaxrl {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    if command == "train":
        from jaxrl.parallel import distributed

        distributed.add_arguments(sub.choices["train"])
    return parser


def _one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def _is_resource_exhausted(exc: BaseException) -> bool:
    """XLA's out-of-memory error (``XlaRuntimeError``/``JaxRuntimeError`` RESOURCE_EXHAUSTED)."""
    return type(exc).__name__ in ("XlaRuntimeError", "JaxRuntimeError") and "RESOURCE_EXHAUSTED" in str(exc)


def _os_error_line(exc: OSError) -> str:
    reason = exc.strerror or type(exc).__name__
    where = f": {exc.filename}" if exc.filename else ""
    hint = ""
    if exc.errno == errno.ENOSPC:
        hint = "; free some space (a train run keeps its last good checkpoint: continue it with --resume)"
    return f"jaxrl: I/O error: {reason}{where}{hint}"


def failure(exc: BaseException) -> tuple[int, str] | None:
    """``(exit code, one line)`` for an expected failure, or None for a bug (re-raised)."""
    from jaxrl.run.checkpoint import CheckpointError, CheckpointSaveError
    from jaxrl.run.config import ConfigError
    from jaxrl.run.guards import ResourceError
    from jaxrl.run.rundir import RunDirError
    from jaxrl.run.trainer import NonFiniteError

    if isinstance(exc, KeyboardInterrupt):
        text = str(exc) if type(exc) is not KeyboardInterrupt else ""
        return EXIT_INTERRUPTED, f"jaxrl: {text or 'interrupted'}"
    if isinstance(exc, ConfigError):
        return EXIT_BAD_INPUT, f"jaxrl: config error: {exc}"
    if isinstance(exc, RunDirError):
        return EXIT_BAD_INPUT, f"jaxrl: {exc}"
    if isinstance(exc, UnicodeDecodeError):
        return EXIT_BAD_INPUT, f"jaxrl: input is not UTF-8 text: {exc.reason} at byte {exc.start}"
    if isinstance(exc, OverflowError):
        return EXIT_BAD_INPUT, f"jaxrl: a number is too large: {exc}"
    if isinstance(exc, NonFiniteError):
        return EXIT_FAILED, f"jaxrl: {exc}"
    from jaxrl.text.python_reward import failure_line

    if (reward_line := failure_line(exc)) is not None:  # a Python reward's error, raised in its host callback
        return EXIT_FAILED, f"jaxrl: {reward_line}"
    from jaxrl.text.remote import failure_line as remote_line

    if (line := remote_line(exc)) is not None:  # a remote env's sessions failing past env.remote.max_failure_frac
        return EXIT_FAILED, f"jaxrl: {line}"
    if isinstance(exc, CheckpointError):
        return EXIT_FAILED, f"jaxrl: checkpoint error: {exc}"
    if isinstance(exc, CheckpointSaveError):  # its message names the run and the resume command
        return EXIT_IO, f"jaxrl: {exc}"
    if isinstance(exc, OSError):
        return EXIT_IO, _os_error_line(exc)
    if isinstance(exc, ResourceError):
        return EXIT_IO, f"jaxrl: {exc}"
    if isinstance(exc, MemoryError) or _is_resource_exhausted(exc):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "MemoryError"
        return EXIT_IO, f"jaxrl: out of memory: {first}; lower train.seeds or the batch sizes"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxrl`` console script; returns the process exit code (see the
    module docstring). Expected failures print one line; a bug keeps its traceback."""
    fresh_process = argv is None  # the console script: nothing registered in-process yet
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_word(argv))
    args = parser.parse_args(argv)
    args.fresh_process = fresh_process  # list / config may answer from jaxrl.run.answers
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        if fresh_process and "jax" in sys.modules:
            _end_process(code)
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except (Exception, KeyboardInterrupt) as exc:
        known = failure(exc)
        if known is None:
            raise
        code, line = known
        print(_one_line(line), file=sys.stderr)
        return code


def __getattr__(name: str):
    """Handlers that moved out of this module (``check_env_main``, ``list_main``,
    ``config_main``), with a warning."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)


def _end_process(code: int) -> None:
    """End the console script's process now: exit handlers (loggers' final flushes) and
    non-daemon threads still run, but not the interpreter's teardown, which frees JAX's
    traced and compiled programs one object at a time and costs a short command a good
    part of its run (``bench/cli_latency.py`` measures it)."""
    import atexit
    import os
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _closed_pipe() -> int:
    """The reader went away (``jaxrl list | head``): stop quietly, as ``cat`` does. stdout
    is pointed at /dev/null so the interpreter's final flush cannot fail again."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
