package pytestbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

func box(t *testing.T, cfg Config) *Box {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err) // bubblewrap and python3-pytest are in .ci/apt-packages
	}
	return b
}

func TestRunsTheWorkspaceTests(t *testing.T) {
	b := box(t, Config{})
	files := map[string]string{
		"pkg/__init__.py":    "",
		"pkg/m.py":           "def double(x):\n    return 2 * x\n",
		"tests/test_m.py":    "from pkg.m import double\n\n\ndef test_ok():\n    assert double(2) == 4\n\n\ndef test_bad():\n    assert double(2) == 5\n",
		"tests/test_skip.py": "import pytest\n\n\n@pytest.mark.skip\ndef test_later():\n    pass\n",
	}
	r, err := b.Run(context.Background(), files, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Passed != 1 || r.Failed != 1 || r.Skipped != 1 || r.ExitCode != 1 || r.TimedOut {
		t.Fatalf("result %+v", r)
	}
	if !strings.Contains(r.Output, "assert 4 == 5") {
		t.Fatalf("output lacks the failed assertion:\n%s", r.Output)
	}
	r, err = b.Run(context.Background(), files, []string{"tests/test_m.py::test_ok"})
	if err != nil || r.Passed != 1 || r.ExitCode != 0 {
		t.Fatalf("one test: %+v %v", r, err)
	}
}

// No network, no host files outside /usr, a time limit.
func TestSandboxLimits(t *testing.T) {
	b := box(t, Config{Timeout: 3 * time.Second})
	files := map[string]string{"test_box.py": `import os, socket, pytest


def test_no_network():
    with pytest.raises(OSError):
        socket.create_connection(("1.1.1.1", 53), timeout=2)


def test_no_host_files():
    assert not os.path.exists("/etc/passwd")
    assert not os.path.exists("/root")
    assert os.getcwd() == "/work"
`}
	r, err := b.Run(context.Background(), files, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Passed != 2 || r.ExitCode != 0 {
		t.Fatalf("result %+v\n%s", r, r.Output)
	}
	spin := map[string]string{"test_spin.py": "def test_spin():\n    while True:\n        pass\n"}
	start := time.Now()
	r, err = b.Run(context.Background(), spin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.TimedOut || time.Since(start) > 20*time.Second {
		t.Fatalf("spin: %+v after %s", r, time.Since(start))
	}
	if _, err := b.Run(context.Background(), map[string]string{"../escape.py": "x"}, nil); err == nil {
		t.Fatal("a path outside the copy was accepted")
	}
}

func TestMissingToolNamesPackage(t *testing.T) {
	_, err := New(Config{Bwrap: "", Python: "/nonexistent/python3"})
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y python3") {
		t.Fatalf("err = %v", err)
	}
}
