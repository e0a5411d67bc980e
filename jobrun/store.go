package jobrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// The job store, <root>/jobs/store.db: one SQLite file (WAL mode) with a
// row per finished job holding its manifest and the images of its stable
// and overlay (cairn's Image). Handle stores a job with one INSERT, where
// a folder of files would cost the creation of a folder and three files,
// on every job: a file creation is the most expensive file system
// operation on our machines (docs/PERFORMANCE.md), and a worker that
// keeps a day of jobs at a hundred jobs a second would need millions of
// inodes a day. OpenJob writes the job's folder from its row when the job
// is first opened for review.

// storeFile is the store's name in the jobs folder (job ids have no dots,
// so no job folder can take it).
const storeFile = "store.db"

const storeSchema = `
CREATE TABLE IF NOT EXISTS jobs (
	job_id     TEXT PRIMARY KEY,
	rank       INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	manifest   TEXT NOT NULL,
	stable     BLOB NOT NULL,
	overlay    BLOB NOT NULL
);`

// store is an open job store.
type store struct{ db *sql.DB }

// storeKey names a shared store handle: the file and its durability.
type storeKey struct {
	path string
	sync bool
}

// stores are the store handles the Handlers of this process share (one
// per file and durability), open for the life of the process, like any
// connection pool.
var stores struct {
	mu sync.Mutex
	m  map[storeKey]*store
}

// storePath is the absolute path of the job store under root.
func storePath(root string) (string, error) {
	return filepath.Abs(filepath.Join(root, jobsDir, storeFile))
}

// sharedStore returns the process's handle on the store file at path
// (absolute), opening (and creating) it on first use. When the file is
// gone (someone removed the workspace folder under a running worker), a
// new store is created and used from then on; the old handle is left open,
// since another job may be writing through it (its row then goes with the
// removed file, as it would have gone with the folder).
func sharedStore(ctx context.Context, path string, syncCommits bool) (*store, error) {
	k := storeKey{path, syncCommits}
	stores.mu.Lock()
	defer stores.mu.Unlock()
	if s := stores.m[k]; s != nil {
		if _, err := os.Stat(path); err == nil {
			return s, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("jobrun: job folders: %w", err)
	}
	s, err := openStore(ctx, path, syncCommits)
	if err != nil {
		return nil, err
	}
	if stores.m == nil {
		stores.m = make(map[storeKey]*store)
	}
	stores.m[k] = s
	return s, nil
}

// openStore opens the store file at path, creating it when missing.
// syncCommits fsyncs the write-ahead log at every commit (synchronous
// FULL): a stored job then survives a power loss. Otherwise (NORMAL) a
// commit is written to the log, which survives the process; the log is
// fsynced at checkpoints.
func openStore(ctx context.Context, path string, syncCommits bool) (*store, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	if syncCommits {
		q.Add("_pragma", "synchronous(FULL)")
	} else {
		q.Add("_pragma", "synchronous(NORMAL)")
	}
	q.Set("_txlock", "immediate")
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	if _, err := db.ExecContext(ctx, storeSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("jobrun: job store %s: %w", path, err)
	}
	return &store{db: db}, nil
}

// put stores a finished job, replacing an earlier attempt's row, and
// reports whether it did: an attempt ranks by its lease revision
// (queue.Job.Attempt), and a row is never replaced by an attempt of a lower
// rank (a stale attempt whose lease was taken over, finishing after the
// attempt that took it over).
func (s *store) put(ctx context.Context, jobID string, rank uint64, created time.Time, manifest, stable, overlay []byte) (bool, error) {
	r, err := s.db.ExecContext(ctx, `INSERT INTO jobs(job_id, rank, created_at, manifest, stable, overlay) VALUES(?, ?, ?, ?, ?, ?)
		ON CONFLICT(job_id) DO UPDATE SET rank = excluded.rank, created_at = excluded.created_at, manifest = excluded.manifest,
			stable = excluded.stable, overlay = excluded.overlay WHERE excluded.rank >= jobs.rank`,
		jobID, int64(rank), created.UnixNano(), string(manifest), stable, overlay)
	if err != nil {
		return false, fmt.Errorf("jobrun: store job %s: %w", jobID, err)
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

// errNoJob reports a job the store does not hold.
var errNoJob = errors.New("no such job in the store")

// get returns a stored job (errNoJob when there is none).
func (s *store) get(ctx context.Context, jobID string) (manifest, stable, overlay []byte, err error) {
	err = s.db.QueryRowContext(ctx, "SELECT manifest, stable, overlay FROM jobs WHERE job_id = ?", jobID).
		Scan(&manifest, &stable, &overlay)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, nil, errNoJob
	}
	return manifest, stable, overlay, err
}

// prune deletes the jobs stored before cutoff and returns their ids.
func (s *store) prune(ctx context.Context, cutoff time.Time) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "DELETE FROM jobs WHERE created_at < ? RETURNING job_id", cutoff.UnixNano())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
