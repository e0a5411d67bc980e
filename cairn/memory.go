package cairn

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

// In-memory workspaces are for runs whose workspace only has to reach disk
// when the run ends, like a worker's job: a run that does not end (the
// worker dies) is run again from a fresh workspace, so nothing written in
// between needs to survive. Their SQLite databases live in SQLite's memdb
// VFS and cost no file creation, locking or fsync while the run works;
// Image then hands each one over as the bytes of a SQLite file, to be
// stored however the caller likes. Their pages are 1 KiB (memPageSize)
// instead of 4 KiB: a small workspace's image is a quarter of the size.

// memPageSize sets the page size of an in-memory database before its first
// table exists.
const memPageSize = "PRAGMA page_size = 1024;\n"

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
	if _, err := keep.ExecContext(ctx, memPageSize+schema); err != nil {
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

// image returns the database as the bytes of a SQLite file (in
// rollback-journal mode), which OpenStable and OpenOverlay open (turning
// it to WAL mode) once written to a file.
func (m *memDB) image() ([]byte, error) {
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
	return img, err
}

// NewMemoryStable returns an empty stable workspace held in memory: it
// works like one opened with OpenStable, but nothing reaches disk (Image
// hands it over). Close discards it. Its Path is "".
func NewMemoryStable(ctx context.Context) (*Stable, error) {
	m, err := openMemDB(ctx, filesSchema)
	if err != nil {
		return nil, fmt.Errorf("cairn: new stable: %w", err)
	}
	return &Stable{db: m.db, mem: m}, nil
}

// Image returns the stable workspace as it is now, as the bytes of a
// SQLite file: written to a file, OpenStable opens it. It works only on a
// stable from NewMemoryStable, which stays usable afterwards.
func (s *Stable) Image(ctx context.Context) ([]byte, error) {
	if s.mem == nil {
		return nil, fmt.Errorf("cairn: stable image: %s is a file; Image is for in-memory workspaces", s.path)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := s.mem.image()
	if err != nil {
		return nil, fmt.Errorf("cairn: stable image: %w", err)
	}
	return img, nil
}

// InMemory makes NewOverlay hold the overlay in memory: no file is created
// (Path is still where it belongs, dir/agent-{operation}-{node}.db; Image
// hands it over). Close discards it.
func InMemory() OverlayOption {
	return overlayOptionFunc(func(o *Overlay) { o.wantMem = true })
}

// newMemOverlay is NewOverlay for InMemory: the database lives in memory
// and the disk is not touched (an overlay file at Path is no concern of an
// in-memory overlay).
func (s *Stable) newMemOverlay(ctx context.Context, p, id, operation, nodeID string, opts []OverlayOption) (*Overlay, error) {
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

// Image returns the overlay as it is now, as the bytes of a SQLite file:
// written to a file, OpenOverlay opens it over the stable the run was
// made on. It works only on an overlay created InMemory, which stays
// usable afterwards; writes wait until the image is taken.
func (o *Overlay) Image(ctx context.Context) ([]byte, error) {
	if o.mem == nil {
		return nil, fmt.Errorf("cairn: overlay image: %s is a file; Image is for in-memory overlays", o.path)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	if o.closed.Load() {
		return nil, ErrClosed
	}
	img, err := o.mem.image()
	if err != nil {
		return nil, fmt.Errorf("cairn: overlay image: %w", err)
	}
	return img, nil
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
