package agents

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentfleet/fleet/internal/yamlnode"
)

// Canary routes a share of an agent's jobs to a second model version:
//
//	canary:
//	  model: functiongemma@2   # required
//	  adapter: lint-lora@3     # optional; empty keeps the agent's adapter
//	  share: 0.1               # 0..1, the fraction of jobs that take it
//
// Which jobs take it is decided by a hash of the job id (CanaryPick), so a
// retried job runs on the same version as its first attempt.
type Canary struct {
	// Model is the canary's model reference, in any form the agent's
	// model: takes (a path, name@version or sha256:<hex>).
	Model string `yaml:"model"`
	// Adapter, when set, replaces the agent's adapter for canary jobs.
	Adapter string `yaml:"adapter"`
	// Share is the fraction of jobs routed to the canary, in [0, 1].
	Share float64 `yaml:"share"`
}

// CanaryPick reports whether the job with this id falls in a canary of the
// given share: the first 8 bytes of sha256(jobID), read as a fraction of
// 2^64, are below share. The choice depends only on the id, so every
// attempt of a job makes the same one.
func CanaryPick(jobID string, share float64) bool {
	if share <= 0 {
		return false
	}
	if share >= 1 {
		return true
	}
	sum := sha256.Sum256([]byte(jobID))
	u := binary.BigEndian.Uint64(sum[:8])
	return float64(u)/math.Exp2(64) < share
}

// ForJob returns the definition a job with this id runs: d itself, or, when
// the agent has a canary and the job falls in its share, a copy of d whose
// Model (and Adapter, when the canary names one) are the canary's, with
// Canary cleared. The model picker then sees an ordinary definition. The
// second result reports whether the canary was chosen.
func (d *Definition) ForJob(jobID string) (*Definition, bool) {
	c := d.Canary
	if c == nil || !CanaryPick(jobID, c.Share) {
		return d, false
	}
	cp := *d
	cp.Model = c.Model
	if c.Adapter != "" {
		cp.Adapter = c.Adapter
	}
	cp.Canary = nil
	return &cp, true
}

// canary decodes the canary: mapping.
func (v *validator) canary(field string, n *yaml.Node) {
	if yamlnode.Deref(n).Tag == "!!null" {
		return
	}
	c := &Canary{Share: math.NaN()}
	v.d.Canary = c
	v.mapping(field, n, map[string]func(string, *yaml.Node){
		"model":   func(f string, n *yaml.Node) { c.Model = v.str(f, n) },
		"adapter": func(f string, n *yaml.Node) { c.Adapter = v.str(f, n) },
		"share":   func(f string, n *yaml.Node) { c.Share = v.share(f, n) },
	})
}

// share decodes a number (an integer or a float).
func (v *validator) share(field string, n *yaml.Node) float64 {
	n = yamlnode.Deref(n)
	var f float64
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") || n.Decode(&f) != nil {
		v.problems = append(v.problems, Problem{Field: field, Line: n.Line, Message: "must be a number between 0 and 1, got " + yamlnode.Kind(n)})
		return 0
	}
	return f
}

// checkCanary requires a canary model and a share in [0, 1].
func (v *validator) checkCanary() {
	c := v.d.Canary
	if c == nil {
		return
	}
	if strings.TrimSpace(c.Model) == "" {
		v.add("canary.model", "required (the model version the canary share runs on)")
	}
	switch {
	case math.IsNaN(c.Share) && v.lines["canary.share"] == 0:
		v.add("canary.share", "required (a number between 0 and 1)")
	case math.IsNaN(c.Share) || c.Share < 0 || c.Share > 1:
		v.add("canary.share", "must be between 0 and 1, got %v", c.Share)
	}
}
