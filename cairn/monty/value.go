package monty

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// MontyObject arms (docs/MONTY.md §4).
const (
	objEllipsis       = 1
	objNone           = 2
	objNotImplemented = 3
	objBool           = 4
	objInt            = 5
	objBigInt         = 6
	objFloat          = 7
	objStr            = 8
	objBytes          = 9
	objUUID           = 10
	objList           = 11
	objTuple          = 12
	objNamedTuple     = 13
	objDict           = 14
	objSet            = 15
	objFrozenSet      = 16
	objDate           = 17
	objTime           = 18
	objDateTime       = 19
	objTimeDelta      = 20
	objTimeZone       = 21
	objException      = 22
	objType           = 23
	objClassInstance  = 24
	objFunction       = 25
	objBuiltin        = 26
	objPath           = 27
	objFileHandle     = 28
	objRepr           = 29
	objCycle          = 30
)

// maxDepth bounds the nesting of values in both directions.
const maxDepth = 256

// noneObject is the encoded MontyObject None.
var noneObject = []byte{objNone<<3 | 2, 0}

// errTooDeep reports a value nested deeper than maxDepth.
var errTooDeep = errors.New("monty: value nested too deeply")

// ---------------------------------------------------------------------------
// Go / JSON → MontyObject
// ---------------------------------------------------------------------------

// encodeValue appends v as a MontyObject. Supported: nil, bool, every int and
// uint type, float32/64, string, []byte, json.Number, json.RawMessage,
// *big.Int, time.Time, []any and other slices, map[string]any and other
// string-keyed maps; anything else goes through encoding/json.
func encodeValue(b []byte, v any) ([]byte, error) {
	return appendGo(b, v, 0)
}

func appendGo(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	switch x := v.(type) {
	case nil:
		return append(b, noneObject...), nil
	case bool:
		return appendBool(b, x), nil
	case int:
		return appendInt(b, int64(x)), nil
	case int8:
		return appendInt(b, int64(x)), nil
	case int16:
		return appendInt(b, int64(x)), nil
	case int32:
		return appendInt(b, int64(x)), nil
	case int64:
		return appendInt(b, x), nil
	case uint:
		return appendUint(b, uint64(x)), nil
	case uint8:
		return appendInt(b, int64(x)), nil
	case uint16:
		return appendInt(b, int64(x)), nil
	case uint32:
		return appendInt(b, int64(x)), nil
	case uint64:
		return appendUint(b, x), nil
	case float32:
		return appendFloat(b, float64(x)), nil
	case float64:
		return appendFloat(b, x), nil
	case string:
		return appendStringField(b, objStr, x), nil
	case []byte:
		b = protowire.AppendTag(b, objBytes, protowire.BytesType)
		return protowire.AppendBytes(b, x), nil
	case json.Number:
		return appendNumber(b, string(x))
	case json.RawMessage:
		return appendJSON(b, x, depth)
	case *big.Int:
		if x == nil {
			return append(b, noneObject...), nil
		}
		return appendBig(b, x), nil
	case time.Time:
		return appendDateTime(b, x), nil
	case []any:
		return appendList(b, objList, len(x), func(b []byte, i int) ([]byte, error) { return appendGo(b, x[i], depth+1) })
	case []string:
		return appendList(b, objList, len(x), func(b []byte, i int) ([]byte, error) { return appendStringField(b, objStr, x[i]), nil })
	case map[string]any:
		keys := sortedKeys(x)
		return appendDictPairs(b, len(keys), func(b []byte, i int) ([]byte, []byte, error) {
			v, err := appendGo(nil, x[keys[i]], depth+1)
			return appendStringField(nil, objStr, keys[i]), v, err
		})
	case map[string]string:
		keys := sortedKeys(x)
		return appendDictPairs(b, len(keys), func(b []byte, i int) ([]byte, []byte, error) {
			return appendStringField(nil, objStr, keys[i]), appendStringField(nil, objStr, x[keys[i]]), nil
		})
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return append(b, noneObject...), nil
		}
		return appendList(b, objList, rv.Len(), func(b []byte, i int) ([]byte, error) { return appendGo(b, rv.Index(i).Interface(), depth+1) })
	case reflect.Pointer:
		if rv.IsNil() {
			return append(b, noneObject...), nil
		}
	}
	// Structs, typed maps and anything else: their JSON form.
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("monty: cannot pass %T to the sandbox: %w", v, err)
	}
	return appendJSON(b, raw, depth)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func appendBool(b []byte, v bool) []byte {
	return appendVarintField(b, objBool, protowire.EncodeBool(v))
}

func appendInt(b []byte, v int64) []byte {
	return appendVarintField(b, objInt, protowire.EncodeZigZag(v))
}

func appendUint(b []byte, v uint64) []byte {
	if v <= math.MaxInt64 {
		return appendInt(b, int64(v))
	}
	return appendBig(b, new(big.Int).SetUint64(v))
}

func appendFloat(b []byte, v float64) []byte {
	b = protowire.AppendTag(b, objFloat, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

func appendBig(b []byte, v *big.Int) []byte {
	if v.IsInt64() {
		return appendInt(b, v.Int64())
	}
	return appendSub(b, objBigInt, func(b []byte) []byte {
		if v.Sign() < 0 {
			b = appendVarintField(b, 1, 1)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		return protowire.AppendBytes(b, v.Bytes())
	})
}

// appendNumber encodes a JSON number: int when it is integral and fits,
// bigint when integral and large, float otherwise.
func appendNumber(b []byte, s string) ([]byte, error) {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return appendInt(b, i), nil
	}
	if bi, ok := new(big.Int).SetString(s, 10); ok {
		return appendBig(b, bi), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("monty: bad number %q", s)
	}
	return appendFloat(b, f), nil
}

func appendDateTime(b []byte, t time.Time) []byte {
	return appendSub(b, objDateTime, func(b []byte) []byte {
		b = appendVarintField(b, 1, uint64(t.Year()))
		b = appendVarintField(b, 2, uint64(t.Month()))
		b = appendVarintField(b, 3, uint64(t.Day()))
		b = appendVarintField(b, 4, uint64(t.Hour()))
		b = appendVarintField(b, 5, uint64(t.Minute()))
		b = appendVarintField(b, 6, uint64(t.Second()))
		b = appendVarintField(b, 7, uint64(t.Nanosecond()/1000))
		_, off := t.Zone()
		return appendVarintField(b, 8, uint64(int64(int32(off))))
	})
}

// appendList appends an ObjectList arm with n items produced by item.
func appendList(b []byte, arm protowire.Number, n int, item func([]byte, int) ([]byte, error)) ([]byte, error) {
	var err error
	b = appendSub(b, arm, func(b []byte) []byte {
		for i := 0; i < n && err == nil; i++ {
			b = appendSub(b, 1, func(b []byte) []byte {
				var out []byte
				out, err = item(b, i)
				if err != nil {
					return b
				}
				return out
			})
		}
		return b
	})
	return b, err
}

// appendDictPairs appends a Dict arm with n pairs produced by pair.
func appendDictPairs(b []byte, n int, pair func([]byte, int) ([]byte, []byte, error)) ([]byte, error) {
	var err error
	b = appendSub(b, objDict, func(b []byte) []byte {
		for i := 0; i < n && err == nil; i++ {
			var k, v []byte
			k, v, err = pair(nil, i)
			if err != nil {
				break
			}
			b = appendSub(b, 1, func(b []byte) []byte {
				b = protowire.AppendTag(b, 1, protowire.BytesType)
				b = protowire.AppendBytes(b, k)
				b = protowire.AppendTag(b, 2, protowire.BytesType)
				return protowire.AppendBytes(b, v)
			})
		}
		return b
	})
	return b, err
}

// appendJSON encodes a JSON document as a MontyObject, keeping object key
// order.
func appendJSON(b []byte, raw []byte, depth int) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	b, err := appendJSONValue(b, dec, depth)
	if err != nil {
		return nil, fmt.Errorf("monty: bad JSON value: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("monty: bad JSON value: trailing data")
	}
	return b, nil
}

func appendJSONValue(b []byte, dec *json.Decoder, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return append(b, noneObject...), nil
	case bool:
		return appendBool(b, t), nil
	case json.Number:
		return appendNumber(b, string(t))
	case string:
		return appendStringField(b, objStr, t), nil
	case json.Delim:
		switch t {
		case '[':
			var err error
			b = appendSub(b, objList, func(b []byte) []byte {
				for err == nil && dec.More() {
					b = appendSub(b, 1, func(b []byte) []byte {
						var out []byte
						out, err = appendJSONValue(b, dec, depth+1)
						if err != nil {
							return b
						}
						return out
					})
				}
				return b
			})
			if err != nil {
				return nil, err
			}
			_, err = dec.Token() // ']'
			return b, err
		case '{':
			var err error
			b = appendSub(b, objDict, func(b []byte) []byte {
				for err == nil && dec.More() {
					var kt json.Token
					kt, err = dec.Token()
					if err != nil {
						break
					}
					key, _ := kt.(string)
					b = appendSub(b, 1, func(b []byte) []byte {
						b = appendSub(b, 1, func(b []byte) []byte { return appendStringField(b, objStr, key) })
						return appendSub(b, 2, func(b []byte) []byte {
							var out []byte
							out, err = appendJSONValue(b, dec, depth+1)
							if err != nil {
								return b
							}
							// appendJSONValue wrote a whole MontyObject; the
							// Pair.value field wraps it.
							return out
						})
					})
				}
				return b
			})
			if err != nil {
				return nil, err
			}
			_, err = dec.Token() // '}'
			return b, err
		}
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// ---------------------------------------------------------------------------
// MontyObject → JSON and Go
// ---------------------------------------------------------------------------

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

// valueToGo decodes an encoded MontyObject into plain Go values: nil, bool,
// int64, *big.Int (ints beyond 64 bits), float64, string, []byte (bytes that
// are not UTF-8), []any, map[string]any; other kinds as in valueToJSON.
func valueToGo(b []byte) (any, error) {
	return objToGo(b, 0)
}

func objToGo(b []byte, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	o, err := decodeObject(b)
	if err != nil {
		return nil, err
	}
	switch o.arm {
	case objNone:
		return nil, nil
	case objBool:
		return o.v != 0, nil
	case objInt:
		return protowire.DecodeZigZag(o.v), nil
	case objBigInt:
		bi, err := decodeBig(o.val)
		if err != nil {
			return nil, err
		}
		if bi.IsInt64() {
			return bi.Int64(), nil
		}
		return bi, nil
	case objFloat:
		return math.Float64frombits(o.v), nil
	case objStr:
		return string(o.val), nil
	case objBytes:
		if utf8.Valid(o.val) {
			return string(o.val), nil
		}
		return bytes.Clone(o.val), nil
	case objList, objTuple, objSet, objFrozenSet:
		out := []any{}
		it := fieldIter{b: o.val}
		for it.next() {
			if it.num != 1 || !it.wantBytes() {
				continue
			}
			v, err := objToGo(it.val, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, it.err
	case objDict, objClassInstance, objNamedTuple:
		// Order does not survive a Go map; the JSON path keeps it.
		j, err := appendObjJSON(nil, b, depth)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, err
		}
		return normalizeNumbers(m), nil
	}
	return scalarString(o)
}

// normalizeNumbers turns json.Number leaves into int64, *big.Int or float64.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if bi, ok := new(big.Int).SetString(string(x), 10); ok {
			return bi
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = normalizeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeNumbers(x[k])
		}
	}
	return v
}
