#!/usr/bin/env bash
# dockerfile-run.sh: runs deploy/Dockerfile's steps on this machine, without a
# container engine, then checks the runtime stage's file system and starts
# the worker from it. `make deploy-check` calls it; run it from anywhere.
#
# How each instruction is carried out:
#   FROM        starts a stage; its root is a folder under the work folder.
#   ARG, ENV    kept per stage (global ARG defaults as Docker scopes them);
#               ROOTFS is overridden to a folder under the work folder.
#   WORKDIR     a folder under the stage's root, except in a stage that
#               copies the whole context (COPY . .): there the work folder
#               IS the repository, so the build uses the Makefile in place
#               and the Go build cache of this checkout (no recompilation of
#               llama.cpp when make test built it already).
#   COPY        from the context (a no-op where the work folder is the
#               repository) or --from=<stage>.
#   RUN         run with bash in the work folder, with the stage's ARG and
#               ENV, EXCEPT a RUN that calls apt-get: it would change this
#               machine (packages, users), so its package names are checked
#               against the archive instead, and the runtime stage's shared
#               libraries are checked to come from them (below).
#   USER, VOLUME, EXPOSE, LABEL, ENTRYPOINT, CMD: recorded.
# Any other instruction fails the run: keep the Dockerfile to these.
#
# Then, on the last stage's root: the entrypoint and the files ENV names
# exist; every shared library the worker and Monty load comes from the
# runtime stage's apt packages or from Debian's base (libc6); and the
# staged worker, started with the image's ENV (paths moved under the root)
# and the scripted model, runs a lint job that the staged enqueue sends.
# DOCKERFILE_RUN_KEEP=DIR keeps that file system in DIR; DOCKERFILE=FILE
# runs another Dockerfile (the check's own tests).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dockerfile=${DOCKERFILE:-$repo/deploy/Dockerfile}
work=$(mktemp -d "${TMPDIR:-/tmp}/dockerfile-run.XXXXXX")
worker_pid=
cleanup() {
  if [ -n "$worker_pid" ]; then kill "$worker_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf 'dockerfile-run: %s\n' "$*"; }
die() { printf 'dockerfile-run: FAIL: %s\n' "$*" >&2; exit 1; }

# --- parse: one instruction per element, continuations joined, comments dropped.
instructions=()
cur=
while IFS= read -r line || [ -n "$line" ]; do
  if [ -z "$cur" ] && [[ $line =~ ^[[:space:]]*(#|$) ]]; then continue; fi
  if [[ $line =~ ^[[:space:]]*# ]]; then continue; fi # a comment inside a continuation
  if [[ $line == *\\ ]]; then
    cur+="${line%\\} "
    continue
  fi
  instructions+=("$cur$line")
  cur=
done <"$dockerfile"
[ -z "$cur" ] || die "the Dockerfile ends inside a continuation"

# --- state
declare -A global_args=() args=() envs=()
stage= stage_root= workdir= maps_context=0
declare -A stage_roots=()
declare -a runtime_apt=()
entrypoint= user= rootfs_override=$work/rootfs

expand() { # expands ${NAME} and $NAME from the stage's ARG and ENV
  local s=$1 name val
  while [[ $s =~ \$\{([A-Za-z_][A-Za-z0-9_]*)\} ]] || [[ $s =~ \$([A-Za-z_][A-Za-z0-9_]*) ]]; do
    name=${BASH_REMATCH[1]}
    val=${envs[$name]:-${args[$name]:-${global_args[$name]:-}}}
    s=${s/"${BASH_REMATCH[0]}"/$val}
  done
  printf '%s' "$s"
}

unquote() { local v=$1; v=${v#\"}; v=${v%\"}; printf '%s' "$v"; }

# stage_copies_context I: does the stage starting at instruction I copy
# the whole context (COPY . .)?
stage_copies_context() {
  local i=$1 ins
  for ((j = i + 1; j < ${#instructions[@]}; j++)); do
    ins=${instructions[$j]}
    [[ $ins =~ ^FROM[[:space:]] ]] && return 1
    [[ $ins =~ ^COPY[[:space:]]+\.[[:space:]]+\.[[:space:]]*$ ]] && return 0
  done
  return 1
}

# path in the current stage's file system -> path on this machine
host_path() {
  local p=$1
  [[ $p == /* ]] || p=$workdir/$p
  if [ "$maps_context" = 1 ] && [[ $p == "$context_dir"* ]]; then
    printf '%s%s' "$repo" "${p#"$context_dir"}"
  elif [[ $p == "$work"/* ]]; then
    printf '%s' "$p" # an ARG that points into the work folder already
  else
    printf '%s%s' "$stage_root" "$p"
  fi
}

run_env() { # the stage's ARG and ENV as NAME=value words for env(1)
  local k
  for k in "${!args[@]}"; do printf '%s=%s\0' "$k" "${args[$k]}"; done
  for k in "${!envs[@]}"; do printf '%s=%s\0' "$k" "${envs[$k]}"; done
}

apt_packages() { # the package names of every apt-get install in a RUN
  local apt=0 on=0 w words
  set -f
  words=($1)
  set +f
  for w in "${words[@]}"; do
    case $w in
      apt-get) apt=1 ;;
      install) [ $apt = 1 ] && on=1 ;;
      '&&' | ';' | '|') apt=0 on=0 ;;
      -*) ;;
      *) [ $on = 1 ] && printf '%s\n' "$w" ;;
    esac
  done
}

check_apt_names() { # package names exist in the archive (when apt has lists)
  local p
  if ! apt-cache policy >/dev/null 2>&1 || [ -z "$(apt-cache pkgnames 2>/dev/null | head -1)" ]; then
    say "  (apt has no package lists here: package names not checked; run apt-get update)"
    return
  fi
  for p in "$@"; do
    apt-cache show "$p" >/dev/null 2>&1 || die "apt package $p does not exist in this machine's archive"
  done
  say "  apt packages exist: $*"
}

i=0
for ins in "${instructions[@]}"; do
  kw=${ins%%[[:space:]]*}
  rest=${ins#"$kw"}
  rest=${rest#"${rest%%[![:space:]]*}"}
  case $kw in
    ARG)
      name=${rest%%=*}
      default=
      [[ $rest == *=* ]] && default=$(unquote "${rest#*=}")
      [ "$name" = ROOTFS ] && default=$rootfs_override
      if [ -z "$stage" ]; then
        global_args[$name]=$default
      elif [[ $rest == *=* ]] || [ "$name" = ROOTFS ]; then
        args[$name]=$default
      else
        args[$name]=${global_args[$name]:-}
      fi
      ;;
    FROM)
      words=($rest)
      image=$(expand "${words[0]}")
      stage=${words[2]:-stage$i}
      stage_root=$work/stages/$stage
      mkdir -p "$stage_root"
      stage_roots[$stage]=$stage_root
      args=() envs=() workdir=/ maps_context=0 context_dir=
      if stage_copies_context "$i"; then maps_context=1; fi
      say "stage $stage (FROM $image)"
      ;;
    WORKDIR)
      workdir=$(expand "$rest")
      if [ "$maps_context" = 1 ] && [ -z "$context_dir" ]; then
        context_dir=$workdir
        say "  WORKDIR $workdir = the repository (this stage copies the whole context)"
      fi
      mkdir -p "$(host_path "$workdir")"
      ;;
    ENV)
      # NAME=value pairs (values without spaces, or double-quoted)
      eval "pairs=($rest)"
      for kv in "${pairs[@]}"; do envs[${kv%%=*}]=$(expand "${kv#*=}"); done
      ;;
    COPY)
      words=($rest)
      from=
      if [[ ${words[0]} == --from=* ]]; then from=${words[0]#--from=}; words=("${words[@]:1}"); fi
      dest=$(expand "${words[-1]}")
      for src in "${words[@]:0:${#words[@]}-1}"; do
        src=$(expand "$src")
        if [ -n "$from" ]; then
          [ -n "${stage_roots[$from]:-}" ] || die "COPY --from=$from: no such stage"
          if [[ $src == "$work"/* ]]; then hsrc=$src; else hsrc=${stage_roots[$from]}$src; fi
        else
          hsrc=$repo/$src
        fi
        hdest=$(host_path "$dest")
        if [ -z "$from" ] && [ "$maps_context" = 1 ] && [[ $hdest == "$repo"* ]]; then
          continue # the work folder is the repository: the context is there already
        fi
        mkdir -p "$hdest"
        if [[ $src == */ ]]; then cp -a "$hsrc/." "$hdest/"; else cp -a "$hsrc" "$hdest/"; fi
      done
      say "  COPY ${from:+--from=$from }-> $dest"
      ;;
    RUN)
      cmd=$(expand "$rest")
      if [[ $cmd == *apt-get* ]]; then
        mapfile -t pkgs < <(apt_packages "$cmd")
        say "  RUN (not run: it changes the machine): apt-get install ${pkgs[*]}"
        check_apt_names "${pkgs[@]}"
        runtime_apt=("${pkgs[@]}") # the last stage's list is the runtime's
        continue
      fi
      say "  RUN $cmd"
      dir=$(host_path "$workdir")
      (cd "$dir" && mapfile -d '' -t vars < <(run_env) && env "${vars[@]}" bash -euo pipefail -c "$rest") ||
        die "RUN $cmd failed"
      ;;
    USER) user=$rest ;;
    ENTRYPOINT) entrypoint=$rest ;;
    CMD | VOLUME | EXPOSE | LABEL) ;;
    *) die "instruction $kw is not one this script carries out" ;;
  esac
  i=$((i + 1))
done

# --- the runtime stage's file system
root=$stage_root
say "checking the $stage stage's file system ($root)"
exe=$(sed -n 's/^\[ *"\([^"]*\)".*/\1/p' <<<"$entrypoint")
[ -n "$exe" ] || die "ENTRYPOINT is not an exec-form array: $entrypoint"
[ -x "$root$exe" ] || die "the entrypoint $exe is missing or not executable"
[[ $user =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] || die "USER is $user: want a non-root numeric uid"
agents_dir=${envs[FLEET_WORKER_AGENTS_DIR]:?ENV FLEET_WORKER_AGENTS_DIR is not set}
monty=${envs[FLEET_MONTY_BINARY]:?ENV FLEET_MONTY_BINARY is not set}
[ -x "$root$monty" ] || die "FLEET_MONTY_BINARY $monty is missing from the image"
n=$(find "$root$agents_dir" -name agent.yaml | wc -l)
[ "$n" -ge 1 ] || die "no agent.yaml under FLEET_WORKER_AGENTS_DIR $agents_dir"
say "  entrypoint $exe, monty $monty, $n agents in $agents_dir, USER $user"

# Every shared library comes from the runtime's apt packages or libc6 (in
# every Debian image).
allowed=" libc6 ${runtime_apt[*]} "
for bin in "$root$exe" "$root$monty" "$root/usr/local/bin/enqueue"; do
  if ldd "$bin" | grep -q 'not found'; then
    die "$(basename "$bin") needs a library this machine lacks: $(ldd "$bin" | grep 'not found')"
  fi
  while read -r lib; do
    pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -1 | cut -d: -f1) || true
    [ -n "$pkg" ] || pkg=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1) || true
    [ -n "$pkg" ] || die "$(basename "$bin") loads $lib, which no Debian package owns"
    [[ $allowed == *" $pkg "* ]] || die "$(basename "$bin") loads $lib from package $pkg, which the runtime stage does not install"
  done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
done
say "  shared libraries: all from${allowed% }"

# --- start the staged worker with the image's ENV and run a job
data=$work/data
mkdir -p "$data"
cp -R "$repo/testdata/demo" "$data/demo"
declare -a wenv=()
for k in "${!envs[@]}"; do
  v=${envs[$k]}
  case $k in
    FLEET_WORKER_AGENTS_DIR | FLEET_MONTY_BINARY) v=$root$v ;;
    FLEET_NATS_EMBEDDED_STORE_DIR | FLEET_WORKER_WORKSPACE_DIR) v=$data${v#/var/lib/fleet} ;;
    FLEET_WORKER_METRICS_LISTEN) v=127.0.0.1:0 ;;
  esac
  wenv+=("$k=$v")
done
wenv+=(FLEET_NATS_EMBEDDED_LISTEN=127.0.0.1:0 FLEET_MODEL_BACKEND=scripted
  "FLEET_MODEL_SCRIPTED_SCRIPT=$data/demo/scripts/lint.yaml" FLEET_WORKER_SLOTS=1)
(cd "$data" && exec env "${wenv[@]}" "$root$exe" -log-format json -ready-file "$data/ready" >"$data/worker.log" 2>&1) &
worker_pid=$!
for _ in $(seq 1 600); do
  [ -s "$data/ready" ] && break
  kill -0 "$worker_pid" 2>/dev/null || { cat "$data/worker.log" >&2; die "the staged worker exited during start-up"; }
  sleep 0.1
done
[ -s "$data/ready" ] || { cat "$data/worker.log" >&2; die "the staged worker did not serve within 60s"; }
grep -q '"llama_built_in":true' "$data/worker.log" || die "the staged worker has no llama.cpp backend built in"
url=$(cat "$data/ready")
if ! out=$(cd "$data/demo" && "$root/usr/local/bin/enqueue" --nats-url "$url" run lint src/inventory/stock.py --json --timeout 2m); then
  cat "$data/worker.log" >&2
  die "the staged enqueue's lint job did not succeed: $out"
fi
grep -q '"state":"succeeded"' <<<"$out" || die "no succeeded result: $out"
kill -TERM "$worker_pid"
wait "$worker_pid" || die "the staged worker did not stop cleanly on SIGTERM: $(tail -5 "$data/worker.log")"
worker_pid=
say "  the staged worker (llama.cpp built in) ran a lint job sent by the staged enqueue, then drained"
if [ -n "${DOCKERFILE_RUN_KEEP:-}" ]; then
  rm -rf "$DOCKERFILE_RUN_KEEP"
  mv "$root" "$DOCKERFILE_RUN_KEEP"
  say "  the runtime stage's file system is kept in $DOCKERFILE_RUN_KEEP"
fi
say "ok: the Dockerfile's steps ran and its runtime stage works"
