package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden/*.out.* from the current encoders")

// TestGoldenWireBytes pins the bytes a worker writes: each fixture in
// testdata/golden/*.in.json is decoded into its message type and encoded
// again with encoding/json, the fast encoders and msgpack; every output must
// equal the stored one byte for byte. A change of the Go types (moving
// fields into shared types, embedding) must leave these bytes alone; a
// change of the protocol updates them with -update-golden and says so in
// docs/PROTOCOL.md.
func TestGoldenWireBytes(t *testing.T) {
	type codec struct {
		fast func(v any) ([]byte, error) // nil: no fast encoder
		msgp bool
	}
	kinds := map[string]struct {
		new func() any
		codec
	}{
		"event":      {func() any { return new(Event) }, codec{func(v any) ([]byte, error) { return AppendEvent(nil, JSON, v.(*Event)) }, true}},
		"result":     {func() any { return new(AgentResult) }, codec{func(v any) ([]byte, error) { return MarshalResult(JSON, v.(*AgentResult)) }, true}},
		"status":     {func() any { return new(StatusRecord) }, codec{func(v any) ([]byte, error) { return MarshalStatus(v.(*StatusRecord)) }, false}},
		"transcript": {func() any { return new(Transcript) }, codec{nil, false}},
	}
	ins, err := filepath.Glob(filepath.Join("testdata", "golden", "*.in.json"))
	if err != nil || len(ins) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		k, ok := kinds[strings.SplitN(name, "_", 2)[0]]
		if !ok {
			t.Fatalf("%s: unknown message kind", in)
		}
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			v := k.new()
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				t.Fatalf("decode fixture: %v", err)
			}
			js, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, name+".out.json", js)
			if k.fast != nil {
				fast, err := k.fast(v)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(fast, js) {
					t.Fatalf("fast encoder:\n got %s\nwant %s", fast, js)
				}
			}
			if k.msgp {
				mp, err := msgpack.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				checkGolden(t, name+".out.msgpack.hex", []byte(hex.EncodeToString(mp)+"\n"))
				// Decoded and encoded again, msgpack gives the same bytes.
				back := k.new()
				if err := msgpack.Unmarshal(mp, back); err != nil {
					t.Fatal(err)
				}
				mp2, err := msgpack.Marshal(back)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(mp2, mp) {
					t.Fatalf("msgpack round trip:\n got %x\nwant %x", mp2, mp)
				}
			}
		})
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-golden once to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s changed:\n got %s\nwant %s", name, got, want)
	}
}
