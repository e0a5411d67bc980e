package wire

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentfleet/fleet/internal/textcut"
)

// ValidJobID reports whether id is a valid job id: 1-128 characters of
// [A-Za-z0-9_-]. Such an id is a single subject token and a valid KV key.
func ValidJobID(id string) bool { return validToken(id, MaxIDLength, true) }

// ValidOperation reports whether op is a valid operation name: 1-64
// characters of [a-z0-9_-], starting with a letter or digit.
func ValidOperation(op string) bool {
	return validToken(op, MaxOperationLength, false) && op[0] != '-' && op[0] != '_'
}

func validToken(s string, maxLen int, upper bool) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case upper && c >= 'A' && c <= 'Z':
		default:
			return false
		}
	}
	return true
}

// ValidateReplyTo checks a Reply-To prefix: a literal subject (no wildcards,
// no empty tokens, printable ASCII), at most 256 bytes, and outside agents.>
// (the worker's own subjects; the canonical result and events are stored
// there already).
func ValidateReplyTo(r string) error {
	if r == "" || len(r) > MaxReplyToLength {
		return Invalid(HeaderReplyTo, "must be 1-%d bytes, got %d", MaxReplyToLength, len(r))
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if c <= ' ' || c >= 0x7f || c == '*' || c == '>' {
			return Invalid(HeaderReplyTo, "%q is not a literal subject (no spaces, control bytes or wildcards)", r)
		}
	}
	for _, tok := range strings.Split(r, ".") {
		if tok == "" {
			return Invalid(HeaderReplyTo, "%q has an empty subject token", r)
		}
	}
	if r == "agents" || strings.HasPrefix(r, "agents.") {
		return Invalid(HeaderReplyTo, "%q is inside agents.>, which fleet reserves", r)
	}
	return nil
}

// ValidatePath checks a workspace path: relative, slash-separated, clean (no
// "." or ".." elements, no empty elements), no backslashes or NUL, valid
// UTF-8, at most MaxPathLength bytes.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case len(p) > MaxPathLength:
		return fmt.Errorf("path is %d bytes, more than %d", len(p), MaxPathLength)
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q is not valid UTF-8", p)
	case strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("path %q contains a backslash or NUL", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute; workspace paths are relative", p)
	}
	for _, el := range strings.Split(p, "/") {
		switch el {
		case "..":
			return fmt.Errorf("path %q escapes the workspace (..)", p)
		case "", ".":
			return fmt.Errorf("path %q is not clean (want %q)", p, path.Clean(p))
		}
	}
	for _, r := range p {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("path %q contains a control character", p)
		}
	}
	return nil
}

var nodeTypes = map[string]bool{"function": true, "class": true, "method": true, "file": true}

// Validate checks a decoded request against the protocol's rules and returns
// a *RequestError (CodeInvalidRequest) naming the first bad field. Files are
// checked in sorted path order, so the error is deterministic.
func (r *RunRequest) Validate() error {
	if r.Version != 0 && r.Version != ProtocolVersion {
		return Invalid("version", "unsupported protocol version %d (this worker speaks %d)", r.Version, ProtocolVersion)
	}
	if !ValidJobID(r.JobID) {
		return Invalid("job_id", "%q must be 1-%d characters of [A-Za-z0-9_-]", Clip(r.JobID), MaxIDLength)
	}
	if !ValidOperation(r.Operation) {
		return Invalid("operation", "%q must be 1-%d characters of [a-z0-9_-]", Clip(r.Operation), MaxOperationLength)
	}
	if r.Project != "" && !ValidProject(r.Project) {
		return Invalid("project", "%q must be 1-%d characters of [A-Za-z0-9_-]", Clip(r.Project), MaxProjectLength)
	}
	if r.Batch != "" && !ValidBatchID(r.Batch) {
		return Invalid("batch", "%q must be 1-%d characters of [A-Za-z0-9_-]", Clip(r.Batch), MaxBatchIDLength)
	}
	if err := ValidateLabels(r.Labels); err != nil {
		return err
	}
	n := &r.Node
	for _, f := range []struct{ name, v string }{
		{"node.id", n.ID}, {"node.name", n.Name}, {"node.type", n.Type}, {"node.file_path", n.FilePath}, {"node.text", n.Text},
	} {
		if !utf8.ValidString(f.v) {
			return Invalid(f.name, "not valid UTF-8")
		}
	}
	if len(n.ID) > MaxIDLength*8 {
		return Invalid("node.id", "is %d bytes, more than %d", len(n.ID), MaxIDLength*8)
	}
	if len(n.Name) > MaxPathLength {
		return Invalid("node.name", "is %d bytes, more than %d", len(n.Name), MaxPathLength)
	}
	if n.Type != "" && !nodeTypes[n.Type] {
		return Invalid("node.type", "%q is not one of function, class, method, file", Clip(n.Type))
	}
	if n.FilePath != "" {
		if err := ValidatePath(n.FilePath); err != nil {
			return Invalid("node.file_path", "%v", err)
		}
	}
	if len(r.Files) > MaxFiles {
		return Invalid("files", "%d files, more than %d", len(r.Files), MaxFiles)
	}
	if len(r.Files) > 0 {
		paths := make([]string, 0, len(r.Files))
		for p := range r.Files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			if err := ValidatePath(p); err != nil {
				return Invalid("files", "%v", err)
			}
			if !utf8.ValidString(r.Files[p]) {
				return Invalid(fmt.Sprintf("files[%q]", p), "content is not valid UTF-8 text")
			}
		}
	}
	o := r.Options
	if o.MaxTurns < 0 || o.MaxTurns > MaxTurnsLimit {
		return Invalid("options.max_turns", "%d is outside 0..%d", o.MaxTurns, MaxTurnsLimit)
	}
	for _, t := range []struct {
		name string
		v    int64
	}{{"options.step_timeout_ms", o.StepTimeoutMS}, {"options.total_timeout_ms", o.TotalTimeoutMS}, {"options.tool_timeout_ms", o.ToolTimeoutMS}, {"options.park_timeout_ms", o.ParkTimeoutMS}} {
		if t.v < 0 || t.v > MaxTimeoutMS {
			return Invalid(t.name, "%d is outside 0..%d", t.v, MaxTimeoutMS)
		}
	}
	if o.StepTimeoutMS > 0 && o.TotalTimeoutMS > 0 && o.TotalTimeoutMS < o.StepTimeoutMS {
		return Invalid("options.total_timeout_ms", "%d is less than step_timeout_ms %d", o.TotalTimeoutMS, o.StepTimeoutMS)
	}
	return nil
}

// clip shortens s for an error message and makes it printable.
// Clip shortens s for an error message: at most 64 bytes, cut on a
// character boundary, invalid UTF-8 replaced.
func Clip(s string) string {
	const max = 64
	return textcut.Clip(strings.ToValidUTF8(s, "\uFFFD"), max, "...")
}
