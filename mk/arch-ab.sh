#!/usr/bin/env bash
# Interleaved A/B of two builds of inference/llama's test binary (the
# portable default and -march=native): runs BenchmarkDecode on each in
# turn, ROUNDS times, and prints the medians and their ratio. Used by
# `make bench-inference` (mk/inference.mk).
set -euo pipefail
portable=$1 native=$2 rounds=${3:-3}
cd inference/llama
run() { "$1" -test.run '^$' -test.bench '^BenchmarkDecode$' -test.benchtime 1x 2>/dev/null | awk '/^BenchmarkDecode/ {for (i=1;i<=NF;i++) {if ($i=="decode-tok/s") d=$(i-1); if ($i=="prefill-tok/s") p=$(i-1)}} END {print d, p}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
pd=() pp=() nd=() np=()
for i in $(seq "$rounds"); do
	read -r d p < <(run "$portable"); pd+=("$d"); pp+=("$p")
	read -r d p < <(run "$native"); nd+=("$d"); np+=("$p")
	echo "  round $i: portable decode ${pd[-1]} prefill ${pp[-1]} tok/s; native decode ${nd[-1]} prefill ${np[-1]} tok/s (load $(cut -d' ' -f1-3 /proc/loadavg))"
done
PD=$(printf '%s\n' "${pd[@]}" | median) PP=$(printf '%s\n' "${pp[@]}" | median)
ND=$(printf '%s\n' "${nd[@]}" | median) NP=$(printf '%s\n' "${np[@]}" | median)
awk -v pd="$PD" -v pp="$PP" -v nd="$ND" -v np="$NP" -v r="$rounds" 'BEGIN {
	printf "build A/B, median of %d interleaved rounds: decode portable %.1f, native %.1f tok/s = %.2fx; prefill portable %.1f, native %.1f tok/s = %.2fx\n", r, pd, nd, nd/pd, pp, np, np/pp
	if (nd/pd >= 1.10) print "  -march=native pays on this host (>= 1.10x decode): build for the host with make ARCHFLAGS=\"-O3 -march=native\" (see docs/PERFORMANCE.md)"
	else print "  -march=native does not pay on this host (< 1.10x decode): keep the portable default"
}'
