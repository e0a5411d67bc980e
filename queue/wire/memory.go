package wire

import (
	"fmt"
	"strings"
	"time"
)

// Memory across runs (docs/PROTOCOL.md §15): agents that declare memory:
// keep short observations per agent and project in the fleet_memory
// bucket.
const (
	// BucketMemory is the KV bucket of remembered entries. Its keys are
	// MemoryKey(agent, project, key); entries expire with a per-message TTL
	// (header Nats-TTL), so the bucket allows message TTLs.
	BucketMemory = "fleet_memory"
	// DefaultProject is the project of a request that names none.
	DefaultProject = "default"
	// MaxProjectLength bounds a request's project.
	MaxProjectLength = 64
	// MaxMemoryKeyLength bounds a remembered entry's key.
	MaxMemoryKeyLength = 64
	// MemoryEntryVersion is the entry format's version.
	MemoryEntryVersion = 1
)

// ValidProject reports whether p can be a request's project: 1-64
// characters of [A-Za-z0-9_-] (it becomes a KV key token).
func ValidProject(p string) bool { return validToken(p, MaxProjectLength, true) }

// ValidMemoryKey reports whether k can key a remembered entry: 1-64
// characters of [A-Za-z0-9_-].
func ValidMemoryKey(k string) bool { return validToken(k, MaxMemoryKeyLength, true) }

// ProjectOf is the request's project: its project field, or DefaultProject.
func ProjectOf(r *RunRequest) string {
	if r.Project == "" {
		return DefaultProject
	}
	return r.Project
}

// MemoryKey is the fleet_memory key of agent's entry key in project:
// "<agent>.<project>.<key>". The agent is the operation its definition
// serves; all three must be valid tokens (ValidOperation, ValidProject,
// ValidMemoryKey), which keeps the key a literal KV key without wildcards.
func MemoryKey(agent, project, key string) string {
	return agent + "." + project + "." + key
}

// SplitMemoryKey splits a fleet_memory key into its agent, project and key;
// ok is false for a key that MemoryKey cannot have made.
func SplitMemoryKey(k string) (agent, project, key string, ok bool) {
	parts := strings.Split(k, ".")
	if len(parts) != 3 || !ValidOperation(parts[0]) || !ValidProject(parts[1]) || !ValidMemoryKey(parts[2]) {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// MemoryEntry is the JSON value of one fleet_memory key.
type MemoryEntry struct {
	// Version is MemoryEntryVersion.
	Version int `json:"version"`
	// Agent is the operation of the agent that remembered it.
	Agent string `json:"agent"`
	// Project is the request's project (ProjectOf).
	Project string `json:"project"`
	// Key is the key the tool gave remember().
	Key string `json:"key"`
	// Text is the remembered observation (UTF-8, at most the agent's
	// memory.max_bytes).
	Text string `json:"text"`
	// NodeID and FilePath are the node of the run that remembered it; the
	// recall ranks entries of the same node and file first.
	NodeID   string `json:"node_id,omitempty"`
	FilePath string `json:"file_path,omitempty"`
	// JobID is the job whose run remembered it.
	JobID string `json:"job_id,omitempty"`
	// UpdatedAt is when the entry was written.
	UpdatedAt time.Time `json:"updated_at"`
	// ExpiresAt is when the entry's TTL ends (the server removes it then;
	// readers skip an entry past it).
	ExpiresAt time.Time `json:"expires_at"`
}

// Check reports what makes an entry read from key k unusable, or nil.
func (e *MemoryEntry) Check(k string) error {
	switch {
	case e.Version != MemoryEntryVersion:
		return fmt.Errorf("unsupported entry version %d", e.Version)
	case MemoryKey(e.Agent, e.Project, e.Key) != k:
		return fmt.Errorf("entry names %s.%s.%s, stored under %s", e.Agent, e.Project, e.Key, k)
	case e.Text == "":
		return fmt.Errorf("entry has no text")
	case e.UpdatedAt.IsZero():
		return fmt.Errorf("entry has no updated_at")
	}
	return nil
}
