package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// StoredMsg is one message read back from a stream. Subject, Seq and Time
// are the ones the server assigned (the JSON fields of its answer, or a
// delivery's metadata), never a header: a stored message may carry a copied
// Nats-Sequence of its own (docs/PROTOCOL.md §8.5). Header holds the headers
// as stored.
type StoredMsg struct {
	Subject string
	Seq     uint64
	Header  nats.Header
	Data    []byte
	Time    time.Time
}

// getLast reads the last message on subject from stream's leader (not a
// direct get, which a replica may answer from behind): the claim's
// decisions must see every write acknowledged before them. It returns nil
// when the subject has no message.
func getLast(ctx context.Context, nc *nats.Conn, stream, subject string) (*StoredMsg, error) {
	return getMsg(ctx, nc, stream, fmt.Sprintf(`{"last_by_subj":%q}`, subject))
}

// getSeq reads message seq of stream from its leader (nil: no such message,
// for a work queue: acknowledged and removed).
func getSeq(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*StoredMsg, error) {
	return getMsg(ctx, nc, stream, fmt.Sprintf(`{"seq":%d}`, seq))
}

func getMsg(ctx context.Context, nc *nats.Conn, stream, req string) (*StoredMsg, error) {
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, []byte(req))
	if err != nil {
		return nil, fmt.Errorf("ledger: read %s: %w", stream, err)
	}
	var r struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("ledger: read %s: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("ledger: read %s: %w", stream, r.Error)
	}
	if r.Message == nil {
		return nil, fmt.Errorf("ledger: read %s: empty answer", stream)
	}
	m := &StoredMsg{Subject: r.Message.Subject, Seq: r.Message.Seq, Data: r.Message.Data, Time: r.Message.Time}
	if len(r.Message.Header) > 0 {
		h, err := decodeHeaders(r.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("ledger: read %s: headers: %w", stream, err)
		}
		m.Header = h
	}
	return m, nil
}

// decodeHeaders parses a stored message's "NATS/1.0\r\nK: V\r\n..." block.
func decodeHeaders(b []byte) (nats.Header, error) { return nats.DecodeHeadersMsg(b) }

// lastLease reads the job's last lease record and its revision (nil, 0:
// none).
func (j reader) lastLease(ctx context.Context, jobID string) (*wire.StatusRecord, uint64, error) {
	m, err := getLast(ctx, j.nc, wire.StreamResults, wire.LeaseSubject(jobID))
	if err != nil || m == nil {
		return nil, 0, err
	}
	var rec wire.StatusRecord
	if json.Unmarshal(m.Data, &rec) != nil {
		// Unreadable (not ours): a claim replaces it.
		return &wire.StatusRecord{JobID: jobID}, m.Seq, nil
	}
	return &rec, m.Seq, nil
}

// storedResult reads the job's stored result (nil: none).
func (j reader) storedResult(ctx context.Context, jobID string) (*wire.AgentResult, error) {
	m, err := getLast(ctx, j.nc, wire.StreamResults, wire.ResultSubject(jobID))
	if err != nil || m == nil {
		return nil, err
	}
	res, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
	if err != nil {
		return nil, fmt.Errorf("ledger: stored result of %s: %w", jobID, err)
	}
	return res, nil
}

// clientRecord reads the job's record in the status bucket (nil: none or
// deleted) from the bucket stream's leader. Not kv.Get: that is a direct
// get, which a replica that is behind may answer (R>1), and the claim must
// see a cancel whose write was acknowledged before it, as a status read must
// see the record its client just wrote.
func (j reader) clientRecord(ctx context.Context, jobID string) (*wire.StatusRecord, error) {
	bucket := j.kv.Bucket()
	m, err := getLast(ctx, j.nc, "KV_"+bucket, "$KV."+bucket+"."+jobID)
	if err != nil || m == nil {
		return nil, err
	}
	if op := m.Header.Get(kvOperation); op == kvDelete || op == kvPurge {
		return nil, nil
	}
	var rec wire.StatusRecord
	if json.Unmarshal(m.Data, &rec) != nil {
		return nil, nil
	}
	return &rec, nil
}

// clientRecordDirect reads the job's record with kv.Get (a direct get): the
// same answer as clientRecord when the bucket has one replica, at about half
// the cost.
func (j reader) clientRecordDirect(ctx context.Context, jobID string) (*wire.StatusRecord, error) {
	e, err := j.kv.Get(ctx, jobID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec wire.StatusRecord
	if json.Unmarshal(e.Value(), &rec) != nil {
		return nil, nil
	}
	return &rec, nil
}

// The header a KV delete or purge marker carries, and its values.
const (
	kvOperation = "KV-Operation"
	kvDelete    = "DEL"
	kvPurge     = "PURGE"
)

// reader reads a job's records.
type reader struct {
	nc *nats.Conn
	kv jetstream.KeyValue
}

// ReadStatus reads a job's status (docs/PROTOCOL.md §8) through nc: its
// stored result, else a cancel the client recorded in kv (the fleet_jobs
// bucket), else its last lease record, else the client's queued record.
// ErrNotFound when there is none.
func ReadStatus(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, jobID string) (*wire.StatusRecord, error) {
	return reader{nc: nc, kv: kv}.status(ctx, jobID)
}

// Status implements Ledger.
func (j *JetStream) Status(ctx context.Context, jobID string) (*wire.StatusRecord, error) {
	return j.status(ctx, jobID)
}

func (j reader) status(ctx context.Context, jobID string) (*wire.StatusRecord, error) {
	if !wire.ValidJobID(jobID) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, wire.Clip(jobID))
	}
	res, err := j.storedResult(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if res != nil {
		return ResultStatus(res), nil
	}
	client, err := j.clientRecord(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if client != nil && client.State == wire.StateCanceled {
		return client, nil
	}
	lease, _, err := j.lastLease(ctx, jobID)
	if err != nil {
		return nil, err
	}
	// A malformed last lease record (lastLease gives it no state) is read as
	// if it did not exist: the client's record is next, never an earlier
	// lease record (docs/PROTOCOL.md §8.3).
	if lease != nil && lease.State != "" {
		return lease, nil
	}
	if client != nil {
		return client, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, jobID)
}

// ResultStatus is the status record a stored result stands for.
func ResultStatus(r *wire.AgentResult) *wire.StatusRecord {
	reason := ""
	if r.ErrorCode != "" {
		reason = r.Error
	}
	return &wire.StatusRecord{JobID: r.JobID, Operation: r.Operation, State: r.State, Worker: r.Worker,
		Attempt: r.Attempts, Code: r.ErrorCode, Reason: reason, UpdatedAt: r.Timings.FinishedAt}
}
