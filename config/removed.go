package config

import (
	"maps"
	"slices"
	"strings"
)

// removedKeys are keys that earlier versions accepted, each with the end of
// the sentence Load reports when one is still set (in the file or as its
// FLEET_* variable), so that an old file fails with a reason instead of as
// an unknown key. docs/CONFIG.md lists them under "Removed keys".
var removedKeys = map[string]string{
	"queue.stream_prefix": "was removed: the stream and bucket names are fixed by the protocol " +
		"(FLEET_RUNS, FLEET_RESULTS, FLEET_DLQ, FLEET_ADVISORIES and fleet_jobs, docs/PROTOCOL.md §3), " +
		"and only the default FLEET was ever accepted; delete the key",
	"model.threads": "was removed: llama.cpp computes each slot on one thread, and a worker runs " +
		"one slot per core (worker.slots); delete the key",
}

// RemovedKeys lists, sorted, the keys earlier versions accepted that Load
// now refuses with the reason.
func RemovedKeys() []string {
	return slices.Sorted(maps.Keys(removedKeys))
}

// checkRemovedEnv reports the removed keys set in the environment.
func (l *loader) checkRemovedEnv(lookup func(string) (string, bool)) {
	for _, k := range RemovedKeys() {
		name := EnvVar(k)
		if s, ok := lookup(name); ok && strings.TrimSpace(s) != "" {
			l.add(k, "set by "+name, "%s", removedKeys[k])
		}
	}
}
