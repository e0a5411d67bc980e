package wire

import (
	"strings"
)

// Priority is a request's priority (protocol 1.8, docs/PROTOCOL.md §19):
// one of Priorities. A request without one is normal.
type Priority string

// The priorities, from the most to the least urgent.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Priorities lists the priorities from the most to the least urgent; a
// priority's index is its tier (0 = served first).
var Priorities = [...]Priority{PriorityHigh, PriorityNormal, PriorityLow}

// HeaderPriority (optional, on a request; protocol 1.8) repeats the
// priority of the request's subject. When present it must be a known
// priority equal to the subject's, or the request is refused (QUEUE_003).
const HeaderPriority = "Fleet-Priority"

// Tier is p's index in Priorities (0 = high); -1 for an unknown priority.
// The empty priority is normal.
func (p Priority) Tier() int {
	switch p {
	case PriorityHigh:
		return 0
	case PriorityNormal, "":
		return 1
	case PriorityLow:
		return 2
	}
	return -1
}

// ParsePriority reads a priority as a client or a header gives it: "" is
// normal; anything but high, normal or low is a QUEUE_003 error naming
// field.
func ParsePriority(field, s string) (Priority, error) {
	p := Priority(s)
	if p == "" {
		return PriorityNormal, nil
	}
	if p.Tier() < 0 {
		return "", Invalid(field, "unknown priority %q (want high, normal or low)", Clip(s))
	}
	return p, nil
}

// PrioritySubject is where requests for operation at priority p are
// published: agents.run.<operation> for normal (the 1.3 subject), and
// agents.run.<operation>.high or .low otherwise.
func PrioritySubject(operation string, p Priority) string {
	if p == PriorityNormal || p == "" {
		return RunSubject(operation)
	}
	return RunSubject(operation) + "." + string(p)
}

// PriorityConsumer is the durable consumer of operation at priority p on
// FLEET_RUNS: the operation's name for normal (the 1.3 consumer), and
// "<operation>-HIGH" or "<operation>-LOW" otherwise (upper case, which an
// operation name cannot contain, so no operation's consumer can clash).
func PriorityConsumer(operation string, p Priority) string {
	if p == PriorityNormal || p == "" {
		return operation
	}
	return operation + "-" + strings.ToUpper(string(p))
}

// ParseRunSubject splits a FLEET_RUNS request subject into its operation
// and priority: agents.run.<operation> is normal, agents.run.<operation>.<p>
// has priority p. A subject with an unknown priority token (or more
// tokens) returns the operation token and a QUEUE_003 error.
func ParseRunSubject(subject string) (operation string, p Priority, err error) {
	rest := strings.TrimPrefix(subject, SubjectRunPrefix)
	op, tail, dotted := strings.Cut(rest, ".")
	if !dotted {
		return op, PriorityNormal, nil
	}
	if p = Priority(tail); p == PriorityHigh || p == PriorityLow {
		return op, p, nil
	}
	return op, "", Invalid("subject", "%q has an unknown priority %q (want %s<operation>, or .high or .low after it)",
		Clip(subject), Clip(tail), SubjectRunPrefix)
}
