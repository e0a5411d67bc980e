#!/usr/bin/env bash
# check.sh: the checks of deploy/ that run without a container engine or a
# cluster (`make deploy-check`, part of `make test`):
#   1. the Kubernetes manifests against the Kubernetes and KEDA schemas and
#      fleet's own rules (check/validate.mjs; npm packages of check/);
#   2. the Dockerfile's steps, run on this machine (dockerfile-run.sh);
#   3. the systemd unit with systemd-analyze verify, over the image's file
#      system (so ExecStart's binary is the staged worker), and its
#      sandboxing exposure score (systemd-analyze security).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/deploy-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "== deploy/kubernetes"
node deploy/check/validate.mjs deploy/kubernetes

echo "== deploy/Dockerfile"
DOCKERFILE_RUN_KEEP=$tmp/root deploy/dockerfile-run.sh

echo "== deploy/systemd"
if ! command -v systemd-analyze >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing systemd (for systemd-analyze)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd; } >/dev/null
  else
    echo "SKIPPED: systemd-analyze is missing and this is not root with apt-get (apt-get install systemd)"
    exit 0
  fi
fi
unit=fleet-worker.service
root=$tmp/root
# The unit's dependencies (network-online.target, …) come from this
# machine's systemd; the unit and the worker from the image.
mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root/tmp"
for d in /usr/lib/systemd/system /lib/systemd/system; do
  if [ -d "$d" ]; then cp -a "$d/." "$root/usr/lib/systemd/system/"; break; fi
done
cp deploy/systemd/$unit "$root/etc/systemd/system/$unit"
out=$(systemd-analyze verify --man=no --root="$root" "$unit" 2>&1) || { echo "$out"; echo "FAIL: systemd-analyze verify $unit"; exit 1; }
if [ -n "$out" ]; then
  echo "$out"
  echo "FAIL: systemd-analyze verify $unit printed warnings"
  exit 1
fi
echo "systemd-analyze verify $unit: ok"
score=$(systemd-analyze security --offline=yes --root="$root" "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
echo "systemd-analyze security $unit: exposure $score (0 = fully sandboxed, 10 = not at all)"
if [ -z "$score" ] || awk -v s="$score" 'BEGIN { exit !(s > 2.0) }'; then
  echo "FAIL: exposure ${score:-unknown} above 2.0: the unit lost sandboxing options"
  exit 1
fi
echo "deploy-check: ok"
