package wire

import (
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding is a payload encoding, chosen by Content-Type.
type Encoding uint8

// Encodings.
const (
	// JSON is application/json, the default.
	JSON Encoding = iota
	// Msgpack is application/msgpack (or application/x-msgpack).
	Msgpack
)

// String returns the encoding's content type.
func (e Encoding) String() string { return e.ContentType() }

// ContentType returns the encoding's canonical Content-Type value.
func (e Encoding) ContentType() string {
	if e == Msgpack {
		return ContentTypeMsgpack
	}
	return ContentTypeJSON
}

// EncodingFor maps a Content-Type header value to an Encoding. An empty value
// means JSON; parameters (";charset=utf-8") are ignored. Other types are an
// error matching ErrUndecodable.
func EncodingFor(contentType string) (Encoding, error) {
	switch contentType {
	case "", ContentTypeJSON:
		return JSON, nil
	case ContentTypeMsgpack, ContentTypeXMsgpack:
		return Msgpack, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err == nil {
		switch strings.ToLower(mt) {
		case ContentTypeJSON:
			return JSON, nil
		case ContentTypeMsgpack, ContentTypeXMsgpack:
			return Msgpack, nil
		}
	}
	return JSON, &RequestError{Code: CodeUndecodable, Field: HeaderContentType,
		Reason: fmt.Sprintf("unsupported content type %q (want %s or %s)", contentType, ContentTypeJSON, ContentTypeMsgpack)}
}

// Marshal encodes v.
func (e Encoding) Marshal(v any) ([]byte, error) {
	if e == Msgpack {
		return msgpack.Marshal(v)
	}
	return json.Marshal(v)
}

// Unmarshal decodes data into v. JSON decoding refuses unknown fields only
// where the caller asks (DecodeRunRequest does not: newer clients may add
// fields).
func (e Encoding) Unmarshal(data []byte, v any) error {
	if e == Msgpack {
		return msgpack.Unmarshal(data, v)
	}
	return json.Unmarshal(data, v)
}

// DecodeAgentResult decodes a result message's body.
func DecodeAgentResult(data []byte, contentType string) (*AgentResult, error) {
	enc, err := EncodingFor(contentType)
	if err != nil {
		return nil, err
	}
	r := new(AgentResult)
	if err := enc.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("queue: decode result: %w", err)
	}
	return r, nil
}

// DecodeEvent decodes an event message's body.
func DecodeEvent(data []byte, contentType string) (*Event, error) {
	enc, err := EncodingFor(contentType)
	if err != nil {
		return nil, err
	}
	e := new(Event)
	if err := enc.Unmarshal(data, e); err != nil {
		return nil, fmt.Errorf("queue: decode event: %w", err)
	}
	return e, nil
}
