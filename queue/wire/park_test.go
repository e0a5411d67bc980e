package wire

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParseResume(t *testing.T) {
	answer, err := ResumeHeader(7, "yes")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    nats.Header
		want *ResumeRequest
	}{
		{"ordinary request", nats.Header{}, nil},
		{"answer", answer, &ResumeRequest{Park: 7, Answer: "yes"}},
		{"timeout", nats.Header{HeaderResume: {"7"}, HeaderParkTimeout: {"true"}}, &ResumeRequest{Park: 7, TimedOut: true}},
		{"cancel", CancelResumeHeader(7), &ResumeRequest{Park: 7, Canceled: true}},
	} {
		got, err := ParseResume(c.h)
		if err != nil || (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	// A 1.9 worker reads the cancel request as a timeout.
	if h := CancelResumeHeader(7); h.Get(HeaderParkTimeout) != "true" {
		t.Errorf("cancel request without %s: %v", HeaderParkTimeout, h)
	}
	for _, h := range []nats.Header{
		{HeaderResume: {"x"}, HeaderParkCancel: {"true"}},
		{HeaderResume: {"0"}, HeaderParkCancel: {"true"}},
		{HeaderResume: {"7"}},
		{HeaderResume: {"7"}, HeaderAnswer: {"not json"}},
	} {
		if _, err := ParseResume(h); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%v: %v, want ErrInvalidRequest", h, err)
		}
	}
}
