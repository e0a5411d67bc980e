package loop

import (
	"cmp"
	"fmt"
	"time"
)

// Defaults for Config's zero values (docs/CONFIG.md lists the worker's).
const (
	DefaultMaxTurns            = 25
	DefaultMaxToolCallsPerTurn = 10
	DefaultToolTimeout         = 30 * time.Second
	DefaultStepTimeout         = 60 * time.Second
	DefaultTotalTimeout        = 10 * time.Minute
	DefaultInvalidRetries      = 1
	DefaultRepeatLimit         = 3
	DefaultOverloadRetries     = 5
	DefaultOverloadBackoff     = 200 * time.Millisecond
	DefaultMaxOverloadBackoff  = 5 * time.Second
	// DefaultEventTextCap caps the model text carried in events.
	DefaultEventTextCap = 2048
	// DefaultArgErrorsPerTool and DefaultArgErrors are the tool-argument
	// error budgets (AGENT_009 in the package doc).
	DefaultArgErrorsPerTool = 3
	DefaultArgErrors        = 6
)

// Config configures a Runner. The zero value of every field means "use the
// default"; -1 means "no limit" where noted.
type Config struct {
	// MaxTurns bounds model calls per run when the agent definition sets no
	// max_turns; 0 = DefaultMaxTurns.
	MaxTurns int
	// MaxToolCallsPerTurn caps the calls run from one model turn; calls
	// beyond it get a too_many_calls envelope. 0 = default, -1 = no cap.
	MaxToolCallsPerTurn int
	// StepTimeout bounds one model call. 0 = default.
	StepTimeout time.Duration
	// TotalTimeout bounds the whole run. 0 = default.
	TotalTimeout time.Duration
	// ToolTimeout bounds one tool call (its context providers and the tool).
	// 0 = default.
	ToolTimeout time.Duration
	// InvalidRetries is how many corrective retries an invalid model response
	// gets before the run soft-fails. 0 = default (1), -1 = none.
	InvalidRetries int
	// RepeatLimit is the position of an identical consecutive call that is
	// refused (3 = the third identical call in a row). 0 = default, -1 = off.
	RepeatLimit int
	// OverloadRetries is how many times an overloaded model is retried
	// before the run fails with AGENT_006. 0 = default, -1 = none.
	OverloadRetries int
	// OverloadBackoff is the first backoff after an overload; it doubles per
	// attempt up to MaxOverloadBackoff, with full jitter. 0 = default.
	OverloadBackoff    time.Duration
	MaxOverloadBackoff time.Duration
	// EventTextCap caps model text carried in events. 0 = default.
	EventTextCap int
	// ArgErrorsPerTool is how many tool-argument errors (unknown_function,
	// invalid_args) one tool name may cause; the next one ends the run with
	// AGENT_009. A name the model invented counts under that name.
	// 0 = default (3), -1 = no per-name limit.
	ArgErrorsPerTool int
	// ArgErrors caps tool-argument errors over all names, so inventing new
	// names buys no fresh budget; the next one ends the run with AGENT_009.
	// 0 = default (6), -1 = no cap.
	ArgErrors int
	// ContextTokens is the prompt budget in tokens (the model's context
	// window less the room its answer needs). When a request would exceed
	// it, the oldest whole turns are trimmed (see TokenCounter). A Model
	// that implements TokenCounter counts exactly against the smaller of
	// its ContextSize and ContextTokens (when set); for other models the
	// loop estimates 1 token per 3 bytes. 0 = only the model's own size;
	// with neither, nothing is trimmed.
	ContextTokens int
}

func (c *Config) validate() error {
	for name, v := range map[string]int{
		"MaxTurns": c.MaxTurns, "MaxToolCallsPerTurn": c.MaxToolCallsPerTurn,
		"InvalidRetries": c.InvalidRetries, "RepeatLimit": c.RepeatLimit,
		"OverloadRetries": c.OverloadRetries, "EventTextCap": c.EventTextCap,
		"ArgErrorsPerTool": c.ArgErrorsPerTool, "ArgErrors": c.ArgErrors,
	} {
		if v < -1 {
			return fmt.Errorf("%w: %s must be >= -1, got %d", ErrInvalidConfig, name, v)
		}
	}
	if c.ContextTokens < 0 {
		return fmt.Errorf("%w: ContextTokens must not be negative, got %d", ErrInvalidConfig, c.ContextTokens)
	}
	if c.MaxTurns == -1 || c.EventTextCap == -1 {
		return fmt.Errorf("%w: MaxTurns and EventTextCap cannot be unlimited", ErrInvalidConfig)
	}
	for name, v := range map[string]time.Duration{
		"StepTimeout": c.StepTimeout, "TotalTimeout": c.TotalTimeout, "ToolTimeout": c.ToolTimeout,
		"OverloadBackoff": c.OverloadBackoff, "MaxOverloadBackoff": c.MaxOverloadBackoff,
	} {
		if v < 0 {
			return fmt.Errorf("%w: %s must not be negative, got %s", ErrInvalidConfig, name, v)
		}
	}
	c.MaxTurns = cmp.Or(c.MaxTurns, DefaultMaxTurns)
	c.MaxToolCallsPerTurn = cmp.Or(c.MaxToolCallsPerTurn, DefaultMaxToolCallsPerTurn)
	c.StepTimeout = cmp.Or(c.StepTimeout, DefaultStepTimeout)
	c.TotalTimeout = cmp.Or(c.TotalTimeout, DefaultTotalTimeout)
	c.ToolTimeout = cmp.Or(c.ToolTimeout, DefaultToolTimeout)
	c.InvalidRetries = cmp.Or(c.InvalidRetries, DefaultInvalidRetries)
	c.RepeatLimit = cmp.Or(c.RepeatLimit, DefaultRepeatLimit)
	c.OverloadRetries = cmp.Or(c.OverloadRetries, DefaultOverloadRetries)
	c.OverloadBackoff = cmp.Or(c.OverloadBackoff, DefaultOverloadBackoff)
	c.MaxOverloadBackoff = cmp.Or(c.MaxOverloadBackoff, DefaultMaxOverloadBackoff)
	c.EventTextCap = cmp.Or(c.EventTextCap, DefaultEventTextCap)
	c.ArgErrorsPerTool = cmp.Or(c.ArgErrorsPerTool, DefaultArgErrorsPerTool)
	c.ArgErrors = cmp.Or(c.ArgErrors, DefaultArgErrors)
	if c.TotalTimeout < c.StepTimeout {
		return fmt.Errorf("%w: TotalTimeout (%s) cannot be less than StepTimeout (%s)", ErrInvalidConfig, c.TotalTimeout, c.StepTimeout)
	}
	if c.MaxOverloadBackoff < c.OverloadBackoff {
		return fmt.Errorf("%w: MaxOverloadBackoff (%s) cannot be less than OverloadBackoff (%s)", ErrInvalidConfig, c.MaxOverloadBackoff, c.OverloadBackoff)
	}
	return nil
}
