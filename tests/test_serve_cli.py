"""``jaxrl serve`` as a command: one-line errors (port in use, unknown id, bad --set), a lazy
``--help``, and a graceful stop on SIGTERM (a real subprocess)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from jaxrl import cli  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_port_in_use_unknown_id_and_bad_set_are_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert cli.main(["serve", "CartPole-v1", "--port", str(port)]) == 3
        assert f"port {port} on 127.0.0.1 is in use" in one_line(capsys)
    assert cli.main(["serve", "CartPol-v1", "--port", "0"]) == 2
    assert "unknown env id 'CartPol-v1'" in one_line(capsys)
    assert cli.main(["serve", "CartPole-v1", "--port", "0", "--set", "env.params.lenght=1"]) == 2
    assert "lenght" in one_line(capsys)
    assert cli.main(["serve", "CartPole-v1", "--port", "0", "--set", "ppo.lr=1"]) == 2
    assert "only env.* keys" in one_line(capsys)
    assert cli.main(["serve", "CartPole-v1", "--port", "0", "--max-sessions", "0"]) == 2
    assert "--max-sessions" in one_line(capsys)
    assert cli.main(["serve", "CartPole-v1", "--port", "0", "--window-ms", "nan"]) == 2
    assert "--window-ms" in one_line(capsys)
    for bad in ("-1", "nan", "inf"):
        assert cli.main(["serve", "CartPole-v1", "--port", "0", "--idle-timeout", bad]) == 2
        assert "--idle-timeout: must be a finite number of seconds >= 0" in one_line(capsys)


def test_help_imports_neither_jax_nor_fastapi():
    code = (
        "import sys\nfrom jaxrl import cli\n"
        "try:\n    cli.main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('jax', 'fastapi', 'uvicorn', 'websockets') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--max-sessions" in out.stdout and "--window-ms" in out.stdout and "--slots-per-session" in out.stdout
    assert "--idle-timeout" in out.stdout


def test_sigterm_stops_the_server_gracefully():
    from jaxrl.interop.openenv import OpenEnvClient

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "jaxrl.cli", "serve", "CartPole-v1", "--port", "0", "--max-sessions", "2", "--ws-deflate", "off"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = proc.stdout.readline()  # printed once the pool has compiled
        assert "ws://127.0.0.1:" in ready and "idle timeout 600 s" in ready, ready + proc.stderr.read()
        url = ready.split("(WebSocket ")[1].split(")")[0]
        client = OpenEnvClient(url)
        first = client.reset(seed=0)
        assert len(first.obs) == 4 and client.step(1).reward == 1.0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        rest = proc.stdout.read()
        assert "stopped on SIGTERM" in rest, rest
        with pytest.raises(ConnectionError):
            client.step(1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in proc.stderr.read()
