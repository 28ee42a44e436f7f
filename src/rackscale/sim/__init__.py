"""The discrete-event simulator: replays a workload on a modelled cluster with the real scheduler."""

from rackscale.sim.engine import EventKind, EventQueue
from rackscale.sim.faults import FaultConfig
from rackscale.sim.simulator import JobRun, SimConfig, SimResult, Simulator, simulate

__all__ = ["EventKind", "EventQueue", "FaultConfig", "JobRun", "SimConfig", "SimResult", "Simulator", "simulate"]
