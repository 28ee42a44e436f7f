"""The one base of every error rackscale raises on purpose.

A caller that wants "anything rackscale refused, whatever the layer" catches :class:`RackscaleError`; each
subclass keeps the builtin it always was (``ValueError`` for bad input, ``RuntimeError`` for an engine that
failed), so code that caught those goes on working.
"""

from __future__ import annotations


class RackscaleError(Exception):
    """An error rackscale raised on purpose, with a message meant for the person who must act on it."""


__all__ = ["RackscaleError"]
