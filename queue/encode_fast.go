package queue

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Hand-written JSON encoders for the messages a worker writes per job many
// times: events and status records. encoding/json spends most of its time
// in reflection for these small structs (about a tenth of a no-op job's CPU
// in BenchmarkNoopJobs). The output is byte for byte what json.Marshal
// writes (TestFastJSONMatchesEncodingJSON checks every field, so a field
// added to loop.Event or StatusRecord without updating these fails it);
// anything unusual (a time outside years 0-9999, invalid raw JSON) falls
// back to json.Marshal.

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
	if u := e.Usage; u != nil {
		dst = append(dst, `,"usage":{"prompt_tokens":`...)
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
		dst = append(dst, '}')
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
	// loop.Event's own "attempt" is shadowed by Event.Attempt.
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
	return append(dst, '}'), true
}

// marshalEvent encodes an event in enc.
func marshalEvent(dst []byte, enc Encoding, e *Event) ([]byte, error) {
	if enc == JSON {
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
	dst = append(dst, `,"updated_at":`...)
	if dst, ok = appendJSONTime(dst, r.UpdatedAt); !ok {
		return dst, false
	}
	return append(dst, '}'), true
}

// marshalStatus encodes a status record (always JSON).
func marshalStatus(r *StatusRecord) ([]byte, error) {
	if out, ok := appendStatusJSON(make([]byte, 0, 192), r); ok {
		return out, nil
	}
	return JSON.Marshal(r)
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
