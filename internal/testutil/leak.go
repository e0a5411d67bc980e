package testutil

import "go.uber.org/goleak"

// NATSLeakIgnores are the goroutines a goleak check must not count against
// the code under test, because the nats.go client (v1.55.0) leaves them
// behind on its own:
//
//   - jetstream's object store Put makes a private JetStream context, whose
//     first asynchronous publish starts resetPendingAcksOnReconnect in a new
//     goroutine, and Put's deferred cleanup sets the channel that goroutine
//     reads to nil. When the cleanup runs before the goroutine has read the
//     field, the goroutine waits on a nil channel for ever. One goroutine per
//     unlucky Put, outside fleet's reach; it showed up as a rare CI failure
//     of queue/client, whose tests park jobs (docs/TESTING.md).
func NATSLeakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	}
}
