package monty

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// rawPair is a kwargs entry; key and value are encoded MontyObjects.
type rawPair struct{ key, value []byte }

// childEvent is a decoded ChildEvent. Byte slices alias the frame buffer and
// are valid only until the next frame is read.
type childEvent struct {
	kind int

	// print
	stream int
	text   string

	// function_call, name_lookup
	name   string
	args   [][]byte
	kwargs []rawPair

	// function_call, os_call
	callID uint32

	// os_call: the arm number of the call oneof and its payload
	osArm     int
	osPayload []byte

	// resolve_futures
	pending []uint32

	// complete (nil when absent), dump_result state
	value []byte

	// error
	exc *exception

	// typing_error diagnostics, fatal_error message
	message string

	totalExecMicros uint64
	maxSuspensions  uint64
}

// exception is a decoded RaisedException.
type exception struct {
	typ       string
	message   string
	traceback []Frame
}

// Frame is one traceback entry of a script error, outermost first.
type Frame struct {
	// Filename is the script's name (the .pym path) for fed code.
	Filename string `json:"filename"`
	// Line and Column are 1-based; Line counts lines of the .pym file.
	Line   int `json:"line"`
	Column int `json:"column,omitempty"`
	// Function is the enclosing function, "" for module-level code.
	Function string `json:"function,omitempty"`
	// Source is the source line, when Monty provides it.
	Source string `json:"source,omitempty"`
}

// fieldIter walks the fields of one message.
type fieldIter struct {
	b   []byte
	err error

	num protowire.Number
	typ protowire.Type
	// val holds the bytes of a BytesType field; v the value of a varint or
	// fixed field.
	val []byte
	v   uint64
}

// next advances to the next field; false at the end or on error (it.err).
func (it *fieldIter) next() bool {
	if len(it.b) == 0 || it.err != nil {
		return false
	}
	num, typ, n := protowire.ConsumeTag(it.b)
	if n < 0 {
		it.err = fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		return false
	}
	it.b = it.b[n:]
	it.num, it.typ, it.val, it.v = num, typ, nil, 0
	switch typ {
	case protowire.VarintType:
		it.v, n = protowire.ConsumeVarint(it.b)
	case protowire.Fixed64Type:
		it.v, n = protowire.ConsumeFixed64(it.b)
	case protowire.Fixed32Type:
		var v32 uint32
		v32, n = protowire.ConsumeFixed32(it.b)
		it.v = uint64(v32)
	case protowire.BytesType:
		it.val, n = protowire.ConsumeBytes(it.b)
	default:
		n = protowire.ConsumeFieldValue(num, typ, it.b)
	}
	if n < 0 {
		it.err = fmt.Errorf("%w: field %d: %v", errMalformed, num, protowire.ParseError(n))
		return false
	}
	it.b = it.b[n:]
	return true
}

// bytesField reports whether the current field is length-delimited; a
// known field with another wire type is malformed.
func (it *fieldIter) wantBytes() bool {
	if it.typ != protowire.BytesType {
		it.err = fmt.Errorf("%w: field %d has wire type %d, want bytes", errMalformed, it.num, it.typ)
		return false
	}
	return true
}

func (it *fieldIter) wantVarint() bool {
	if it.typ != protowire.VarintType {
		it.err = fmt.Errorf("%w: field %d has wire type %d, want varint", errMalformed, it.num, it.typ)
		return false
	}
	return true
}

// decodeChildEvent decodes one ChildEvent frame body. Unknown fields are
// skipped; an event without a known arm is an error.
func decodeChildEvent(b []byte) (childEvent, error) {
	var ev childEvent
	it := fieldIter{b: b}
	for it.next() {
		switch it.num {
		case evFieldTotalExecMicros:
			if it.wantVarint() {
				ev.totalExecMicros = it.v
			}
			continue
		case evFieldMaxSuspensions:
			if it.wantVarint() {
				ev.maxSuspensions = it.v
			}
			continue
		case evFieldMaxDuration, evFieldRestoredScript:
			continue
		}
		if it.num < evPrint || it.num > evShutdown {
			continue // unknown field
		}
		if !it.wantBytes() {
			break
		}
		ev = childEvent{kind: int(it.num), totalExecMicros: ev.totalExecMicros, maxSuspensions: ev.maxSuspensions}
		var err error
		switch it.num {
		case evPrint:
			err = decodePrint(&ev, it.val)
		case evFunctionCall:
			err = decodeFunctionCall(&ev, it.val)
		case evOsCall:
			err = decodeOsCall(&ev, it.val)
		case evNameLookup:
			ev.name, err = decodeStringField(it.val, 1)
		case evResolveFutures:
			err = decodeResolveFutures(&ev, it.val)
		case evComplete:
			ev.value, err = decodeBytesField(it.val, 1)
			if err == nil && ev.value == nil {
				ev.value = noneObject
			}
		case evError:
			var exc []byte
			exc, err = decodeBytesField(it.val, 1)
			if err == nil {
				ev.exc, err = decodeException(exc)
			}
		case evTypingError, evFatalError:
			ev.message, err = decodeStringField(it.val, 1)
		case evDumpResult:
			ev.value, err = decodeBytesField(it.val, 1)
		}
		if err != nil {
			return childEvent{}, err
		}
	}
	if it.err != nil {
		return childEvent{}, it.err
	}
	if ev.kind == 0 {
		return childEvent{}, fmt.Errorf("%w: event without a kind", errMalformed)
	}
	return ev, nil
}

// decodeBytesField returns the last occurrence of length-delimited field num
// (nil when absent).
func decodeBytesField(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	it := fieldIter{b: b}
	for it.next() {
		if it.num == num && it.wantBytes() {
			out = it.val
			if out == nil {
				out = []byte{}
			}
		}
	}
	return out, it.err
}

func decodeStringField(b []byte, num protowire.Number) (string, error) {
	v, err := decodeBytesField(b, num)
	return string(v), err
}

func decodePrint(ev *childEvent, b []byte) error {
	it := fieldIter{b: b}
	for it.next() {
		switch it.num {
		case 1:
			if it.wantVarint() {
				ev.stream = int(it.v)
			}
		case 2:
			if it.wantBytes() {
				ev.text += string(it.val)
			}
		case 3: // newer builds: repeated segments {stream = 1, text = 2}
			if it.wantBytes() {
				t, err := decodeStringField(it.val, 2)
				if err != nil {
					return err
				}
				ev.text += t
			}
		}
	}
	return it.err
}

func decodeFunctionCall(ev *childEvent, b []byte) error {
	it := fieldIter{b: b}
	for it.next() {
		switch it.num {
		case 1:
			if it.wantBytes() {
				ev.name = string(it.val)
			}
		case 2:
			if it.wantBytes() {
				ev.args = append(ev.args, it.val)
			}
		case 3:
			if it.wantBytes() {
				p, err := decodePair(it.val)
				if err != nil {
					return err
				}
				ev.kwargs = append(ev.kwargs, p)
			}
		case 4:
			if it.wantVarint() {
				ev.callID = uint32(it.v)
			}
		}
	}
	return it.err
}

func decodePair(b []byte) (rawPair, error) {
	var p rawPair
	it := fieldIter{b: b}
	for it.next() {
		switch it.num {
		case 1:
			if it.wantBytes() {
				p.key = it.val
			}
		case 2:
			if it.wantBytes() {
				p.value = it.val
			}
		}
	}
	if p.key == nil {
		p.key = noneObject
	}
	if p.value == nil {
		p.value = noneObject
	}
	return p, it.err
}

func decodeOsCall(ev *childEvent, b []byte) error {
	it := fieldIter{b: b}
	for it.next() {
		switch {
		case it.num == 1:
			if it.wantVarint() {
				ev.callID = uint32(it.v)
			}
		case it.num >= 2 && it.num <= 40:
			ev.osArm = int(it.num)
			ev.osPayload = it.val
		}
	}
	return it.err
}

func decodeResolveFutures(ev *childEvent, b []byte) error {
	it := fieldIter{b: b}
	for it.next() {
		if it.num != 1 {
			continue
		}
		switch it.typ {
		case protowire.VarintType: // unpacked
			ev.pending = append(ev.pending, uint32(it.v))
		case protowire.BytesType: // packed
			p := it.val
			for len(p) > 0 {
				v, n := protowire.ConsumeVarint(p)
				if n < 0 {
					return fmt.Errorf("%w: pending_call_ids: %v", errMalformed, protowire.ParseError(n))
				}
				ev.pending = append(ev.pending, uint32(v))
				p = p[n:]
			}
		default:
			return fmt.Errorf("%w: pending_call_ids has wire type %d", errMalformed, it.typ)
		}
	}
	return it.err
}

func decodeException(b []byte) (*exception, error) {
	exc := &exception{}
	it := fieldIter{b: b}
	for it.next() {
		switch it.num {
		case 1:
			if it.wantBytes() {
				exc.typ = string(it.val)
			}
		case 2:
			if it.wantBytes() {
				exc.message = string(it.val)
			}
		case 3:
			if it.wantBytes() {
				f, err := decodeFrame(it.val)
				if err != nil {
					return nil, err
				}
				exc.traceback = append(exc.traceback, f)
			}
		}
	}
	return exc, it.err
}

func decodeFrame(b []byte) (Frame, error) {
	var f Frame
	it := fieldIter{b: b}
	for it.next() {
		switch it.num {
		case 1:
			if it.wantBytes() {
				f.Filename = string(it.val)
			}
		case 2:
			if it.wantBytes() {
				sub := fieldIter{b: it.val}
				for sub.next() {
					switch sub.num {
					case 1:
						f.Line = int(uint32(sub.v))
					case 2:
						f.Column = int(uint32(sub.v))
					}
				}
				if sub.err != nil {
					return f, sub.err
				}
			}
		case 4:
			if it.wantBytes() {
				f.Function = string(it.val)
			}
		case 5:
			if it.wantBytes() {
				f.Source = string(it.val)
			}
		}
	}
	return f, it.err
}
