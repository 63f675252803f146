"""Every ``notebooks/*.ipynb`` runs top to bottom without an error.

Each notebook runs in a fresh Jupyter kernel started with *this* interpreter (a kernelspec
written to a temp dir, so the kernel sees the same venv and the editable install), from the
``notebooks/`` directory, under a wall-clock budget for the whole notebook.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
#: Wall-clock budget per notebook (seconds); a notebook not listed gets the default.
TIMEOUT_S = {"default": 150, "02_write_an_env.ipynb": 120}
#: Environment of every notebook's kernel: 03_grpo_verifiers.ipynb trains one chunk of 25
#: updates instead of its 100 (its text says the tests use a small budget).
KERNEL_ENV = {"JAXRL_NB_UPDATES": "25"}
KERNEL_NAME = "jaxrl-test-venv"


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A ``JUPYTER_PATH`` entry holding a kernelspec that runs ``sys.executable``."""
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        # capture_fd_output=False: native fd 1/2 of the kernel go straight to the test's
        # output instead of through ipykernel's pipe-draining thread.
        "argv": [sys.executable, "-m", "ipykernel_launcher", "--IPKernelApp.capture_fd_output=False", "-f", "{connection_file}"],
        "display_name": "jaxrl test venv",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return root


class _Deadline:
    """nbclient ``timeout_func``: each cell gets what is left of the notebook's budget."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def __call__(self, cell) -> int:
        return max(1, int(self.end - time.monotonic()))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, kernel_dir, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    for name, value in KERNEL_ENV.items():
        monkeypatch.setenv(name, value)
    budget = TIMEOUT_S.get(path.name, TIMEOUT_S["default"])
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout_func=_Deadline(budget),
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()  # raises CellExecutionError (with the traceback) on the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
