package eval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// surveyCache keeps survey answers on disk, one file per upstream file,
// under a key of everything that decides the answer: the file's text and
// path, whether lint sites were asked for, the line length, evaltool's
// scripts and the versions of Python and the linters. Every seed surveys
// the same upstream files, so the suites after the first find their
// answers here (a suite build is then mostly the check of its defects).
// A cache that cannot be read or written is skipped: it never changes what
// a build makes.
type surveyCache struct {
	dir  string
	salt string
}

// openSurveyCache asks py for the versions the answers depend on; dir ""
// (no cache) gives nil.
func openSurveyCache(ctx context.Context, dir string, py *Python) (*surveyCache, error) {
	if dir == "" {
		return nil, nil
	}
	var v map[string]string
	if err := py.run(ctx, "versions", map[string]any{}, &v); err != nil {
		return nil, err
	}
	h := sha256.New()
	fs.WalkDir(pyFiles, "py", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := pyFiles.ReadFile(p)
			fmt.Fprintf(h, "%s %d\n", p, len(b))
			h.Write(b)
		}
		return nil
	})
	vb, _ := json.Marshal(v) // map keys are sorted
	h.Write(vb)
	return &surveyCache{dir: dir, salt: hex.EncodeToString(h.Sum(nil))}, nil
}

func (c *surveyCache) key(path, text string, lint bool, lineLength int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%t\x00%d\x00", c.salt, path, lint, lineLength)
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))
}

func (c *surveyCache) file(key string) string {
	return filepath.Join(c.dir, key[:2], key[2:]+".json")
}

func (c *surveyCache) get(key string) (json.RawMessage, bool) {
	if c == nil {
		return nil, false
	}
	b, err := os.ReadFile(c.file(key))
	if err != nil || !json.Valid(b) {
		return nil, false
	}
	return b, true
}

// put writes an answer atomically (a temporary file renamed), so builds
// running side by side never read half of one.
func (c *surveyCache) put(key string, raw json.RawMessage) {
	if c == nil {
		return
	}
	p := c.file(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return
	}
	_, werr := f.Write(raw)
	if cerr := f.Close(); werr != nil || cerr != nil || os.Rename(f.Name(), p) != nil {
		os.Remove(f.Name())
	}
}
