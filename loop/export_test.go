package loop

import (
	"encoding/json"
	"time"

	"github.com/agentfleet/fleet/agents"
)

// SetJitter replaces r's backoff jitter (tests only).
func SetJitter(r *Runner, f func(time.Duration) time.Duration) { r.jitter = f }

// DecodeAndValidate runs the loop's argument decoding and schema validation
// on raw: canon is the canonical encoding, problems what the model would be
// told, err a malformed-arguments error (or a broken schema).
func DecodeAndValidate(t *agents.Tool, raw json.RawMessage) (canon []byte, problems []string, err error) {
	obj, canon, err := parseArgs(raw)
	if err != nil {
		return nil, nil, err
	}
	problems, err = validateArgs(t, obj)
	return canon, problems, err
}
