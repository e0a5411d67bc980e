package wire

import (
	"errors"
	"testing"
)

func TestPrioritySubjects(t *testing.T) {
	for _, tc := range []struct {
		subject  string
		op       string
		p        Priority
		consumer string
		bad      bool
	}{
		{"agents.run.lint", "lint", PriorityNormal, "lint", false},
		{"agents.run.lint.high", "lint", PriorityHigh, "lint-HIGH", false},
		{"agents.run.sample_data.low", "sample_data", PriorityLow, "sample_data-LOW", false},
		{"agents.run.lint.normal", "lint", "", "", true},
		{"agents.run.lint.urgent", "lint", "", "", true},
		{"agents.run.lint.high.x", "lint", "", "", true},
		{"agents.run.lint.", "lint", "", "", true},
	} {
		op, p, err := ParseRunSubject(tc.subject)
		if op != tc.op || p != tc.p || (err != nil) != tc.bad {
			t.Errorf("ParseRunSubject(%q) = %q, %q, %v", tc.subject, op, p, err)
			continue
		}
		if tc.bad {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("%q: %v is not ErrInvalidRequest", tc.subject, err)
			}
			continue
		}
		if s := PrioritySubject(op, p); s != tc.subject {
			t.Errorf("PrioritySubject(%q, %q) = %q", op, p, s)
		}
		if c := PriorityConsumer(op, p); c != tc.consumer {
			t.Errorf("PriorityConsumer(%q, %q) = %q, want %q", op, p, c, tc.consumer)
		}
	}
	for _, s := range []string{"", "high", "normal", "low"} {
		if p, err := ParsePriority("priority", s); err != nil || p.Tier() < 0 {
			t.Errorf("ParsePriority(%q) = %q, %v", s, p, err)
		}
	}
	for _, s := range []string{"HIGH", "urgent", " low", "1"} {
		if _, err := ParsePriority("priority", s); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("ParsePriority(%q): %v", s, err)
		}
	}
}

// FuzzParseRunSubject: a subject either parses into an operation and a
// priority whose subject is the input, or is refused with QUEUE_003.
func FuzzParseRunSubject(f *testing.F) {
	for _, s := range []string{"agents.run.lint", "agents.run.lint.high", "agents.run.lint.low", "agents.run.a.b.c", "agents.run."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		op, p, err := ParseRunSubject(SubjectRunPrefix + s)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) || p != "" {
				t.Fatalf("%q: %q, %v", s, p, err)
			}
			return
		}
		if got := PrioritySubject(op, p); got != SubjectRunPrefix+s {
			t.Fatalf("%q parsed as %q, %q, which is %q", s, op, p, got)
		}
	})
}
