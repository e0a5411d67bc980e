package cairn

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// In-memory workspaces are for runs whose workspace only has to reach disk
// when the run ends, like a worker's job: a run that does not end (the
// worker dies) is run again from a fresh workspace, so nothing written in
// between needs to survive. Their SQLite databases live in SQLite's memdb
// VFS and cost no file creation, locking or fsync while the run works;
// Image then hands each one over as the bytes of a SQLite file, to be
// stored however the caller likes.
//
// Their pages are 1 KiB instead of 4 KiB (a small workspace's image is a
// quarter of the size), and a closed one is not thrown away: it is emptied
// and kept for the next workspace of the same kind (memPool), with its
// connections and prepared statements, which would otherwise be opened,
// created and parsed again for every run. Emptying deletes every row with
// secure_delete on (the freed content is zeroed) and auto_vacuum FULL (the
// freed pages leave the database), then checks that no row and no free
// page is left; a database that fails the check is closed, never reused.
// So nothing of one run can reach the next one's view or its Image. The
// handle a Stable or Overlay holds is a lease: after Close it refuses
// every query (ErrClosed), so a stale reference cannot reach the database
// once it serves another run.

// memPragmas set up an in-memory database before its first table exists.
// secure_delete is per connection: it is set on the keeper, which empties
// the database.
const memPragmas = "PRAGMA page_size = 1024;\nPRAGMA auto_vacuum = FULL;\nPRAGMA secure_delete = ON;\n"

// maxFreeMemDBs caps the emptied databases kept per kind.
const maxFreeMemDBs = 16

// memSeq numbers the in-memory databases of this process.
var memSeq atomic.Uint64

// memDB is an in-memory SQLite database shared by the connections of db,
// with its statement cache. keep pins it (memdb frees a database when its
// last connection closes, and database/sql may close idle connections at
// will); it also serializes it and empties it.
type memDB struct {
	db     *sql.DB
	keep   *sql.Conn
	stmts  *stmtCache
	schema string
	tables []string
	// On keep: a DELETE per table, then the count of what is left.
	deletes []*sql.Stmt
	left    *sql.Stmt
}

// memPool holds emptied in-memory databases by schema.
var memPool struct {
	mu   sync.Mutex
	free map[string][]*memDB
}

// leaseMemDB returns an empty in-memory database with schema, from the
// pool when one is free, and the lease the workspace queries it through.
// Closing the lease gives the database back.
func leaseMemDB(ctx context.Context, schema string) (*stmtDB, *memDB, error) {
	memPool.mu.Lock()
	var m *memDB
	if l := memPool.free[schema]; len(l) > 0 {
		m, memPool.free[schema] = l[len(l)-1], l[:len(l)-1]
	}
	memPool.mu.Unlock()
	if m == nil {
		var err error
		if m, err = openMemDB(ctx, schema); err != nil {
			return nil, nil, err
		}
	}
	return &stmtDB{DB: m.db, cache: m.stmts, release: m.release}, m, nil
}

// openMemDB creates a database in SQLite's memdb VFS, named uniquely in
// this process so that every connection of its pool opens the same one,
// and creates schema in it.
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
	m := &memDB{db: db, stmts: newStmtCache(), schema: schema}
	if m.keep, err = db.Conn(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open in-memory database: %w", err)
	}
	if _, err := m.keep.ExecContext(ctx, memPragmas+schema); err != nil {
		m.close()
		return nil, fmt.Errorf("create schema in memory: %w", err)
	}
	rows, err := m.keep.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
	if err == nil {
		for rows.Next() {
			var t string
			if err = rows.Scan(&t); err != nil {
				break
			}
			m.tables = append(m.tables, t)
		}
		rows.Close()
		err = errors.Join(err, rows.Err())
	}
	if err != nil || len(m.tables) == 0 {
		m.close()
		return nil, fmt.Errorf("in-memory database tables: %v", err)
	}
	count := "SELECT (SELECT freelist_count FROM pragma_freelist_count())"
	for _, t := range m.tables {
		d, err := m.keep.PrepareContext(ctx, "DELETE FROM "+t)
		if err != nil {
			m.close()
			return nil, err
		}
		m.deletes = append(m.deletes, d)
		count += " + (SELECT count(*) FROM " + t + ")"
	}
	if m.left, err = m.keep.PrepareContext(ctx, count); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

// close releases the database (its content is gone).
func (m *memDB) close() error {
	var errs []error
	for _, d := range append(m.deletes, m.left) {
		if d != nil {
			errs = append(errs, d.Close())
		}
	}
	return errors.Join(append(errs, m.stmts.close(), m.keep.Close(), m.db.Close())...)
}

// release empties the database and gives it back to the pool; one that
// cannot be emptied, or that the full pool does not take, is closed.
func (m *memDB) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.empty(ctx); err != nil {
		return errors.Join(err, m.close())
	}
	memPool.mu.Lock()
	if memPool.free == nil {
		memPool.free = make(map[string][]*memDB)
	}
	if l := memPool.free[m.schema]; len(l) < maxFreeMemDBs {
		memPool.free[m.schema] = append(l, m)
		memPool.mu.Unlock()
		return nil
	}
	memPool.mu.Unlock()
	return m.close()
}

// empty deletes every row and checks that no row and no free page is left.
func (m *memDB) empty(ctx context.Context) error {
	for _, d := range m.deletes {
		if _, err := d.ExecContext(ctx); err != nil {
			return fmt.Errorf("cairn: empty an in-memory database: %w", err)
		}
	}
	var left int
	if err := m.left.QueryRowContext(ctx).Scan(&left); err != nil {
		return fmt.Errorf("cairn: check an emptied in-memory database: %w", err)
	}
	if left != 0 {
		return fmt.Errorf("cairn: an emptied in-memory database still holds %d rows or free pages", left)
	}
	return nil
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
	db, m, err := leaseMemDB(ctx, filesSchema)
	if err != nil {
		return nil, fmt.Errorf("cairn: new stable: %w", err)
	}
	return &Stable{db: db, mem: m}, nil
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
	if s.db.closed.Load() {
		return nil, ErrClosed
	}
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
	db, m, err := leaseMemDB(ctx, overlaySchema)
	if err != nil {
		return nil, fmt.Errorf("cairn: create overlay: %w", err)
	}
	meta, _ := json.Marshal(overlayMeta{ID: id, Operation: operation, NodeID: nodeID, CreatedAt: time.Now().UTC(), Format: 1})
	if err := putKV(ctx, db, metaKey, string(meta)); err != nil {
		db.Close()
		return nil, fmt.Errorf("cairn: create overlay: %w", err)
	}
	o := newOverlay(s, db, p, id, operation, nodeID, opts)
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
