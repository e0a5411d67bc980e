package functiongemma

import (
	"encoding/json"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
)

// TestGrammarMapObject: an object whose additionalProperties is a schema
// (the docstring agent's params and raises) admits free keys, bare or
// escaped, with values of that schema; other objects without properties
// still admit only {}.
func TestGrammarMapObject(t *testing.T) {
	t.Parallel()
	tools := []fleettype.ToolSpec{{Name: "doc", Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{
		"params":{"type":"object","additionalProperties":{"type":"string"}},
		"counts":{"type":"object","additionalProperties":{"type":"integer"}},
		"any":{"type":"object","additionalProperties":true},
		"empty":{"type":"object"},
		"summary":{"type":"string"}}}`)}}
	g := mustGrammar(t, tools)
	accepts := acceptor(t, g)
	call := func(args string) string { return "<start_function_call>call:doc" + args + "<end_function_call>" }
	for _, ok := range []string{
		"{params:{}}",
		"{params:{x:<escape>The x.<escape>}}",
		"{params:{mod_name:<escape>The mod name.<escape>,init_globals:<escape>The init globals.<escape>},summary:<escape>Run.<escape>}",
		"{params:{<escape>a b<escape>:<escape>A key that cannot be bare.<escape>}}",
		"{counts:{a:1,b:-2}}",
		"{any:{k:true,n:null,s:<escape>x<escape>}}",
		"{empty:{}}",
		"{counts:{a:1,b:2,c:3,d:4,e:5,f:6}}",
	} {
		if !accepts(call(ok)) {
			t.Errorf("rejected %q", ok)
		}
	}
	for _, bad := range []string{
		"{params:{x:1}}",                                          // a string map
		"{params:{x:<escape>a<escape>,}}",                         // trailing comma
		"{params:{:<escape>a<escape>}}",                           // empty bare key
		"{counts:{a:<escape>1<escape>}}",                          // an integer map
		"{empty:{a:1}}",                                           // no additionalProperties: only {}
		"{params:{x:<escape>a<escape>}summary:<escape>s<escape>}", // missing comma
		"{counts:{a:1,b:2,c:3,d:4,e:5,f:6,g:7}}",                  // over maxMapEntries
	} {
		if accepts(call(bad)) {
			t.Errorf("accepted %q", bad)
		}
	}
	// What the grammar admits parses back to the map.
	calls, _, err := ParseCalls(call("{params:{x:<escape>The x.<escape>,y:<escape>Y.<escape>}}"))
	if err != nil || len(calls) != 1 {
		t.Fatalf("parse: %v %v", calls, err)
	}
	var args map[string]map[string]string
	if err := json.Unmarshal(calls[0].Arguments, &args); err != nil || args["params"]["x"] != "The x." || args["params"]["y"] != "Y." {
		t.Fatalf("arguments = %s (%v)", calls[0].Arguments, err)
	}
}
