package loop_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// ChanSink never blocks: a full buffer drops and counts; kinds filter.
func TestChanSinkDropPolicy(t *testing.T) {
	t.Parallel()
	s := loop.NewChanSink(2)
	for i := range 5 {
		s.Emit(fleettype.Event{Seq: i + 1})
	}
	if s.Dropped() != 3 || len(s.C()) != 2 || (<-s.C()).Seq != 1 {
		t.Errorf("dropped %d buffered %d", s.Dropped(), len(s.C()))
	}
	f := loop.NewChanSink(8, fleettype.EventFinished)
	var m loop.MultiSink = []loop.EventSink{f, nil}
	m.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted})
	m.Emit(fleettype.Event{Kind: fleettype.EventFinished})
	if len(f.C()) != 1 || (<-f.C()).Kind != fleettype.EventFinished || f.Dropped() != 0 {
		t.Errorf("kind filter let through the wrong events")
	}
}

// A run whose sink is a tiny ChanSink finishes; events past the buffer are
// dropped, never waited for.
func TestRunWithSlowSink(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{EventTextCap: 8}, 6,
		looptest.Step{Text: "a long explanation: ééééé", Calls: []fleettype.ToolCall{looptest.Call("read_file", `{"path":"a"}`)}},
		looptest.Text("done é and more text"))
	b.tools.ChangedFilesFunc = func(context.Context) ([]string, error) { return []string{"z.py"}, nil }
	sink := loop.NewChanSink(1)
	in := b.input()
	in.Events = loop.MultiSink{sink, b.events}
	res, err := b.runner.Run(context.Background(), in)
	if err != nil || res.Status != fleettype.StatusSuccess {
		t.Fatalf("%v %+v", err, res)
	}
	if sink.Dropped() == 0 {
		t.Errorf("nothing dropped")
	}
	out := b.events.ofKind(fleettype.EventModelOutput)
	if len(out) != 2 || out[0].Text != "a long e…" || !strings.HasPrefix(out[1].Text, "done ") || len(out[1].Text) > 8+len("…") {
		t.Errorf("model_output texts not capped at 8 bytes on a rune boundary: %q %q", out[0].Text, out[1].Text)
	}
	// A plain-text answer keeps changed_files empty (it submitted none) but records
	// what the workspace really changed.
	if len(res.ChangedFiles) != 0 || res.Details[loop.DetailChangedFilesActual] == nil {
		t.Errorf("ChangedFiles %v details %v", res.ChangedFiles, res.Details)
	}
}
