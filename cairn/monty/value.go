package monty

import (
	"bytes"
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
