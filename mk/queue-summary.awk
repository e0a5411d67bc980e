# Summarises one `make bench-queue` run (its tee'd output) into the four
# figures the worker engine is held to (docs/PERFORMANCE.md): fleet's no-op
# jobs/s ÷ asynq + Redis's, fleet ÷ its protocol floor with events, the
# single-job dispatch p99, and what the priority tiers cost the no-op path.
#   awk -v LOAD="0.4 0.5 0.6" -f mk/queue-summary.awk bench-queue.txt
function metric(line, unit,    i, n, f) {
	n = split(line, f, /[ \t]+/)
	for (i = 2; i < n; i++)
		if (f[i + 1] == unit)
			return f[i] + 0
	return ""
}
function verdict(ok) { return ok ? "met" : "NOT met" }
/^BenchmarkNoopJobs/ { jobs = metric($0, "jobs/s"); floor = metric($0, "fleet÷floor+ev") }
/^BenchmarkDispatchLatency/ { p99 = metric($0, "p99-µs") }
/^BenchmarkTierCost/ { tier = metric($0, "tier-cost-%"); tierwall = metric($0, "tier-cost-wall-%") }
/peer asynq \+ Redis: [0-9.]+ jobs\/s/ {
	s = $0
	sub(/.*peer asynq \+ Redis: /, "", s)
	split(s, a, " ")
	asynq = a[1] + 0
}
END {
	printf "\nqueue: the engine's figures in this run (machine load %s; a loaded machine moves every wall-clock figure)\n", LOAD
	printf "  %-44s %-22s %-10s %s\n", "figure", "value", "target", "verdict"
	if (jobs != "" && asynq > 0)
		printf "  %-44s %-22s %-10s %s\n", "fleet no-op jobs/s ÷ asynq + Redis", sprintf("%.0f ÷ %.0f = %.2f", jobs, asynq, jobs / asynq), "≥ 1", verdict(jobs / asynq >= 1)
	else
		printf "  %-44s %-22s %-10s %s\n", "fleet no-op jobs/s ÷ asynq + Redis", (jobs != "" ? sprintf("%.0f ÷ ?", jobs) : "?"), "≥ 1", "no asynq figure (make bench-peers)"
	if (floor != "")
		printf "  %-44s %-22s %-10s %s\n", "fleet ÷ its floor with events", sprintf("%.2f", floor), "≥ 0.9", verdict(floor >= 0.9)
	if (p99 != "")
		printf "  %-44s %-22s %-10s %s\n", "single-job dispatch p99", sprintf("%.0f µs", p99), "≤ 1 ms", verdict(p99 <= 1000)
	if (tier != "")
		printf "  %-44s %-22s %-10s %s\n", "priority tiers' cost (CPU per no-op job)", sprintf("%.1f %% (wall %.1f %%)", tier, tierwall), "≤ 5 %", verdict(tier <= 5)
}
