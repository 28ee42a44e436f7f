"""The web page at ``/`` (placeholder until the dashboard lands)."""

from __future__ import annotations


def page() -> str:
    return "<!doctype html><title>rackscale</title><h1>rackscale</h1>"
