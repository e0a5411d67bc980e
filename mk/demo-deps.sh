#!/usr/bin/env bash
# demo-deps.sh SYNC_PACKAGES [-- BACKGROUND_PACKAGES]
# demo-deps.sh --pending   exit 0 while the background install runs
# demo-deps.sh --wait      wait for the background install to end
#
# The Debian packages the first `make demo` needs, for root on a machine
# that lacks some. The first list (the llama.cpp build's headers, the
# graders, the Python sources of the lint tasks) is installed now, in one
# apt call; the second (PyTorch and OpenBLAS, most of the download) is
# installed in the background while llama.cpp compiles and the expert runs:
# `make train-deps` waits for it (.build/apt-train.pid, its output in
# .build/apt-train.log) before training starts. Not root: the missing
# packages are named and the demo goes on.
set -uo pipefail
pidfile=.build/apt-train.pid
# running: the background apt-get of an earlier call still runs (a pid
# that now names another process does not count).
running() {
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(cat "$pidfile")
  [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q apt-get
}
case "${1:-}" in
--pending) running; exit ;;
--wait)
  if running; then
    echo "fleet-train: waiting for the PyTorch install make demo started (.build/apt-train.log)" >&2
    while running; do sleep 1; done
  fi
  rm -f "$pidfile"
  exit 0 ;;
esac
missing() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || printf ' %s' "$p"
  done
}
now=() later=() into=now
for a in "$@"; do
  if [ "$a" = -- ]; then into=later; continue; fi
  if [ "$into" = now ]; then now+=("$a"); else later+=("$a"); fi
done
sync=$(missing "${now[@]}")
bg=$(missing "${later[@]}")
[ -z "$sync$bg" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "missing Debian packages:$sync$bg (sudo apt-get install$sync$bg); going on" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || exit 1
if [ -n "$sync" ]; then
  echo "installing$sync"
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $sync >/dev/null || exit 1
fi
if [ -n "$bg" ]; then
  mkdir -p .build
  echo "installing$bg in the background (.build/apt-train.log); training waits for it"
  # shellcheck disable=SC2086
  nohup apt-get install -y -qq --no-install-recommends $bg >.build/apt-train.log 2>&1 </dev/null &
  echo $! >"$pidfile"
fi
