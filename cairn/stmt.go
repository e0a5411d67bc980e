package cairn

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
)

// stmtDB is a database whose queries reuse prepared statements: one per SQL
// text, prepared on first use (on each pooled connection it runs on) and
// kept until Close. database/sql prepares a statement again for every
// QueryContext and ExecContext call on a *sql.DB; with the few dozen
// queries a run makes per workspace, parsing SQL was a quarter of a job's
// CPU time in the worker.
//
// A stmtDB with release set is a lease on a pooled in-memory database
// (memory.go): Close gives the database back, and from then on every query
// fails with ErrClosed.
type stmtDB struct {
	*sql.DB
	cache   *stmtCache
	release func() error
	closed  atomic.Bool
}

func newStmtDB(db *sql.DB) *stmtDB { return &stmtDB{DB: db, cache: newStmtCache()} }

// closedDB is a closed *sql.DB: its QueryRowContext returns a Row holding
// sql.ErrDBClosed, for queries on a closed lease.
var closedDB = func() *sql.DB {
	db, _ := sql.Open("sqlite", ":memory:")
	db.Close()
	return db
}()

// QueryContext runs query as a cached prepared statement.
func (d *stmtDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	s, err := d.cache.get(ctx, d.DB, query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(ctx, args...)
}

// QueryRowContext runs query as a cached prepared statement.
func (d *stmtDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if d.closed.Load() {
		return closedDB.QueryRowContext(ctx, query)
	}
	s, err := d.cache.get(ctx, d.DB, query)
	if err != nil {
		// A Row carrying the error: run the query unprepared.
		return d.DB.QueryRowContext(ctx, query, args...)
	}
	return s.QueryRowContext(ctx, args...)
}

// ExecContext runs query as a cached prepared statement.
func (d *stmtDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	s, err := d.cache.get(ctx, d.DB, query)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(ctx, args...)
}

// BeginTx starts a transaction whose queries use the cached statements.
func (d *stmtDB) BeginTx(ctx context.Context, opts *sql.TxOptions) (*stmtTx, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	tx, err := d.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &stmtTx{Tx: tx, db: d.DB, cache: d.cache}, nil
}

// Close closes the statements and the database, or gives a lease back.
func (d *stmtDB) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	if d.release != nil {
		return d.release()
	}
	return errors.Join(d.cache.close(), d.DB.Close())
}

// stmtCache holds the prepared statements of one *sql.DB by SQL text.
type stmtCache struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache() *stmtCache { return &stmtCache{m: make(map[string]*sql.Stmt)} }

func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// get returns the statement for query, preparing it on db the first time.
func (c *stmtCache) get(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	if s := c.lookup(query); s != nil {
		return s, nil
	}
	s, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[query]; old != nil {
		s.Close()
		return old, nil
	}
	c.m[query] = s
	return s, nil
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for q, s := range c.m {
		errs = append(errs, s.Close())
		delete(c.m, q)
	}
	return errors.Join(errs...)
}

// stmtTx is a transaction of a stmtDB. It uses a cached statement when
// there is one and runs the query unprepared otherwise: preparing through
// the pool would take another connection, which an in-memory database
// (memdb) does not let read while this transaction holds its write lock.
// The queries it ran unprepared are prepared into the cache when it ends.
type stmtTx struct {
	*sql.Tx
	db     *sql.DB
	cache  *stmtCache
	misses []string
}

// cached returns the cached statement for query bound to the transaction,
// or nil (and notes the miss).
func (t *stmtTx) cached(ctx context.Context, query string) *sql.Stmt {
	if s := t.cache.lookup(query); s != nil {
		return t.Tx.StmtContext(ctx, s)
	}
	t.misses = append(t.misses, query)
	return nil
}

// Commit commits the transaction, then prepares its misses.
func (t *stmtTx) Commit() error {
	err := t.Tx.Commit()
	t.prepareMisses()
	return err
}

// Rollback rolls the transaction back, then prepares its misses.
func (t *stmtTx) Rollback() error {
	err := t.Tx.Rollback()
	t.prepareMisses()
	return err
}

func (t *stmtTx) prepareMisses() {
	for _, q := range t.misses {
		_, _ = t.cache.get(context.Background(), t.db, q) // best effort
	}
	t.misses = nil
}

// QueryContext runs query in the transaction.
func (t *stmtTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := t.cached(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs query in the transaction.
func (t *stmtTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := t.cached(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

// ExecContext runs query in the transaction.
func (t *stmtTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := t.cached(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}
