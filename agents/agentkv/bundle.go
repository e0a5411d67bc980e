// Package agentkv stores agent definitions and their .pym files in the
// fleet_agents JetStream KV bucket (docs/PROTOCOL.md, "Agents bucket"), so
// that workers on many machines get an agent change without a copy by hand
// or a restart.
//
// One key per operation holds a Bundle: the agent's folder (its YAML and
// every file under it) plus the .pym files it references elsewhere under
// the pushed root, a version counter and a sha256 digest of the files.
// Nothing is validated twice: a push loads the folder with
// agents.LoadDirWith (the loader's own errors, with file and line), and a
// worker writes a bundle to a folder of its own and loads it with the same
// function.
package agentkv

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/fleet/agents"
)

// ErrInvalidBundle is matched by every error about a bundle's content (a
// corrupt or hostile bucket entry).
var ErrInvalidBundle = errors.New("agentkv: invalid agent bundle")

// MaxBundleBytes bounds the files of one bundle (the KV value must also fit
// the server's max_payload, 1 MiB by default).
const MaxBundleBytes = 768 << 10

// BundleVersion is the format version of a stored Bundle.
const BundleVersion = 1

// Bundle is one agent as stored under its operation's key.
type Bundle struct {
	// Format is BundleVersion.
	Format int `json:"format"`
	// Operation is the operation the agent serves (the key).
	Operation string `json:"operation"`
	// Name is the agent's name.
	Name string `json:"name"`
	// Version counts the pushes of this operation that changed its files,
	// from 1.
	Version uint64 `json:"version"`
	// Digest is "sha256:<hex>" over the files (Digest documents the form).
	Digest string `json:"digest"`
	// Root is the base name of the pushed folder: the files are laid out
	// under it, so repository-relative .pym paths ("agents/x/t.pym")
	// resolve as they did on the pusher's machine.
	Root string `json:"root"`
	// Definition is the YAML file's path under Root.
	Definition string `json:"definition"`
	// Files maps slash-separated paths under Root to their content.
	Files map[string][]byte `json:"files"`
	// PushedAt and PushedBy say when and by whom it was pushed.
	PushedAt time.Time `json:"pushed_at"`
	PushedBy string    `json:"pushed_by,omitempty"`
}

// Digest is "sha256:<hex>" of the files: for each path in byte order, the
// path, a NUL, the content's length in decimal, a NUL and the content.
func Digest(files map[string][]byte) string {
	h := sha256.New()
	for _, p := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(files[p]))
		h.Write(files[p])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Collect loads every agent under root with agents.LoadDirWith (so a
// broken agent fails with the loader's errors, file and line, and nothing
// is collected) and returns one bundle per operation, Version 0, in
// operation order. Each bundle holds the agent's folder and every .pym its
// tools and context providers reference; a reference outside root is an
// error. Every bundle is then written to a temporary folder and loaded
// again, so what is stored is known to load on a worker.
func Collect(root string, opts agents.LoadOptions) ([]*Bundle, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("agentkv: %w", err)
	}
	defs, err := agents.LoadDirWith(absRoot, opts)
	if err != nil {
		return nil, err
	}
	if len(defs) == 0 {
		return nil, fmt.Errorf("agentkv: no agent found in %s (one folder per operation with an agent.yaml)", root)
	}
	var out []*Bundle
	for _, op := range slices.Sorted(maps.Keys(defs)) {
		b, err := bundleOf(absRoot, defs[op])
		if err != nil {
			return nil, err
		}
		if err := checkLoads(b, opts); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// bundleOf reads one loaded agent's files.
func bundleOf(root string, d *agents.Definition) (*Bundle, error) {
	b := &Bundle{Format: BundleVersion, Operation: d.Operation, Name: d.Name, Root: filepath.Base(root),
		Files: map[string][]byte{}}
	size := 0
	add := func(abs string) error {
		rel, err := filepath.Rel(root, abs)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("agentkv: %s: %s is outside the pushed folder %s; keep the agent's files under it", d.Path, abs, root)
		}
		rel = filepath.ToSlash(rel)
		if _, dup := b.Files[rel]; dup {
			return nil
		}
		data, err := os.ReadFile(abs)
		if err != nil {
			return fmt.Errorf("agentkv: %w", err)
		}
		if size += len(data); size > MaxBundleBytes {
			return fmt.Errorf("agentkv: agent %s: files larger than %d bytes", d.Operation, MaxBundleBytes)
		}
		b.Files[rel] = data
		return nil
	}
	dir := filepath.Dir(d.Path)
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		return add(p)
	})
	if err != nil {
		return nil, err
	}
	for _, t := range d.Tools {
		refs := append([]string{t.Pym}, t.ContextProviders...)
		for _, r := range refs {
			if r == "" {
				continue
			}
			if err := add(d.ResolvePath(r)); err != nil {
				return nil, err
			}
		}
	}
	rel, _ := filepath.Rel(root, d.Path)
	b.Definition = filepath.ToSlash(rel)
	b.Digest = Digest(b.Files)
	return b, nil
}

// checkLoads writes b to a temporary folder and loads it.
func checkLoads(b *Bundle, opts agents.LoadOptions) error {
	tmp, err := os.MkdirTemp("", "fleet-agent-*")
	if err != nil {
		return fmt.Errorf("agentkv: %w", err)
	}
	defer os.RemoveAll(tmp)
	cp := *b
	cp.Version = 1 // Push numbers it
	if _, err := Materialize(tmp, &cp, opts); err != nil {
		return fmt.Errorf("agentkv: agent %s does not load from its bundle: %w", b.Operation, err)
	}
	return nil
}

// Validate checks a decoded bundle's shape: format, operation, version,
// safe relative paths, the definition among the files, the size bound and
// the digest.
func (b *Bundle) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidBundle, fmt.Sprintf(format, args...))
	}
	switch {
	case b.Format != BundleVersion:
		return bad("format %d, want %d", b.Format, BundleVersion)
	case !ValidKey(b.Operation):
		return bad("operation %q", b.Operation)
	case b.Version == 0:
		return bad("version 0")
	case b.Root == "" || b.Root == "." || b.Root == ".." || strings.ContainsAny(b.Root, `/\`):
		return bad("root %q", b.Root)
	}
	size := 0
	for p, data := range b.Files {
		if !safePath(p) {
			return bad("file path %q", p)
		}
		size += len(data)
	}
	if size > MaxBundleBytes {
		return bad("files larger than %d bytes", MaxBundleBytes)
	}
	if _, ok := b.Files[b.Definition]; !ok {
		return bad("definition %q is not among the files", b.Definition)
	}
	if d := Digest(b.Files); d != b.Digest {
		return bad("digest %s does not match the files (%s)", b.Digest, d)
	}
	return nil
}

// safePath accepts a clean, relative, slash-separated path.
func safePath(p string) bool {
	return p != "" && !strings.HasPrefix(p, "/") && !strings.Contains(p, `\`) && path.Clean(p) == p &&
		p != ".." && !strings.HasPrefix(p, "../")
}

// Materialize validates b, writes its files under dir/<Root>/ and loads the
// agent from there with agents.LoadDirWith. The definition's Dir points into
// dir, so its .pym files are read from there for as long as dir is kept.
func Materialize(dir string, b *Bundle, opts agents.LoadOptions) (*agents.Definition, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	root := filepath.Join(dir, b.Root)
	for p, data := range b.Files {
		f := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o750); err != nil {
			return nil, fmt.Errorf("agentkv: %w", err)
		}
		if err := os.WriteFile(f, data, 0o640); err != nil {
			return nil, fmt.Errorf("agentkv: %w", err)
		}
	}
	defs, err := agents.LoadDirWith(root, opts)
	if err != nil {
		return nil, err
	}
	d, ok := defs[b.Operation]
	if !ok || len(defs) != 1 {
		return nil, fmt.Errorf("%w: bundle of %s loads %d agents and not exactly that operation", ErrInvalidBundle, b.Operation, len(defs))
	}
	return d, nil
}
