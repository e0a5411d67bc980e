// Package filedigest computes a file's sha256 once per process: a model
// file (a GGUF of hundreds of megabytes) is hashed the first time a
// transcript names it, and the digest is reused while the file's size and
// modification time stay the same.
package filedigest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

type key struct {
	path string
	size int64
	mod  time.Time
}

type entry struct {
	once   sync.Once
	digest string
	err    error
}

var cache sync.Map // key -> *entry

// SHA256 returns "sha256:<hex>" of the file at path, computed at most once
// per process for the same path, size and modification time (concurrent
// callers wait for the one computation).
func SHA256(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("filedigest: %w", err)
	}
	e, _ := cache.LoadOrStore(key{path, fi.Size(), fi.ModTime()}, new(entry))
	en := e.(*entry)
	en.once.Do(func() { en.digest, en.err = hashFile(path) })
	return en.digest, en.err
}

func hashFile(path string) (string, error) {
	h, err := Hex(path)
	if err != nil {
		return "", err
	}
	return "sha256:" + h, nil
}

// Hex returns the lowercase hex sha256 of the file at path, read now (not
// cached): for checks that must see the bytes as they are, such as a
// downloaded file before it is used.
func Hex(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("filedigest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("filedigest: %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
