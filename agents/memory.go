package agents

import (
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentfleet/fleet/internal/yamlnode"
)

// Defaults and bounds of an agent's memory: settings (agents/README.md,
// "Memory").
const (
	// DefaultMemoryRecall is how many entries are recalled into the first
	// turn when memory.recall is 0.
	DefaultMemoryRecall = 5
	// MaxMemoryRecall bounds memory.recall.
	MaxMemoryRecall = 100
	// DefaultMemoryRecallBytes bounds the recalled entries' text when
	// memory.recall_bytes is 0.
	DefaultMemoryRecallBytes = 2048
	// MaxMemoryRecallBytes bounds memory.recall_bytes.
	MaxMemoryRecallBytes = 64 << 10
	// DefaultMemoryMaxEntries is how many entries one agent keeps per
	// project when memory.max_entries is 0.
	DefaultMemoryMaxEntries = 100
	// MaxMemoryMaxEntries bounds memory.max_entries.
	MaxMemoryMaxEntries = 10000
	// DefaultMemoryMaxBytes caps one entry's text when memory.max_bytes is
	// 0.
	DefaultMemoryMaxBytes = 1024
	// MaxMemoryMaxBytes bounds memory.max_bytes.
	MaxMemoryMaxBytes = 16 << 10
	// DefaultMemoryTTL is how long an entry lives when memory.ttl is unset.
	DefaultMemoryTTL = 720 * time.Hour
	// MinMemoryTTL is the shortest memory.ttl (the server's message TTLs
	// count whole seconds).
	MinMemoryTTL = time.Second
)

// Memory is an agent's memory: settings. The zero value of each field means
// its default; Validate fills them in.
type Memory struct {
	// Recall is how many entries are recalled into the first turn, most
	// relevant first.
	Recall int `yaml:"recall"`
	// RecallBytes caps the recalled entries' text in the first turn.
	RecallBytes int `yaml:"recall_bytes"`
	// MaxEntries is how many entries the agent keeps per project; when a
	// run's entries push the count past it, the oldest are removed.
	MaxEntries int `yaml:"max_entries"`
	// MaxBytes caps one entry's text; remember() refuses longer text.
	MaxBytes int `yaml:"max_bytes"`
	// TTL is how long an entry lives after its last write.
	TTL time.Duration `yaml:"ttl"`
}

// Resolved returns m with every zero field set to its default (what
// Validate fills in), for a Memory built in code.
func (m Memory) Resolved() Memory {
	for _, f := range []struct {
		val *int
		def int
	}{{&m.Recall, DefaultMemoryRecall}, {&m.RecallBytes, DefaultMemoryRecallBytes},
		{&m.MaxEntries, DefaultMemoryMaxEntries}, {&m.MaxBytes, DefaultMemoryMaxBytes}} {
		if *f.val == 0 {
			*f.val = f.def
		}
	}
	if m.TTL == 0 {
		m.TTL = DefaultMemoryTTL
	}
	return m
}

// memory decodes the memory: mapping.
func (v *validator) memory(field string, n *yaml.Node) *Memory {
	m := &Memory{}
	v.mapping(field, n, map[string]func(string, *yaml.Node){
		"recall":       func(f string, n *yaml.Node) { m.Recall = v.int(f, n) },
		"recall_bytes": func(f string, n *yaml.Node) { m.RecallBytes = v.int(f, n) },
		"max_entries":  func(f string, n *yaml.Node) { m.MaxEntries = v.int(f, n) },
		"max_bytes":    func(f string, n *yaml.Node) { m.MaxBytes = v.int(f, n) },
		"ttl":          func(f string, n *yaml.Node) { m.TTL = v.duration(f, n) },
	})
	return m
}

// duration decodes a Go duration string ("720h", "90m").
func (v *validator) duration(field string, n *yaml.Node) time.Duration {
	n = yamlnode.Deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return 0
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		v.problems = append(v.problems, Problem{Field: field, Line: n.Line,
			Message: "must be a duration such as 720h or 90m, got " + yamlnode.Kind(n)})
		return 0
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		v.problems = append(v.problems, Problem{Field: field, Line: n.Line,
			Message: "must be a duration such as 720h or 90m: " + err.Error()})
		return 0
	}
	return d
}

// checkMemory checks the memory: bounds and fills in the defaults.
func (v *validator) checkMemory() {
	m := v.d.Memory
	if m == nil {
		return
	}
	for _, b := range []struct {
		field    string
		val      int
		def, max int
	}{
		{"memory.recall", m.Recall, DefaultMemoryRecall, MaxMemoryRecall},
		{"memory.recall_bytes", m.RecallBytes, DefaultMemoryRecallBytes, MaxMemoryRecallBytes},
		{"memory.max_entries", m.MaxEntries, DefaultMemoryMaxEntries, MaxMemoryMaxEntries},
		{"memory.max_bytes", m.MaxBytes, DefaultMemoryMaxBytes, MaxMemoryMaxBytes},
	} {
		if b.val < 0 || b.val > b.max {
			v.add(b.field, "must be 0..%d (0 = the default, %d), got %d", b.max, b.def, b.val)
		}
	}
	switch {
	case m.TTL == 0:
	case m.TTL < MinMemoryTTL:
		v.add("memory.ttl", "must be at least %s, got %s", MinMemoryTTL, m.TTL)
	case m.TTL%time.Second != 0:
		v.add("memory.ttl", "must be whole seconds, got %s", m.TTL)
	}
	*m = m.Resolved()
}
