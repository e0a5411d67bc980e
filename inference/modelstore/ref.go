// Package modelstore keeps GGUF models and LoRA adapters in a NATS Object
// Store bucket (fleet_models, docs/PROTOCOL.md "Models") and brings them to
// workers: Store pushes, lists, resolves and removes them; Cache fetches a
// model into a local folder once, checks its sha256 and hands out the path
// of the verified file, which llama.cpp then memory-maps.
//
// A model is named by a reference (ParseRef): "name@version" or
// "sha256:<hex>". Versions are whole numbers from 1, given by the pusher or
// the next free one; a stored version never changes content. A bare name is
// not a reference (it stays a local file path, as agent YAML model: always
// was): a job names the exact model it runs on.
package modelstore

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrBadRef is wrapped by ParseRef's errors.
var ErrBadRef = errors.New("modelstore: bad model reference")

// MaxNameLen bounds a model name.
const MaxNameLen = 64

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
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

// String formats r as ParseRef reads it.
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

// ParseRef parses "name@version" (version a whole number >= 1) or
// "sha256:<64 lowercase hex digits>".
func ParseRef(s string) (Ref, error) {
	if hex, ok := strings.CutPrefix(s, DigestPrefix); ok {
		if !digestRE.MatchString(hex) {
			return Ref{}, fmt.Errorf("%w %q: want sha256: and 64 lowercase hex digits", ErrBadRef, clip(s))
		}
		return Ref{Digest: hex}, nil
	}
	name, ver, ok := strings.Cut(s, "@")
	if !ok {
		return Ref{}, fmt.Errorf("%w %q: want name@version or sha256:<hex> (a bare name is a file path)", ErrBadRef, clip(s))
	}
	if !ValidName(name) {
		return Ref{}, fmt.Errorf("%w %q: the name must be 1-%d of A-Z a-z 0-9 . _ - starting with a letter or digit", ErrBadRef, clip(s), MaxNameLen)
	}
	v, err := strconv.Atoi(ver)
	if err != nil || v < 1 || strconv.Itoa(v) != ver {
		return Ref{}, fmt.Errorf("%w %q: the version must be a whole number from 1 (no sign, no leading zero)", ErrBadRef, clip(s))
	}
	return Ref{Name: name, Version: v}, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
