package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadSeq reads message seq of stream from the stream's leader (nil: no
// such message). Unlike a direct get (nats.go's Stream.GetMsg on a stream
// with AllowDirect), the answer's sequence and subject come from the
// server's JSON fields, so a stored message's own Nats-* headers cannot
// stand in for them.
func ReadSeq(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*StoredMsg, error) {
	return getSeq(ctx, nc, stream, seq)
}

// NextBySubject reads the first message of stream at or after seq whose
// subject matches filter (wildcards allowed), from the stream's leader;
// nil when there is none. Walk a subject by calling it again with the
// returned message's Seq+1.
func NextBySubject(ctx context.Context, nc *nats.Conn, stream, filter string, seq uint64) (*StoredMsg, error) {
	return getMsg(ctx, nc, stream, fmt.Sprintf(`{"seq":%d,"next_by_subj":%q}`, max(seq, 1), filter))
}

// walkIdle is how long Walk waits for the next delivery before it asks the
// stream's leader whether anything is left (a message deleted while the
// walk runs is never delivered).
const walkIdle = 2 * time.Second

// Walk calls fn with every message of stream whose subject matches filter,
// oldest first, until fn returns false or an error. It reads them with one
// ordered consumer (a few round trips for any number of messages), and each
// message's Seq, Subject and Time come from the delivery's metadata, which
// the server writes, not from the message's headers. Messages stored or
// deleted while it runs may or may not be seen; every message stored before
// it started and still there when it ends is.
func Walk(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, stream, filter string, fn func(*StoredMsg) (bool, error)) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("ledger: walk %s: %w", stream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("ledger: walk %s: %w", stream, err)
	}
	var pending uint64
	for _, n := range info.State.Subjects {
		pending += n
	}
	if pending == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return fmt.Errorf("ledger: walk %s: %w", stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(int(min(pending, 512))))
	if err != nil {
		return fmt.Errorf("ledger: walk %s: %w", stream, err)
	}
	defer it.Stop()
	var last uint64
	for {
		nctx, cancel := context.WithTimeout(ctx, walkIdle)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
			// Nothing delivered for a while: done when the leader has
			// nothing after the last message seen.
			next, err := NextBySubject(ctx, nc, stream, filter, last+1)
			if err != nil {
				return err
			}
			if next == nil {
				return nil
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("ledger: walk %s: %w", stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("ledger: walk %s: %w", stream, err)
		}
		last = meta.Sequence.Stream
		ok, err := fn(&StoredMsg{Subject: m.Subject(), Seq: last, Header: m.Headers(), Data: m.Data(), Time: meta.Timestamp})
		if err != nil || !ok || meta.NumPending == 0 {
			return err
		}
	}
}
