"""``check_algorithm``: the conformance check of an algorithm, the twin of ``check_env``.

It runs one configured algorithm (a :class:`~jaxrl.run.config.RunConfig` on a tiny budget)
through the promises of the training program (``DESIGN.md``, "The training program") and
reports each as a named check (PASS, FAIL or SKIP, with one line naming what differs)::

    >>> report = check_algorithm(load_config("my_algo.yaml", ["my_algo.num_envs=4"]))
    >>> print(report); report.passed, report.failed_names()

The checks (:data:`CHECKS`) use the trainer's own pieces (``build``, ``make_layout``,
``make_chunk``, :mod:`jaxrl.run.checkpoint` as ``--resume`` restores): ``compiles_once``
(one compile for every chunk and ``n_active``), ``chunked_equals_scanned`` (the chunk loop
equals ``update`` scanned in one program from the same initial state, bit for bit),
``seeds_equal_separate`` (``S`` vmapped seeds equal each seed run alone), ``resume_bit_exact``
(checkpointed mid-way and restored equals straight, bit for bit) and ``env_split`` (the env
batch split over ``devices`` devices equals one device); :data:`TOLERANCES` says which
comparisons allow float32 rounding and why. ``env_split`` needs ``devices`` JAX devices in
this process (on CPU: ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` set before JAX
starts) and is skipped otherwise. Cost: four training programs compiled (the chunk for 2
seeds, for 1 seed, split, and the scan); keep the config to 3-5 updates.
"""

from __future__ import annotations

import dataclasses
import tempfile
from typing import Any, Callable, Sequence

import jax
import numpy as np

from jaxrl.algos.common.train import COMPILER_OPTIONS
from jaxrl.core.check import FAIL, PASS, SKIP, CheckResult, Checks
from jaxrl.parallel import sharding
from jaxrl.run.build import build, seed_keys
from jaxrl.run.checkpoint import Checkpoints, to_storable
from jaxrl.run.config import ConfigError, RunConfig
from jaxrl.run.program import make_chunk, make_layout, trace_mesh
from jaxrl.run.resume import first_leaf_difference

__all__ = ["CHECKS", "TOLERANCES", "AlgoCheckReport", "check_algorithm"]

CHECKS = ("compiles_once", "chunked_equals_scanned", "seeds_equal_separate", "resume_bit_exact", "env_split")
#: ``(rtol, atol)`` per comparison, ``|a - b| <= atol + rtol * |b|`` elementwise (integer
#: leaves always exactly); a PASS line says whether the runs were equal bit for bit.
#: ``resume_bit_exact`` has none: the same program continues from the same bytes, and
#: ``chunked_equals_scanned`` none by default: the chunk's ``lax.cond`` and ``n_active``
#: must not change the math. ``seeds_equal_separate``: one seed runs unbatched, ``S`` seeds vmapped
#: (batched matmuls, another summation order). ``env_split``: gradients and metric means are
#: all-reduced across devices, another summation order (``docs/scale_out.md``).
TOLERANCES = {
    "chunked_equals_scanned": (0.0, 0.0),
    "seeds_equal_separate": (1e-5, 1e-6),
    "env_split": (1e-4, 1e-5),
}


@dataclasses.dataclass
class AlgoCheckReport(Checks):
    """Everything ``check_algorithm`` found: ``checks`` in the order they ran."""

    algo: str
    env_id: str
    checks: list[CheckResult]
    num_updates: int = 0
    updates_per_chunk: int = 0
    seeds: int = 0

    def to_dict(self) -> dict:
        return {"algo": self.algo, "env": self.env_id, "checks": {c.name: [c.status, c.message] for c in self.checks}}

    def __str__(self) -> str:
        width = max((len(c.name) for c in self.checks), default=0)
        lines = [f"check_algorithm({self.algo} on {self.env_id}: {self.num_updates} updates, "
                 f"chunks of {self.updates_per_chunk}, {self.seeds} seeds)"]
        lines += [f"  {c.status}  {c.name:<{width}}  {c.message}" for c in self.checks]
        bad = self.failed_names()
        lines.append("result: " + ("all checks passed" if not bad else f"{len(bad)} check(s) FAILED: {', '.join(bad)}"))
        return "\n".join(lines)


class _Mismatch(Exception):
    """Two runs differ; the message names the leaf or metric, the update and the seed."""


# ------------------------------------------------------------------------ comparisons


def _leaves(state) -> list[tuple[str, np.ndarray]]:
    flat = jax.tree_util.tree_flatten_with_path(to_storable(state))[0]
    return [(jax.tree_util.keystr(path), np.asarray(sharding.fetch(x))) for path, x in flat]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    """Largest ``|a - b| / (1 + |b|)`` over float elements (equal NaNs and infs: 0)."""
    if not (np.issubdtype(a.dtype, np.inexact) and a.shape == b.shape and a.size):
        return 0.0
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.where((x == y) | (np.isnan(x) & np.isnan(y)), 0.0, np.abs(x - y) / (1.0 + np.abs(y)))
    return float(np.nanmax(d))


def _first_diff(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple | None:
    """``(index, a, b)`` of the first element where ``a`` and ``b`` differ beyond
    ``atol + rtol * |b|`` (exactly, for integer and bool arrays)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return ("shape/dtype", f"{a.dtype}{list(a.shape)}", f"{b.dtype}{list(b.shape)}")
    if np.issubdtype(a.dtype, np.inexact):
        x, y = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            same = (x == y) | (np.isnan(x) & np.isnan(y)) | (np.abs(x - y) <= atol + rtol * np.abs(y))
    else:
        same = a == b
    if np.all(same):
        return None
    idx = np.unravel_index(int(np.flatnonzero(~same.reshape(-1))[0]), a.shape) if a.ndim else ()
    return idx, a[idx], b[idx]


def _compare_states(a, b, what: str, rtol: float = 0.0, atol: float = 0.0) -> float:
    """The largest relative difference of two ``[S, ...]`` states; raises :class:`_Mismatch`
    naming the first leaf (and seed) that differs beyond the tolerance."""
    la, lb = _leaves(a), _leaves(b)
    if [p for p, _ in la] != [p for p, _ in lb]:
        raise _Mismatch(f"{what}: the final states have different structures")
    worst = 0.0
    for (path, x), (_, y) in zip(la, lb):
        d = _first_diff(x, y, rtol, atol)
        if d is not None:
            idx, u, v = d
            seed = f" (seed {idx[0]}, index {tuple(int(i) for i in idx[1:])})" if isinstance(idx, tuple) and idx else ""
            raise _Mismatch(f"{what}: state leaf {path or '<root>'}{seed}: {u} vs {v}; "
                            f"max |a-b|/(1+|b|) of the leaf {_rel(x, y):.3g}")
        worst = max(worst, _rel(x, y))
    return worst


def _compare_metrics(a: dict, b: dict, what: str, rtol: float = 0.0, atol: float = 0.0) -> float:
    """Metrics ``{name: [S, N]}``: the largest relative difference; raises naming the metric,
    update and seed of the earliest update that differs beyond the tolerance."""
    if sorted(a) != sorted(b):
        raise _Mismatch(f"{what}: metric names differ: {sorted(set(a) ^ set(b))}")
    worst, first = 0.0, None
    for name in sorted(a):
        x, y = np.asarray(a[name]), np.asarray(b[name])
        if x.shape != y.shape or x.ndim != 2:
            raise _Mismatch(f"{what}: metric {name!r} has shapes {list(x.shape)} vs {list(y.shape)}")
        for i in range(x.shape[1]):
            d = _first_diff(x[:, i], y[:, i], rtol, atol)
            if d is not None:
                if first is None or i < first[0]:
                    first = (i, name, int(d[0][0]), d[1], d[2])
                break
        worst = max(worst, _rel(x, y))
    if first is not None:
        i, name, seed, u, v = first
        raise _Mismatch(f"{what}: metric {name!r} at update {i + 1} (seed {seed}): {u} vs {v}")
    return worst


def _equal(worst: float, rtol: float) -> str:
    """How close two runs came, for a PASS line."""
    if worst == 0.0:
        return "bit for bit"
    return f"within rtol {rtol:g} (largest |a-b|/(1+|b|) {worst:.2g}; not bit for bit)"


# ------------------------------------------------------------------------ the runs


class _Runner:
    """The trainer's pieces for one config and one layout: init, the chunk, the host loop."""

    def __init__(self, cfg: RunConfig, keys: jax.Array, count: Callable[[], None] | None = None):
        self.built = build(cfg)
        self.keys = keys
        self.layout = make_layout(cfg, self.built, keys)
        update = self.built.program.update
        if count is not None:
            def update(state, _update=update):  # counts the traces of the chunk
                count()
                return _update(state)
        self.k = self.built.derived.updates_per_chunk
        self.chunk = make_chunk(update, self.k, self.layout)
        self.init = sharding.init_sharded(jax.vmap(self.built.program.init), self.layout)
        self.template = jax.eval_shape(jax.vmap(self.built.program.init), keys)
        self.n_dev = {}

    def run(self, state, start: int, stop: int) -> tuple[Any, dict]:
        """Chunks from ``start`` to ``stop`` updates; the metrics ``{name: [S, stop - start]}``."""
        mesh, parts, done = trace_mesh(self.layout), [], start
        while done < stop:
            n = min(self.k, stop - done)
            if n not in self.n_dev:
                self.n_dev[n] = jax.device_put(np.int32(n), self.layout.replicated)
            with jax.transfer_guard("disallow"), sharding.use_mesh(mesh):  # as the trainer calls it
                state, metrics, _ = self.chunk(state, self.n_dev[n])
            parts.append({k: np.asarray(v)[:, :n] for k, v in jax.device_get(metrics).items()})
            done += n
        return state, {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}

    def straight(self, num_updates: int):
        return self.run(self.init(self.keys), 0, num_updates)


def _cache_size(fn) -> int | None:
    size = getattr(fn, "_cache_size", None)
    return size() if callable(size) else None


def check_algorithm(
    cfg: RunConfig,
    *,
    devices: int = 2,
    seeds: int = 2,
    updates_per_chunk: int = 2,
    only: Sequence[str] | None = None,
    tolerances: dict | None = None,
    verbose: bool = False,
) -> AlgoCheckReport:
    """Run the conformance checks (:data:`CHECKS`, or ``only`` those) on ``cfg``'s algorithm.

    ``cfg``'s ``train.seeds``, ``train.updates_per_chunk``, ``devices`` and ``shard`` are
    replaced by ``seeds`` (vmapped in one program), ``updates_per_chunk`` (``K``) and one
    device; its budget must give at least ``K + 1`` updates, so that a chunk of ``K`` and a
    shorter one both run (keep it a few updates: everything is compiled and run on this
    machine). A check that raises is reported as FAIL with the exception's first line; the
    others still run. ``verbose`` prints each check as it finishes. Raises
    :class:`~jaxrl.run.config.ConfigError` when the config cannot run at all.
    """
    tol = {**TOLERANCES, **(tolerances or {})}
    names = list(CHECKS if only is None else only)
    unknown = sorted(set(names) - set(CHECKS))
    if unknown:
        raise ValueError(f"only: unknown check(s) {unknown}; checks: {list(CHECKS)}")
    if seeds < 2 or updates_per_chunk < 1 or devices < 2:
        raise ValueError("check_algorithm: needs seeds >= 2, updates_per_chunk >= 1 and devices >= 2")
    one = dataclasses.replace(
        cfg, devices=1, shard="auto", train=dataclasses.replace(cfg.train, seeds=seeds, updates_per_chunk=updates_per_chunk),
    )
    traces = [0]
    keys = seed_keys(one.train.seed, seeds)
    main = _Runner(one, keys, count=lambda: traces.__setitem__(0, traces[0] + 1))
    n, k = main.built.derived.num_updates, main.k
    if n <= k:
        raise ConfigError(f"{cfg.algo}: check_algorithm needs more than updates_per_chunk={k} updates, the config gives {n}")
    report = AlgoCheckReport(cfg.algo, cfg.env.id, [], n, k, seeds)

    ref: dict = {}

    def reference():
        if not ref:
            state, metrics = main.straight(n)
            ref.update(state=state, metrics=metrics, traces=traces[0], cache=_cache_size(main.chunk))
        return ref["state"], ref["metrics"]

    def compiles_once():
        changed = _type_change(main.built.program, keys[0])
        if changed:
            raise _Mismatch(f"update changes the state's types, so no scan can carry it: {changed}")
        reference()
        cut = _cut(n, k)
        state, _ = main.run(main.init(keys), 0, cut)  # other n_active values, a fresh state
        main.run(state, cut, n)
        cache = _cache_size(main.chunk)
        if cache is not None and cache != 1:
            raise _Mismatch(f"the chunk compiled {cache} times for n_active in {sorted(main.n_dev)} (expected once)")
        if traces[0] != ref["traces"]:
            raise _Mismatch(f"the chunk was traced again after its first call ({ref['traces']} -> {traces[0]} traces of update)")
        return f"one compile for {-(-n // k)} chunks, n_active in {sorted(main.n_dev)}"

    def chunked_equals_scanned():
        state, metrics = reference()
        update = main.built.program.update
        scan = jax.jit(jax.vmap(lambda s: jax.lax.scan(lambda c, _: update(c), s, None, length=n)),
                       compiler_options=COMPILER_OPTIONS)
        s_state, s_metrics = scan(main.init(keys))
        what, (rtol, atol) = f"chunks of {k} vs one scan of {n}", tol["chunked_equals_scanned"]
        worst = max(_compare_metrics(metrics, jax.device_get(s_metrics), what, rtol, atol),
                    _compare_states(state, s_state, what, rtol, atol))
        return f"{n} updates in chunks of {k} equal one scan of update {_equal(worst, rtol)}"

    def seeds_equal_separate():
        state, metrics = reference()
        alone = _Runner(dataclasses.replace(one, train=dataclasses.replace(one.train, seeds=1)), keys[:1])
        (rtol, atol), worst = tol["seeds_equal_separate"], 0.0
        for s in range(seeds):
            alone.keys = keys[s:s + 1]
            a_state, a_metrics = alone.straight(n)
            pick = lambda t, s=s: jax.tree_util.tree_map(lambda x: x[s:s + 1], t)  # noqa: E731 (one seed)
            what = f"seed {s} of {seeds} vmapped vs alone"
            worst = max(worst, _compare_metrics(pick(metrics), a_metrics, what, rtol, atol),
                        _compare_states(pick(state), a_state, what, rtol, atol))
        return f"{seeds} vmapped seeds equal each seed trained alone {_equal(worst, rtol)}"

    def resume_bit_exact():
        state, metrics = reference()
        cut = _cut(n, k)
        first, m1 = main.run(main.init(keys), 0, cut)
        with tempfile.TemporaryDirectory(prefix="jaxrl-check-") as tmp:
            with Checkpoints(tmp, keep=2) as ckpts:
                ckpts.save(cut, sharding.fetch(first))  # what trainer.save_checkpoint writes
                del first
                restored = ckpts.restore_verified(main.template)
            if restored.step != cut:
                raise _Mismatch(f"restored step {restored.step}, saved {cut}")
            again = sharding.put(to_storable(restored.state), main.template, main.layout.state)
        resumed, m2 = main.run(again, cut, n)
        what = f"checkpointed at update {cut} and resumed vs straight"
        _compare_metrics({key: np.concatenate([m1[key], m2[key]], axis=1) for key in m1}, metrics, what)
        _compare_states(resumed, state, what)
        return f"checkpoint at update {cut} of {n}, restored: equal to the straight run, bit for bit"

    def env_split():
        if jax.device_count() < devices:
            return SKIP, (f"needs {devices} devices, this process has {jax.device_count()} (on CPU: "
                          f"XLA_FLAGS=--xla_force_host_platform_device_count={devices} before JAX starts)")
        state, metrics = reference()
        split = _Runner(dataclasses.replace(one, devices=devices, shard="envs"), keys)
        batch = split.built.program.batch
        s_state, s_metrics = split.straight(n)
        what = f"envs split over {devices} devices vs 1"
        rtol, atol = tol["env_split"]
        worst = max(_compare_metrics(s_metrics, metrics, what, rtol, atol), _compare_states(s_state, state, what, rtol, atol))
        per = f"{batch.size // devices} of {batch.size} {batch.unit} per device" if batch else "nothing split (replicated)"
        return f"{per}: equal to one device {_equal(worst, rtol)}"

    runs = {f.__name__: f for f in (compiles_once, chunked_equals_scanned, seeds_equal_separate, resume_bit_exact, env_split)}
    for name in names:
        try:
            out = runs[name]()
            status, message = (PASS, out) if isinstance(out, str) else out
        except _Mismatch as exc:
            status, message = FAIL, str(exc)
        except Exception as exc:  # noqa: BLE001 (reported as the check's failure; the others still run)
            first = (str(exc).strip().splitlines() or [""])[0]
            status, message = FAIL, f"raised {type(exc).__name__}: {first}"
        report.checks.append(CheckResult(name, status, message))
        if verbose:
            print(f"  {status}  {name}  {message}", flush=True)
    return report


def _type_change(program, key) -> str | None:
    """The first state leaf whose shape or dtype ``update`` changes (``init``'s vs ``update``'s)."""
    before = jax.eval_shape(program.init, key)
    diff = first_leaf_difference(before, jax.eval_shape(lambda s: program.update(s)[0], before))
    if diff is None:
        return None
    path, a, b = diff
    return "the state's structure differs" if path is None else f"leaf {path}: {a.dtype}{list(a.shape)} -> {b.dtype}{list(b.shape)}"


def _cut(n: int, k: int) -> int:
    """Where the resumed run is checkpointed: after a full chunk and a shorter one (``K + 1``)
    when that leaves updates to run, else after one update; off the straight run's
    chunk boundaries (for ``K > 1``), so the resumed run's chunks differ from the straight run's."""
    return k + 1 if k + 1 < n else 1
