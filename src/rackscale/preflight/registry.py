"""The ordered table of checks, and running them so that one check's crash never stops the others."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rackscale.preflight import firewall, gpu, iops, network, rdma, spec_compare, storage, sysctl, versions
from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import HostProbe

CheckFn = Callable[[HostProbe, Options], list[Check]]

CHECKS: dict[CheckName, CheckFn] = {
    CheckName.kernel: versions.kernel,
    CheckName.driver: versions.driver,
    CheckName.runtime: versions.runtime,
    CheckName.kubernetes: versions.kubernetes,
    CheckName.topology: gpu.topology,
    CheckName.rdma: rdma.rdma,
    CheckName.sysctl: sysctl.sysctl,
    CheckName.subnets: network.subnets,
    CheckName.firewall: firewall.firewall,
    CheckName.storage: storage.storage,
    CheckName.iops: iops.iops,
    CheckName.spec: spec_compare.spec,
}
assert list(CHECKS) == list(CheckName), "every check is registered, in CheckName's order"


def run_checks(probe: HostProbe, opts: Options, only: Iterable[CheckName] | None = None) -> list[Check]:
    """Run the checks in table order (``only``: a subset). An unexpected exception becomes that check's
    ``fail`` with the error line; the others still run."""
    wanted = set(only) if only is not None else set(CHECKS)
    out: list[Check] = []
    for name, fn in CHECKS.items():
        if name not in wanted:
            continue
        try:
            out.extend(fn(probe, opts))
        except Exception as err:
            line = f"{type(err).__name__}: {err}".splitlines()[0][:200]
            out.append(
                Check(
                    check=name,
                    name="crashed",
                    status=Status.FAIL,
                    found=line,
                    required="the check runs",
                    fix="a bug in rackscale preflight: please report it with this line",
                )
            )
    return out
