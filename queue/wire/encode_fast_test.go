package wire

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
)

var trickyStrings = []string{"", "a", "lint", "<b>&amp;</b>", "quote \" back \\ slash", "tab\tnl\nret\r\b\f\x00\x1f\x7f",
	"héllo wörld ✓", "line\u2028sep\u2029", "bad utf8 \xff\xfe end", "emoji 😀", "\xed\xa0\x80 surrogate"}

var trickyRaw = []json.RawMessage{nil, json.RawMessage(`{}`), json.RawMessage(`{"fix": true, "path" : "a<b>.py"}`),
	json.RawMessage(" [1, 2,\n 3] "), json.RawMessage(`"s\u2028"`)}

// fillRandom sets every exported field of v (a struct, recursively) to a
// random value, zero about a third of the time (omitempty paths).
func fillRandom(t *testing.T, r *rand.Rand, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		sf := v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		if r.IntN(3) == 0 && !sf.Anonymous {
			f.SetZero()
			continue
		}
		switch {
		case f.Type() == reflect.TypeFor[time.Time]():
			zones := []*time.Location{time.UTC, time.FixedZone("x", -7*3600-1800), time.FixedZone("y", 5*3600+45*60)}
			f.Set(reflect.ValueOf(time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).In(zones[r.IntN(len(zones))])))
		case f.Type() == reflect.TypeFor[json.RawMessage]():
			f.Set(reflect.ValueOf(trickyRaw[r.IntN(len(trickyRaw))]))
		case f.Kind() == reflect.Struct:
			fillRandom(t, r, f)
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct:
			p := reflect.New(f.Type().Elem())
			fillRandom(t, r, p.Elem())
			f.Set(p)
		case f.Kind() == reflect.String:
			f.SetString(trickyStrings[r.IntN(len(trickyStrings))])
		case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
			f.SetInt(r.Int64N(1<<40) - 1<<20)
		case f.Kind() == reflect.Uint64:
			f.SetUint(r.Uint64())
		case f.Kind() == reflect.Bool:
			f.SetBool(r.IntN(2) == 0)
		case f.Type() == reflect.TypeFor[map[string]any]():
			m := map[string]any{}
			for k := range r.IntN(4) {
				switch k % 3 {
				case 0:
					m[trickyStrings[r.IntN(len(trickyStrings))]] = trickyStrings[r.IntN(len(trickyStrings))]
				case 1:
					m["n"+trickyStrings[r.IntN(len(trickyStrings))]] = r.Float64() * 1000
				default:
					m["list"] = []any{true, nil, "x<y>", 3.5}
				}
			}
			f.Set(reflect.ValueOf(m))
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Int:
			n := r.IntN(4)
			s := reflect.MakeSlice(f.Type(), n, n)
			for k := range n {
				s.Index(k).SetInt(r.Int64N(200) - 5)
			}
			f.Set(s)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
			n := r.IntN(4)
			s := reflect.MakeSlice(f.Type(), n, n)
			for k := range n {
				s.Index(k).SetString(trickyStrings[r.IntN(len(trickyStrings))])
			}
			f.Set(s)
		default:
			t.Fatalf("fillRandom: field %s of type %s is not handled: teach the fast encoders and this test about it", sf.Name, f.Type())
		}
	}
}

// TestFastJSONMatchesEncodingJSON: the hand-written event and status
// encoders write exactly what json.Marshal writes, for random values of
// every field (a new field in Event, Usage or StatusRecord makes
// this fail until the encoders know it).
func TestFastJSONMatchesEncodingJSON(t *testing.T) {
	if !fastJSON {
		t.Fatalf("the fast JSON encoders are off: the structs changed. Teach appendEventJSON/appendStatusJSON/appendResultJSON the change and update the field lists in encode_fast.go:\nUsage %s\nEvent %s\nStatusRecord %s\nAgentResult %s\nResultTimings %s",
			jsonFields(reflect.TypeFor[fleettype.Usage]()),
			jsonFields(reflect.TypeFor[Event]()), jsonFields(reflect.TypeFor[StatusRecord]()),
			jsonFields(reflect.TypeFor[AgentResult]()), jsonFields(reflect.TypeFor[ResultTimings]()))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		var e Event
		fillRandom(t, r, reflect.ValueOf(&e).Elem())
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendEvent(nil, JSON, &e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("event %d:\n got %s\nwant %s", i, got, want)
		}
		var res AgentResult
		fillRandom(t, r, reflect.ValueOf(&res).Elem())
		if r.IntN(4) == 0 {
			res.ChangedFiles = []string{} // [] rather than null
		}
		if want, err = json.Marshal(&res); err != nil {
			t.Fatal(err)
		}
		if got, err = MarshalResult(JSON, &res); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("result %d:\n got %s\nwant %s", i, got, want)
		}
		var s StatusRecord
		fillRandom(t, r, reflect.ValueOf(&s).Elem())
		if want, err = json.Marshal(&s); err != nil {
			t.Fatal(err)
		}
		if got, err = MarshalStatus(&s); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("status %d:\n got %s\nwant %s", i, got, want)
		}
	}
	// Out-of-range times and invalid raw JSON take json.Marshal's path.
	e := Event{JobID: "j", Event: fleettype.Event{Kind: fleettype.EventFinished, Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}
	if _, err := AppendEvent(nil, JSON, &e); err == nil {
		t.Fatal("year 10000 encoded without error")
	}
	e = Event{JobID: "j", Event: fleettype.Event{Kind: fleettype.EventToolCall, Arguments: json.RawMessage(`{bad`)}}
	if _, err := AppendEvent(nil, JSON, &e); err == nil {
		t.Fatal("invalid arguments encoded without error")
	}
}

// FuzzAppendJSONString: any string encodes as encoding/json encodes it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q:\n got %s\nwant %s", s, got, want)
		}
	})
}
