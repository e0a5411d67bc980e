package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// change is one file accept writes or removes.
type change struct {
	path    string // workspace path
	abs     string
	content string
	remove  bool
	mode    fs.FileMode
	what    string // modified, created, deleted
	// existed and old are the local file before the change, to restore it
	// when a later write fails.
	existed bool
	old     string
}

// planAccept works out what applying patches under root does, without
// touching the disk. Every reason to refuse is collected in conflicts
// (with force, only what cannot be applied at all is).
func planAccept(root string, rec *jobRecord, patches []filePatch, force bool) (changes []change, conflicts []string) {
	for _, fp := range patches {
		abs := filepath.Join(root, filepath.FromSlash(fp.path))
		data, rerr := os.ReadFile(abs)
		exists := rerr == nil
		if rerr != nil && !notExist(rerr) {
			conflicts = append(conflicts, fmt.Sprintf("%s: %v", fp.path, rerr))
			continue
		}
		local := string(data)
		mode := fs.FileMode(0o644)
		if st, err := os.Stat(abs); err == nil {
			mode = st.Mode().Perm()
		}
		ch := change{path: fp.path, abs: abs, mode: mode, existed: exists, old: local}
		if fp.IsBinary {
			conflicts = append(conflicts, fp.path+": a binary change cannot be applied from the diff")
			continue
		}
		if fp.IsNew {
			next, err := fp.apply("", true)
			if err != nil {
				conflicts = append(conflicts, err.Error())
				continue
			}
			if exists && local == next {
				continue // already there
			}
			if exists && !force {
				conflicts = append(conflicts, fp.path+": the job created it, but a local file exists")
				continue
			}
			ch.content, ch.what = next, "created"
			changes = append(changes, ch)
			continue
		}
		if !exists {
			if fp.IsDelete {
				continue // already gone
			}
			conflicts = append(conflicts, fp.path+": missing locally")
			continue
		}
		base, sent := "", false
		if rec != nil {
			base, sent = rec.Files[fp.path]
		}
		unchanged := sent && sha(local) == base
		if !unchanged && !force {
			switch {
			case rec == nil:
				conflicts = append(conflicts, fp.path+": no local record of the job's files (--force applies the diff where its context matches)")
			case !sent:
				conflicts = append(conflicts, fp.path+": not among the files the job was sent")
			default:
				conflicts = append(conflicts, fp.path+": changed locally since the job was enqueued")
			}
			continue
		}
		if fp.IsDelete {
			ch.remove, ch.what = true, "deleted"
			changes = append(changes, ch)
			continue
		}
		next, err := fp.apply(local, unchanged)
		if err != nil {
			conflicts = append(conflicts, err.Error())
			continue
		}
		ch.content, ch.what = next, "modified"
		changes = append(changes, ch)
	}
	return changes, conflicts
}

// writeChanges applies the planned changes, each file atomically
// (temporary file and rename). When one fails, the files already written
// are put back as they were (and the folders made for them removed), so
// that nothing of the job is left half-applied; the error says so, or
// names what could not be restored.
func writeChanges(changes []change) ([]string, error) {
	var done []string
	var made []string // folders created, deepest last
	for i, ch := range changes {
		var err error
		if ch.remove {
			err = os.Remove(ch.abs)
		} else {
			var dirs []string
			dirs, err = mkdirs(filepath.Dir(ch.abs))
			made = append(made, dirs...)
			if err == nil {
				err = writeAtomic(ch.abs, []byte(ch.content), ch.mode)
			}
		}
		if err != nil {
			if rerr := rollback(changes[:i], made); rerr != nil {
				return done, fmt.Errorf("%s: %w; restoring the files written before it failed too: %v", ch.path, err, rerr)
			}
			return nil, fmt.Errorf("%s: %w; nothing was written (%d file(s) written before it were restored)", ch.path, err, i)
		}
		done = append(done, ch.path)
	}
	return done, nil
}

// rollback undoes applied changes, last first, then removes the folders
// made for them when they are empty.
func rollback(applied []change, made []string) error {
	var errs []error
	for i := len(applied) - 1; i >= 0; i-- {
		ch := applied[i]
		var err error
		if ch.existed {
			err = writeAtomic(ch.abs, []byte(ch.old), ch.mode)
		} else {
			err = os.Remove(ch.abs)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ch.path, err))
		}
	}
	for i := len(made) - 1; i >= 0; i-- {
		_ = os.Remove(made[i]) // fails, harmlessly, when not empty
	}
	return errors.Join(errs...)
}

// mkdirs is os.MkdirAll that returns the folders it created, outermost
// first.
func mkdirs(dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !notExist(err) || filepath.Dir(d) == d {
			break
		}
		missing = append(missing, d)
	}
	slices.Reverse(missing)
	// On an error, MkdirAll may have made some of them: the caller removes
	// what is empty either way.
	return missing, os.MkdirAll(dir, 0o755)
}
