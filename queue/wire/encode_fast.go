package wire

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/fleet/fleettype"
)

// Hand-written JSON encoders for the messages a worker writes for every
// job: events, status records and the result. encoding/json spends most of its time
// in reflection for these small structs (about a tenth of a no-op job's CPU
// in BenchmarkNoopJobs). The output is byte for byte what json.Marshal
// writes (TestFastJSONMatchesEncodingJSON checks every field, so a field
// added to Event or StatusRecord without updating these fails it);
// anything unusual (a time outside years 0-9999, invalid raw JSON, details
// json.Marshal refuses) falls back to json.Marshal.

// appendEventJSON appends e as JSON; ok is false when json.Marshal must be
// used instead.
func appendEventJSON(dst []byte, e *Event) (_ []byte, ok bool) {
	dst = append(dst, `{"job_id":`...)
	dst = appendJSONString(dst, e.JobID)
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(e.Attempt), 10)
	dst = append(dst, `,"kind":`...)
	dst = appendJSONString(dst, string(e.Kind))
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, int64(e.Seq), 10)
	dst = append(dst, `,"turn":`...)
	dst = strconv.AppendInt(dst, int64(e.Turn), 10)
	dst = append(dst, `,"time":`...)
	if dst, ok = appendJSONTime(dst, e.Time); !ok {
		return dst, false
	}
	if e.MaxTurns != 0 {
		dst = append(dst, `,"max_turns":`...)
		dst = strconv.AppendInt(dst, int64(e.MaxTurns), 10)
	}
	if e.Text != "" {
		dst = append(dst, `,"text":`...)
		dst = appendJSONString(dst, e.Text)
	}
	if len(e.Calls) > 0 {
		dst = append(dst, `,"calls":[`...)
		for i, c := range e.Calls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, c)
		}
		dst = append(dst, ']')
	}
	if e.Usage != nil {
		dst = append(dst, `,"usage":`...)
		dst = appendUsageJSON(dst, e.Usage)
	}
	if e.Tool != "" {
		dst = append(dst, `,"tool":`...)
		dst = appendJSONString(dst, e.Tool)
	}
	if e.CallID != "" {
		dst = append(dst, `,"call_id":`...)
		dst = appendJSONString(dst, e.CallID)
	}
	if len(e.Arguments) > 0 {
		// Raw JSON is compacted and HTML-escaped by encoding/json: let it.
		raw, err := json.Marshal(e.Arguments)
		if err != nil {
			return dst, false
		}
		dst = append(dst, `,"arguments":`...)
		dst = append(dst, raw...)
	}
	if e.OK {
		dst = append(dst, `,"ok":true`...)
	}
	if e.Code != "" {
		dst = append(dst, `,"code":`...)
		dst = appendJSONString(dst, e.Code)
	}
	if e.Provider != "" {
		dst = append(dst, `,"provider":`...)
		dst = appendJSONString(dst, e.Provider)
	}
	if e.Size != 0 {
		dst = append(dst, `,"size":`...)
		dst = strconv.AppendInt(dst, int64(e.Size), 10)
	}
	if e.Duration != 0 {
		dst = append(dst, `,"duration_ns":`...)
		dst = strconv.AppendInt(dst, int64(e.Duration), 10)
	}
	if e.Status != "" {
		dst = append(dst, `,"status":`...)
		dst = appendJSONString(dst, string(e.Status))
	}
	if e.Error != "" {
		dst = append(dst, `,"error":`...)
		dst = appendJSONString(dst, e.Error)
	}
	if len(e.TrimmedTurns) > 0 {
		dst = append(dst, `,"trimmed_turns":[`...)
		for i, n := range e.TrimmedTurns {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(n), 10)
		}
		dst = append(dst, ']')
	}
	if e.PromptTokens != 0 {
		dst = append(dst, `,"prompt_tokens":`...)
		dst = strconv.AppendInt(dst, int64(e.PromptTokens), 10)
	}
	if e.ContextTokens != 0 {
		dst = append(dst, `,"context_tokens":`...)
		dst = strconv.AppendInt(dst, int64(e.ContextTokens), 10)
	}
	return append(dst, '}'), true
}

// The fast encoders know these fields, in this order. If the structs
// change (a field added to Event), fastJSON is
// false and every event and status record goes through json.Marshal until
// the encoders are taught the change (TestFastJSONMatchesEncodingJSON
// fails meanwhile).
var (
	fastEventFields = "job_id/string attempt/int kind/EventKind seq/int turn/int time/Time max_turns,omitempty/int text,omitempty/string " +
		"calls,omitempty/[]string usage,omitempty/*Usage tool,omitempty/string call_id,omitempty/string " +
		"arguments,omitempty/RawMessage ok,omitempty/bool code,omitempty/string provider,omitempty/string " +
		"size,omitempty/int duration_ns,omitempty/Duration status,omitempty/Status " +
		"error,omitempty/string trimmed_turns,omitempty/[]int prompt_tokens,omitempty/int context_tokens,omitempty/int"
	fastUsageFields = "prompt_tokens/int cached_tokens/int completion_tokens/int forced_tokens,omitempty/int " +
		"prompt_ns/Duration completion_ns/Duration"
	fastStatusFields = "job_id/string operation,omitempty/string state/JobState worker,omitempty/string " +
		"attempt,omitempty/int code,omitempty/ErrorCode reason,omitempty/string seq,omitempty/uint64 " +
		"scheduled_at,omitempty/*Time question,omitempty/string park,omitempty/uint64 deadline,omitempty/*Time priority,omitempty/Priority updated_at/Time"
	fastResultFields = "version/int job_id/string operation/string state/JobState status/Status " +
		"workspace_id/string changed_files/[]string summary/string details,omitempty/ " +
		"error,omitempty/string error_code,omitempty/ErrorCode turns/int tool_calls/int usage/Usage " +
		"diff,omitempty/string worker/string attempts/int events_dropped,omitempty/int64 timings/ResultTimings transcript_seq,omitempty/uint64 " +
		"agent_version,omitempty/uint64 agent_digest,omitempty/string model_ref,omitempty/string canary,omitempty/bool teacher,omitempty/string model,omitempty/*ModelInfo"
	fastTimingsFields = "enqueued_at/Time started_at/Time finished_at/Time queued_ns/Duration run_ns/Duration " +
		"model_ns/Duration tools_ns/Duration"
	fastJSON = jsonFields(reflect.TypeFor[Event]()) == fastEventFields &&
		jsonFields(reflect.TypeFor[AgentResult]()) == fastResultFields &&
		jsonFields(reflect.TypeFor[ResultTimings]()) == fastTimingsFields &&
		jsonFields(reflect.TypeFor[fleettype.Usage]()) == fastUsageFields &&
		jsonFields(reflect.TypeFor[StatusRecord]()) == fastStatusFields
)

// jsonFields describes a struct's fields as "tag/type ...", in the order
// encoding/json writes them: the fields of an embedded struct (the shared
// types of package fleettype) in its place, less those a field of the outer
// struct hides by its name.
func jsonFields(t reflect.Type) string {
	outer := map[string]bool{}
	for i := range t.NumField() {
		if f := t.Field(i); !f.Anonymous {
			outer[strings.Split(f.Tag.Get("json"), ",")[0]] = true
		}
	}
	var parts []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			for _, inner := range strings.Fields(jsonFields(f.Type)) {
				if !outer[strings.Split(strings.Split(inner, "/")[0], ",")[0]] {
					parts = append(parts, inner)
				}
			}
			continue
		}
		tn := f.Type.Name()
		switch f.Type.Kind() {
		case reflect.Slice:
			if f.Type.Name() == "" {
				tn = "[]" + f.Type.Elem().Name()
			}
		case reflect.Pointer:
			tn = "*" + f.Type.Elem().Name()
		}
		parts = append(parts, f.Tag.Get("json")+"/"+tn)
	}
	return strings.Join(parts, " ")
}

// AppendEvent encodes an event in enc, appending to dst when it can.
func AppendEvent(dst []byte, enc Encoding, e *Event) ([]byte, error) {
	if enc == JSON && fastJSON {
		if out, ok := appendEventJSON(dst, e); ok {
			return out, nil
		}
	}
	return enc.Marshal(e)
}

// appendStatusJSON appends r as JSON; ok is false when json.Marshal must be
// used instead.
func appendStatusJSON(dst []byte, r *StatusRecord) (_ []byte, ok bool) {
	dst = append(dst, `{"job_id":`...)
	dst = appendJSONString(dst, r.JobID)
	if r.Operation != "" {
		dst = append(dst, `,"operation":`...)
		dst = appendJSONString(dst, r.Operation)
	}
	dst = append(dst, `,"state":`...)
	dst = appendJSONString(dst, string(r.State))
	if r.Worker != "" {
		dst = append(dst, `,"worker":`...)
		dst = appendJSONString(dst, r.Worker)
	}
	if r.Attempt != 0 {
		dst = append(dst, `,"attempt":`...)
		dst = strconv.AppendInt(dst, int64(r.Attempt), 10)
	}
	if r.Code != "" {
		dst = append(dst, `,"code":`...)
		dst = appendJSONString(dst, string(r.Code))
	}
	if r.Reason != "" {
		dst = append(dst, `,"reason":`...)
		dst = appendJSONString(dst, r.Reason)
	}
	if r.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, r.Seq, 10)
	}
	if r.ScheduledAt != nil {
		dst = append(dst, `,"scheduled_at":`...)
		if dst, ok = appendJSONTime(dst, *r.ScheduledAt); !ok {
			return dst, false
		}
	}
	if r.Question != "" {
		dst = append(dst, `,"question":`...)
		dst = appendJSONString(dst, r.Question)
	}
	if r.Park != 0 {
		dst = append(dst, `,"park":`...)
		dst = strconv.AppendUint(dst, r.Park, 10)
	}
	if r.Deadline != nil {
		dst = append(dst, `,"deadline":`...)
		if dst, ok = appendJSONTime(dst, *r.Deadline); !ok {
			return dst, false
		}
	}
	if r.Priority != "" {
		dst = append(dst, `,"priority":`...)
		dst = appendJSONString(dst, string(r.Priority))
	}
	dst = append(dst, `,"updated_at":`...)
	if dst, ok = appendJSONTime(dst, r.UpdatedAt); !ok {
		return dst, false
	}
	return append(dst, '}'), true
}

// MarshalStatus encodes a status record (always JSON).
func MarshalStatus(r *StatusRecord) ([]byte, error) {
	if !fastJSON {
		return JSON.Marshal(r)
	}
	if out, ok := appendStatusJSON(make([]byte, 0, 192), r); ok {
		return out, nil
	}
	return JSON.Marshal(r)
}

// appendResultJSON appends r as JSON; ok is false when json.Marshal must
// be used instead.
func appendResultJSON(dst []byte, r *AgentResult) (_ []byte, ok bool) {
	dst = append(dst, `{"version":`...)
	dst = strconv.AppendInt(dst, int64(r.Version), 10)
	dst = append(dst, `,"job_id":`...)
	dst = appendJSONString(dst, r.JobID)
	dst = append(dst, `,"operation":`...)
	dst = appendJSONString(dst, r.Operation)
	dst = append(dst, `,"state":`...)
	dst = appendJSONString(dst, string(r.State))
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, string(r.Status))
	dst = append(dst, `,"workspace_id":`...)
	dst = appendJSONString(dst, r.WorkspaceID)
	dst = append(dst, `,"changed_files":`...)
	if r.ChangedFiles == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, f := range r.ChangedFiles {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, f)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"summary":`...)
	dst = appendJSONString(dst, r.Summary)
	if len(r.Details) > 0 {
		raw, err := json.Marshal(r.Details)
		if err != nil {
			return dst, false
		}
		dst = append(dst, `,"details":`...)
		dst = append(dst, raw...)
	}
	if r.Error != "" {
		dst = append(dst, `,"error":`...)
		dst = appendJSONString(dst, r.Error)
	}
	if r.ErrorCode != "" {
		dst = append(dst, `,"error_code":`...)
		dst = appendJSONString(dst, string(r.ErrorCode))
	}
	dst = append(dst, `,"turns":`...)
	dst = strconv.AppendInt(dst, int64(r.Turns), 10)
	dst = append(dst, `,"tool_calls":`...)
	dst = strconv.AppendInt(dst, int64(r.ToolCalls), 10)
	dst = append(dst, `,"usage":`...)
	dst = appendUsageJSON(dst, &r.Usage)
	if r.Diff != "" {
		dst = append(dst, `,"diff":`...)
		dst = appendJSONString(dst, r.Diff)
	}
	dst = append(dst, `,"worker":`...)
	dst = appendJSONString(dst, r.Worker)
	dst = append(dst, `,"attempts":`...)
	dst = strconv.AppendInt(dst, int64(r.Attempts), 10)
	if r.EventsDropped != 0 {
		dst = append(dst, `,"events_dropped":`...)
		dst = strconv.AppendInt(dst, r.EventsDropped, 10)
	}
	t := &r.Timings
	dst = append(dst, `,"timings":{"enqueued_at":`...)
	if dst, ok = appendJSONTime(dst, t.EnqueuedAt); !ok {
		return dst, false
	}
	dst = append(dst, `,"started_at":`...)
	if dst, ok = appendJSONTime(dst, t.StartedAt); !ok {
		return dst, false
	}
	dst = append(dst, `,"finished_at":`...)
	if dst, ok = appendJSONTime(dst, t.FinishedAt); !ok {
		return dst, false
	}
	dst = append(dst, `,"queued_ns":`...)
	dst = strconv.AppendInt(dst, int64(t.Queued), 10)
	dst = append(dst, `,"run_ns":`...)
	dst = strconv.AppendInt(dst, int64(t.Run), 10)
	dst = append(dst, `,"model_ns":`...)
	dst = strconv.AppendInt(dst, int64(t.Model), 10)
	dst = append(dst, `,"tools_ns":`...)
	dst = strconv.AppendInt(dst, int64(t.Tools), 10)
	dst = append(dst, '}')
	if r.TranscriptSeq != 0 {
		dst = append(dst, `,"transcript_seq":`...)
		dst = strconv.AppendUint(dst, r.TranscriptSeq, 10)
	}
	if r.AgentVersion != 0 {
		dst = append(dst, `,"agent_version":`...)
		dst = strconv.AppendUint(dst, r.AgentVersion, 10)
	}
	if r.AgentDigest != "" {
		dst = append(dst, `,"agent_digest":`...)
		dst = appendJSONString(dst, r.AgentDigest)
	}
	if r.ModelRef != "" {
		dst = append(dst, `,"model_ref":`...)
		dst = appendJSONString(dst, r.ModelRef)
	}
	if r.Canary {
		dst = append(dst, `,"canary":true`...)
	}
	if r.Teacher != "" {
		dst = append(dst, `,"teacher":`...)
		dst = appendJSONString(dst, r.Teacher)
	}
	if m := r.Model; m != nil {
		dst = append(dst, `,"model":{"backend":`...)
		dst = appendJSONString(dst, m.Backend)
		for _, f := range [...]struct{ key, val string }{{`,"name":`, m.Name}, {`,"digest":`, m.Digest},
			{`,"adapter":`, m.Adapter}, {`,"adapter_digest":`, m.AdapterDigest}} {
			if f.val != "" {
				dst = append(dst, f.key...)
				dst = appendJSONString(dst, f.val)
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, '}'), true
}

// MarshalResult encodes a result in enc.
func MarshalResult(enc Encoding, r *AgentResult) ([]byte, error) {
	if enc == JSON && fastJSON {
		if out, ok := appendResultJSON(make([]byte, 0, 512+len(r.Diff)+len(r.Summary)), r); ok {
			return out, nil
		}
	}
	return enc.Marshal(r)
}

// appendUsageJSON appends a Usage.
func appendUsageJSON(dst []byte, u *fleettype.Usage) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	if u.ForcedTokens != 0 {
		dst = append(dst, `,"forced_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.ForcedTokens), 10)
	}
	dst = append(dst, `,"prompt_ns":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptDuration), 10)
	dst = append(dst, `,"completion_ns":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionDuration), 10)
	return append(dst, '}')
}

// appendJSONTime appends t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, quoted); false for the years it refuses.
func appendJSONTime(dst []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return dst, false
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		return dst, false
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), true
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json does
// (HTML characters escaped, invalid UTF-8 replaced, U+2028 and U+2029
// escaped).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
