package fleettype

// Codes and details keys that both the agent loop and the worker engine
// write into a Result: the engine ends a parked job itself (a timeout, a
// state that is gone or refused) without running the loop, and it keeps
// docs/PROTOCOL.md §6's rule that error goes only with error_code. Package
// loop gives them their loop names (loop.ErrCodeParkTimeout, ...).
const (
	// ErrCodeParkTimeout: a parked run was not answered within its
	// timeout.
	ErrCodeParkTimeout ErrorCode = "AGENT_010"
	// ErrCodeParkState: a parked run's stored state cannot be resumed
	// (corrupt, gone, made by another interpreter build, too large to
	// store).
	ErrCodeParkState ErrorCode = "AGENT_011"

	// DetailLimit (string) is the details key naming the limit or failure
	// that ended a run.
	DetailLimit = "limit"
	// LimitParkTimeout is DetailLimit's value for a park timeout.
	LimitParkTimeout = "park_timeout"
	// DetailAgentError (string) is the details key of the error text the
	// agent submitted itself: never Result.Error, which only coded
	// failures set.
	DetailAgentError = "agent_error"
)
