"""Old import paths and config keys, kept working for one release with a warning.

Everything that moved is listed here, in one place:

* :data:`MOVED_MODULES` -- module paths of 0.1.0 (``jaxrl.env``, ``jaxrl.render``, ...) and
  the modules their names live in now. ``import jaxrl.env`` and ``from jaxrl.env import
  Environment`` give the same objects as ``jaxrl.core.env`` and a ``DeprecationWarning``
  naming the new path; ``jaxrl.render`` (an attribute of the package) does the same.
* :data:`MOVED_NAMES` -- names that left a module which still exists (``jaxrl eval``'s
  handler left ``jaxrl.run.evaluate``); the old module's ``__getattr__`` forwards them with
  the same warning (:func:`moved_name`).
* :data:`RENAMED_KEYS` -- config keys that were renamed; a config (or ``--set``) using the
  old spelling is read as the new one with a ``FutureWarning`` (shown to command-line users,
  who cannot act on a ``DeprecationWarning`` they never see).

The shims are made by a meta-path finder (:class:`MovedModuleFinder`, installed by
``jaxrl/__init__.py``) consulted only after the real modules: no file stands in for an old
module, and nothing here imports JAX until an old path is used. ``CHANGELOG.md`` lists the
same moves for readers.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

#: Releases: the one that moved the names, and the one that removes the old paths.
MOVED_IN, REMOVED_IN = "0.2.0", "0.6.0"  # kept a release longer than promised

#: Old module path -> the modules its public names live in now (searched in order).
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "jaxrl.check": ("jaxrl.core.check", "jaxrl.core.check_rollout"),
    "jaxrl.checkpoint": ("jaxrl.run.checkpoint",),
    "jaxrl.config": ("jaxrl.run.config",),
    "jaxrl.distributed": ("jaxrl.parallel.distributed",),
    "jaxrl.distributions": ("jaxrl.models.distributions",),
    "jaxrl.env": ("jaxrl.core.env",),
    "jaxrl.evaluate": ("jaxrl.run.evaluate",),
    "jaxrl.logging": ("jaxrl.run.logging",),
    "jaxrl.networks": ("jaxrl.models.networks",),
    "jaxrl.normalize": ("jaxrl.models.normalize",),
    "jaxrl.prng": ("jaxrl.core.prng",),
    "jaxrl.registry": ("jaxrl.core.registry",),
    "jaxrl.render": ("jaxrl.core.render", "jaxrl.core.raster"),
    "jaxrl.rollout": ("jaxrl.core.rollout",),
    "jaxrl.sharding": ("jaxrl.parallel.sharding", "jaxrl.algos.common.batching"),
    "jaxrl.spaces": ("jaxrl.core.spaces",),
    "jaxrl.trainer": ("jaxrl.run.trainer",),
    "jaxrl.transformer": ("jaxrl.models.transformer",),
    "jaxrl.vector": ("jaxrl.core.vector",),
    "jaxrl.wrappers": ("jaxrl.core.wrappers",),
    "jaxrl.algos.base": ("jaxrl.algos.contract",),
    "jaxrl.adapters.reset_pool": ("jaxrl.core.reset_pool",),
    # the command handlers' floor (0.6.0): jaxrl.commands
    "jaxrl.run.commands": ("jaxrl.commands.train",),
    "jaxrl.run.check_command": ("jaxrl.commands.check_env",),
    "jaxrl.run.eval_command": ("jaxrl.commands.eval", "jaxrl.commands.render", "jaxrl.run.remote"),
    # the text wing (0.7.0): text configuration and tokenization in jaxrl.text
    "jaxrl.run.text_config": ("jaxrl.text.config",),
    "jaxrl.run.tokenized": ("jaxrl.text.tokenized",),
    "jaxrl.adapters.tokenized": ("jaxrl.text.tokenized",),
    # the language-model wing (0.7.0): jaxrl.algos.common.lm
    "jaxrl.algos.common.lm_program": ("jaxrl.algos.common.lm.program",),
    "jaxrl.algos.grpo.lm_policy": ("jaxrl.algos.common.lm.policy",),
}

#: Modules that moved in a later release than :data:`MOVED_IN`: (moved in, removed in).
MOVED_LATER: dict[str, tuple[str, str]] = {
    "jaxrl.adapters.reset_pool": ("0.4.0", "0.6.0"),
    "jaxrl.run.commands": ("0.6.0", "0.7.0"),
    "jaxrl.run.check_command": ("0.6.0", "0.7.0"),
    "jaxrl.run.eval_command": ("0.7.0", "0.8.0"),
    "jaxrl.run.text_config": ("0.7.0", "0.8.0"),
    "jaxrl.run.tokenized": ("0.7.0", "0.8.0"),
    "jaxrl.adapters.tokenized": ("0.7.0", "0.8.0"),
    "jaxrl.algos.common.lm_program": ("0.7.0", "0.8.0"),
    "jaxrl.algos.grpo.lm_policy": ("0.7.0", "0.8.0"),
}

#: ``old module.name`` -> ``(new module.name, moved in, removed in)`` for names that left a
#: module which still exists; that module's ``__getattr__`` calls :func:`moved_name`.
MOVED_NAMES: dict[str, tuple[str, str, str]] = {
    **{
        f"jaxrl.run.evaluate.{name}": (f"jaxrl.commands.{module}.{name}", "0.5.0", "0.6.0")
        for module, names in (("eval", ("main_eval", "main_sampled", "main_remote")), ("render", ("main_render", "check_render_args")))
        for name in names
    },
    "jaxrl.cli.check_env_main": ("jaxrl.commands.check_env.main_check_env", "0.5.0", "0.6.0"),
    # the command handlers' floor (0.6.0): every handler in jaxrl.commands
    **{f"jaxrl.cli.{name}": (f"jaxrl.commands.listing.{new}", "0.6.0", "0.7.0")
       for name, new in (("list_main", "main_list"), ("registry_listing", "registry_listing"), ("config_dirs", "config_dirs"))},
    "jaxrl.cli.config_main": ("jaxrl.commands.config.main_config", "0.6.0", "0.7.0"),
    "jaxrl.run.reference.main_config": ("jaxrl.commands.config.config_table", "0.6.0", "0.7.0"),
    "jaxrl.run.export.main_export_hf": ("jaxrl.commands.export_hf.main_export_hf", "0.6.0", "0.7.0"),
    "jaxrl.run.aggregate.main_compare": ("jaxrl.commands.compare.main_compare", "0.6.0", "0.7.0"),
    "jaxrl.serve.main.main_serve": ("jaxrl.commands.serve.main_serve", "0.6.0", "0.7.0"),
    # the text wing (0.7.0): the rubric above the byte rules (no import circle)
    **{f"jaxrl.text.verifiers.{name}": (f"jaxrl.text.rubric.{name}", "0.7.0", "0.8.0") for name in ("rubric", "RUBRIC_KEYS")},
    # the language-model wing (0.7.0): one token policy, one model section
    "jaxrl.algos.grpo.policy.Policy": ("jaxrl.algos.common.lm.policy.TokenPolicy", "0.7.0", "0.8.0"),
    "jaxrl.algos.sft.config.ModelConfig": ("jaxrl.algos.common.lm.config.ModelSection", "0.7.0", "0.8.0"),
    **{
        f"jaxrl.core.render.{name}": (f"jaxrl.core.raster.{name}", "0.5.0", "0.6.0")
        for name in ("Color", "blank", "rect", "circle", "line", "polyline")
    },
}

#: Old paths that are still public under the same name, so they load without a warning
#: (``jaxrl.spaces`` is re-exported by the package: ``from jaxrl.spaces import Box`` is fine).
SILENT = frozenset({"jaxrl.spaces"})

#: Renamed config keys: (algorithm section or "*", old dotted key) -> new dotted key, both
#: relative to the top of the run config. GRPO's flat section became model / loss /
#: sampling / optim sections in 0.2.0, and its curriculum and evaluation params moved to env.
RENAMED_KEYS: dict[str, str] = {
    **{f"grpo.{k}": f"grpo.optim.{k}" for k in ("lr", "warmup_updates", "lr_end_frac", "max_grad_norm")},
    "grpo.loss_type": "grpo.loss.type",
    **{f"grpo.{k}": f"grpo.loss.{k}" for k in ("eps_low", "eps_high", "beta", "token_credit", "credit_discount", "scale_rewards")},
    **{
        f"grpo.{k}": f"grpo.sampling.{k}"
        for k in ("temperature", "dynamic_sampling", "oversample", "overlong_buffer", "overlong_penalty", "max_steps")
    },
    **{
        f"grpo.{k}": f"grpo.model.{k}"
        for k in ("policy", "d_model", "n_layers", "n_heads", "positions", "tie_embeddings", "smear_keys", "hidden")
    },
    "grpo.eval_params": "env.eval_params",
    **{f"grpo.curriculum_{k}": f"env.curriculum.{k}" for k in ("param", "start", "stop", "metric", "threshold", "step")},
}


#: 0.5.0: every algorithm's optimiser keys moved into its ``optim`` section (the keys of
#: ``jaxrl.algos.common.optim.OptimConfig``); ``anneal_lr`` became ``optim.lr_end_frac``
#: (true: 0.0, false: 1.0; DQN's old ``lr_end_frac`` was the floor of ``anneal_lr: true``).
_FLAT_OPTIM = {
    "ppo": ("lr", "max_grad_norm", "adam_eps", "anneal_lr"),
    "mappo": ("lr", "max_grad_norm", "adam_eps", "anneal_lr"),
    "ippo": ("lr", "max_grad_norm", "adam_eps", "anneal_lr"),
    "dqn": ("lr", "max_grad_norm", "lr_end_frac", "anneal_lr"),  # lr_end_frac first: anneal_lr reads it
    "pqn": ("lr", "max_grad_norm", "anneal_lr"),
    "sac": ("lr", "max_grad_norm"),
}
OPTIM_KEYS = {
    f"{algo}.{key}": f"{algo}.optim.{'lr_end_frac' if key == 'anneal_lr' else key}"
    for algo, keys in _FLAT_OPTIM.items() for key in keys
}
RENAMED_KEYS.update(OPTIM_KEYS)

#: Renamed keys of a later release than :data:`MOVED_IN`: old key -> (renamed in, removed in).
KEYS_RENAMED_LATER: dict[str, tuple[str, str]] = dict.fromkeys(OPTIM_KEYS, ("0.5.0", "0.6.0"))


def _anneal_lr(value, current, floor: bool):
    """``optim.lr_end_frac`` of an old ``anneal_lr: value``. ``current``: the new key's value
    so far; ``floor``: it came from the same section's old ``lr_end_frac`` (DQN's floor)."""
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    if not value:
        return 1.0
    if floor:
        return current
    below_one = isinstance(current, (int, float)) and not isinstance(current, bool) and current < 1.0
    return current if below_one else 0.0  # a decay set already (--set order) is kept


#: Renamed keys whose value changes too: old key -> (what the warning adds, the mapping).
KEY_VALUES = {old: ("anneal_lr: true is lr_end_frac: 0.0, false is 1.0", _anneal_lr) for old in OPTIM_KEYS if old.endswith(".anneal_lr")}


def _moved(old: str, new: str, moved: str, removed: str) -> str:
    return f"{old} moved to {new} in jaxrl {moved}; the old path goes away in {removed}"


def moved_message(old: str) -> str:
    return _moved(old, " / ".join(MOVED_MODULES[old]), *MOVED_LATER.get(old, (MOVED_IN, REMOVED_IN)))


def _forward(targets: tuple[str, ...], old: str, name: str):
    """Module ``__getattr__`` of a shim: ``name`` from the first target that has it."""
    if name.startswith("__") and name != "__all__":
        raise AttributeError(name)
    modules = [importlib.import_module(t) for t in targets]
    if name == "__all__":
        return sorted({n for m in modules for n in getattr(m, "__all__", [k for k in vars(m) if not k.startswith("_")])})
    for module in modules:  # a name defined in a target first: no second (moved-name) warning
        if name in vars(module):
            return vars(module)[name]
    for module in modules:
        if hasattr(module, name):
            return getattr(module, name)
    moved = MOVED_LATER.get(old, (MOVED_IN,))[0]
    raise AttributeError(f"module {old!r} has no attribute {name!r} (it moved to {' / '.join(targets)} in {moved})")


class _Shim(types.ModuleType):
    """A stand-in for a moved module: every attribute is the new module's object."""

    def __getattr__(self, name):
        return _forward(MOVED_MODULES[self.__name__], self.__name__, name)

    def __dir__(self):
        modules = [importlib.import_module(t) for t in MOVED_MODULES[self.__name__]]
        return sorted({n for m in modules for n in vars(m) if not n.startswith("_")})


def shim(old: str) -> types.ModuleType:
    """The (cached) stand-in module for ``old``, imported without the loader's warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module(old)


class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return _Shim(spec.name, f"Deprecated: {moved_message(spec.name)}.")

    def exec_module(self, module):
        if module.__name__ not in SILENT:
            # stacklevel 2: the first frame outside this module and importlib's (skipped by
            # warnings) is the user's import statement.
            warnings.warn(moved_message(module.__name__), DeprecationWarning, stacklevel=2)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths of :data:`MOVED_MODULES` (after every real module)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _ShimLoader(), is_package=False)


def install() -> None:
    """Put :class:`MovedModuleFinder` at the end of ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())


def package_attribute(name: str):
    """``jaxrl.<name>`` for an old module name (with a warning), or None."""
    old = f"jaxrl.{name}"
    if old not in MOVED_MODULES:
        return None
    if old not in SILENT:
        warnings.warn(moved_message(old), DeprecationWarning, stacklevel=3)
    return shim(old)


def moved_name(module: str, name: str):
    """``module.name`` for a name of :data:`MOVED_NAMES` (from its new module, with a
    ``DeprecationWarning``); ``AttributeError`` for any other name."""
    entry = MOVED_NAMES.get(f"{module}.{name}")
    if entry is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new = entry[0]
    warnings.warn(_moved(f"{module}.{name}", *entry), DeprecationWarning, stacklevel=3)
    new_module, _, new_name = new.rpartition(".")
    return getattr(importlib.import_module(new_module), new_name)


# ------------------------------------------------------------------------------------------
# Config keys
# ------------------------------------------------------------------------------------------


def renamed_key(path: str) -> str:
    """The current spelling of a dotted config key (itself when it was not renamed), with a
    ``FutureWarning`` for an old one."""
    new = RENAMED_KEYS.get(path)
    if new is None:
        return path
    moved, removed = KEYS_RENAMED_LATER.get(path, (MOVED_IN, REMOVED_IN))
    note = f"; {KEY_VALUES[path][0]}" if path in KEY_VALUES else ""
    warnings.warn(
        f"config key {path} is now {new}{note} (since jaxrl {moved}; the old spelling goes away in {removed})",
        FutureWarning, stacklevel=3,
    )
    return new


def renamed_value(path: str, value, current=None, floor: bool = False):
    """The value an old key's ``value`` has under its new key (itself for most keys);
    ``current`` is the new key's value so far. ``ValueError("<old key>: ...")`` when it
    cannot be read."""
    if path not in KEY_VALUES:
        return value
    try:
        return KEY_VALUES[path][1](value, current, floor)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def rename_config_keys(raw: dict) -> dict:
    """A copy of a raw run-config mapping with old key spellings moved to the new ones.
    Raises ``ValueError`` when a key is given under both spellings."""
    if not isinstance(raw, dict):
        return raw
    out, written = None, set()
    for old in RENAMED_KEYS:
        section, _, leaf = old.rpartition(".")
        node = _get(raw, section)
        if not isinstance(node, dict) or leaf not in node:
            continue
        if out is None:  # copy lazily: the common case has no old key
            import copy

            out = copy.deepcopy(raw)
        new = renamed_key(old)
        value = _get(out, section).pop(leaf)
        new_section, _, new_leaf = new.rpartition(".")
        target = _ensure(out, new_section)
        if target is None:
            raise ValueError(f"{old} is the old spelling of {new}, but {new_section} is not a section")
        floor = new in written  # DQN: anneal_lr after the same section's old lr_end_frac
        if new_leaf in target and not (floor and old in KEY_VALUES):
            raise ValueError(f"both {old} and its new spelling {new} are given; keep {new}")
        target[new_leaf] = renamed_value(old, value, target.get(new_leaf), floor)
        written.add(new)
    return raw if out is None else out


def _get(node, dotted: str):
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _ensure(node: dict, dotted: str):
    for part in dotted.split("."):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            return None
        node = child
    return node
