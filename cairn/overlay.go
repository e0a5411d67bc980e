package cairn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/fleet/internal/textcut"
)

// MaxContentBytes caps one file read or written by a script (10 MiB).
const MaxContentBytes = 10 << 20

// maxEscapedNodeBytes bounds the escaped node id inside a file name; longer
// ids are cut and suffixed with a hash (see OverlayID).
const maxEscapedNodeBytes = 160

// OverlayID returns the workspace id of the overlay for one run,
// "agent-{operation}-{node}", which is also its file name without ".db".
//
// operation must match [A-Za-z0-9_]{1,64} (it is a NATS subject token in
// fleet), so the first "-" after "agent-" always ends it. nodeID may be any
// non-empty string; it is escaped so the name is a safe, injective file
// name:
//   - bytes in [A-Za-z0-9._-] are kept, except a leading "." (no hidden
//     files, no "." or "..");
//   - every other byte, "~" included, becomes "~XX" (upper-case hex), so
//     "pkg/mod.py::f" → "pkg~2Fmod.py~3A~3Af";
//   - when the escaped id exceeds 160 bytes it is cut at an escape boundary
//     and "~~" plus the first 16 hex digits of sha256(nodeID) is appended
//     ("~~" never occurs otherwise, so cut names cannot collide with uncut
//     ones).
func OverlayID(operation, nodeID string) (string, error) {
	if operation == "" || len(operation) > 64 || strings.IndexFunc(operation, func(r rune) bool {
		return !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) >= 0 {
		return "", fmt.Errorf("cairn: operation %q must match [A-Za-z0-9_]{1,64}", textcut.Clip(operation, 80, "…"))
	}
	if nodeID == "" {
		return "", errors.New("cairn: node id is empty")
	}
	return "agent-" + operation + "-" + escapeNodeID(nodeID), nil
}

func escapeNodeID(id string) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	cut := false
	for i := 0; i < len(id); i++ {
		c := id[i]
		keep := c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (c == '.' && i > 0)
		n := 1
		if !keep {
			n = 3
		}
		if b.Len()+n > maxEscapedNodeBytes {
			cut = true
			break
		}
		if keep {
			b.WriteByte(c)
		} else {
			b.WriteByte('~')
			b.WriteByte(hexd[c>>4])
			b.WriteByte(hexd[c&15])
		}
	}
	if cut {
		sum := sha256.Sum256([]byte(id))
		b.WriteString("~~")
		b.WriteString(hex.EncodeToString(sum[:8]))
	}
	return b.String()
}

// OverlayPath returns dir/OverlayID(operation, nodeID)+".db".
func OverlayPath(dir, operation, nodeID string) (string, error) {
	id, err := OverlayID(operation, nodeID)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, id+".db"), nil
}

// Overlay is the copy-on-write workspace of one run, layered over a Stable.
// It is one SQLite file with tables files, tombstones, kv and base_hashes.
// Reads fall through overlay → stable (honouring tombstones); writes and
// deletes touch only the overlay. base_hashes records, the first time the
// run reads, writes or deletes a path, the sha256 stable had for it then
// ("absent" when stable had no such file); Accept uses it as the stale-base
// guard.
//
// An Overlay is safe for concurrent use. Writes (write, delete) are
// serialised in call order; reads run concurrently with them.
type Overlay struct {
	stable    *Stable
	db        *stmtDB
	path      string
	id        string
	operation string
	nodeID    string

	writeMu sync.Mutex // orders writes, deletes, Accept and Image
	based   sync.Map   // paths whose base hash is recorded
	closed  atomic.Bool
	mem     *memDB // set for InMemory
	wantMem bool   // the InMemory option

	logger   *slog.Logger
	logFunc  func(workspaceID, message string)
	logLines atomic.Int64
}

// OverlayOption configures an Overlay. Options are sealed; use the With...
// constructors.
type OverlayOption interface{ applyOverlay(*Overlay) }

type overlayOptionFunc func(*Overlay)

func (f overlayOptionFunc) applyOverlay(o *Overlay) { f(o) }

// WithLogger sends the script's log() lines to l at Info level, as
// "[workspace id] message" with a "workspace" attribute. The default
// discards them (unless WithLogFunc is set).
func WithLogger(l *slog.Logger) OverlayOption {
	return overlayOptionFunc(func(o *Overlay) { o.logger = l })
}

// WithLogFunc calls f for each script log() line (after capping), for
// example to forward it to the run's event stream. f must be safe for
// concurrent use.
func WithLogFunc(f func(workspaceID, message string)) OverlayOption {
	return overlayOptionFunc(func(o *Overlay) { o.logFunc = f })
}

type overlayMeta struct {
	ID        string    `json:"id"`
	Operation string    `json:"operation"`
	NodeID    string    `json:"node_id"`
	CreatedAt time.Time `json:"created_at"`
	Format    int       `json:"format"`
}

const metaKey = "cairn:meta"

// NewOverlay creates the overlay file dir/agent-{operation}-{node}.db (see
// OverlayID for the name) for a new run over s. dir is created if missing.
// An existing file for the same operation and node is never reused or
// overwritten: NewOverlay fails with ErrExists (Reject it, or open it with
// OpenOverlay, first). With the InMemory option the disk is not touched
// (neither created nor checked): the overlay lives in memory (Image hands
// it over).
func (s *Stable) NewOverlay(ctx context.Context, dir, operation, nodeID string, opts ...OverlayOption) (*Overlay, error) {
	id, err := OverlayID(operation, nodeID)
	if err != nil {
		return nil, err
	}
	probe := &Overlay{}
	for _, opt := range opts {
		opt.applyOverlay(probe)
	}
	if probe.wantMem {
		return s.newMemOverlay(ctx, filepath.Join(dir, id+".db"), id, operation, nodeID, opts)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cairn: overlay dir: %w", err)
	}
	p := filepath.Join(dir, id+".db")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil, newErr("new_overlay", p, ErrExists, "an overlay for this operation and node already exists")
	}
	if err != nil {
		return nil, fmt.Errorf("cairn: create overlay: %w", err)
	}
	f.Close()
	db, err := openDB(ctx, p, false, overlaySchema)
	if err != nil {
		os.Remove(p)
		return nil, fmt.Errorf("cairn: create overlay: %w", err)
	}
	meta, _ := json.Marshal(overlayMeta{ID: id, Operation: operation, NodeID: nodeID, CreatedAt: time.Now().UTC(), Format: 1})
	if err := putKV(ctx, db, metaKey, string(meta)); err != nil {
		db.Close()
		removeDBFiles(p)
		return nil, fmt.Errorf("cairn: create overlay: %w", err)
	}
	return newOverlay(s, db, p, id, operation, nodeID, opts), nil
}

// OpenOverlay opens an existing overlay file (written by NewOverlay) over
// s, for example to diff, accept or reject a finished run.
func (s *Stable) OpenOverlay(ctx context.Context, path string, opts ...OverlayOption) (*Overlay, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, newErr("open_overlay", path, ErrNotFound, "")
		}
		return nil, err
	}
	db, err := openDB(ctx, path, false, overlaySchema)
	if err != nil {
		return nil, fmt.Errorf("cairn: open overlay: %w", err)
	}
	v, ok, err := getKV(ctx, db, metaKey)
	if err == nil && !ok {
		err = errors.New("no metadata record; not a cairn overlay")
	}
	var meta overlayMeta
	if err == nil {
		err = json.Unmarshal([]byte(v), &meta)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("cairn: open overlay %s: %w", path, err)
	}
	return newOverlay(s, db, path, meta.ID, meta.Operation, meta.NodeID, opts), nil
}

func newOverlay(s *Stable, db *stmtDB, p, id, op, node string, opts []OverlayOption) *Overlay {
	o := &Overlay{stable: s, db: db, path: p, id: id, operation: op, nodeID: node}
	for _, opt := range opts {
		opt.applyOverlay(o)
	}
	return o
}

// ID returns the workspace id ("agent-{operation}-{node}"), the value of
// AgentResult.workspace_id.
func (o *Overlay) ID() string { return o.id }

// Path returns the overlay's SQLite file path.
func (o *Overlay) Path() string { return o.path }

// Operation returns the run's operation.
func (o *Overlay) Operation() string { return o.operation }

// NodeID returns the run's node id (unescaped).
func (o *Overlay) NodeID() string { return o.nodeID }

// Close closes the overlay's database, keeping the file (an in-memory
// overlay is discarded).
func (o *Overlay) Close() error {
	if o.closed.Swap(true) {
		return nil
	}
	return o.db.Close()
}

// Reject discards the run: it closes the overlay and deletes its file
// (with any -wal/-shm companions). Stable is not touched.
func (o *Overlay) Reject(ctx context.Context) error {
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	if err := o.Close(); err != nil {
		return err
	}
	return removeDBFiles(o.path)
}

func removeDBFiles(p string) error {
	var errs []error
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if err := os.Remove(p + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Cleanup removes overlay files (agent-*.db and their -wal/-shm) in dir
// whose last modification is older than olderThan, and returns how many
// overlays it removed. Other files (stable.db included) are never touched.
// A missing dir removes nothing.
func Cleanup(dir string, olderThan time.Duration) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cutoff := time.Now().Add(-olderThan)
	removed := 0
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, "agent-") || !strings.HasSuffix(name, ".db") {
			continue
		}
		p := filepath.Join(dir, name)
		newest := time.Time{}
		for _, suffix := range []string{"", "-wal"} {
			if fi, err := os.Stat(p + suffix); err == nil && fi.ModTime().After(newest) {
				newest = fi.ModTime()
			}
		}
		if newest.IsZero() || newest.After(cutoff) {
			continue
		}
		if err := removeDBFiles(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// ---- reads ----

// recordBase stores stable's current sha256 of cp in base_hashes the first
// time the run touches cp.
func (o *Overlay) recordBase(ctx context.Context, cp string) error {
	if _, ok := o.based.Load(cp); ok {
		return nil
	}
	h, err := hashOf(ctx, o.stable.db, cp)
	if err != nil {
		return err
	}
	if _, err := o.db.ExecContext(ctx, "INSERT OR IGNORE INTO base_hashes(path, sha256) VALUES(?, ?)", cp, h); err != nil {
		return err
	}
	o.based.Store(cp, true)
	return nil
}

// WriteFile writes content to p in the overlay only, creating parent
// directories implicitly and cancelling any tombstone on p. The mode is
// kept from the file it replaces (0644 for a new file). Errors: ErrPath*,
// ErrTooLarge over MaxContentBytes, ErrIsDir when p is a directory,
// ErrNotDir when an ancestor of p is a file.
func (o *Overlay) WriteFile(ctx context.Context, p string, content []byte) error {
	const op = "write_file"
	cp, err := cleanFilePath(op, p)
	if err != nil {
		return err
	}
	if len(content) > MaxContentBytes {
		return newErr(op, p, ErrTooLarge, fmt.Sprintf("content is %d bytes; the limit is %d", len(content), MaxContentBytes))
	}
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	if err := o.checkWritable(ctx, op, p, cp); err != nil {
		return err
	}
	if err := o.recordBase(ctx, cp); err != nil {
		return err
	}
	mode := int64(0o644)
	var m int64
	if err := o.db.QueryRowContext(ctx, "SELECT mode FROM files WHERE path = ?", cp).Scan(&m); err == nil {
		mode = m
	} else if err := o.stable.db.QueryRowContext(ctx, "SELECT mode FROM files WHERE path = ?", cp).Scan(&m); err == nil {
		mode = m
	}
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := upsertFile(ctx, tx, cp, content, sha256Hex(content), mode, time.Now().UnixNano()); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM tombstones WHERE path = ?", cp); err != nil {
		return err
	}
	return tx.Commit()
}

// checkWritable rejects writing a file at cp when cp is a visible directory
// or an ancestor is a visible file.
func (o *Overlay) checkWritable(ctx context.Context, op, p, cp string) error {
	if isDir, err := o.dirVisible(ctx, cp); err != nil {
		return err
	} else if isDir {
		return newErr(op, p, ErrIsDir, "")
	}
	for _, d := range parentDirs(cp) {
		ok, err := o.fileVisible(ctx, d)
		if err != nil {
			return err
		}
		if ok {
			return newErr(op, p, ErrNotDir, fmt.Sprintf("%q is a file, not a directory", d))
		}
	}
	return nil
}

// DeleteFile deletes the file p from the merged view: it drops any overlay
// copy and, when stable has the file, records a tombstone. Errors: ErrPath*,
// ErrIsDir for a directory, ErrNotFound when no file is visible at p.
func (o *Overlay) DeleteFile(ctx context.Context, p string) error {
	const op = "delete_file"
	cp, err := cleanFilePath(op, p)
	if err != nil {
		return err
	}
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	ok, err := o.fileVisible(ctx, cp)
	if err != nil {
		return err
	}
	if !ok {
		if isDir, err := o.dirVisible(ctx, cp); err != nil {
			return err
		} else if isDir {
			return newErr(op, p, ErrIsDir, "delete_file removes files only")
		}
		return newErr(op, p, ErrNotFound, "")
	}
	if err := o.recordBase(ctx, cp); err != nil {
		return err
	}
	inStable, err := hashOf(ctx, o.stable.db, cp)
	if err != nil {
		return err
	}
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "DELETE FROM files WHERE path = ?", cp); err != nil {
		return err
	}
	if inStable != absentHash {
		if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO tombstones(path) VALUES(?)", cp); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// SetKV stores value (JSON-encoded) under key in the overlay's kv table,
// for example the "submission" record. Keys starting with "cairn:" are
// reserved.
func (o *Overlay) SetKV(ctx context.Context, key string, value any) error {
	if strings.HasPrefix(key, "cairn:") {
		return fmt.Errorf("cairn: kv key %q is reserved", key)
	}
	b, err := json.Marshal(value)
	if err != nil {
		return err
	}
	return putKV(ctx, o.db, key, string(b))
}
