package fleettype

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestUsageAddCountsEveryField(t *testing.T) {
	one := Usage{PromptTokens: 1, CachedTokens: 2, CompletionTokens: 3, ForcedTokens: 4, PromptDuration: 5, CompletionDuration: 6}
	for i := range reflect.TypeFor[Usage]().NumField() {
		if reflect.ValueOf(one).Field(i).IsZero() {
			t.Fatalf("set %s above", reflect.TypeFor[Usage]().Field(i).Name)
		}
	}
	var u Usage
	u.Add(one)
	u.Add(one)
	want := Usage{PromptTokens: 2, CachedTokens: 4, CompletionTokens: 6, ForcedTokens: 8, PromptDuration: 10 * time.Nanosecond, CompletionDuration: 12}
	if u != want {
		t.Fatalf("got %+v, want %+v", u, want)
	}
}

// TestChatMessageContent: a nil content is written as null and read as "";
// a set one, even empty, is written as a string.
func TestChatMessageContent(t *testing.T) {
	empty := ""
	for _, c := range []struct {
		m    ChatMessage
		json string
	}{
		{ChatMessage{Role: "assistant"}, `{"role":"assistant","content":null}`},
		{ChatMessage{Role: "assistant", Content: &empty}, `{"role":"assistant","content":""}`},
	} {
		b, err := json.Marshal(&c.m)
		if err != nil || string(b) != c.json {
			t.Fatalf("%s, %v; want %s", b, err, c.json)
		}
		var back ChatMessage
		if err := json.Unmarshal(b, &back); err != nil || back.Text() != "" {
			t.Fatalf("back %+v, %v", back, err)
		}
	}
}
