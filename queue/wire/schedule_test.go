package wire

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// natsKey is the KV key rule of the NATS clients, plus fleet's own: no
// empty token and at most MaxUniqueKeyLength bytes.
var natsKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func FuzzValidUniqueKey(f *testing.F) {
	for _, s := range []string{"lint.abc.def", "a", ".a", "a.", "a..b", "a b", "a/b", "ü", "k=v", strings.Repeat("a", 201)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		ok := ValidUniqueKey(key)
		want := natsKey.MatchString(key) && !strings.Contains(key, "/") && len(key) <= MaxUniqueKeyLength &&
			!strings.HasPrefix(key, ".") && !strings.HasSuffix(key, ".") && !strings.Contains(key, "..")
		if ok != want {
			t.Fatalf("ValidUniqueKey(%q) = %v, want %v", key, ok, want)
		}
	})
}

func TestFiredJobID(t *testing.T) {
	name := strings.Repeat("n", MaxScheduleName)
	id := FiredJobID(name, time.Date(2286, 11, 20, 17, 46, 39, 0, time.UTC)) // 10 digits, the widest before 2286
	if !ValidJobID(id) || !ValidScheduleName(name) || ValidScheduleName(name+"n") {
		t.Fatalf("%q (%d bytes) is not a valid job id", id, len(id))
	}
	if got := FiredJobID("tick", time.Unix(1795488165, 500)); got != "tick-1795488165" {
		t.Fatalf("FiredJobID = %q", got)
	}
}
