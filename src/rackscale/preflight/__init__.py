"""``rackscale preflight``: is this host ready for the deployment plan? (issue 15, part 1).

Each check reads the host through :class:`~rackscale.preflight.host_facts.HostProbe` (a root path for
``/sys``, ``/proc`` and ``/etc`` and a command runner), so fixture trees and recorded command outputs
test the parsing; the real probe reads ``/`` and runs the commands with a timeout.
"""

from __future__ import annotations

from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import HostProbe, real_probe
from rackscale.preflight.registry import CHECKS, run_checks

__all__ = ["CHECKS", "Check", "CheckName", "HostProbe", "Options", "Status", "real_probe", "run_checks"]
