package monty

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentfleet/fleet/internal/filedigest"
)

// The pinned Monty build (docs/MONTY.md §1). Upgrading Monty is a
// protocol upgrade: bump these together with the codec and golden frames.
const (
	// Version is the Monty release fleet speaks to.
	Version = "0.0.23"
	// BinarySHA256 is the sha256 of package/monty in
	// @pydantic/monty-linux-x64-gnu 0.0.23.
	BinarySHA256 = "b634e4fe49bdd2f933e2f5ecf32633db4273107a3a693946a4e3c9b0d01ba45a"
	// BinaryEnv names the environment variable that points tests and tools
	// at the binary.
	BinaryEnv = "FLEET_MONTY_BIN"
	// RepoBinaryPath is where `make monty` leaves the binary, relative to the
	// repository root.
	RepoBinaryPath = ".build/monty/monty"
)

// FindBinary locates the Monty binary: $FLEET_MONTY_BIN when set, else
// .build/monty/monty in the first directory at or above startDir that holds
// a go.mod. The error says to run `make monty` when nothing is found.
func FindBinary(startDir string) (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("monty: %s=%s: %w", BinaryEnv, p, err)
		}
		return p, nil
	}
	dir, err := filepath.Abs(startDir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, RepoBinaryPath)
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("monty: binary not found at %s: run `make monty` (or set %s)", p, BinaryEnv)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("monty: no go.mod above %s and %s unset: run `make monty` in the repository", startDir, BinaryEnv)
		}
		dir = parent
	}
}

// hashCache remembers verified binaries by path, size and modification time,
// so pools started one after another hash a 25 MB file once.
var hashCache sync.Map // hashKey → string (hex sha256)

type hashKey struct {
	path  string
	size  int64
	mtime time.Time
}

// verifyBinary checks that path is an executable file whose sha256 is want.
func verifyBinary(path, want string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadBinary, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrBadBinary, path)
	}
	if st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: %s is not executable", ErrBadBinary, path)
	}
	key := hashKey{path: path, size: st.Size(), mtime: st.ModTime()}
	got, ok := hashCache.Load(key)
	if !ok {
		h, err := filedigest.Hex(path)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadBinary, err)
		}
		hashCache.Store(key, h)
		got = h
	}
	if got != want {
		return fmt.Errorf("%w: %s has sha256 %s, want %s (run `make monty`)", ErrBadBinary, path, got, want)
	}
	return nil
}

var errEmptyBinary = errors.New("monty: Config.Binary is required")
