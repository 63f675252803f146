"""The conformance cases of tests/test_algo_conformance.py that are not in its ``HERE``: GRPO
(token), SFT, MAPPO and IPPO through :func:`jaxrl.run.conformance.check_algorithm`
in their own two-device subprocess. A file of their own, so that ``pytest -n 2 --dist
loadfile`` can run them on one worker while the other cases run on the other.
"""

from __future__ import annotations

import pytest
from test_algo_conformance import CASES, HERE, case_checks, check_case, run_report

#: The cases this file checks.
THERE = tuple(case for case in CASES if case not in HERE)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    return run_report(tmp_path_factory, THERE)


@pytest.mark.parametrize("case, check", case_checks(THERE))
def test_algorithm_conforms(report, case, check):
    check_case(report, case, check)
