package monty

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"math/big"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// The golden frames (docs/MONTY.md §7), recorded from Monty 0.0.23.
const goldenCode = "x = await read_file(\"a.txt\")\nprint(x)\nx"

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "\n", "").Replace(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func frame(t testing.TB, body []byte) []byte {
	t.Helper()
	var w bytes.Buffer
	if _, err := writeFrame(&w, nil, body); err != nil {
		t.Fatal(err)
	}
	return w.Bytes()
}

func TestGoldenRequests(t *testing.T) {
	t.Parallel()
	if len(goldenCode) != 39 {
		t.Fatalf("golden code is %d bytes, want 39", len(goldenCode))
	}
	tests := []struct {
		name string
		body []byte
		want string
	}{
		{"1 configure", encodeConfigure(nil, configureMsg{scriptName: "t.py", montyVersion: "0.0.23"}),
			"12000000 0a10 0a04742e7079 2a06302e302e3233 4802"},
		{"3 feed", encodeFeed(nil, goldenCode),
			"2b000000 1a29 0a27" + hex.EncodeToString([]byte(goldenCode))},
		{"5 resume_call future", encodeResumeCall(nil, 0, extResult{kind: extFuture, futureID: 0}),
			"08000000 2206 0800 1202 1800"},
		{"7 resume_futures", encodeResumeFutures(nil, []futureResult{{callID: 0, result: extResult{kind: extReturnValue, value: mustEncode(t, "hi")}}}),
			"0e000000 320c 0a0a 0800 1206 0a04 42026869"},
		// Not from the §11 trace: dump (arm 7) and load (arm 8, state = 1);
		// the snapshot tests run them against the binary.
		{"dump", encodeEmpty(nil, reqDump), "02000000 3a00"},
		{"load", encodeLoad(nil, []byte{1, 2}), "06000000 4204 0a020102"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := frame(t, tt.body)
			if want := unhex(t, tt.want); !bytes.Equal(got, want) {
				t.Errorf("frame\n got %x\nwant %x", got, want)
			}
		})
	}
}

func mustEncode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := encodeValue(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readGolden(t *testing.T, s string) childEvent {
	t.Helper()
	body, err := readFrame(bytes.NewReader(unhex(t, s)), nil, defaultFrameLimit)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := decodeChildEvent(body)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestGoldenEvents(t *testing.T) {
	t.Parallel()
	t.Run("2 ok", func(t *testing.T) {
		if ev := readGolden(t, "02000000 5200"); ev.kind != evOk {
			t.Fatalf("kind %d, want ok", ev.kind)
		}
	})
	t.Run("4 function_call", func(t *testing.T) {
		ev := readGolden(t, "1d000000 1214 0a09"+hex.EncodeToString([]byte("read_file"))+" 1207 4205"+hex.EncodeToString([]byte("a.txt"))+" a00125 b801e807")
		if ev.kind != evFunctionCall || ev.name != "read_file" || ev.callID != 0 {
			t.Fatalf("got %+v", ev)
		}
		args, kwargs, err := decodeArgs(ev)
		if err != nil || len(args) != 1 || args[0] != "a.txt" || kwargs != nil {
			t.Fatalf("args %v kwargs %v err %v", args, kwargs, err)
		}
		if ev.totalExecMicros != 37 || ev.maxSuspensions != 1000 {
			t.Fatalf("micros %d suspensions %d", ev.totalExecMicros, ev.maxSuspensions)
		}
	})
	t.Run("6 resolve_futures", func(t *testing.T) {
		ev := readGolden(t, "0c000000 2a03 0a0100 a00137 b801e807")
		if ev.kind != evResolveFutures || len(ev.pending) != 1 || ev.pending[0] != 0 || ev.totalExecMicros != 55 {
			t.Fatalf("got %+v", ev)
		}
	})
	t.Run("8 print", func(t *testing.T) {
		ev := readGolden(t, "09000000 0a07 0801 1203 68690a")
		if ev.kind != evPrint || ev.stream != 1 || ev.text != "hi\n" {
			t.Fatalf("got %+v", ev)
		}
	})
	t.Run("9 complete", func(t *testing.T) {
		ev := readGolden(t, "0f000000 3206 0a04 42026869 a00152 b801e807")
		if ev.kind != evComplete || ev.totalExecMicros != 82 {
			t.Fatalf("got %+v", ev)
		}
		j, err := valueToJSON(nil, ev.value)
		if err != nil || string(j) != `"hi"` {
			t.Fatalf("value %s, %v", j, err)
		}
	})
}

func TestReadFrame(t *testing.T) {
	t.Parallel()
	if _, err := readFrame(bytes.NewReader(nil), nil, 10); err != io.EOF {
		t.Errorf("empty stream: %v, want io.EOF", err)
	}
	if _, err := readFrame(bytes.NewReader([]byte{5, 0}), nil, 10); err != io.ErrUnexpectedEOF {
		t.Errorf("half header: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := readFrame(bytes.NewReader([]byte{5, 0, 0, 0, 1}), nil, 10); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated body: %v", err)
	}
	if _, err := readFrame(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0x7f}), nil, 10); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("huge frame: %v", err)
	}
}

func TestDecodeUnpackedPendingAndUnknownFields(t *testing.T) {
	t.Parallel()
	var inner []byte
	inner = appendVarintField(inner, 1, 3)
	inner = appendVarintField(inner, 1, 5)
	inner = appendStringField(inner, 9, "future field") // unknown inside
	var b []byte
	b = appendStringField(b, 99, "unknown top-level field")
	b = protowire.AppendTag(b, evResolveFutures, protowire.BytesType)
	b = protowire.AppendBytes(b, inner)
	ev, err := decodeChildEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if ev.kind != evResolveFutures || len(ev.pending) != 2 || ev.pending[0] != 3 || ev.pending[1] != 5 {
		t.Fatalf("got %+v", ev)
	}
	if _, err := decodeChildEvent(appendStringField(nil, 99, "x")); err == nil {
		t.Fatal("an event without a kind decoded")
	}
}

func TestAppendSubLongBody(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 70000)
	got := encodeFeed(nil, long)
	var want []byte
	inner := appendStringField(nil, 1, long)
	want = protowire.AppendTag(want, reqFeed, protowire.BytesType)
	want = protowire.AppendBytes(want, inner)
	if !bytes.Equal(got, want) {
		t.Fatal("appendSub produced a different encoding from protowire.AppendBytes for a long body")
	}
}

func TestValueRoundTrip(t *testing.T) {
	t.Parallel()
	huge, _ := new(big.Int).SetString("-123456789012345678901234567890", 10)
	tests := []struct {
		in   any
		json string
	}{
		{nil, `null`},
		{true, `true`},
		{int64(-42), `-42`},
		{uint64(math.MaxUint64), `"18446744073709551615"`},
		{huge, `"-123456789012345678901234567890"`},
		{1.5, `1.5`},
		{math.Inf(1), `"inf"`},
		{"a\"<b>\n\x01", `"a\"<b>\n\u0001"`},
		{[]byte{0xff, 0x00}, `"/wA="`},
		{[]any{int64(1), "two", []any{}}, `[1,"two",[]]`},
		{map[string]any{"b": int64(1), "a": []string{"x"}}, `{"a":["x"],"b":1}`},
		{[]byte(`{"z":1,"a":{"n":null,"f":2.5,"big":123456789012345678901}}`), `"{\"z\":1,\"a\":{\"n\":null,\"f\":2.5,\"big\":123456789012345678901}}"`},
		{jsonRaw(`{"z":1,"a":{"n":null,"f":2.5,"big":123456789012345678901}}`), `{"z":1,"a":{"n":null,"f":2.5,"big":"123456789012345678901"}}`},
		{struct {
			File string `json:"file"`
			Line int    `json:"line"`
		}{"a.py", 3}, `{"file":"a.py","line":3}`},
	}
	for _, tt := range tests {
		enc, err := encodeValue(nil, tt.in)
		if err != nil {
			t.Errorf("encode %#v: %v", tt.in, err)
			continue
		}
		j, err := valueToJSON(nil, enc)
		if err != nil {
			t.Errorf("toJSON %#v: %v", tt.in, err)
			continue
		}
		if string(j) != tt.json {
			t.Errorf("%#v: JSON %s, want %s", tt.in, j, tt.json)
		}
		if _, err := valueToGo(enc); err != nil {
			t.Errorf("toGo %#v: %v", tt.in, err)
		}
	}
	if _, err := encodeValue(nil, jsonRaw(`{"a":`)); err == nil {
		t.Error("truncated JSON encoded")
	}
	if _, err := encodeValue(nil, make(chan int)); err == nil {
		t.Error("a channel encoded")
	}
}

func TestValueToGoNested(t *testing.T) {
	t.Parallel()
	enc := mustEncode(t, jsonRaw(`{"files":["a","b"],"n":3,"f":0.5,"ok":true,"m":{"x":null}}`))
	v, err := valueToGo(enc)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["n"] != int64(3) || m["f"] != 0.5 || m["ok"] != true || len(m["files"].([]any)) != 2 || m["m"].(map[string]any)["x"] != nil {
		t.Fatalf("got %#v", m)
	}
}

func TestValueTooDeep(t *testing.T) {
	t.Parallel()
	deep := jsonRaw(strings.Repeat("[", maxDepth+10) + strings.Repeat("]", maxDepth+10))
	if _, err := encodeValue(nil, deep); err == nil {
		t.Fatal("a value nested beyond maxDepth encoded")
	}
	// Build a deep MontyObject by hand and decode it.
	obj := noneObject
	for range maxDepth + 10 {
		obj = appendSub(nil, objList, func(b []byte) []byte {
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			return protowire.AppendBytes(b, obj)
		})
	}
	if _, err := valueToJSON(nil, obj); err == nil {
		t.Fatal("a MontyObject nested beyond maxDepth decoded")
	}
}

func jsonRaw(s string) any { return jsonRawMessage(s) }

// FuzzDecodeChildEvent feeds arbitrary bytes to the ChildEvent decoder and to
// the value decoders behind it: nothing may panic, hang or allocate without
// bound.
func FuzzDecodeChildEvent(f *testing.F) {
	for _, s := range []string{
		"5200",
		"1214 0a09" + hex.EncodeToString([]byte("read_file")) + " 1207 4205" + hex.EncodeToString([]byte("a.txt")) + " a00125 b801e807",
		"2a03 0a0100 a00137 b801e807",
		"0a07 0801 1203 68690a",
		"3206 0a04 42026869 a00152 b801e807",
	} {
		f.Add(unhex(f, s))
	}
	f.Add(encodeResumeFutures(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := decodeChildEvent(b)
		if err != nil {
			return
		}
		_ = describeEvent(ev)
		for _, a := range ev.args {
			_, _ = valueToJSON(nil, a)
			_, _ = valueToGo(a)
		}
		for _, kw := range ev.kwargs {
			_, _ = valueToGo(kw.key)
			_, _ = valueToJSON(nil, kw.value)
		}
		if ev.value != nil {
			j, err := valueToJSON(nil, ev.value)
			if err == nil && !jsonValid(j) {
				t.Fatalf("valueToJSON produced invalid JSON %q", j)
			}
			_, _ = valueToGo(ev.value)
		}
		if ev.kind == evOsCall {
			_ = osCallResult(ev)
		}
	})
}

func jsonRawMessage(s string) json.RawMessage { return json.RawMessage(s) }

func jsonValid(b []byte) bool { return json.Valid(b) }
