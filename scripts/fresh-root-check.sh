#!/usr/bin/env bash
# Checks the README's two set-up commands on a fresh machine: a Debian 12 (bookworm) minbase root made
# with debootstrap (no Python, no engines, nothing of this machine's), a clean `git clone` of this
# repository's HEAD in it with a copy of ../shared beside it (as CI lays them), entered with chroot.
# Then, as root, timed: the first command (twice: with a cold and a warm pip cache), then the test command
# with CI=true. Not run by CI (it takes ~13 min on 2 cores); see docs/benchmarks.md.
#
# Usage (root): scripts/fresh-root-check.sh [--ci] [WORKDIR]   (default /var/tmp/rackscale-fresh-root, ~3.5 GB)
#   --ci: instead, only what CI does on a new machine: `bash .ci/run` with CI=true, timed
#   SHARED=DIR: the shared/ folder to copy beside the clone (default: ../shared of this repository)
#   WORKDIR/base    the debootstrap root, built once (~1 min) and never entered; rm -r it to rebuild
#   WORKDIR/root    a copy of base, made anew each run (the machine under test)
#   WORKDIR/results logs and times.txt
# The chroot runs in its own mount and PID namespaces (unshare): /proc, /sys, /dev, /dev/pts, /dev/shm and
# /run are mounted there, unmounted by the inner shell's trap, and in any case gone with the namespace; every
# process started inside (servers that apt's scripts start included) ends with it.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (debootstrap, mounts, chroot)" >&2; exit 1; }
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
MODE=readme
if [ "${1:-}" = --ci ]; then MODE=ci; shift; fi
W=$(realpath -m "${1:-/var/tmp/rackscale-fresh-root}")
B=$W/base R=$W/root OUT=$W/results
mkdir -p "$W"

# The Debian mirror apt uses here (a deb822 .sources file or the classic sources.list).
mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
security=$(awk '/^URIs:/{u=$2} /^Suites:.*-security/{print u; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
security=${security:-${mirror%/debian}/debian-security}

if [ ! -x "$B/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || {
    apt-get -qq update
    DEBIAN_FRONTEND=noninteractive apt-get -qq install -y debootstrap >/dev/null
  }
  rm -rf "$B"
  echo "building a Debian 12 minbase root in $B (~1 min)"
  debootstrap --variant=minbase bookworm "$B" "$mirror" >"$W/debootstrap.log" 2>&1 ||
    { tail -20 "$W/debootstrap.log"; exit 1; }
fi

if [ -d "$R" ]; then
  if grep -q " $R/" /proc/mounts; then echo "$0: something is still mounted under $R" >&2; exit 1; fi
  rm -rf "$R"
fi
cp -a "$B" "$R"
rm -rf "$OUT"
mkdir -p "$OUT"

# What an installed Debian machine of this workplace has and a bare debootstrap root lacks: apt's usual
# sources (updates and security too), /etc/hosts, the resolver, and the CA bundle that this network's
# HTTPS egress needs (its machines point PIP_CERT, SSL_CERT_FILE, ... at it).
cat >"$R/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n' "$(hostname)" >"$R/etc/hosts"
cp /etc/resolv.conf "$R/etc/resolv.conf"
ca=
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$R/etc/ssl"
  cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/workplace-ca.crt"
  ca=/etc/ssl/workplace-ca.crt
fi

# A clean clone of HEAD (no uncommitted edits, no .venv), with shared/ beside it, read-only, as CI has it.
mkdir -p "$R/ci"
git clone -q "$REPO" "$R/ci/main"
git -C "$R/ci/main" log -1 --format='checked commit: %H %s' | tee "$OUT/commit.txt"
SHARED=${SHARED:-$REPO/../shared}
if [ -d "$SHARED" ]; then
  cp -a "$SHARED/." "$R/ci/shared"
  chmod -R a-w "$R/ci/shared"
fi

# The run inside the root: a login-like environment, nothing of this shell's but the CA variables.
echo "#!/bin/bash
MODE=$MODE" >"$R/ci/check.sh"
cat >>"$R/ci/check.sh" <<'EOF'
set -uo pipefail
cd /ci/main
out=/ci/results
exec 3>&1
t() { local s=$SECONDS; "$@"; local rc=$?; echo "$((SECONDS - s)) s, exit $rc" >&3; return $rc; }
if [ "$MODE" = ci ]; then
  {
    echo "== CI: CI=true bash .ci/run"
    t env CI=true bash .ci/run >"$out/ci.log" 2>&1
    rc=$?
    grep -E 'installed what|passed|failed|error' "$out/ci.log" | tail -3
    exit $rc
  } 2>&1 | tee "$out/times.txt"
  exit "${PIPESTATUS[0]}"
fi
{
  echo "== first command, cold: scripts/quickstart.sh"
  t scripts/quickstart.sh >"$out/quickstart-cold.log" 2>&1
  echo "== first command, again with .venv removed (downloads cached)"
  rm -rf .venv
  t scripts/quickstart.sh >"$out/quickstart-warm.log" 2>&1
  echo "== rackscale simulate alone"
  t .venv/bin/rackscale simulate >/dev/null 2>&1
  echo "== test command: CI=true scripts/test.sh"
  t env CI=true scripts/test.sh >"$out/test.log" 2>&1
  rc=$?
  grep -E 'installed what|passed|failed|error' "$out/test.log" | tail -3
  exit $rc
} 2>&1 | tee "$out/times.txt"
exit "${PIPESTATUS[0]}"
EOF
chmod +x "$R/ci/check.sh"
mkdir -p "$R/ci/results"

inner=$(
  cat <<'EOF'
set -u
R=$1
cleanup() {
  for m in run dev/shm dev/pts dev sys proc; do
    mountpoint -q "$R/$m" && umount -l "$R/$m"
  done
}
trap cleanup EXIT
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --bind /dev "$R/dev"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$R/dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=0755 tmpfs "$R/run"
mkdir -p "$R/run/lock"
chroot "$R" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  TERM="${TERM:-dumb}" ${CA:+PIP_CERT=$CA REQUESTS_CA_BUNDLE=$CA SSL_CERT_FILE=$CA CURL_CA_BUNDLE=$CA} \
  /ci/check.sh
EOF
)
rc=0
CA=$ca unshare --mount --pid --fork --propagation private bash -c "$inner" inner "$R" || rc=$?
cp -a "$R/ci/results/." "$OUT/"
if grep -q " $R/" /proc/mounts; then
  echo "$0: left mounted under $R:" >&2
  grep " $R/" /proc/mounts >&2
  rc=1
fi
echo "results in $OUT (exit $rc)"
exit "$rc"
