package cairn

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// In-memory workspaces are for runs whose workspace only has to reach disk
// when the run ends, like a worker's job: a run that does not end (the
// worker dies) is run again from a fresh workspace, so nothing written in
// between needs to survive. Their SQLite databases live in SQLite's memdb
// VFS and cost no file creation, locking or fsync while the run works;
// SaveAs then writes each one to disk as a single file write.

// memSeq numbers the in-memory databases of this process.
var memSeq atomic.Uint64

// memDB is an in-memory SQLite database shared by the connections of db.
// keep pins it: memdb frees a database when its last connection closes,
// and database/sql may close idle connections at will.
type memDB struct {
	db   *sql.DB
	keep *sql.Conn
}

// openMemDB creates a database in SQLite's memdb VFS, named uniquely in
// this process so that every connection of the returned pool opens the
// same one, and creates schema in it.
func openMemDB(ctx context.Context, schema string) (*memDB, error) {
	q := url.Values{}
	q.Set("vfs", "memdb")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Set("_txlock", "immediate")
	name := "file:/cairn-mem-" + strconv.FormatUint(memSeq.Add(1), 10) + "?" + q.Encode()
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	keep, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open in-memory database: %w", err)
	}
	if _, err := keep.ExecContext(ctx, schema); err != nil {
		keep.Close()
		db.Close()
		return nil, fmt.Errorf("create schema in memory: %w", err)
	}
	return &memDB{db: db, keep: keep}, nil
}

// close releases the database (its content is gone).
func (m *memDB) close() error {
	return errors.Join(m.keep.Close(), m.db.Close())
}

// SaveOptions tunes SaveAs.
type SaveOptions struct {
	// Sync fsyncs the file before SaveAs returns, so that it survives a
	// power loss or kernel crash once its folder entry is durable too
	// (fsync the folder after the last file it gets). Without Sync the
	// file survives the process (it is in the OS page cache) and reaches
	// the disk with the kernel's writeback.
	Sync bool
}

// saveAs writes a consistent image of the database to a new file at path
// (ErrExists when path exists). The image is a standard SQLite file in
// rollback-journal mode; OpenStable and OpenOverlay open it (and turn it
// to WAL mode) like any other workspace file.
func (m *memDB) saveAs(ctx context.Context, op, path string, opts SaveOptions) error {
	var img []byte
	err := m.keep.Raw(func(dc any) error {
		s, ok := dc.(interface{ Serialize() ([]byte, error) })
		if !ok {
			return errors.New("the SQLite driver cannot serialize a database")
		}
		var err error
		img, err = s.Serialize()
		return err
	})
	if err != nil {
		return fmt.Errorf("cairn: %s %s: %w", op, path, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return newErr(op, path, ErrExists, "the file to save to already exists")
	}
	if err != nil {
		return fmt.Errorf("cairn: %s: %w", op, err)
	}
	_, err = f.Write(img)
	if err == nil && opts.Sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("cairn: %s %s: %w", op, path, err)
	}
	return nil
}

// NewMemoryStable returns an empty stable workspace held in memory: it
// works like one opened with OpenStable, but nothing reaches disk until
// SaveAs. Close discards it. Its Path is "".
func NewMemoryStable(ctx context.Context) (*Stable, error) {
	m, err := openMemDB(ctx, filesSchema)
	if err != nil {
		return nil, fmt.Errorf("cairn: new stable: %w", err)
	}
	return &Stable{db: m.db, mem: m}, nil
}

// SaveAs writes the stable workspace, as it is now, to a new SQLite file
// at path, which OpenStable opens later. It works only on a stable from
// NewMemoryStable, which stays usable (in memory) afterwards. An existing
// file at path is never overwritten: SaveAs fails with ErrExists.
func (s *Stable) SaveAs(ctx context.Context, path string, opts SaveOptions) error {
	if s.mem == nil {
		return fmt.Errorf("cairn: save stable: %s is a file already; SaveAs saves in-memory workspaces", s.path)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mem.saveAs(ctx, "save_stable", path, opts)
}

// InMemory makes NewOverlay hold the overlay in memory: no file is created
// (Path is still where it belongs, dir/agent-{operation}-{node}.db) until
// SaveAs writes it. Close discards an unsaved overlay.
func InMemory() OverlayOption {
	return overlayOptionFunc(func(o *Overlay) { o.wantMem = true })
}

// newMemOverlay is NewOverlay for InMemory: the name is checked like a
// file's (ErrExists when an overlay file for the same operation and node
// is on disk), the database lives in memory.
func (s *Stable) newMemOverlay(ctx context.Context, p, id, operation, nodeID string, opts []OverlayOption) (*Overlay, error) {
	if _, err := os.Lstat(p); err == nil {
		return nil, newErr("new_overlay", p, ErrExists, "an overlay for this operation and node already exists")
	}
	m, err := openMemDB(ctx, overlaySchema)
	if err != nil {
		return nil, fmt.Errorf("cairn: create overlay: %w", err)
	}
	meta, _ := json.Marshal(overlayMeta{ID: id, Operation: operation, NodeID: nodeID, CreatedAt: time.Now().UTC(), Format: 1})
	if err := putKV(ctx, m.keep, metaKey, string(meta)); err != nil {
		m.close()
		return nil, fmt.Errorf("cairn: create overlay: %w", err)
	}
	o := newOverlay(s, m.db, p, id, operation, nodeID, opts)
	o.mem = m
	return o, nil
}

// SaveAs writes the overlay, as it is now, to a new SQLite file at path
// (for example Path(), or a file in a folder that is renamed into place
// afterwards), which OpenOverlay opens later over the saved stable. It
// works only on an overlay created InMemory, which stays usable (in
// memory) afterwards; writes wait until it is saved. An existing file at
// path is never overwritten: SaveAs fails with ErrExists.
func (o *Overlay) SaveAs(ctx context.Context, path string, opts SaveOptions) error {
	if o.mem == nil {
		return fmt.Errorf("cairn: save overlay: %s is a file already; SaveAs saves in-memory overlays", o.path)
	}
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	if o.closed.Load() {
		return ErrClosed
	}
	return o.mem.saveAs(ctx, "save_overlay", path, opts)
}

// InMemory reports whether the overlay is held in memory (InMemory).
func (o *Overlay) InMemory() bool { return o.mem != nil }

// closeDB closes the overlay's database, releasing an in-memory one.
func (o *Overlay) closeDB() error {
	if o.mem != nil {
		return o.mem.close()
	}
	return o.db.Close()
}
