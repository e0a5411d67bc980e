package main

import (
	"os"
	"strconv"
)

// writeFileAtomic writes content to path through a temporary file in the
// same folder and a rename, so that a script waiting for -ready-file never
// reads half of it.
func writeFileAtomic(path, content string) error {
	tmp := path + ".tmp." + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
