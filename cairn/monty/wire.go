package monty

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file is the hand-written protobuf codec for the subset of the Monty
// 0.0.23 subprocess protocol fleet speaks (docs/MONTY.md §2–§4). Field
// numbers are those of the pinned binary; the golden frames in wire_test.go
// pin them.

// protocolVersion is the only wire protocol Monty 0.0.23 serves.
const protocolVersion = 2

// defaultFrameLimit bounds a frame read from the child. Every child frame is
// untrusted input.
const defaultFrameLimit = 16 << 20

// ParentRequest arms.
const (
	reqConfigure        = 1
	reqFeed             = 3
	reqResumeCall       = 4
	reqResumeNameLookup = 5
	reqResumeFutures    = 6
	reqDump             = 7
	reqLoad             = 8
	reqReset            = 9
	reqShutdown         = 10
	reqAbortFeed        = 11
)

// ChildEvent arms.
const (
	evPrint          = 1
	evFunctionCall   = 2
	evOsCall         = 3
	evNameLookup     = 4
	evResolveFutures = 5
	evComplete       = 6
	evError          = 7
	evTypingError    = 8
	evDumpResult     = 9
	evOk             = 10
	evFatalError     = 11
	evShutdown       = 12
)

// ChildEvent message-level fields.
const (
	evFieldTotalExecMicros = 20
	evFieldMaxDuration     = 21
	evFieldRestoredScript  = 22
	evFieldMaxSuspensions  = 23
)

// ExtFunctionResult arms.
const (
	extReturnValue = 1
	extError       = 2
	extFuture      = 3
	extNotFound    = 4
	extNotHandled  = 5
)

// OsCall arms that fleet answers (the clock); everything else is not_handled.
const (
	osDateToday   = 23
	osDateTimeNow = 24
)

// errMalformed reports a frame or message that does not decode.
var errMalformed = errors.New("monty: malformed message")

// writeFrame prefixes body with its 4-byte little-endian length and writes
// both in one call.
func writeFrame(w io.Writer, buf []byte, body []byte) ([]byte, error) {
	buf = binary.LittleEndian.AppendUint32(buf[:0], uint32(len(body)))
	buf = append(buf, body...)
	_, err := w.Write(buf)
	return buf, err
}

// frameTooLargeError is a child frame over the parent's frame limit: the
// script produced a value or output too large to take. The stream cannot be
// resynchronised, so the process is replaced.
type frameTooLargeError struct{ size, limit uint32 }

func (e *frameTooLargeError) Error() string {
	return fmt.Sprintf("monty: frame of %d bytes exceeds limit %d", e.size, e.limit)
}

// readFrame reads one frame. It returns io.EOF only for a clean close at a
// frame boundary.
func readFrame(r io.Reader, buf []byte, limit uint32) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > limit {
		return nil, &frameTooLargeError{size: n, limit: limit}
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("monty: truncated frame: %w", err)
	}
	return buf, nil
}

// ---------------------------------------------------------------------------
// Requests (parent → child)
// ---------------------------------------------------------------------------

// limits is ResourceLimits; a zero field is left absent (unlimited, or the
// child's default for recursion and suspensions).
type limits struct {
	maxDurationMicros uint64
	maxMemoryBytes    uint64
	gcInterval        uint64
	maxRecursion      uint64
	maxSuspensions    uint64
}

// configureMsg is Configure.
type configureMsg struct {
	scriptName   string
	limits       *limits
	montyVersion string
}

// appendSub appends field num as a length-delimited sub-message built by fn.
func appendSub(b []byte, num protowire.Number, fn func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	// Reserve one length byte: most sub-messages are short. Move the body if
	// it needs a longer varint.
	at := len(b)
	b = append(b, 0)
	b = fn(b)
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	sz := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, sz-1)...)
	copy(b[at+sz:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// encodeConfigure builds ParentRequest{configure}.
func encodeConfigure(b []byte, c configureMsg) []byte {
	return appendSub(b, reqConfigure, func(b []byte) []byte {
		if c.scriptName != "" {
			b = appendStringField(b, 1, c.scriptName)
		}
		if l := c.limits; l != nil {
			b = appendSub(b, 2, func(b []byte) []byte {
				for _, f := range []struct {
					num protowire.Number
					v   uint64
				}{{1, l.maxDurationMicros}, {2, l.maxMemoryBytes}, {3, l.gcInterval}, {4, l.maxRecursion}, {5, l.maxSuspensions}} {
					if f.v != 0 {
						b = appendVarintField(b, f.num, f.v)
					}
				}
				return b
			})
		}
		if c.montyVersion != "" {
			b = appendStringField(b, 5, c.montyVersion)
		}
		return appendVarintField(b, 9, protocolVersion)
	})
}

// encodeFeed builds ParentRequest{feed{code}}. Inputs are not bound as
// globals: the script's Input() calls fetch them (docs/MONTY.md §3).
func encodeFeed(b []byte, code string) []byte {
	return appendSub(b, reqFeed, func(b []byte) []byte {
		return appendStringField(b, 1, code)
	})
}

// extResult is an ExtFunctionResult: exactly one arm is used.
type extResult struct {
	kind     int    // extReturnValue, extError, extFuture, extNotFound, extNotHandled
	value    []byte // encoded MontyObject for extReturnValue
	excType  string // for extError
	excMsg   string // for extError
	futureID uint32 // for extFuture
	name     string // for extNotFound
}

func appendExtResult(b []byte, r extResult) []byte {
	switch r.kind {
	case extReturnValue:
		b = protowire.AppendTag(b, extReturnValue, protowire.BytesType)
		return protowire.AppendBytes(b, r.value)
	case extError:
		return appendSub(b, extError, func(b []byte) []byte { return appendException(b, r.excType, r.excMsg) })
	case extFuture:
		return appendVarintField(b, extFuture, uint64(r.futureID))
	case extNotFound:
		return appendStringField(b, extNotFound, r.name)
	default: // extNotHandled
		b = protowire.AppendTag(b, extNotHandled, protowire.BytesType)
		return protowire.AppendVarint(b, 0)
	}
}

// appendException encodes RaisedException{exc_type, message}.
func appendException(b []byte, typ, msg string) []byte {
	b = appendStringField(b, 1, typ)
	return appendStringField(b, 2, msg)
}

// encodeResumeCall builds ParentRequest{resume_call{call_id, result}}. The
// call id is always written, also when it is 0 (the child accepts that).
func encodeResumeCall(b []byte, callID uint32, r extResult) []byte {
	return appendSub(b, reqResumeCall, func(b []byte) []byte {
		b = appendVarintField(b, 1, uint64(callID))
		return appendSub(b, 2, func(b []byte) []byte { return appendExtResult(b, r) })
	})
}

// futureResult is one entry of ResumeFutures.
type futureResult struct {
	callID uint32
	result extResult
}

// encodeResumeFutures builds ParentRequest{resume_futures{results}}.
func encodeResumeFutures(b []byte, results []futureResult) []byte {
	return appendSub(b, reqResumeFutures, func(b []byte) []byte {
		for _, fr := range results {
			b = appendSub(b, 1, func(b []byte) []byte {
				b = appendVarintField(b, 1, uint64(fr.callID))
				return appendSub(b, 2, func(b []byte) []byte { return appendExtResult(b, fr.result) })
			})
		}
		return b
	})
}

// encodeResumeNameLookup builds ParentRequest{resume_name_lookup}. A nil
// value answers `undefined` (NameError in the sandbox).
func encodeResumeNameLookup(b []byte, value []byte) []byte {
	return appendSub(b, reqResumeNameLookup, func(b []byte) []byte {
		if value == nil {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			return protowire.AppendVarint(b, 0)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		return protowire.AppendBytes(b, value)
	})
}

// encodeEmpty builds a ParentRequest whose arm is an empty message (reset,
// shutdown).
func encodeEmpty(b []byte, arm protowire.Number) []byte {
	b = protowire.AppendTag(b, arm, protowire.BytesType)
	return protowire.AppendVarint(b, 0)
}

// encodeLoad builds ParentRequest{load{state}}.
func encodeLoad(b []byte, state []byte) []byte {
	return appendSub(b, reqLoad, func(b []byte) []byte {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		return protowire.AppendBytes(b, state)
	})
}

// encodeAbortFeed builds ParentRequest{abort_feed{exception}}.
func encodeAbortFeed(b []byte, typ, msg string) []byte {
	return appendSub(b, reqAbortFeed, func(b []byte) []byte {
		return appendSub(b, 1, func(b []byte) []byte { return appendException(b, typ, msg) })
	})
}

// ---------------------------------------------------------------------------
// Events (child → parent)
// ---------------------------------------------------------------------------
