"""The discrete-event simulator: replays a workload on a modelled cluster with the real scheduler."""

from rackscale.sim.engine import EventQueue
from rackscale.sim.replay import ReplayResult, replay

__all__ = ["EventQueue", "ReplayResult", "replay"]
