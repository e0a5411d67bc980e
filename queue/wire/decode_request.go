package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// DecodeRunRequest decodes and validates a run request. contentType is the
// Content-Type header ("" = JSON). Every failure is a *RequestError
// (docs/PROTOCOL.md §9):
//
//   - CodeUndecodable when the bytes cannot be read as a RunRequest: not
//     JSON or msgpack, empty, trailing data, a field of the wrong type (Field
//     names it), a created_at that is not a time.
//   - CodeInvalidRequest when a field is wrong, including a string that is
//     not valid UTF-8 (Field names it, in either encoding).
//
// created_at may be an RFC 3339 string in msgpack as in JSON. Whether the
// operation is served is the worker's check (CodeUnknownOperation).
func DecodeRunRequest(data []byte, contentType string) (*RunRequest, error) {
	enc, err := EncodingFor(contentType)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxRequestBytes {
		return nil, Invalid("", "request is %d bytes, more than %d", len(data), MaxRequestBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &RequestError{Code: CodeUndecodable, Reason: "empty payload"}
	}
	var shape requestShape
	if enc == Msgpack {
		// One msgpack value, nothing after it.
		r := bytes.NewReader(data)
		if err := msgpack.NewDecoder(r).Decode(&shape); err != nil {
			return nil, undecodable(err, Msgpack, data)
		}
		if r.Len() != 0 {
			return nil, &RequestError{Code: CodeUndecodable, Reason: fmt.Sprintf("%d bytes of trailing data after the msgpack value", r.Len())}
		}
	} else if !utf8.Valid(data) {
		// encoding/json would quietly turn invalid UTF-8 into U+FFFD, so a
		// file's bytes would change on the way in: refuse the request,
		// naming the string that holds the bad bytes, as the msgpack path
		// does through Validate.
		if field, ok := jsonInvalidUTF8(data); ok {
			return nil, Invalid(field, "not valid UTF-8")
		}
		return nil, &RequestError{Code: CodeUndecodable, Reason: "JSON payload is not valid UTF-8"}
	} else if err := json.Unmarshal(data, &shape); err != nil {
		// json.Unmarshal also refuses trailing data.
		return nil, undecodable(err, JSON, data)
	}
	req := (*RunRequest)(&shape.requestFields)
	req.CreatedAt = shape.CreatedAt.Time
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// requestFields is RunRequest as a type of its own, so that requestShape
// can embed it and shadow its created_at.
type requestFields RunRequest

// requestShape is what DecodeRunRequest decodes into: a RunRequest whose
// created_at goes through requestTime. CreatedAt comes first: msgpack keeps
// the first field of a name and skips the inlined one, encoding/json keeps
// the shallower one.
type requestShape struct {
	CreatedAt     requestTime `json:"created_at" msgpack:"created_at"`
	requestFields `msgpack:",inline"`
}

// requestTime is a request's created_at: an RFC 3339 string or null in
// JSON; a msgpack timestamp, an RFC 3339 string or nil in msgpack. A value
// that is none of these is a *fieldError naming created_at.
type requestTime struct{ time.Time }

// UnmarshalJSON implements json.Unmarshaler.
func (t *requestTime) UnmarshalJSON(b []byte) error {
	if err := t.Time.UnmarshalJSON(b); err != nil {
		return &fieldError{field: "created_at", reason: "want an RFC 3339 time: " + err.Error()}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (t *requestTime) DecodeMsgpack(d *msgpack.Decoder) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		t.Time = time.Time{}
		return d.DecodeNil()
	}
	// DecodeTime reads the timestamp extension (and its older forms) and
	// RFC 3339 strings.
	v, err := d.DecodeTime()
	if err != nil {
		return &fieldError{field: "created_at", reason: "want a msgpack timestamp or an RFC 3339 time: " + err.Error()}
	}
	t.Time = v
	return nil
}

// fieldError is a decoding error about one field.
type fieldError struct{ field, reason string }

func (e *fieldError) Error() string { return e.field + ": " + e.reason }

// undecodable turns a decoder's error into a CodeUndecodable
// *RequestError, naming the field when the error tells which. data is the
// request, for what the errors leave out: the field of a msgpack type error,
// the file of a JSON one.
func undecodable(err error, enc Encoding, data []byte) *RequestError {
	format := "JSON"
	if enc == Msgpack {
		format = "msgpack"
	}
	re := &RequestError{Code: CodeUndecodable, Reason: fmt.Sprintf("not a %s RunRequest: %v", format, err)}
	var fe *fieldError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &fe):
		re.Field, re.Reason = fe.field, fe.reason
	case errors.As(err, &te):
		// The path runs through the embedded requestFields, and stops at
		// a map: name the file too.
		re.Field = strings.TrimPrefix(strings.TrimPrefix(te.Field, "requestFields"), ".")
		re.Reason = fmt.Sprintf("want %s, got a JSON %s", kindName(te.Type), te.Value)
		if re.Field == "files" && te.Type.Kind() == reflect.String {
			re.Field = jsonFileNotString(data)
		}
	case enc == Msgpack:
		if f, r := msgpackTypeError(data); f != "" {
			re.Field, re.Reason = f, r
		}
	}
	return re
}

// kindName is the protocol's name for the values a Go type holds.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return t.String()
}

// fieldPath appends one step to a field path: .key for plain keys,
// ["key"] for others (file paths), [i] for array elements.
func fieldPath(path string, key string, index int) string {
	if index >= 0 {
		return path + "[" + strconv.Itoa(index) + "]"
	}
	plain := key != ""
	for i := 0; i < len(key) && plain; i++ {
		c := key[i]
		plain = c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	}
	return path + "." + key
}

// jsonFileNotString names the first file (in path order) of a JSON request
// whose content is not a string, or "files" when it finds none.
func jsonFileNotString(data []byte) string {
	var probe struct {
		Files map[string]json.RawMessage `json:"files"`
	}
	if json.Unmarshal(data, &probe) == nil {
		for _, p := range slices.Sorted(maps.Keys(probe.Files)) {
			if v := bytes.TrimSpace(probe.Files[p]); len(v) > 0 && v[0] != '"' && !bytes.Equal(v, []byte("null")) {
				return fieldPath("files", p, -1)
			}
		}
	}
	return "files"
}

// jsonInvalidUTF8 names the string of a JSON document that holds its first
// invalid UTF-8 sequence ("node.text", `files["a.py"]`, or an object key's
// own path when the key is the bad string). ok is false when the sequence
// is outside every string: the document is then not JSON at all.
func jsonInvalidUTF8(data []byte) (field string, ok bool) {
	bad := 0
	for bad < len(data) {
		r, n := utf8.DecodeRune(data[bad:])
		if r == utf8.RuneError && n == 1 {
			break
		}
		bad += n
	}
	type frame struct {
		obj     bool
		wantKey bool
		key     string
		index   int
	}
	var stack []*frame
	path := func() string {
		p := ""
		for _, f := range stack {
			if f.obj {
				p = fieldPath(p, f.key, -1)
			} else {
				p = fieldPath(p, "", f.index)
			}
		}
		return p
	}
	start := func() { // a value begins in the innermost container
		if n := len(stack); n > 0 && !stack[n-1].obj {
			stack[n-1].index++
		}
	}
	end := func() { // a value ended in the innermost container
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		past := dec.InputOffset() > int64(bad)
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				start()
				stack = append(stack, &frame{obj: v == '{', wantKey: v == '{', index: -1})
			default:
				stack = stack[:len(stack)-1]
				end()
			}
		case string:
			if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
				stack[n-1].key, stack[n-1].wantKey = v, false
				if past {
					return path(), true
				}
				continue
			}
			start()
			if past {
				return path(), true
			}
			end()
		default:
			start()
			end()
		}
		if past {
			return "", false
		}
	}
}

// msgpackTypeError finds the first field of a msgpack request whose value
// has the wrong type (msgpack's own errors do not name it): the field and
// what is wrong, or "" when the request is not a map with string keys or
// every field it checks has a type the protocol allows. It walks the
// encoding with the decoder's primitives and skips what it does not check,
// so a hostile length allocates nothing.
func msgpackTypeError(data []byte) (field, reason string) {
	d := msgpack.NewDecoder(bytes.NewReader(data))
	field, reason, _ = msgpackWalk(d, "", requestSchema)
	return field, reason
}

// msgpackSchema says what a msgpack map holds: the kind of each key's value
// ("" = not checked), with "*" for every key, and nested maps' schemas.
type msgpackSchema struct {
	kinds  map[string]string
	nested map[string]*msgpackSchema
}

const (
	kindString  = "a string"
	kindInteger = "an integer"
	kindObject  = "an object"
	kindBoolean = "a boolean"
)

var requestSchema = &msgpackSchema{
	kinds: map[string]string{"version": kindInteger, "job_id": kindString, "operation": kindString,
		"node": kindObject, "files": kindObject, "options": kindObject, "project": kindString,
		"batch": kindString, "labels": kindObject},
	nested: map[string]*msgpackSchema{
		"node": {kinds: map[string]string{"id": kindString, "name": kindString, "type": kindString,
			"file_path": kindString, "text": kindString}},
		"files":  {kinds: map[string]string{"*": kindString}},
		"labels": {kinds: map[string]string{"*": kindString}},
		"options": {kinds: map[string]string{"max_turns": kindInteger, "step_timeout_ms": kindInteger,
			"total_timeout_ms": kindInteger, "tool_timeout_ms": kindInteger, "park_timeout_ms": kindInteger, "teacher": kindBoolean}},
	},
}

// msgpackWalk checks the map at d's position against s; ok is false when
// the encoding cannot be walked (not a map, a non-string key, truncated).
func msgpackWalk(d *msgpack.Decoder, path string, s *msgpackSchema) (field, reason string, ok bool) {
	n, err := d.DecodeMapLen()
	if err != nil {
		return "", "", false
	}
	for i := 0; i < n; i++ {
		c, err := d.PeekCode()
		if err != nil || !msgpcode.IsString(c) {
			return "", "", false
		}
		key, err := d.DecodeString()
		if err != nil {
			return "", "", false
		}
		want, ok := s.kinds[key]
		if !ok {
			want = s.kinds["*"]
		}
		c, err = d.PeekCode()
		if err != nil {
			return "", "", false
		}
		here := fieldPath(path, key, -1)
		got := msgpackKind(c)
		switch {
		case want == "" || c == msgpcode.Nil:
		case got != want:
			return here, fmt.Sprintf("want %s, got %s", want, got), true
		case s.nested[key] != nil:
			if f, r, ok := msgpackWalk(d, here, s.nested[key]); f != "" || !ok {
				return f, r, ok
			}
			continue
		}
		if d.Skip() != nil {
			return "", "", false
		}
	}
	return "", "", true
}

// msgpackKind names the protocol kind of the msgpack value whose first byte
// is c (bin counts as a string: a request's strings may be sent as bin).
func msgpackKind(c byte) string {
	switch {
	case msgpcode.IsString(c), msgpcode.IsBin(c):
		return kindString
	case msgpcode.IsFixedNum(c), c >= msgpcode.Uint8 && c <= msgpcode.Int64:
		return kindInteger
	case msgpcode.IsFixedMap(c), c == msgpcode.Map16, c == msgpcode.Map32:
		return kindObject
	case msgpcode.IsFixedArray(c), c == msgpcode.Array16, c == msgpcode.Array32:
		return "an array"
	case c == msgpcode.Float, c == msgpcode.Double:
		return "a float"
	case c == msgpcode.True, c == msgpcode.False:
		return kindBoolean
	case c == msgpcode.Nil:
		return "nil"
	}
	return "an extension value"
}
