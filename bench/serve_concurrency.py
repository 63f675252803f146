"""Concurrent WebSocket sessions served by ``jaxrl serve`` and by OpenEnv's own server.

Close to OpenEnv's published scaling method: at each level ``N`` the load client opens ``N``
WebSocket sessions at once (OpenEnv's ``/ws`` protocol), waits until all are open (so ``N``
sessions are in fact concurrent), then each sends ``reset`` and ``--steps`` requests back to
back, the next when the previous answer has arrived (a ``step`` with a random action, or a
``reset`` right after an episode ended). A session succeeds when it connects within
``--connect-timeout`` and every answer comes within ``--deadline`` seconds. A level passes
when >= 95% of its sessions succeed; a server's ramp stops after its first failing level.
Per level: connect/reset/step latency p50/p99, steps/s served (step answers over the
stepping phase's wall time), the CPU seconds of server and client, the load average.

Both servers run CartPole-v1 on this machine in the same run, driven by the same client
(one asyncio + ``websockets`` process, uvloop when installed, sharing the cores with the
servers). The peer is ``bench/peers/openenv_cartpole.py`` (``openenv-core``'s ``create_app``
under uvicorn), run from its own virtual environment (``--peer-python``), swept over
uvicorn workers and OpenEnv's executor modes (``--peer-configs``).

    python bench/serve_concurrency.py --peer-python /tmp/oe_venv/bin/python
    python bench/serve_concurrency.py --servers openenv --levels 1 64 128 512 --peer-configs 1:session

Writes ``bench/results/serve_concurrency.{json,csv,md}`` (``--name``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEER_SCRIPT = ROOT / "bench" / "peers" / "openenv_cartpole.py"
DEFAULT_LEVELS = (1, 64, 128, 512, 1024, 2048, 4096, 8192)
JAXRL_CMD = "jaxrl serve CartPole-v1 --host {host} --port {port} --max-sessions {max_sessions} --window-ms {window_ms}"


# ----------------------------------------------------------------------------------------
# The load client
# ----------------------------------------------------------------------------------------
def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard one (every session holds one socket)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Level:
    """Shared state of one level: the all-connected barrier and the per-session records."""

    def __init__(self, n: int):
        self.n, self.pending, self.all_open = n, n, asyncio.Event()
        self.records: list[dict[str, Any]] = []
        self.go_time = 0.0
        self.extensions = None  # what the server accepted (permessage-deflate or none)

    def arrived(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.go_time = time.perf_counter()
            self.all_open.set()


STEP_TEXT = [json.dumps({"type": "step", "data": {"action": a}}) for a in range(2)]
RESET_TEXT = json.dumps({"type": "reset", "data": {}})


async def _ask(ws, text: str, timeout: float) -> tuple[dict, float]:
    start = time.perf_counter()
    await ws.send(text)
    raw = await asyncio.wait_for(ws.recv(), timeout=timeout)
    elapsed = time.perf_counter() - start
    answer = json.loads(raw)
    if answer.get("type") != "observation":
        raise RuntimeError(f"answer {str(answer)[:160]}")
    return answer["data"], elapsed


async def session(url: str, idx: int, level: Level, args: argparse.Namespace) -> None:
    """One client session: connect, wait for every session to be open, reset, ``steps`` requests."""
    import websockets

    rec: dict[str, Any] = {"ok": False, "connect": None, "reset": None, "steps": [], "env_steps": 0}
    level.records.append(rec)
    rng = random.Random(idx)
    ws = None
    try:
        start = time.perf_counter()
        try:
            ws = await asyncio.wait_for(
                websockets.connect(url, max_size=2**22, open_timeout=None, ping_interval=None,
                                   compression=None if args.no_compression else "deflate"),
                timeout=args.connect_timeout,
            )
            rec["connect"] = time.perf_counter() - start
            if idx == 0:
                level.extensions = ws.response.headers.get("Sec-WebSocket-Extensions") or "none"
        finally:
            level.arrived()
        await level.all_open.wait()
        seeded = json.dumps({"type": "reset", "data": {"seed": idx}})
        data, rec["reset"] = await _ask(ws, seeded, args.answer_timeout)
        for _ in range(args.steps):
            if data.get("done"):
                data, dt = await _ask(ws, RESET_TEXT, args.answer_timeout)
            else:
                data, dt = await _ask(ws, STEP_TEXT[rng.randrange(2)], args.answer_timeout)
                rec["env_steps"] += 1
            rec["steps"].append(dt)
        latencies = [rec["reset"], *rec["steps"]]
        rec["ok"] = max(latencies) <= args.deadline
        if not rec["ok"]:
            rec["error"] = f"slowest answer {max(latencies):.2f} s"
        rec["end"] = time.perf_counter()
    except Exception as exc:  # a failed session is a figure, not a crash
        rec["error"] = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        if ws is not None:
            try:
                await asyncio.wait_for(ws.close(), timeout=5.0)
            except Exception:
                pass


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


async def run_level(url: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    level = Level(n)
    tasks = [asyncio.ensure_future(session(url, i, level, args)) for i in range(n)]
    _, pending = await asyncio.wait(tasks, timeout=args.level_timeout)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    recs = level.records
    ok = sum(r["ok"] for r in recs)
    steps = [s for r in recs for s in r["steps"]]
    ends = [r["end"] for r in recs if "end" in r]
    phase = (max(ends) - level.go_time) if ends and level.go_time else None
    errors: dict[str, int] = {}
    for r in recs:
        if not r["ok"]:
            key = r.get("error", "timed out (level bound)")[:80]
            errors[key] = errors.get(key, 0) + 1
    ms = lambda v: None if v is None else round(v * 1e3, 2)  # noqa: E731
    return {
        "sessions": n,
        "succeeded": ok,
        "success_rate": ok / n,
        "passed": ok >= 0.95 * n,
        "connect_p50_ms": ms(_pct([r["connect"] for r in recs if r["connect"] is not None], 0.5)),
        "connect_p99_ms": ms(_pct([r["connect"] for r in recs if r["connect"] is not None], 0.99)),
        "reset_p50_ms": ms(_pct([r["reset"] for r in recs if r["reset"] is not None], 0.5)),
        "reset_p99_ms": ms(_pct([r["reset"] for r in recs if r["reset"] is not None], 0.99)),
        "step_p50_ms": ms(_pct(steps, 0.5)),
        "step_p99_ms": ms(_pct(steps, 0.99)),
        "step_max_ms": ms(max(steps) if steps else None),
        "requests_answered": len(steps),
        "env_steps": sum(r["env_steps"] for r in recs),
        "phase_s": phase,
        "steps_per_s": (len(steps) / phase) if phase else None,
        "ws_extensions": level.extensions,
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:4]),
    }


# ----------------------------------------------------------------------------------------
# Servers
# ----------------------------------------------------------------------------------------
def _tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children, from /proc."""
    import psutil

    try:
        proc = psutil.Process(pid)
        total = 0.0
        for p in [proc, *proc.children(recursive=True)]:
            t = p.cpu_times()
            total += t.user + t.system
        return total
    except psutil.Error:
        return float("nan")


class Server:
    """A server subprocess in its own process group; ``url`` once ``/health`` answers."""

    def __init__(self, name: str, argv: list[str], port: int, env: dict | None = None):
        self.name, self.argv, self.port = name, argv, port
        self.log = open(f"/tmp/serve_concurrency_{name}_{port}.log", "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})}, cwd=ROOT)
        self.url = f"ws://127.0.0.1:{port}/ws"

    def wait_ready(self, timeout: float = 180.0) -> float:
        start = time.perf_counter()
        while time.perf_counter() - start < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return time.perf_counter() - start
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"{self.name} not healthy after {timeout} s; see {self.log.name}")

    def cpu(self) -> float:
        return _tree_cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def server_specs(args: argparse.Namespace) -> list[tuple[str, list[str], dict, dict]]:
    """(label, argv, extra environment, config record) of every server the run ramps."""
    top = max([*args.levels, *args.throughput_levels])
    specs = []
    if "jaxrl" in args.servers:
        cmd = args.jaxrl_cmd.format(host="127.0.0.1", port="{port}", max_sessions=max(top, args.max_sessions),
                                    window_ms=args.window_ms)
        specs.append(("jaxrl", shlex.split(cmd), {}, {"command": cmd}))
    if "openenv" in args.servers:
        for cfg in args.peer_configs:
            workers, executor, *rest = cfg.split(":")
            deflate = rest[0] if rest else "on"
            argv = [args.peer_python, str(PEER_SCRIPT), "--port", "{port}", "--workers", workers,
                    "--executor", executor, "--max-envs", str(top), "--ws-deflate", deflate]
            specs.append((f"openenv[{workers}w,{executor},deflate {deflate}]", argv, {},
                          {"workers": int(workers), "executor": executor, "max_concurrent_envs": top, "ws_deflate": deflate}))
    return specs


def measure(server: Server, n: int, args: argparse.Namespace, label: str) -> dict[str, Any]:
    """One level against a running server, with its CPU seconds and the load average."""
    gc.collect()
    gc.disable()  # the load client's own collector pauses would count against the server
    load0, cpu0, ccpu0 = os.getloadavg()[0], server.cpu(), time.process_time()
    t0 = time.perf_counter()
    try:
        rec = asyncio.run(run_level(server.url, n, args))
    finally:
        gc.enable()
    rec.update(steps_per_session=args.steps, wall_s=time.perf_counter() - t0, server_cpu_s=server.cpu() - cpu0,
               client_cpu_s=time.process_time() - ccpu0, load_1m_before=load0, load_1m_after=os.getloadavg()[0])
    print(f"{label:>24} N={n:>5} x {args.steps}: {rec['success_rate']:.1%} ok, step p50 {rec['step_p50_ms']} ms "
          f"p99 {rec['step_p99_ms']} ms, {rec['steps_per_s'] or 0:,.0f} steps/s, load {load0:.1f}"
          + (f"  errors {rec['errors']}" if rec["errors"] else ""), flush=True)
    return rec


def ramp(label: str, argv: list[str], env: dict, port: int, args: argparse.Namespace) -> dict[str, Any]:
    """Start one server, warm it up (untimed), then the levels until the first failing one."""
    server = Server(re.sub(r"[^A-Za-z0-9]+", "_", label),
                    [a.replace("{port}", str(port)) for a in argv], port, env)
    out: dict[str, Any] = {"server": label, "levels": []}
    try:
        out["startup_s"] = server.wait_ready()
        warm = argparse.Namespace(**{**vars(args), "steps": 20})
        for n in (1, 64):  # compile / first-touch work, untimed
            asyncio.run(run_level(server.url, n, warm))
        for n in args.levels:
            rec = measure(server, n, args, label)
            out["levels"].append(rec)
            if not rec["passed"]:
                break
            time.sleep(args.pause)
        measured = {r["sessions"] for r in out["levels"]}
        out["throughput"] = [r for r in out["levels"] if r["sessions"] in args.throughput_levels]
        for n in (m for m in args.throughput_levels if m not in measured):
            time.sleep(args.pause)
            slow = argparse.Namespace(**{**vars(args), "steps": args.throughput_steps, "answer_timeout": args.level_timeout})
            rec = measure(server, n, slow, label)
            out["throughput"].append(rec)
    finally:
        server.stop()
    passed = [r["sessions"] for r in out["levels"] if r["passed"]]
    out["max_sessions_95"] = max(passed) if passed else 0
    return out


# ----------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------
def write_markdown(path: Path, result: dict[str, Any]) -> None:
    meta, ramps = result["meta"], result["ramps"]
    lines = [
        "# Concurrent WebSocket sessions: `jaxrl serve` vs OpenEnv's server (CartPole-v1)",
        "",
        f"Measured {meta['utc']} on {meta['machine']['cpu_model']} ({meta['machine']['cpus_usable']} cores usable), "
        "loopback; the load client (one asyncio + websockets process) shares the cores with the server, and other "
        "work was running on the machine (load averages below). jaxrl at commit " + str(meta.get("jaxrl_commit")) + ". "
        "Command: `" + meta["command"] + "`.",
        "",
        f"Method: {meta['method']}",
        "",
        "| server | largest N with >= 95% ok | startup s |",
        "|---|---|---|",
    ]
    for r in ramps:
        lines.append(f"| {r['server']} | **{r['max_sessions_95']:,}** | {r.get('startup_s', float('nan')):.1f} |")
    lines += ["", "| server | N | ok | connect p50/p99 ms | reset p50/p99 ms | step p50/p99 ms | steps/s | server CPU s | client CPU s | load 1m | deflate |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ramps:
        for v in r["levels"]:
            lines.append(
                f"| {r['server']} | {v['sessions']:,} | {v['success_rate']:.1%} | {v['connect_p50_ms']} / {v['connect_p99_ms']} | "
                f"{v['reset_p50_ms']} / {v['reset_p99_ms']} | {v['step_p50_ms']} / {v['step_p99_ms']} | "
                f"{(v['steps_per_s'] or 0):,.0f} | {v['server_cpu_s']:.1f} | {v['client_cpu_s']:.1f} | "
                f"{v['load_1m_before']:.1f} -> {v['load_1m_after']:.1f} | {'on' if 'deflate' in str(v.get('ws_extensions')) else 'off'} |")
    lines += ["", "Throughput (steps/s served = answers over the stepping phase; all sessions open and stepping back to back):", "",
              "| server | sessions | requests per session | steps/s | step p50/p99 ms | ok within 1 s | load 1m |", "|---|---|---|---|---|---|---|"]
    for r in ramps:
        for v in sorted(r.get("throughput", []), key=lambda v: v["sessions"]):
            lines.append(f"| {r['server']} | {v['sessions']:,} | {v['steps_per_session']} | {(v['steps_per_s'] or 0):,.0f} | "
                         f"{v['step_p50_ms']} / {v['step_p99_ms']} | {v['success_rate']:.1%} | {v['load_1m_before']:.1f} |")
    if result.get("summary"):
        lines += ["", "Summary: " + result["summary"]]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servers", nargs="+", default=["jaxrl", "openenv"], choices=["jaxrl", "openenv"])
    p.add_argument("--levels", type=int, nargs="+", default=list(DEFAULT_LEVELS))
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--throughput-levels", type=int, nargs="*", default=[1, 64, 1024, 8192],
                   help="session counts whose steps/s are reported; those the ramp did not reach run after it")
    p.add_argument("--throughput-steps", type=int, default=30, help="requests per session in those extra runs")
    p.add_argument("--deadline", type=float, default=1.0, help="seconds each answer may take")
    p.add_argument("--connect-timeout", type=float, default=60.0)
    p.add_argument("--answer-timeout", type=float, default=5.0,
                   help="abandon a ramp session whose answer takes this long (it has failed anyway); "
                   "the extra throughput runs wait up to --level-timeout")
    p.add_argument("--level-timeout", type=float, default=300.0, help="bound on one level's wall time")
    p.add_argument("--pause", type=float, default=2.0, help="seconds between levels")
    p.add_argument("--no-compression", action="store_true", help="do not offer permessage-deflate")
    p.add_argument("--jaxrl-cmd", default=JAXRL_CMD)
    p.add_argument("--max-sessions", type=int, default=8192)
    p.add_argument("--window-ms", type=float, default=2.0)
    p.add_argument("--peer-python", default=sys.executable, help="the Python that has openenv-core installed")
    p.add_argument("--peer-configs", nargs="+", default=["1:session", "2:session", "1:inline", "2:inline"],
                   help="WORKERS:EXECUTOR[:on|off] (executor: session | shared | inline; on/off: the server "
                   "accepts permessage-deflate, uvicorn's default on)")
    p.add_argument("--port", type=int, default=8310)
    p.add_argument("--name", default="serve_concurrency")
    args = p.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    nofile = raise_fd_limit()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                            check=False).stdout.strip()  # what the servers start from, before the (long) run
    ramps = []
    for i, (label, server_argv, env, config) in enumerate(server_specs(args)):
        r = ramp(label, server_argv, env, args.port + i, args)
        r["config"] = config
        ramps.append(r)
    jax_best = max((r["max_sessions_95"] for r in ramps if r["server"] == "jaxrl"), default=None)
    peer_best = max((r["max_sessions_95"] for r in ramps if r["server"].startswith("openenv")), default=None)
    summary = f"jaxrl serve {jax_best}, OpenEnv best {peer_best} concurrent sessions at >= 95% success"
    if jax_best is not None and peer_best:
        summary += f" ({jax_best / peer_best:.1f}x)"
    versions = common.library_versions(("jax", "jaxlib", "numpy", "websockets", "uvicorn", "fastapi", "uvloop"))
    peer_versions = subprocess.run(
        [args.peer_python, "-c", "import importlib.metadata as m, json; print(json.dumps({k: m.version(k) for k in "
         "('openenv-core', 'fastapi', 'uvicorn', 'websockets', 'pydantic', 'uvloop')}))"],
        capture_output=True, text=True).stdout.strip() if "openenv" in args.servers else ""
    meta = common.metadata({
        "method": (f"N sessions opened at once, all open before any reset; each: reset then {args.steps} requests back "
                   f"to back (step with a random action, reset after an episode ends); a session succeeds when every "
                   f"answer comes within {args.deadline} s; a level passes at >= 95%; ramp stops after the first "
                   f"failing level; untimed warm-up of 1 and 64 sessions first; compression "
                   f"{'off' if args.no_compression else 'permessage-deflate offered (as OpenEnv client)'}"),
        "rlimit_nofile": nofile,
        "jaxrl_commit": commit,
        "peer_versions": json.loads(peer_versions) if peer_versions else None,
        "client": "one asyncio process, websockets " + str(versions.get("websockets")) + (", uvloop" if versions.get("uvloop") else ""),
    }, libraries=("jax", "jaxlib", "numpy", "websockets", "uvicorn", "fastapi", "uvloop"))
    result = {"meta": meta, "ramps": ramps, "summary": summary}
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (common.RESULTS_DIR / f"{args.name}.json").write_text(common.dumps(result))
    write_markdown(common.RESULTS_DIR / f"{args.name}.md", result)
    print(summary)


if __name__ == "__main__":
    main()
