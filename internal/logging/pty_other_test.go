//go:build !linux

package logging

import (
	"os"
	"testing"
)

func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Skip("pseudo-terminal test is Linux-only")
	return nil, nil
}
