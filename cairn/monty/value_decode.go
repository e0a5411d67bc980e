package monty

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// object is one decoded MontyObject arm.
type object struct {
	arm int
	typ protowire.Type
	val []byte // BytesType payload
	v   uint64 // varint / fixed payload
}

// decodeObject finds the MontyObject's arm (the last one wins, as protobuf
// oneofs do). An empty message is None.
func decodeObject(b []byte) (object, error) {
	o := object{arm: objNone}
	it := fieldIter{b: b}
	for it.next() {
		if it.num < objEllipsis || it.num > objCycle {
			continue
		}
		o = object{arm: int(it.num), typ: it.typ, val: it.val, v: it.v}
	}
	if it.err != nil {
		return object{}, it.err
	}
	want := protowire.BytesType
	switch o.arm {
	case objBool, objInt:
		want = protowire.VarintType
	case objFloat:
		want = protowire.Fixed64Type
	}
	if o.typ != want && !(o.arm == objNone && o.typ == 0 && o.val == nil) {
		return object{}, fmt.Errorf("%w: MontyObject arm %d has wire type %d", errMalformed, o.arm, o.typ)
	}
	return o, nil
}

// valueToJSON renders an encoded MontyObject as JSON (docs/MONTY.md §4):
// tuples and sets become arrays, dicts objects (non-string keys
// stringified), dates ISO-8601 strings, dataclass instances objects of their
// attributes, bytes a UTF-8 string or base64, big ints numbers when they fit
// in 64 bits and strings otherwise.
func valueToJSON(dst []byte, b []byte) ([]byte, error) {
	return appendObjJSON(dst, b, 0)
}

func appendObjJSON(dst []byte, b []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	o, err := decodeObject(b)
	if err != nil {
		return nil, err
	}
	switch o.arm {
	case objNone:
		return append(dst, "null"...), nil
	case objBool:
		return strconv.AppendBool(dst, o.v != 0), nil
	case objInt:
		return strconv.AppendInt(dst, protowire.DecodeZigZag(o.v), 10), nil
	case objBigInt:
		bi, err := decodeBig(o.val)
		if err != nil {
			return nil, err
		}
		if bi.IsInt64() {
			return strconv.AppendInt(dst, bi.Int64(), 10), nil
		}
		return appendJSONString(dst, bi.String()), nil
	case objFloat:
		f := math.Float64frombits(o.v)
		switch {
		case math.IsNaN(f):
			return appendJSONString(dst, "nan"), nil
		case math.IsInf(f, 1):
			return appendJSONString(dst, "inf"), nil
		case math.IsInf(f, -1):
			return appendJSONString(dst, "-inf"), nil
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64), nil
	case objList, objTuple, objSet, objFrozenSet:
		dst = append(dst, '[')
		first := true
		it := fieldIter{b: o.val}
		for it.next() {
			if it.num != 1 || !it.wantBytes() {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			if dst, err = appendObjJSON(dst, it.val, depth+1); err != nil {
				return nil, err
			}
		}
		if it.err != nil {
			return nil, it.err
		}
		return append(dst, ']'), nil
	case objDict:
		return appendDictJSON(dst, o.val, depth)
	case objClassInstance:
		attrs, err := decodeBytesField(o.val, 3)
		if err != nil {
			return nil, err
		}
		return appendDictJSON(dst, attrs, depth)
	case objNamedTuple:
		var names []string
		var values [][]byte
		it := fieldIter{b: o.val}
		for it.next() {
			switch {
			case it.num == 2 && it.wantBytes():
				names = append(names, string(it.val))
			case it.num == 3 && it.wantBytes():
				values = append(values, it.val)
			}
		}
		if it.err != nil {
			return nil, it.err
		}
		dst = append(dst, '{')
		for i, v := range values {
			if i > 0 {
				dst = append(dst, ',')
			}
			name := strconv.Itoa(i)
			if i < len(names) {
				name = names[i]
			}
			dst = appendJSONString(dst, name)
			dst = append(dst, ':')
			if dst, err = appendObjJSON(dst, v, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	}
	s, err := scalarString(o)
	if err != nil {
		return nil, err
	}
	return appendJSONString(dst, s), nil
}

func appendDictJSON(dst []byte, b []byte, depth int) ([]byte, error) {
	dst = append(dst, '{')
	first := true
	it := fieldIter{b: b}
	for it.next() {
		if it.num != 1 || !it.wantBytes() {
			continue
		}
		p, err := decodePair(it.val)
		if err != nil {
			return nil, err
		}
		key, err := keyString(p.key, depth+1)
		if err != nil {
			return nil, err
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendJSONString(dst, key)
		dst = append(dst, ':')
		if dst, err = appendObjJSON(dst, p.value, depth+1); err != nil {
			return nil, err
		}
	}
	if it.err != nil {
		return nil, it.err
	}
	return append(dst, '}'), nil
}

// keyString renders a dict key: a str as itself, anything else as its JSON
// text (None, True and False in Python spelling).
func keyString(b []byte, depth int) (string, error) {
	o, err := decodeObject(b)
	if err != nil {
		return "", err
	}
	switch o.arm {
	case objStr:
		return string(o.val), nil
	case objNone:
		return "None", nil
	case objBool:
		if o.v != 0 {
			return "True", nil
		}
		return "False", nil
	}
	j, err := appendObjJSON(nil, b, depth)
	if err != nil {
		return "", err
	}
	var s string
	if json.Unmarshal(j, &s) == nil {
		return s, nil
	}
	return string(j), nil
}

// scalarString renders the arms that map to JSON strings.
func scalarString(o object) (string, error) {
	switch o.arm {
	case objEllipsis:
		return "Ellipsis", nil
	case objNotImplemented:
		return "NotImplemented", nil
	case objStr, objPath, objRepr:
		return string(o.val), nil
	case objBytes:
		if utf8.Valid(o.val) {
			return string(o.val), nil
		}
		return base64.StdEncoding.EncodeToString(o.val), nil
	case objUUID:
		d, err := decodeBytesField(o.val, 1)
		if err != nil {
			return "", err
		}
		h := hex.EncodeToString(d)
		if len(h) == 32 {
			h = h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
		}
		return h, nil
	case objDate:
		f, err := uintFields(o.val, 3)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%04d-%02d-%02d", int32(f[1]), f[2], f[3]), nil
	case objDateTime:
		f, err := uintFields(o.val, 9)
		if err != nil {
			return "", err
		}
		s := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d", int32(f[1]), f[2], f[3], f[4], f[5], f[6])
		if f[7] != 0 {
			s += fmt.Sprintf(".%06d", f[7])
		}
		if hasField(o.val, 8) {
			s += offsetString(int32(f[8]))
		}
		return s, nil
	case objTime:
		f, err := uintFields(o.val, 7)
		if err != nil {
			return "", err
		}
		s := fmt.Sprintf("%02d:%02d:%02d", f[1], f[2], f[3])
		if f[4] != 0 {
			s += fmt.Sprintf(".%06d", f[4])
		}
		if hasField(o.val, 5) {
			s += offsetString(int32(f[5]))
		}
		return s, nil
	case objTimeDelta:
		f, err := uintFields(o.val, 3)
		if err != nil {
			return "", err
		}
		d := time.Duration(int32(f[1]))*24*time.Hour + time.Duration(int32(f[2]))*time.Second + time.Duration(int32(f[3]))*time.Microsecond
		return d.String(), nil
	case objTimeZone:
		name, err := decodeStringField(o.val, 2)
		if err != nil || name != "" {
			return name, err
		}
		f, err := uintFields(o.val, 1)
		if err != nil {
			return "", err
		}
		return "UTC" + offsetString(int32(f[1])), nil
	case objException:
		typ, err := decodeStringField(o.val, 1)
		if err != nil {
			return "", err
		}
		arg, err := decodeStringField(o.val, 2)
		if err != nil {
			return "", err
		}
		if arg == "" {
			return typ, nil
		}
		return typ + ": " + arg, nil
	case objType:
		name, err := decodeStringField(o.val, 1)
		return "<class '" + name + "'>", err
	case objFunction:
		name, err := decodeStringField(o.val, 1)
		return "<function " + name + ">", err
	case objBuiltin:
		return "<built-in function " + string(o.val) + ">", nil
	case objFileHandle:
		return decodeStringField(o.val, 1)
	case objCycle:
		return decodeStringField(o.val, 2)
	}
	return "", fmt.Errorf("%w: unknown MontyObject arm %d", errMalformed, o.arm)
}

// uintFields collects varint fields 1..n of a small message; index 0 unused.
func uintFields(b []byte, n int) ([]uint64, error) {
	out := make([]uint64, n+1)
	it := fieldIter{b: b}
	for it.next() {
		if int(it.num) <= n && it.num > 0 && it.typ == protowire.VarintType {
			out[it.num] = it.v
		}
	}
	return out, it.err
}

func hasField(b []byte, num protowire.Number) bool {
	it := fieldIter{b: b}
	for it.next() {
		if it.num == num {
			return true
		}
	}
	return false
}

func offsetString(sec int32) string {
	sign := '+'
	if sec < 0 {
		sign = '-'
		sec = -sec
	}
	return fmt.Sprintf("%c%02d:%02d", sign, sec/3600, sec%3600/60)
}

func decodeBig(b []byte) (*big.Int, error) {
	var neg bool
	var mag []byte
	it := fieldIter{b: b}
	for it.next() {
		switch {
		case it.num == 1 && it.typ == protowire.VarintType:
			neg = it.v != 0
		case it.num == 2 && it.wantBytes():
			mag = it.val
		}
	}
	if it.err != nil {
		return nil, it.err
	}
	bi := new(big.Int).SetBytes(mag)
	if neg {
		bi.Neg(bi)
	}
	return bi, nil
}

// appendJSONString appends s as a JSON string literal. Invalid UTF-8 is
// replaced, as encoding/json does; unlike encoding/json, <, > and & stay
// as they are (tool results are read by a model, not embedded in HTML).
func appendJSONString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
