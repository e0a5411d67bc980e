# Summarises `go test -bench` output repeated with -count: for each
# benchmark (in order of appearance, only those matching ONLY when set) and
# each unit in UNITS (space-separated), the lowest and highest value over
# the runs, "lo–hi" (one value when they are equal).
#   awk -v UNITS="p50-ms jobs/s" [-v ONLY=regexp] -f mk/benchrange.awk bench.txt
/^Benchmark/ {
	name = $1
	sub(/-[0-9]+$/, "", name)
	if (ONLY != "" && name !~ ONLY)
		next
	if (!(name in seen)) {
		order[++n] = name
		seen[name] = 1
	}
	for (i = 3; i + 1 <= NF; i += 2) {
		k = name SUBSEP $(i + 1)
		v = $i + 0
		if (!(k in lo) || v < lo[k])
			lo[k] = v
		if (!(k in hi) || v > hi[k])
			hi[k] = v
	}
}

function num(v) {
	if (v >= 100)
		return sprintf("%.0f", v)
	if (v >= 10)
		return sprintf("%.1f", v)
	return sprintf("%.2f", v)
}

END {
	nu = split(UNITS, us, " ")
	for (j = 1; j <= n; j++) {
		line = sprintf("  %-36s", order[j])
		for (x = 1; x <= nu; x++) {
			k = order[j] SUBSEP us[x]
			if (!(k in lo))
				continue
			r = num(lo[k])
			if (num(hi[k]) != r)
				r = r "–" num(hi[k])
			line = line sprintf("  %s %s", r, us[x])
		}
		print line
	}
}
