package ollamapeer_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/ollamapeer"
)

func TestParsePromptLoads(t *testing.T) {
	log := `time=2026-11-24T06:24:49.500Z level=DEBUG source=server.go:1536 msg="completion request" images=0 prompt=3576 format=""
time=2026-11-24T06:24:51.794Z level=WARN source=vocabulary.go:49 msg="adding bos token to prompt which already has it" id=[2]
time=2026-11-24T06:24:51.795Z level=DEBUG source=vocabulary.go:52 msg="adding bos token to prompt" id=2
time=2026-11-24T06:24:51.795Z level=DEBUG source=cache.go:151 msg="loading cache slot" id=0 cache=0 prompt=305 used=0 remaining=305
time=2026-11-24T06:24:54.100Z level=INFO source=server.go:1 msg="something else" prompt=7
time=2026-11-24T06:24:54.405Z level=DEBUG source=cache.go:151 msg="loading cache slot" id=0 cache=305 prompt=305 used=9 remaining=296
`
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	got, err := ollamapeer.ParsePromptLoads(log)
	if err != nil {
		t.Fatal(err)
	}
	want := []ollamapeer.PromptLoad{
		{Prompt: 305, Used: 0, Remaining: 305, DoubleBOS: true, Received: at("2026-11-24T06:24:49.500Z"), Loaded: at("2026-11-24T06:24:51.795Z")},
		{Prompt: 305, Used: 9, Remaining: 296, Loaded: at("2026-11-24T06:24:54.405Z")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		`msg="loading cache slot" id=0 cache=0 prompt=305 used=0` + "\n",
		`msg="loading cache slot" id=0 cache=0 prompt=x used=0 remaining=1` + "\n",
	} {
		if _, err := ollamapeer.ParsePromptLoads(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
