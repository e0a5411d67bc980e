package eval

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A survey cache never changes a suite: the build that fills it, the build
// that reads it and a build with a cache entry spoiled all give the bytes of
// a build without one, and the reading build asks Python for no survey.
func TestSurveyCacheKeepsSuites(t *testing.T) {
	py := needTools(t)
	_, want := suiteSeven(t)
	dir := t.TempDir()
	var tryBuild func(py *Python, dir string) ([]byte, error)
	build := func(py *Python) []byte {
		t.Helper()
		b, err := tryBuild(py, dir)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tryBuild = func(py *Python, dir string) ([]byte, error) {
		s, err := Build(context.Background(), BuildConfig{Seed: 7, Python: py, Only: smallFiles, SurveyCache: dir,
			Sources:  DefaultSources()[:1],
			PerSplit: map[string]int{SplitTrain: 9, SplitDev: 9, SplitTest: 9}})
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		err = s.Write(&buf)
		return buf.Bytes(), err
	}
	if got := build(py); !bytes.Equal(got, want) {
		t.Fatal("the build that filled the cache differs from one without it")
	}
	entries, _ := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if len(entries) == 0 {
		t.Fatal("nothing was cached")
	}
	// Only "versions" and "check" may reach this interpreter: a survey
	// request fails.
	noSurvey := &Python{Path: writeScript(t, `#!/bin/sh
exec /usr/bin/python3 -c '
import json, runpy, sys
sys.argv = sys.argv[2:]  # after -c: -B evaltool.py serve
real = sys.stdin
class Guard:
    def __iter__(self):
        for line in real:
            if json.loads(line)["cmd"] == "survey":
                raise SystemExit("a survey was asked for")
            yield line
sys.stdin = Guard()
runpy.run_path(sys.argv[0], run_name="__main__")
' "$@"
`)}
	defer noSurvey.Close()
	if _, err := tryBuild(noSurvey, t.TempDir()); err == nil || !strings.Contains(err.Error(), "a survey was asked for") {
		t.Fatalf("the guard let a survey through: %v", err)
	}
	if got := build(noSurvey); !bytes.Equal(got, want) {
		t.Fatal("the build that read the cache differs")
	}
	// A spoiled entry is surveyed again, not trusted.
	if err := os.WriteFile(entries[0], []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := build(py); !bytes.Equal(got, want) {
		t.Fatal("the build over a spoiled entry differs")
	}
}

func writeScript(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
