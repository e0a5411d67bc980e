package cairn

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// lookup returns the overlay's view of a clean path: content from the
// overlay, deleted by a tombstone, or (inOverlay=false, deleted=false) to be
// read from stable.
func (o *Overlay) lookup(ctx context.Context, cp string) (content []byte, inOverlay, deleted bool, err error) {
	rows, err := o.db.QueryContext(ctx, "SELECT content, 0 FROM files WHERE path = ?1 UNION ALL SELECT NULL, 1 FROM tombstones WHERE path = ?1", cp)
	if err != nil {
		return nil, false, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var c []byte
		var tomb int
		if err := rows.Scan(&c, &tomb); err != nil {
			return nil, false, false, err
		}
		if tomb == 1 {
			deleted = true
			continue
		}
		if c == nil {
			c = []byte{}
		}
		content, inOverlay = c, true
	}
	return content, inOverlay, deleted && !inOverlay, rows.Err()
}

// readVisible returns the content of the file at cp in the merged view,
// or ok=false.
func (o *Overlay) readVisible(ctx context.Context, cp string) ([]byte, bool, error) {
	c, in, del, err := o.lookup(ctx, cp)
	if err != nil || in {
		return c, in, err
	}
	if del {
		return nil, false, nil
	}
	err = o.stable.db.QueryRowContext(ctx, "SELECT content FROM files WHERE path = ?", cp).Scan(&c)
	if err == sql.ErrNoRows {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if c == nil {
		c = []byte{}
	}
	return c, true, nil
}

// fileVisible reports whether a file exists at cp in the merged view.
func (o *Overlay) fileVisible(ctx context.Context, cp string) (bool, error) {
	var tomb int
	err := o.db.QueryRowContext(ctx, "SELECT 0 FROM files WHERE path = ?1 UNION ALL SELECT 1 FROM tombstones WHERE path = ?1 LIMIT 1", cp).Scan(&tomb)
	switch {
	case err == nil:
		return tomb == 0, nil
	case err != sql.ErrNoRows:
		return false, err
	}
	h, err := hashOf(ctx, o.stable.db, cp)
	return h != absentHash, err
}

// dirVisible reports whether any visible file lies under the clean
// directory path cp ("." is always a directory).
func (o *Overlay) dirVisible(ctx context.Context, cp string) (bool, error) {
	if cp == "." {
		return true, nil
	}
	pre := dirPrefix(cp)
	var one int
	err := o.db.QueryRowContext(ctx, "SELECT 1 FROM files WHERE path >= ? AND path < ? LIMIT 1", pre, prefixEnd(pre)).Scan(&one)
	if err == nil {
		return true, nil
	}
	if err != sql.ErrNoRows {
		return false, err
	}
	tombs, err := o.tombstoneSet(ctx, pre)
	if err != nil {
		return false, err
	}
	rows, err := o.stable.db.QueryContext(ctx, "SELECT path FROM files WHERE path >= ? AND path < ? ORDER BY path", pre, prefixEnd(pre))
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return false, err
		}
		if !tombs[p] {
			return true, nil
		}
	}
	return false, rows.Err()
}

func (o *Overlay) tombstoneSet(ctx context.Context, prefix string) (map[string]bool, error) {
	ps, err := pathsWithPrefix(ctx, o.db, "tombstones", prefix)
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(ps))
	for _, p := range ps {
		m[p] = true
	}
	return m, nil
}

// visiblePaths returns every visible file path under prefix ("" = all),
// sorted, and the set of those that come from the overlay.
func (o *Overlay) visiblePaths(ctx context.Context, prefix string) ([]string, map[string]bool, error) {
	ov, err := pathsWithPrefix(ctx, o.db, "files", prefix)
	if err != nil {
		return nil, nil, err
	}
	tombs, err := o.tombstoneSet(ctx, prefix)
	if err != nil {
		return nil, nil, err
	}
	st, err := pathsWithPrefix(ctx, o.stable.db, "files", prefix)
	if err != nil {
		return nil, nil, err
	}
	inOv := make(map[string]bool, len(ov))
	for _, p := range ov {
		inOv[p] = true
	}
	out := slices.Clone(ov)
	for _, p := range st {
		if !inOv[p] && !tombs[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, inOv, nil
}

// ReadFile returns the content of p in the merged view (overlay, else
// stable unless deleted). Errors: ErrPath* for bad paths, ErrIsDir,
// ErrNotFound, ErrTooLarge over MaxContentBytes.
func (o *Overlay) ReadFile(ctx context.Context, p string) ([]byte, error) {
	const op = "read_file"
	cp, err := cleanFilePath(op, p)
	if err != nil {
		return nil, err
	}
	// Record the base first: if stable changes between the two, the run
	// saw the newer content but Accept conservatively reports it stale.
	if err := o.recordBase(ctx, cp); err != nil {
		return nil, err
	}
	c, ok, err := o.readVisible(ctx, cp)
	if err != nil {
		return nil, err
	}
	if !ok {
		if isDir, err := o.dirVisible(ctx, cp); err != nil {
			return nil, err
		} else if isDir {
			return nil, newErr(op, p, ErrIsDir, "")
		}
		return nil, newErr(op, p, ErrNotFound, "")
	}
	if len(c) > MaxContentBytes {
		return nil, newErr(op, p, ErrTooLarge, fmt.Sprintf("file is %d bytes; the limit is %d", len(c), MaxContentBytes))
	}
	return c, nil
}

// Exists reports whether a file (not a directory) exists at p in the merged
// view.
func (o *Overlay) Exists(ctx context.Context, p string) (bool, error) {
	cp, err := CleanPath("file_exists", p)
	if err != nil {
		return false, err
	}
	if cp == "." {
		return false, nil
	}
	return o.fileVisible(ctx, cp)
}

// ListDir returns the sorted names of the entries directly in directory p
// ("", "." and "/" are the root): the union of overlay and stable, minus
// tombstoned files. Directories are implied by file paths and listed by
// their bare name, without a trailing slash, exactly like files. Errors:
// ErrNotDir when p is a file, ErrNotFound when no such directory exists
// (the root always exists, possibly empty).
func (o *Overlay) ListDir(ctx context.Context, p string) ([]string, error) {
	const op = "list_dir"
	cp, err := cleanDirArg(op, p)
	if err != nil {
		return nil, err
	}
	if cp != "." {
		if isFile, err := o.fileVisible(ctx, cp); err != nil {
			return nil, err
		} else if isFile {
			return nil, newErr(op, p, ErrNotDir, "")
		}
	}
	pre := dirPrefix(cp)
	paths, _, err := o.visiblePaths(ctx, pre)
	if err != nil {
		return nil, err
	}
	if cp != "." && len(paths) == 0 {
		return nil, newErr(op, p, ErrNotFound, "no such directory")
	}
	names := make([]string, 0, len(paths))
	for _, fp := range paths {
		rest := fp[len(pre):]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[:i]
		}
		if n := len(names); n == 0 || names[n-1] != rest {
			names = append(names, rest)
		}
	}
	// Sorting paths does not sort names ("a.b" < "a/x" but "a" < "a.b").
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Glob returns the sorted visible file paths matching pattern (see Glob
// for the syntax). Directories are not returned.
func (o *Overlay) Glob(ctx context.Context, pattern string) ([]string, error) {
	g, err := compileGlob("search_files", pattern)
	if err != nil {
		return nil, err
	}
	paths, _, err := o.visiblePaths(ctx, g.literalPrefix())
	if err != nil {
		return nil, err
	}
	out := paths[:0]
	for _, p := range paths {
		if g.Match(p) {
			out = append(out, p)
		}
	}
	return slices.Clip(out), nil
}

// GetKV decodes the value under key into dst and reports whether it existed.
func (o *Overlay) GetKV(ctx context.Context, key string, dst any) (bool, error) {
	v, ok, err := getKV(ctx, o.db, key)
	if err != nil || !ok {
		return false, err
	}
	return true, json.Unmarshal([]byte(v), dst)
}

// Files returns the merged view of the workspace (overlay over stable,
// tombstones honoured): every visible file and its content.
func (o *Overlay) Files(ctx context.Context) (map[string][]byte, error) {
	paths, _, err := o.visiblePaths(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(paths))
	for _, p := range paths {
		c, ok, err := o.readVisible(ctx, p)
		if err != nil {
			return nil, err
		}
		if ok {
			out[p] = c
		}
	}
	return out, nil
}
