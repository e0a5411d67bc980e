#!/usr/bin/env bash
# stage-runtime.sh ROOTFS: lays the worker's runtime files out under ROOTFS
# (the image's "runtime" stage copies ROOTFS to /). Run from the repository
# root after `make build monty`. It checks the Monty binary against the
# sha256 pinned in mk/monty.mk, so the image carries exactly that binary.
set -euo pipefail
root=${1:?usage: stage-runtime.sh ROOTFS}
cd "$(dirname "$0")/.."
want=$(sed -n 's/^MONTY_BIN_SHA256 *:= *//p' mk/monty.mk)
got=$(sha256sum .build/monty/monty | cut -d' ' -f1)
if [ -z "$want" ] || [ "$got" != "$want" ]; then
  echo "stage-runtime: .build/monty/monty has sha256 $got, mk/monty.mk pins ${want:-nothing}" >&2
  exit 1
fi
for f in bin/worker bin/enqueue; do
  [ -x "$f" ] || { echo "stage-runtime: $f missing: run make build first" >&2; exit 1; }
done
install -D -m 0755 bin/worker "$root/usr/local/bin/worker"
install -D -m 0755 bin/enqueue "$root/usr/local/bin/enqueue"
install -D -m 0755 .build/monty/monty "$root/usr/lib/fleet/monty"
mkdir -p "$root/usr/share/fleet"
rm -rf "$root/usr/share/fleet/agents"
cp -R agents "$root/usr/share/fleet/agents"
# Only the agents themselves: their Go tests and test data stay behind.
find "$root/usr/share/fleet/agents" -mindepth 1 -maxdepth 1 ! -type d -delete
rm -rf "$root/usr/share/fleet/agents/testdata"
install -D -m 0644 config/fleet.example.yaml "$root/etc/fleet/fleet.example.yaml"
echo "stage-runtime: staged worker, enqueue, monty ($got) and $(find "$root/usr/share/fleet/agents" -name agent.yaml | wc -l) agents under $root"
