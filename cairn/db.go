package cairn

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// absentHash is recorded in base_hashes for a path that stable did not have.
const absentHash = "absent"

// openDB opens (and with create, creates) a SQLite file in WAL mode with a
// busy timeout; write transactions begin IMMEDIATE so that concurrent
// writers queue on the busy handler instead of failing on lock upgrade.
func openDB(ctx context.Context, path string, create bool, schema string) (*stmtDB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	mode := "rw"
	if create {
		mode = "rwc"
	}
	q.Set("mode", mode)
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: q.Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if schema != "" {
		if _, err := db.ExecContext(ctx, schema); err != nil {
			db.Close()
			return nil, fmt.Errorf("create schema in %s: %w", path, err)
		}
	}
	return newStmtDB(db), nil
}

const filesSchema = `
CREATE TABLE IF NOT EXISTS files (
	path    TEXT PRIMARY KEY,
	content BLOB NOT NULL,
	sha256  TEXT NOT NULL,
	mode    INTEGER NOT NULL,
	mtime   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
`

const overlaySchema = filesSchema + `
CREATE TABLE IF NOT EXISTS tombstones (
	path TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS base_hashes (
	path   TEXT PRIMARY KEY,
	sha256 TEXT NOT NULL
);
`

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// queryer is satisfied by *stmtDB, *stmtTx, *sql.DB, *sql.Tx and *sql.Conn.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// pathsWithPrefix returns the sorted paths in table under prefix ("" = all).
func pathsWithPrefix(ctx context.Context, q queryer, table, prefix string) ([]string, error) {
	var rows *sql.Rows
	var err error
	if prefix == "" {
		rows, err = q.QueryContext(ctx, "SELECT path FROM "+table+" ORDER BY path")
	} else {
		rows, err = q.QueryContext(ctx, "SELECT path FROM "+table+" WHERE path >= ? AND path < ? ORDER BY path", prefix, prefixEnd(prefix))
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// hashOf returns the sha256 of path in a files table, or absentHash.
func hashOf(ctx context.Context, q queryer, p string) (string, error) {
	var h string
	err := q.QueryRowContext(ctx, "SELECT sha256 FROM files WHERE path = ?", p).Scan(&h)
	if err == sql.ErrNoRows {
		return absentHash, nil
	}
	return h, err
}

func getKV(ctx context.Context, q queryer, key string) (string, bool, error) {
	var v string
	err := q.QueryRowContext(ctx, "SELECT value FROM kv WHERE key = ?", key).Scan(&v)
	if err == sql.ErrNoRows {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return v, true, nil
}

func putKV(ctx context.Context, q queryer, key, value string) error {
	_, err := q.ExecContext(ctx, "INSERT INTO kv(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
	return err
}
