package cairn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultMaxSyncFileBytes is the default cap on files mirrored by LoadDir
// (Cairn's max_sync_file_bytes).
const DefaultMaxSyncFileBytes = 5 << 20

// Stable is the stable workspace: the source of truth a human accepts runs
// into. It is one SQLite file with the tables files(path, content, sha256,
// mode, mtime) and kv(key, value). Stable is safe for concurrent use; reads
// run in parallel (WAL mode) and writes are serialised.
type Stable struct {
	db   *stmtDB
	path string
	mem  *memDB     // set for NewMemoryStable
	mu   sync.Mutex // serialises writers in this process
}

// OpenStable opens the stable workspace at path, creating the file and its
// tables when missing.
func OpenStable(ctx context.Context, path string) (*Stable, error) {
	db, err := openDB(ctx, path, true, filesSchema)
	if err != nil {
		return nil, fmt.Errorf("cairn: open stable: %w", err)
	}
	return &Stable{db: db, path: path}, nil
}

// Path returns the SQLite file's path ("" for NewMemoryStable).
func (s *Stable) Path() string { return s.path }

// Close closes the database (and discards an in-memory one).
func (s *Stable) Close() error { return s.db.Close() }

// LoadOptions tunes LoadDir. The zero value is the default behaviour.
type LoadOptions struct {
	// MaxFileBytes skips larger files: 0 means DefaultMaxSyncFileBytes,
	// -1 means no limit (MaxContentBytes still applies to scripts' reads).
	MaxFileBytes int64
	// IgnoreDirs adds directory names to skip (anywhere in the tree).
	IgnoreDirs []string
	// IgnoreFiles adds base-name glob patterns of files to skip ("*.log").
	IgnoreFiles []string
	// KeepMissing keeps stable paths that are not in the directory;
	// by default LoadDir mirrors the tree and removes them.
	KeepMissing bool
}

// LoadStats counts what a load did.
type LoadStats struct {
	Added, Updated, Unchanged, Removed, Skipped int
}

// defaultIgnoredDirs are never mirrored. A directory holding pyvenv.cfg
// (a virtualenv of any name) and any *.egg-info directory are skipped too.
var defaultIgnoredDirs = []string{
	".git", ".agentfs", ".jj", ".hg", ".svn", "__pycache__", ".venv", "venv",
	".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".cache",
	".eggs", "node_modules", "dist", "build", "target",
}

// defaultIgnoredFiles are base-name patterns never mirrored.
var defaultIgnoredFiles = []string{
	"*.db", "*.db-wal", "*.db-shm", "*.db-journal", "*.sqlite", "*.sqlite3",
	"*.so", "*.dylib", "*.pyc", "*.pyo", ".DS_Store",
}

func (o *LoadOptions) validate() error {
	if o.MaxFileBytes < -1 {
		return fmt.Errorf("cairn: LoadOptions.MaxFileBytes must be >= -1, got %d", o.MaxFileBytes)
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = DefaultMaxSyncFileBytes
	}
	for _, p := range o.IgnoreFiles {
		if _, err := path.Match(p, "x"); err != nil {
			return fmt.Errorf("cairn: LoadOptions.IgnoreFiles: bad pattern %q: %w", p, err)
		}
	}
	return nil
}

// LoadDir mirrors the project tree at dir into stable in one transaction:
// new and changed files are written, unchanged ones left alone and, unless
// opts.KeepMissing, stable paths no longer in the tree are removed.
//
// Skipped (and counted in Skipped): the directories in defaultIgnoredDirs
// (.git, .agentfs, .jj, virtualenvs, __pycache__, caches, dist, build,
// target, ...), files matching defaultIgnoredFiles (*.db, *.so, *.pyc, ...),
// files over the size cap, symlinks and other non-regular files (never
// followed), and names CleanPath rejects. Files are read through an
// os.Root, so nothing outside dir is ever read.
func (s *Stable) LoadDir(ctx context.Context, dir string, opts LoadOptions) (LoadStats, error) {
	var st LoadStats
	if err := opts.validate(); err != nil {
		return st, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("cairn: load %s: %w", dir, err)
	}
	defer root.Close()
	ignDirs := append(slices.Clone(defaultIgnoredDirs), opts.IgnoreDirs...)
	ignFiles := append(slices.Clone(defaultIgnoredFiles), opts.IgnoreFiles...)

	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return st, err
	}
	defer tx.Rollback()
	existing, err := hashesByPath(ctx, tx)
	if err != nil {
		return st, err
	}
	seen := make(map[string]bool, len(existing))
	walkErr := fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if slices.Contains(ignDirs, name) || strings.HasSuffix(name, ".egg-info") {
				st.Skipped++
				return fs.SkipDir
			}
			if _, err := root.Lstat(path.Join(rel, "pyvenv.cfg")); err == nil {
				st.Skipped++
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || matchesAny(ignFiles, name) {
			st.Skipped++
			return nil
		}
		clean, err := CleanPath("load", rel)
		if err != nil || clean != rel {
			st.Skipped++
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if opts.MaxFileBytes >= 0 && info.Size() > opts.MaxFileBytes {
			st.Skipped++
			return nil
		}
		content, err := root.ReadFile(rel)
		if err != nil {
			return err
		}
		seen[rel] = true
		h := sha256Hex(content)
		old, ok := existing[rel]
		switch {
		case ok && old == h:
			st.Unchanged++
			return nil
		case ok:
			st.Updated++
		default:
			st.Added++
		}
		return upsertFile(ctx, tx, rel, content, h, int64(info.Mode().Perm()), info.ModTime().UnixNano())
	})
	if walkErr != nil {
		return LoadStats{}, fmt.Errorf("cairn: load %s: %w", dir, walkErr)
	}
	if !opts.KeepMissing {
		for p := range existing {
			if !seen[p] {
				if _, err := tx.ExecContext(ctx, "DELETE FROM files WHERE path = ?", p); err != nil {
					return LoadStats{}, err
				}
				st.Removed++
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return LoadStats{}, err
	}
	return st, nil
}

func matchesAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

func hashesByPath(ctx context.Context, q queryer) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT path, sha256 FROM files")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := make(map[string]string)
	for rows.Next() {
		var p, h string
		if err := rows.Scan(&p, &h); err != nil {
			return nil, err
		}
		m[p] = h
	}
	return m, rows.Err()
}

func upsertFile(ctx context.Context, q queryer, p string, content []byte, h string, mode, mtime int64) error {
	if content == nil {
		content = []byte{}
	}
	_, err := q.ExecContext(ctx, `INSERT INTO files(path, content, sha256, mode, mtime) VALUES(?, ?, ?, ?, ?)
		ON CONFLICT(path) DO UPDATE SET content = excluded.content, sha256 = excluded.sha256, mode = excluded.mode, mtime = excluded.mtime`,
		p, content, h, mode, mtime)
	return err
}

// LoadFiles writes the files carried in a run request into stable (paths
// are workspace paths, checked with CleanPath; contents at most
// MaxContentBytes). Other stable paths are kept. It is all or nothing: any
// bad path, oversized file or file/directory clash (with another entry or
// with stable) fails the whole load, naming every problem, and writes
// nothing.
func (s *Stable) LoadFiles(ctx context.Context, files map[string][]byte) (LoadStats, error) {
	var st LoadStats
	clean := make(map[string][]byte, len(files))
	var problems []error
	for p, c := range files {
		cp, err := cleanFilePath("load_files", p)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if len(c) > MaxContentBytes {
			problems = append(problems, newErr("load_files", p, ErrTooLarge, fmt.Sprintf("file is %d bytes; the limit is %d", len(c), MaxContentBytes)))
			continue
		}
		if _, dup := clean[cp]; dup {
			problems = append(problems, newErr("load_files", p, ErrBadValue, "two entries normalise to "+cp))
			continue
		}
		clean[cp] = c
	}
	if len(problems) > 0 {
		slices.SortFunc(problems, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return st, errors.Join(problems...)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return st, err
	}
	defer tx.Rollback()
	now := time.Now().UnixNano()
	paths := make([]string, 0, len(clean))
	for p := range clean {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		c := clean[p]
		h := sha256Hex(c)
		old, err := hashOf(ctx, tx, p)
		if err != nil {
			return LoadStats{}, err
		}
		switch old {
		case h:
			st.Unchanged++
			continue
		case absentHash:
			st.Added++
		default:
			st.Updated++
		}
		if err := upsertFile(ctx, tx, p, c, h, 0o644, now); err != nil {
			return LoadStats{}, err
		}
	}
	for _, p := range paths {
		if err := checkShape(ctx, tx, "load_files", p); err != nil {
			problems = append(problems, err)
		}
	}
	if len(problems) > 0 {
		return LoadStats{}, errors.Join(problems...)
	}
	return st, tx.Commit()
}

// checkShape fails when the file p in a files table also has a file as an
// ancestor or has files below it.
func checkShape(ctx context.Context, q queryer, op, p string) error {
	for _, d := range parentDirs(p) {
		h, err := hashOf(ctx, q, d)
		if err != nil {
			return err
		}
		if h != absentHash {
			return newErr(op, p, ErrConflict, fmt.Sprintf("%q is a file, so it cannot hold %q", d, p))
		}
	}
	var one int
	pre := p + "/"
	err := q.QueryRowContext(ctx, "SELECT 1 FROM files WHERE path >= ? AND path < ? LIMIT 1", pre, prefixEnd(pre)).Scan(&one)
	if err == nil {
		return newErr(op, p, ErrConflict, fmt.Sprintf("%q is a directory and a file at once", p))
	}
	if err != sql.ErrNoRows {
		return err
	}
	return nil
}

// ReadFile returns the content of a stable file.
func (s *Stable) ReadFile(ctx context.Context, p string) ([]byte, error) {
	cp, err := cleanFilePath("read_file", p)
	if err != nil {
		return nil, err
	}
	var c []byte
	err = s.db.QueryRowContext(ctx, "SELECT content FROM files WHERE path = ?", cp).Scan(&c)
	if err == sql.ErrNoRows {
		if ok, derr := s.isDir(ctx, cp); derr == nil && ok {
			return nil, newErr("read_file", p, ErrIsDir, "")
		}
		return nil, newErr("read_file", p, ErrNotFound, "")
	}
	if err != nil {
		return nil, err
	}
	if c == nil {
		c = []byte{}
	}
	return c, nil
}

// SHA256 returns the hex sha256 of a stable file, or "absent".
func (s *Stable) SHA256(ctx context.Context, p string) (string, error) {
	cp, err := cleanFilePath("sha256", p)
	if err != nil {
		return "", err
	}
	return hashOf(ctx, s.db, cp)
}

func (s *Stable) isDir(ctx context.Context, cp string) (bool, error) {
	pre := dirPrefix(cp)
	var one int
	err := s.db.QueryRowContext(ctx, "SELECT 1 FROM files WHERE path >= ? AND path < ? LIMIT 1", pre, prefixEnd(pre)).Scan(&one)
	if err == sql.ErrNoRows {
		return false, nil
	}
	return err == nil, err
}

// List returns every stable file path, sorted.
func (s *Stable) List(ctx context.Context) ([]string, error) {
	return pathsWithPrefix(ctx, s.db, "files", "")
}

// ExportDir writes every stable file under dir (created if missing) with its
// recorded mode, through an os.Root so nothing lands outside dir. Existing
// files are overwritten; other files in dir are left alone.
func (s *Stable) ExportDir(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	rows, err := s.db.QueryContext(ctx, "SELECT path, content, mode FROM files ORDER BY path")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		var c []byte
		var mode int64
		if err := rows.Scan(&p, &c, &mode); err != nil {
			return err
		}
		if err := writeUnder(root, p, c, mode); err != nil {
			return fmt.Errorf("cairn: export %s: %w", p, err)
		}
	}
	return rows.Err()
}

// writeUnder writes a clean workspace path under root.
func writeUnder(root *os.Root, p string, c []byte, mode int64) error {
	if _, err := CleanPath("export", p); err != nil {
		return err
	}
	if d := path.Dir(p); d != "." {
		if err := root.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
			return err
		}
	}
	perm := fs.FileMode(mode).Perm()
	if perm == 0 {
		perm = 0o644
	}
	if err := root.WriteFile(filepath.FromSlash(p), c, perm); err != nil {
		return err
	}
	return root.Chmod(filepath.FromSlash(p), perm)
}

// undoRecord is the snapshot Accept stores in stable's kv under
// "undo/<workspace id>".
type undoRecord struct {
	WorkspaceID string      `json:"workspace_id"`
	AcceptedAt  time.Time   `json:"accepted_at"`
	Files       []undoEntry `json:"files"`
}

type undoEntry struct {
	Path    string `json:"path"`
	Existed bool   `json:"existed"`
	Content []byte `json:"content,omitempty"`
	Mode    int64  `json:"mode,omitempty"`
	MTime   int64  `json:"mtime,omitempty"`
}

// UndoKey returns the stable kv key holding the undo snapshot of an
// accepted workspace.
func UndoKey(workspaceID string) string { return "undo/" + workspaceID }
