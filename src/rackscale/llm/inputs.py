"""The bounds of a serving question's inputs, shared by ``rackscale perf`` and ``rackscale sweep``'s perf
cells: the interactivity targets asked when none are given, and the largest values that still mean
anything (past them the arithmetic would only print nonsense, so a hostile value gets one line instead)."""

from __future__ import annotations

DEFAULT_TARGETS = (10.0, 25.0, 50.0, 100.0, 125.0, 200.0, 300.0)  # tok/s/user: chat to agentic
MAX_TOKENS = 1 << 24  # the longest contexts are ~10M tokens
MAX_TTFT_S = 86_400.0
MAX_INTERACTIVITY = 1e9  # far past any chip (the tests ask for unreachable targets below it)
