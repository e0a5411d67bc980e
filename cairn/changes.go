package cairn

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Change is one actual change of a run against the current stable.
type Change struct {
	// Path is the clean workspace path.
	Path string
	// Deleted is true when the run deleted the file (Content is nil).
	Deleted bool
	// Content is the new content.
	Content []byte
	// Mode is the file's permission bits (0644 for new files).
	Mode int64
	// SHA256 is the hex sha256 of Content ("" when Deleted).
	SHA256 string
	// BaseSHA256 is stable's sha256 when the run first touched Path
	// ("absent" when stable had no such file).
	BaseSHA256 string
}

// overlayEntry is one overlay file or tombstone, without content.
type overlayEntry struct {
	path    string
	deleted bool
	sha     string
	base    string
}

// entries returns every overlay file and tombstone with its base hash,
// sorted by path.
func (o *Overlay) entries(ctx context.Context) ([]overlayEntry, error) {
	rows, err := o.db.QueryContext(ctx, `
		SELECT f.path, 0, f.sha256, COALESCE(b.sha256, '') FROM files f LEFT JOIN base_hashes b ON b.path = f.path
		UNION ALL
		SELECT t.path, 1, '', COALESCE(b.sha256, '') FROM tombstones t LEFT JOIN base_hashes b ON b.path = t.path
		ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []overlayEntry
	for rows.Next() {
		var e overlayEntry
		var del int
		if err := rows.Scan(&e.path, &del, &e.sha, &e.base); err != nil {
			return nil, err
		}
		e.deleted = del == 1
		out = append(out, e)
	}
	return out, rows.Err()
}

// changed filters entries down to those that differ from stable as seen by
// q: a file whose content differs from stable's, or a tombstone on a file
// stable has. It returns them with stable's current hash of each path.
func changed(ctx context.Context, q queryer, es []overlayEntry) ([]overlayEntry, []string, error) {
	var out []overlayEntry
	var cur []string
	for _, e := range es {
		h, err := hashOf(ctx, q, e.path)
		if err != nil {
			return nil, nil, err
		}
		if (e.deleted && h == absentHash) || (!e.deleted && h == e.sha) {
			continue
		}
		out = append(out, e)
		cur = append(cur, h)
	}
	return out, cur, nil
}

// ChangedFiles returns the paths the run actually changed, sorted: files
// written with content that differs from current stable, and files deleted
// that stable has. Writing a file back to its stable content, or creating
// then deleting a new file, is no change. It implements loop.ChangeLister.
func (o *Overlay) ChangedFiles(ctx context.Context) ([]string, error) {
	es, err := o.entries(ctx)
	if err != nil {
		return nil, err
	}
	ch, _, err := changed(ctx, o.stable.db, es)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ch))
	for i, e := range ch {
		out[i] = e.path
	}
	return out, nil
}

// Changes returns the run's actual changes (as ChangedFiles) with their new
// content, sorted by path; what a CLI writes to disk on accept.
func (o *Overlay) Changes(ctx context.Context) ([]Change, error) {
	es, err := o.entries(ctx)
	if err != nil {
		return nil, err
	}
	ch, _, err := changed(ctx, o.stable.db, es)
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(ch))
	for _, e := range ch {
		c := Change{Path: e.path, Deleted: e.deleted, BaseSHA256: e.base}
		if !e.deleted {
			if err := o.db.QueryRowContext(ctx, "SELECT content, mode FROM files WHERE path = ?", e.path).Scan(&c.Content, &c.Mode); err != nil {
				return nil, err
			}
			if c.Content == nil {
				c.Content = []byte{}
			}
			c.SHA256 = e.sha
		}
		out = append(out, c)
	}
	return out, nil
}

// CompareClaimed compares the changed files a model claimed (in
// submit_result) with the actual ones (from ChangedFiles). Claimed paths are
// normalised with CleanPath first (a leading "/" or "./" is tolerated); a
// claimed path that is not a valid workspace path is reported as extra,
// verbatim. missing: actually changed but not claimed; extra: claimed but
// not changed. Both are sorted and free of duplicates; both empty means the
// claim is exact.
func CompareClaimed(actual, claimed []string) (missing, extra []string) {
	act := make(map[string]bool, len(actual))
	for _, p := range actual {
		act[p] = true
	}
	cl := make(map[string]bool, len(claimed))
	for _, p := range claimed {
		cp, err := cleanFilePath("claimed", strings.TrimLeft(p, "/"))
		if err != nil {
			cp = p
		}
		cl[cp] = true
		if !act[cp] {
			extra = append(extra, cp)
		}
	}
	for _, p := range actual {
		if !cl[p] {
			missing = append(missing, p)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return slices.Compact(missing), slices.Compact(extra)
}

// AcceptOptions tunes Accept.
type AcceptOptions struct {
	// Force merges even when stable changed under the run (the stale-base
	// guard is skipped; the run's content wins).
	Force bool
}

// AcceptResult counts what Accept merged.
type AcceptResult struct {
	// FilesMerged counts files written into stable.
	FilesMerged int `json:"files_merged"`
	// TombstonesApplied counts files deleted from stable.
	TombstonesApplied int `json:"tombstones_applied"`
	// Paths lists the merged and deleted paths, sorted.
	Paths []string `json:"paths,omitempty"`
}

// Accept merges the run's changes into stable in one SQLite transaction on
// stable, after the stale-base guard: for each path the run changed, the
// sha256 stable has now must equal the one recorded when the run first
// touched the path (base_hashes); otherwise Accept fails with a
// *StaleBaseError (errors.Is ErrStaleBase, code ACCEPT_STALE_BASE) and
// changes nothing, unless opts.Force. Paths the run only read are not
// guarded. A path whose overlay content already equals stable's (or a
// deletion of a file stable no longer has) is skipped, so accepting twice
// is a no-op. The previous stable state of every merged path is stored in
// stable's kv under UndoKey(ID()) (see Stable.Undo). A merge that would make
// a path both a file and a directory in stable fails with ErrConflict and
// changes nothing, even when forced. The overlay file is kept; Reject it to
// discard it.
func (o *Overlay) Accept(ctx context.Context, opts AcceptOptions) (AcceptResult, error) {
	var res AcceptResult
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	if o.closed.Load() {
		return res, ErrClosed
	}
	es, err := o.entries(ctx)
	if err != nil {
		return res, err
	}
	s := o.stable
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return res, err
	}
	defer tx.Rollback()
	ch, cur, err := changed(ctx, tx, es)
	if err != nil {
		return res, err
	}
	if !opts.Force {
		var stale []string
		for i, e := range ch {
			if e.base != cur[i] {
				stale = append(stale, e.path)
			}
		}
		if len(stale) > 0 {
			return res, &StaleBaseError{WorkspaceID: o.id, Paths: stale}
		}
	}
	undo := undoRecord{WorkspaceID: o.id, AcceptedAt: time.Now().UTC()}
	now := time.Now().UnixNano()
	for i, e := range ch {
		ue := undoEntry{Path: e.path, Existed: cur[i] != absentHash}
		if ue.Existed {
			if err := tx.QueryRowContext(ctx, "SELECT content, mode, mtime FROM files WHERE path = ?", e.path).Scan(&ue.Content, &ue.Mode, &ue.MTime); err != nil {
				return res, err
			}
		}
		undo.Files = append(undo.Files, ue)
		if e.deleted {
			if _, err := tx.ExecContext(ctx, "DELETE FROM files WHERE path = ?", e.path); err != nil {
				return res, err
			}
			res.TombstonesApplied++
		} else {
			var c []byte
			var mode int64
			if err := o.db.QueryRowContext(ctx, "SELECT content, mode FROM files WHERE path = ?", e.path).Scan(&c, &mode); err != nil {
				return res, err
			}
			if err := upsertFile(ctx, tx, e.path, c, e.sha, mode, now); err != nil {
				return res, err
			}
			res.FilesMerged++
		}
		res.Paths = append(res.Paths, e.path)
	}
	for _, e := range ch {
		if e.deleted {
			continue
		}
		if err := checkShape(ctx, tx, "accept", e.path); err != nil {
			return AcceptResult{}, err
		}
	}
	if len(ch) > 0 {
		b, err := json.Marshal(undo)
		if err != nil {
			return AcceptResult{}, err
		}
		if err := putKV(ctx, tx, UndoKey(o.id), string(b)); err != nil {
			return AcceptResult{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return AcceptResult{}, err
	}
	acc, _ := json.Marshal(map[string]any{"accepted_at": undo.AcceptedAt, "result": res})
	_ = putKV(ctx, o.db, "cairn:accepted", string(acc))
	return res, nil
}

// Undo restores the stable paths an accepted workspace changed to their
// state before the accept (from the snapshot under UndoKey), in one
// transaction, and deletes the snapshot. It returns the number of paths
// restored; ErrNotFound when there is no snapshot. Later changes to those
// paths are overwritten.
func (s *Stable) Undo(ctx context.Context, workspaceID string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	v, ok, err := getKV(ctx, tx, UndoKey(workspaceID))
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, newErr("undo", workspaceID, ErrNotFound, "no undo snapshot for this workspace")
	}
	var rec undoRecord
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		return 0, fmt.Errorf("cairn: undo %s: %w", workspaceID, err)
	}
	for _, f := range rec.Files {
		if f.Existed {
			err = upsertFile(ctx, tx, f.Path, f.Content, sha256Hex(f.Content), f.Mode, f.MTime)
		} else {
			_, err = tx.ExecContext(ctx, "DELETE FROM files WHERE path = ?", f.Path)
		}
		if err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM kv WHERE key = ?", UndoKey(workspaceID)); err != nil {
		return 0, err
	}
	return len(rec.Files), tx.Commit()
}
