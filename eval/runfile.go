package eval

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ReadRunFile reads a run written by WriteRunFile (`fleet-train eval
// -json`): a run measured outside the fleet, for `enqueue eval compare`.
func ReadRunFile(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("eval: run file: %w", err)
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("eval: run file %s: %v", path, err)
	}
	if r.ID == "" || r.Tasks != len(r.Results) {
		return nil, fmt.Errorf("eval: run file %s: not a run (id %q, %d tasks, %d results)", path, r.ID, r.Tasks, len(r.Results))
	}
	return &r, nil
}

// WriteRunFile writes r as JSON to path through a temporary file renamed
// into place.
func WriteRunFile(path string, r *Run) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".run-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
