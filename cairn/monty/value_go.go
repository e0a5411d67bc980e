package monty

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

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
