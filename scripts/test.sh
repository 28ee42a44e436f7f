#!/usr/bin/env bash
# The README's test command, and all that CI runs (.ci/run): install what the tests need, then run them.
#  1. Debian packages (apt; root or sudo), each only when missing: the real engines the tests start
#     (Prometheus + promtool and Alertmanager, Chromium, PostgreSQL, Slurm 22.05 with munge, procps for
#     pgrep, kubectl, libatomic1 for Playwright's Node.js), and python3-venv when python3 has no venv module.
#  2. `.venv` (kept if it exists) with `pip install -e '.[dev]'`.
#  3. `python -m pytest ARGS...` (ruff, mypy --strict and the import-linter contract run as tests too).
# Exit status: pytest's, except that a run that collected no test (pytest's 5) fails with 1.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need=()
have() { PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" command -v "$1" >/dev/null 2>&1; }  # sbin: also for non-root
{ have prometheus && have promtool; } || need+=(prometheus)
{ have prometheus-alertmanager && have amtool; } || need+=(prometheus-alertmanager)
have chromium || need+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
{ have slurmctld && have slurmd && have sbatch && have scontrol; } || need+=(slurm-wlm)
have munged || need+=(munge)
have debootstrap || need+=(debootstrap)  # Slurm 24.11 with topology/block runs in a Debian 13 root (tests/slurm/test_block.py)
have pgrep || need+=(procps)
# kubectl for `kubectl kustomize` of deploy/kubernetes (Debian's 1.20 will do); never over a kubectl already here.
have kubectl || need+=(kubernetes-client)
# Playwright's own Node.js (it drives Chromium) links libatomic, which a machine with gcc has anyway.
compgen -G "/usr/lib/*/libatomic.so.1" >/dev/null || compgen -G "/lib/*/libatomic.so.1" >/dev/null || need+=(libatomic1)
apt_install "${need[@]}"

ensure_venv
echo "$0: installing rackscale and its test tools into .venv (pip install -e '.[dev]')" >&2
.venv/bin/python -m pip install -q -e '.[dev]'
echo "$0: installed what the tests need in ${SECONDS} s; running the tests" >&2

# shellcheck disable=SC1091
source .venv/bin/activate
rc=0
python -m pytest "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "$0: pytest collected no test: that is no pass (check the arguments, or that tests/ is there)" >&2
  rc=1
fi
exit "$rc"
