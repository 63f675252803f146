"""Token tasks for RL with verifiable rewards (see docs/rlvr.md).

=========================== ==================================================== =========
id                          task                                                 reward
=========================== ==================================================== =========
``text/Reverse-v0``         reverse K digits (K <= 8)                            dense
``text/Sort-v0``            sort K digits ascending (K <= 6)                     dense
``text/AlphabetSort-v0``    sort 2-3 two-letter names alphabetically             sim ** 4
``text/Addition-v0``        add two K-digit numbers, answer LSD first (K <= 2)   dense
=========================== ==================================================== =========

The vocabulary is shared (:mod:`jaxrl_envs.text.vocab`); the env contract is
:class:`jaxrl_envs.text.base.TokenEnv`'s.
"""

from jaxrl_envs.text.addition import Addition, AdditionParams
from jaxrl_envs.text.alphabet_sort import AlphabetSort, AlphabetSortParams
from jaxrl_envs.text.alphabet_sort_turns import AlphabetSortTurns
from jaxrl_envs.text.base import TokenEnv, TokenState, is_held_out
from jaxrl_envs.text.reverse import DigitParams, Reverse
from jaxrl_envs.text.guess_range import GuessRange
from jaxrl_envs.text.sort import Sort
from jaxrl_envs.text.tool_addition import ToolAddition
from jaxrl_envs.text.vocab import VOCAB_SIZE, decode, encode

__all__ = [
    "Addition",
    "AdditionParams",
    "AlphabetSort",
    "AlphabetSortParams",
    "AlphabetSortTurns",
    "GuessRange",
    "DigitParams",
    "Reverse",
    "Sort",
    "TokenEnv",
    "TokenState",
    "ToolAddition",
    "VOCAB_SIZE",
    "decode",
    "encode",
    "is_held_out",
]
