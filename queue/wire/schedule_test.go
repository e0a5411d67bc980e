package wire

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

func TestFiredJobIDOf(t *testing.T) {
	h := func(kv ...string) nats.Header {
		out := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	next := "2026-11-24T02:42:45.000000001Z"
	for _, c := range []struct {
		h    nats.Header
		want string
	}{
		{h(HeaderFleetSchedule, "tick", HeaderScheduler, "agents.schedule.tick", HeaderScheduleNext, next), "tick-1795488165"},
		{h(HeaderFleetSchedule, "tick", HeaderScheduler, "agents.schedule.tick", HeaderScheduleNext, ScheduleNextPurge), ""},
		{h(HeaderFleetSchedule, "tick", HeaderScheduleNext, next), ""}, // not fired by the server
		{h(HeaderScheduler, "agents.schedule.tick", HeaderScheduleNext, next), ""},
		{h(HeaderFleetSchedule, "bad.name", HeaderScheduler, "agents.schedule.x", HeaderScheduleNext, next), ""},
		{h(HeaderFleetSchedule, "tick", HeaderScheduler, "agents.schedule.tick", HeaderScheduleNext, "soon"), ""},
	} {
		got, ok := FiredJobIDOf(c.h)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("FiredJobIDOf(%v) = %q, %v; want %q", c.h, got, ok, c.want)
		}
	}
}
