package wire

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// serverPrefix starts every header name the NATS server reserves: the ones
// it adds to what it sends back (a direct get's Nats-Stream,
// Nats-Sequence, Nats-Subject, Nats-Time-Stamp, Nats-Last-Sequence,
// Nats-Num-Pending, Nats-UpTo-Sequence) and the ones it acts on when a
// message is published (Nats-Msg-Id, Nats-Expected-*, Nats-Rollup,
// Nats-TTL, Nats-Schedule*, ...).
const serverPrefix = "Nats-"

// CopyHeader returns the headers of a message read back from a stream that
// may be stored again with another message (a dead letter keeps its
// request's headers): every header but the NATS server's own.
//
// A direct get answers with the stored headers plus the server's
// Nats-Stream, Nats-Sequence, Nats-Subject and Nats-Time-Stamp. Stored again
// as they are, a later direct get of the copy carries two Nats-Sequence
// values and nats.go takes the copied one as the copy's sequence, so a walk
// of the stream by sequence skips or misreads messages (docs/PROTOCOL.md
// §8.5). Publish-time controls (Nats-Expected-*, Nats-Rollup, Nats-TTL,
// schedules) would make the copy's own write conditional on another stream's
// state. Nats-Msg-Id goes too: the writer of the copy sets its own.
//
// Header names are matched as nats.Header stores them (canonical MIME form);
// a name that differs only in case ("nats-sequence") is dropped as well.
func CopyHeader(h nats.Header) nats.Header {
	out := make(nats.Header, len(h)+8)
	for k, v := range h {
		if IsServerHeader(k) {
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	return out
}

// IsServerHeader reports whether header name k is one the NATS server
// reserves (it starts with "Nats-", in any case).
func IsServerHeader(k string) bool {
	return len(k) >= len(serverPrefix) && strings.EqualFold(k[:len(serverPrefix)], serverPrefix)
}
