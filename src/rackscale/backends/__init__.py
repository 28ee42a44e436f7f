"""Where placements become real. Each backend turns a start or a stop into something (a simulated run, a
process, ...) and reports back the jobs that ended. Backends do not know each other or the service."""

from rackscale.backends.base import Backend, Exit, RunningJobRecord

__all__ = ["Backend", "Exit", "RunningJobRecord"]
