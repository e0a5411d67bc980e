package wire

import (
	"strconv"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/nats-io/nats.go"
)

// Scheduling and uniqueness (docs/PROTOCOL.md §12 and §13).
const (
	// SubjectSchedulePrefix + <schedule> holds a schedule message in
	// FLEET_RUNS: the request body with Nats-Schedule and
	// Nats-Schedule-Target. The server publishes a copy on the target when
	// the schedule fires.
	SubjectSchedulePrefix = "agents.schedule."
	// HeaderSchedule is the server's schedule pattern: "@at <RFC3339>",
	// "@every <duration>" or a six-field cron expression.
	HeaderSchedule = "Nats-Schedule"
	// HeaderScheduleTarget is the subject a fired copy is stored on.
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderScheduleNext is set by the server on a fired copy: the next
	// firing time (RFC 3339) of a recurring schedule, or "purge" for a
	// one-shot one.
	HeaderScheduleNext = "Nats-Schedule-Next"
	// HeaderScheduler is set by the server on a fired copy: the schedule
	// message's subject.
	HeaderScheduler = "Nats-Scheduler"
	// ScheduleNextPurge is HeaderScheduleNext's value on a one-shot firing.
	ScheduleNextPurge = "purge"
	// HeaderFleetSchedule names the recurring schedule a request came from;
	// the worker derives each firing's job id from it (FiredJobID).
	HeaderFleetSchedule = "Fleet-Schedule"
	// HeaderUnique carries a request's uniqueness key (a key of
	// BucketUnique holding the job id).
	HeaderUnique = "Fleet-Unique"
	// BucketUnique is the KV bucket of uniqueness keys.
	BucketUnique = "fleet_unique"
	// MaxScheduleName bounds a recurring schedule's name so that its fired
	// job ids ("<name>-<unix seconds>") stay valid job ids.
	MaxScheduleName = MaxIDLength - 21
	// MaxUniqueKeyLength bounds a uniqueness key.
	MaxUniqueKeyLength = 200
)

// StateScheduled is a client-written record's state for a job that waits
// for its scheduled time (StatusRecord.ScheduledAt).
const StateScheduled JobState = "scheduled"

// CodeDuplicateJob: a unique request was refused because another job with
// the same uniqueness key is queued or running (docs/PROTOCOL.md §9).
const CodeDuplicateJob fleettype.ErrorCode = "QUEUE_007"

// ScheduleSubject is the subject of schedule name's message.
func ScheduleSubject(name string) string { return SubjectSchedulePrefix + name }

// ValidScheduleName reports whether name can name a recurring schedule:
// 1-MaxScheduleName characters of [A-Za-z0-9_-].
func ValidScheduleName(name string) bool { return validToken(name, MaxScheduleName, true) }

// FiredJobID is the job id of a recurring schedule's firing whose
// Nats-Schedule-Next header is next: "<name>-<unix seconds of next>". Every
// firing has a distinct next time, and redeliveries of one firing carry the
// same header, so the id is stable per firing.
func FiredJobID(name string, next time.Time) string {
	return name + "-" + strconv.FormatInt(next.Unix(), 10)
}

// ValidUniqueKey reports whether key is a usable uniqueness key: 1-200
// characters of [A-Za-z0-9_=-] and dots, not starting or ending with a dot
// and without empty tokens (a KV key).
func ValidUniqueKey(key string) bool {
	if key == "" || len(key) > MaxUniqueKeyLength || key[0] == '.' || key[len(key)-1] == '.' {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '=':
		case c == '.' && key[i-1] != '.':
		default:
			return false
		}
	}
	return true
}

// FiredJobIDOf is the job id of a request with headers h when it is a
// firing of a recurring schedule (Fleet-Schedule, Nats-Scheduler and a
// Nats-Schedule-Next time), and false for any other request (its job id
// is its body's).
func FiredJobIDOf(h nats.Header) (string, bool) {
	name, next := h.Get(HeaderFleetSchedule), h.Get(HeaderScheduleNext)
	if name == "" || next == "" || next == ScheduleNextPurge || h.Get(HeaderScheduler) == "" || !ValidScheduleName(name) {
		return "", false
	}
	t, err := time.Parse(time.RFC3339Nano, next)
	if err != nil {
		return "", false
	}
	return FiredJobID(name, t), true
}
