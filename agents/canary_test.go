package agents

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const canaryBase = `name: a
model: functiongemma@1
tools:
  - name: submit_result
    description: done
`

func loadCanary(t *testing.T, extra string) (*Definition, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(p, []byte(canaryBase+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return LoadFile(p)
}

func TestCanaryLoads(t *testing.T) {
	d, err := loadCanary(t, "adapter: lora@1\ncanary:\n  model: functiongemma@2\n  adapter: lora@2\n  share: 0.25\n")
	if err != nil {
		t.Fatal(err)
	}
	if d.Adapter != "lora@1" || d.Canary == nil || *d.Canary != (Canary{Model: "functiongemma@2", Adapter: "lora@2", Share: 0.25}) {
		t.Fatalf("definition %+v canary %+v", d, d.Canary)
	}
	if d, err = loadCanary(t, "canary:\n  model: m@2\n  share: 1\n"); err != nil || d.Canary.Share != 1 {
		t.Fatalf("integer share: %v %+v", err, d)
	}
}

func TestCanaryErrorsNameTheLine(t *testing.T) {
	for extra, want := range map[string]string{
		"canary:\n  share: 0.1\n":                ":6: canary.model: required",
		"canary:\n  model: m@2\n":                ":6: canary.share: required",
		"canary:\n  model: m@2\n  share: 1.5\n":  ":8: canary.share: must be between 0 and 1, got 1.5",
		"canary:\n  model: m@2\n  share: -0.1\n": ":8: canary.share: must be between 0 and 1, got -0.1",
		"canary:\n  model: m@2\n  share: lots\n": ":8: canary.share: must be a number between 0 and 1",
		"canary:\n  model: m@2\n  shares: 0.1\n": ":8: canary: unknown key \"shares\"",
		"canary: m@2\n":                          ":6: canary: must be a mapping",
	} {
		_, err := loadCanary(t, extra)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", extra, err, want)
		}
	}
}

// TestCanaryPickIsDeterministicAndHoldsItsShare: the same id always makes
// the same choice; over 10,000 ids a 0.3 share lands within 4σ
// (σ = √(10000·0.3·0.7) ≈ 45.8).
func TestCanaryPickIsDeterministicAndHoldsItsShare(t *testing.T) {
	d := &Definition{Name: "a", Model: "m@1", Adapter: "l@1", Canary: &Canary{Model: "m@2", Share: 0.3}}
	n := 0
	for i := range 10000 {
		id := fmt.Sprintf("01J%08d", i)
		got, picked := d.ForJob(id)
		if again, p2 := d.ForJob(id); p2 != picked || again.Model != got.Model {
			t.Fatalf("%s: not deterministic", id)
		}
		if picked {
			n++
			if got == d || got.Model != "m@2" || got.Adapter != "l@1" || got.Canary != nil {
				t.Fatalf("canary copy %+v", got)
			}
		} else if got != d {
			t.Fatal("a base job got a copy")
		}
	}
	if n < 3000-184 || n > 3000+184 {
		t.Fatalf("%d of 10000 picked for a 0.3 share", n)
	}
	if CanaryPick("x", 0) || !CanaryPick("x", 1) {
		t.Fatal("share 0 or 1 not honoured")
	}
}
