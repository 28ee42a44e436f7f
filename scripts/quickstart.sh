#!/usr/bin/env bash
# The README's first command: rackscale into `.venv` (pip install -e .), then `rackscale simulate`.
# Arguments go to `rackscale simulate` (paths in them are relative to the repository root).
# Needs Python >= 3.11 with its venv module; where either is missing it installs Debian's python3-venv
# with apt (root or sudo). Installs nothing else outside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

ensure_venv
echo "$0: installing rackscale into .venv (pip install -e .)" >&2
.venv/bin/python -m pip install -q -e .
exec .venv/bin/rackscale simulate "$@"
