//go:build llama

package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentfleet/fleet/inference/gguf"
)

// finishedFile, in the work folder, holds the configuration digest of the
// last run that finished there (its output written).
const finishedFile = "finished"

// checkpointFiles are a run's state in the work folder: the trainer's
// checkpoint, its best weights so far and its last output.
var checkpointFiles = []string{"ckpt.pt", "best.pt", "out.safetensors"}

// settleCheckpoint decides what to do with a checkpoint in cfg.Work made
// with another configuration digest than digest (other data, vocabulary
// or settings): the checkpoint of a run that finished is set aside, so the
// new run starts from scratch; that of an unfinished run is refused with
// ErrConfig, since starting over would throw its training away (the same
// command as before resumes it; -fresh discards it). A checkpoint of the
// same digest is left to the trainer, which resumes from it.
func settleCheckpoint(cfg Config, digest string, say func(string, ...any)) error {
	if _, err := os.Stat(filepath.Join(cfg.Work, "ckpt.pt")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	old := workDigest(cfg.Work)
	if old == digest {
		return nil
	}
	if !finished(cfg, old) {
		return fmt.Errorf("%w: %s holds the checkpoint of an unfinished run with other data or settings: "+
			"run that command again to finish it, or pass -fresh to discard it and start this one", ErrConfig, cfg.Work)
	}
	for _, f := range checkpointFiles {
		if err := os.Remove(filepath.Join(cfg.Work, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	say("train: %s held the checkpoint of a finished run with other data or settings: starting a new run", cfg.Work)
	return nil
}

// workDigest is the configuration digest of the run the work folder's
// checkpoint belongs to ("" when unknown).
func workDigest(work string) string {
	b, err := os.ReadFile(filepath.Join(work, "config.json"))
	if err != nil {
		return ""
	}
	var c struct {
		Digest string `json:"digest"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.Digest
}

// finished reports whether the run of digest finished: the work folder
// says so, or the output file was written by it (work folders of earlier
// versions have no marker).
func finished(cfg Config, digest string) bool {
	if digest == "" {
		return false
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Work, finishedFile)); err == nil && strings.TrimSpace(string(b)) == digest {
		return true
	}
	m, err := gguf.ReadModel(cfg.Out)
	return err == nil && m.KV.String(MetaConfig) == digest
}
