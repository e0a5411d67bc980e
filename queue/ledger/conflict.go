package ledger

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// IsConflict reports whether err is a lost compare-and-set: the record was
// not at the revision the write expected. nats.go reports it in three shapes:
// ErrKeyRevisionMismatch and ErrKeyExists from a KV Update or Create (a
// Create on a stream with more than one replica answers with the API error
// instead of ErrKeyExists), or the API error itself with code 10071 (JSErrCodeStreamWrongLastSequence), which a
// replicated (R>1) stream reports as 10164
// (JSErrCodeStreamWrongLastSequenceConstant). A conflict is never transient: the caller reads
// the record again and decides; it does not retry the same write.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}
