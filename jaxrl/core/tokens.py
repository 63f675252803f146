"""The token-task interface: what an algorithm may know about an env whose actions are tokens.

A token task is an :class:`~jaxrl.core.env.Environment` whose observation is
``int32[prompt_len + max_completion_len]`` (the prompt, then the completion written so far)
and whose action is the next token id in ``[0, vocab_size)``. Algorithms dispatch on
``isinstance(env, TokenTask)`` and read only what is declared here; they never import the
env suite. ``jaxrl_envs.text`` implements it (``TokenEnv``), and so can any package.
"""

from __future__ import annotations

import abc
from typing import Any

from jaxrl.core.env import Environment


class TokenTask(Environment, metaclass=abc.ABCMeta):
    """An env whose actions are tokens of a fixed vocabulary (see the module docstring)."""

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of token ids; actions are ``int32`` in ``[0, vocab_size)``."""

    @property
    @abc.abstractmethod
    def prompt_len(self) -> int:
        """Prompt tokens at the front of every observation."""

    @property
    @abc.abstractmethod
    def max_completion_len(self) -> int:
        """The most tokens a completion may have (the episode's step cap)."""

    @abc.abstractmethod
    def decode(self, tokens: Any) -> str:
        """Host-side text of a token sequence (numpy or list of ints), for transcripts."""

    def held_out_params(self, params: Any) -> Any:
        """``params`` switched to the held-out split that evaluation uses (default: same)."""
        return params
