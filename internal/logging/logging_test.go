package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
)

func TestJSONWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, slog.LevelInfo, FormatAuto)
	l.Info("hello", "n", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("auto format on a buffer is not JSON: %v: %q", err, buf.String())
	}
	if rec["msg"] != "hello" || rec["n"] != float64(1) || rec["level"] != "INFO" {
		t.Fatalf("record = %v", rec)
	}
}

func TestTextWhenTerminal(t *testing.T) {
	ptmx, tty := openPTY(t)
	l := New(tty, slog.LevelInfo, FormatAuto)
	l.Info("hello", "n", 1)
	buf := make([]byte, 4096)
	n, err := ptmx.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	got := string(buf[:n])
	if !strings.Contains(got, "level=INFO") || !strings.Contains(got, "msg=hello") || strings.HasPrefix(got, "{") {
		t.Fatalf("auto format on a terminal is not text: %q", got)
	}
	if !IsTerminal(tty) {
		t.Fatal("IsTerminal(tty) = false")
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Fatal("IsTerminal(regular file) = true")
	}
}

func TestExplicitFormats(t *testing.T) {
	var buf bytes.Buffer
	New(&buf, slog.LevelInfo, FormatText).Info("x")
	if !strings.HasPrefix(buf.String(), "time=") {
		t.Fatalf("text = %q", buf.String())
	}
	buf.Reset()
	New(&buf, slog.LevelInfo, "JSON").Info("x")
	if !json.Valid(buf.Bytes()) {
		t.Fatalf("json = %q", buf.String())
	}
	buf.Reset()
	New(&buf, slog.LevelInfo, "bogus").Info("x") // treated as auto: JSON on a buffer
	if !json.Valid(buf.Bytes()) {
		t.Fatalf("unknown format = %q", buf.String())
	}
}

func TestLevel(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, slog.LevelWarn, FormatJSON)
	l.Info("quiet")
	l.Debug("quieter")
	if buf.Len() != 0 {
		t.Fatalf("below level logged: %q", buf.String())
	}
	l.Warn("loud")
	if !strings.Contains(buf.String(), "loud") {
		t.Fatalf("warn not logged: %q", buf.String())
	}
}

func decodeLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestWithJob(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, slog.LevelInfo, FormatJSON)
	WithJob(l, "job-1", "lint").Info("started", "slot", 0)
	l.Info("unrelated")
	recs := decodeLines(t, buf.Bytes())
	if recs[0][KeyJobID] != "job-1" || recs[0][KeyOperation] != "lint" || recs[0]["slot"] != float64(0) {
		t.Fatalf("job record = %v", recs[0])
	}
	if _, ok := recs[1][KeyJobID]; ok {
		t.Fatalf("job id leaked to the parent logger: %v", recs[1])
	}
}

func TestContextWithJob(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, slog.LevelInfo, FormatJSON).With("worker", "w1").WithGroup("g")
	ctx := ContextWithJob(context.Background(), "job-2", "fix")
	l.InfoContext(ctx, "turn", "n", 3)
	l.Info("no ctx")
	recs := decodeLines(t, buf.Bytes())
	g, _ := recs[0]["g"].(map[string]any)
	if recs[0]["worker"] != "w1" || g[KeyJobID] != "job-2" || g[KeyOperation] != "fix" || g["n"] != float64(3) {
		t.Fatalf("record = %v", recs[0])
	}
	if _, ok := recs[1]["g"]; ok {
		t.Fatalf("record without ctx has job attrs: %v", recs[1])
	}
	if id, op, ok := JobFromContext(ctx); !ok || id != "job-2" || op != "fix" {
		t.Fatalf("JobFromContext = %q %q %v", id, op, ok)
	}
	if _, _, ok := JobFromContext(context.Background()); ok {
		t.Fatal("JobFromContext on a bare context = ok")
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"": FormatAuto, "auto": FormatAuto, " Text ": FormatText, "json": FormatJSON} {
		got, err := ParseFormat(in)
		if err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseFormat("yaml"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"yaml"`) {
		t.Errorf("ParseFormat(yaml) error = %v", err)
	}
	for in, want := range map[string]slog.Level{"": slog.LevelInfo, "debug": slog.LevelDebug, "INFO": slog.LevelInfo,
		"warn": slog.LevelWarn, "warning": slog.LevelWarn, "error": slog.LevelError, "info+2": slog.LevelInfo + 2} {
		got, err := ParseLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseLevel("loud"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseLevel(loud) error = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "auto", "TEXT", "json", "debug", "info+2", "warn-1", "warning", "ERROR", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if fm, err := ParseFormat(s); err == nil {
			if fm != FormatAuto && fm != FormatText && fm != FormatJSON {
				t.Fatalf("ParseFormat(%q) = %q", s, fm)
			}
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParseFormat(%q) error %v does not wrap ErrInvalid", s, err)
		}
		l, err := ParseLevel(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseLevel(%q) error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		// An accepted level prints as a name ParseLevel reads back.
		back, err := ParseLevel(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLevel(%q) = %v; ParseLevel(%q) = %v, %v", s, l, l.String(), back, err)
		}
	})
}
