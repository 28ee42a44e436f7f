# shellcheck shell=bash
# Sourced by scripts/quickstart.sh and scripts/test.sh (run from the repository root):
# Debian packages through apt (as root, or through sudo), and the project's virtualenv `.venv`.

# as_root CMD...: run CMD as root (directly when root, else through sudo).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "$0: needs root (or sudo) to run: $*" >&2
    return 1
  fi
}

# apt_install PKG...: install Debian packages (non-interactive; waits up to 5 min for another apt's lock).
apt_install() {
  [ $# -gt 0 ] || return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$0: missing, and no apt-get here to install them: $* (Debian package names; install their equivalents)" >&2
    return 1
  fi
  echo "$0: installing Debian packages: $*" >&2
  local opts=(-qq -o DPkg::Lock::Timeout=300)
  as_root env DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" install -y "$@" >/dev/null
}

# ensure_venv: `.venv` with a working pip, made by python3 (>= 3.11). Where python3, or its venv module
# (Debian splits it off as python3-venv), is missing, installs it with apt first. An existing .venv is kept.
ensure_venv() {
  if [ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1; then
    return 0
  fi
  command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "$0: rackscale needs Python >= 3.11; python3 is $(python3 -V 2>&1)" >&2
    return 1
  fi
  rm -rf .venv
  if ! python3 -m venv .venv >/dev/null 2>&1; then
    rm -rf .venv
    apt_install python3-venv
    python3 -m venv .venv
  fi
}
