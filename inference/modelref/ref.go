// Package modelref parses the references that name a stored model or
// LoRA adapter (inference/modelstore): "name@version" or "sha256:<hex>".
// Versions are whole numbers from 1. A bare name is not a reference: it
// stays a local file path, as the agent YAML's model: always was, so that
// a job names the exact model it runs on. The package has no dependencies,
// so agent validation can use it.
package modelref

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentfleet/fleet/internal/textcut"
)

// ErrBadRef is wrapped by Parse's errors.
var ErrBadRef = errors.New("bad model reference")

// MaxNameLen bounds a model name.
const MaxNameLen = 64

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// DigestRE matches a sha256 in lowercase hex.
	DigestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// DigestPrefix starts a digest reference.
const DigestPrefix = "sha256:"

// Ref names one stored model: Name and Version, or Digest.
type Ref struct {
	// Name and Version name a pushed version ("name@3").
	Name    string
	Version int
	// Digest is the lowercase hex sha256 of the file ("sha256:<hex>").
	Digest string
}

// String formats r as Parse reads it.
func (r Ref) String() string {
	if r.Digest != "" {
		return DigestPrefix + r.Digest
	}
	return r.Name + "@" + strconv.Itoa(r.Version)
}

// IsRef reports whether s is written as a model-store reference: it starts
// with "sha256:" or has the form name@version with no '/' in it. Anything
// else is a local file path. A reference can still be invalid (ParseRef
// says why).
func IsRef(s string) bool {
	if strings.HasPrefix(s, DigestPrefix) {
		return true
	}
	i := strings.LastIndexByte(s, '@')
	return i > 0 && !strings.ContainsAny(s, `/\`)
}

// ValidName reports whether name can name a model: 1-64 of A-Z a-z 0-9 . _ -,
// starting with a letter or digit.
func ValidName(name string) bool {
	return len(name) <= MaxNameLen && nameRE.MatchString(name)
}

// Parse parses "name@version" (version a whole number >= 1) or
// "sha256:<64 lowercase hex digits>".
func Parse(s string) (Ref, error) {
	if hex, ok := strings.CutPrefix(s, DigestPrefix); ok {
		if !DigestRE.MatchString(hex) {
			return Ref{}, fmt.Errorf("%w %q: want sha256: and 64 lowercase hex digits", ErrBadRef, Clip(s))
		}
		return Ref{Digest: hex}, nil
	}
	name, ver, ok := strings.Cut(s, "@")
	if !ok {
		return Ref{}, fmt.Errorf("%w %q: want name@version or sha256:<hex> (a bare name is a file path)", ErrBadRef, Clip(s))
	}
	if !ValidName(name) {
		return Ref{}, fmt.Errorf("%w %q: the name must be 1-%d of A-Z a-z 0-9 . _ - starting with a letter or digit", ErrBadRef, Clip(s), MaxNameLen)
	}
	v, err := strconv.Atoi(ver)
	if err != nil || v < 1 || strconv.Itoa(v) != ver {
		return Ref{}, fmt.Errorf("%w %q: the version must be a whole number from 1 (no sign, no leading zero)", ErrBadRef, Clip(s))
	}
	return Ref{Name: name, Version: v}, nil
}

// Clip shortens s for an error message.
func Clip(s string) string { return textcut.Clip(s, 80, "…") }
