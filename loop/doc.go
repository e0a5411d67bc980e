// Package loop runs fleet's bounded multi-turn tool loop: one agent on one
// node, turn after turn (model call, tool calls, results), until the model
// calls submit_result, answers in plain text, or a limit ends the run.
//
// The package owns turn orchestration only. The job lifecycle (pulling a
// job, heartbeats, acking, publishing the result and events) lives in the
// queue; models and tools plug in through the small interfaces defined
// here: Model (inference backends), ToolExecutor and ChangeLister (the
// sandboxed .pym tools over a workspace overlay) and EventSink (observers).
// loop imports no NATS, llama.cpp or Monty code. The values it shares with
// the wire, the backends and the training data (events, results, usage,
// messages, tool declarations) are package fleettype's.
//
// # Outcomes and error codes
//
// Every run ends in a Result (fleettype.Result, the AgentResult of
// docs/PROTOCOL.md §6, plus accounting). The
// codes of failed runs, in Result.ErrorCode and as the prefix of
// Result.Error:
//
//	AGENT_001  invalid or empty model output, after one corrective retry
//	AGENT_002  the run's total timeout, or the caller's deadline, passed
//	AGENT_003  "Turn limit (N) exceeded": max_turns used and the last-chance
//	           submit_result turn not taken
//	AGENT_004  doom loop: the same call again after a repeated_call refusal
//	AGENT_005  cancelled through ctx (Details["cancel_cause"] says why);
//	           not a model failure
//	AGENT_006  model backend error, or overload that did not clear
//	AGENT_007  a model call exceeded the step timeout twice in a row
//	AGENT_008  submit_result arguments stayed invalid past the retry budget
//	AGENT_009  tool-argument errors (unknown tool names, invalid arguments)
//	           past their budget: Config.ArgErrorsPerTool for one name (an
//	           invented name counts under its own name) or Config.ArgErrors
//	           over all names, so new names buy no fresh budget
//	AGENT_010  a run parked on a human was not answered in time (set by
//	           the queue, see Parking)
//	AGENT_011  a parked run cannot be resumed (its tool state is corrupt,
//	           another tool version's or another interpreter build's)
//
// A run that ends with submit_result has the status, summary and details
// the model submitted, the error text it submitted in
// Details["agent_error"], and no Error or ErrorCode, even when its status
// is failed: Error is set only with ErrorCode.
//
// # What the model sees
//
// Each tool call is answered by one tool message whose content is an
// Envelope: {"ok":true,"result":...} or
// {"ok":false,"error":{"code":...,"message":...,"details":...}} with the
// codes invalid_args (details.problems, details.required), unknown_function
// (details.valid_tools), tool_error, timeout, internal, repeated_call,
// too_many_calls and not_run. invalid_args and unknown_function envelopes
// also carry details.errors_left (how many more such errors the run
// tolerates before AGENT_009) and a hint that says so; execution errors
// (tool_error, timeout) have no budget: the model decides what to do.
//
// # Context window
//
// Before each model call the loop measures the request: exactly, when the
// Model is a TokenCounter (the llama.cpp backend), against the smaller of
// its ContextSize and Config.ContextTokens; otherwise estimated at one
// token per 3 bytes against Config.ContextTokens; with neither known it
// does not trim. A request that would not fit loses whole turns, oldest
// first: a turn is the model's message and everything that belongs to it
// (corrective messages, context-provider output, every tool result), so no
// call is ever left without its result or a result without its call. The
// pinned messages (system prompt, node context) and the tool declarations
// are never trimmed, nor is the turn being played. A user message after
// the pinned ones stands in for the trimmed turns, one line each, built
// from each tool result's summary field ("turn 3: read_file{...} -> ok:
// ..."). Trimming leaves headroom (down to 3/4 of the budget, keeping the
// last completed turn while it can) so that the following turns fit
// without trimming again and the backend keeps its KV cache; when the
// summary itself grows past a quarter of the budget its oldest lines are
// folded into one "N earlier turns" line. Each trim emits
// context_trimmed and Details[DetailTrimmedTurns] lists the trimmed turns.
// A request that cannot be made to fit is sent anyway and the model's
// error ends the run (AGENT_006).
//
// # Parking
//
// A tool may wait for a person: its executor's Execute returns a
// *ParkError with the question and the tool's own state. The run then
// stops without a result: Run returns a Result with StatusWaiting whose
// Parked holds the conversation, the counters and budgets (turns, repeat
// guard, argument-error budgets, invalid submits, the context window's
// trimming state, usage, timings), the call in flight and the calls after
// it in its turn, and the tool's state, as plain JSON-encodable data; no
// finished event is emitted. Runner.Resume continues it in any process:
// the executor (a Resumer) finishes the tool with the answer, the answer's
// envelope becomes the call's tool message, the rest of the turn runs and
// the turns go on, events numbered after the parked run's. The total
// timeout counts the time run before parking, not the waiting. A tool in
// the last-chance turn cannot park (it gets a tool_error envelope). The
// queue stores Parked and resumes it (docs/PROTOCOL.md §20).
//
// # Events
//
// A run emits, in order and numbered from 1: turn_started, model_output,
// invalid_response and retry (when they happen; context_trimmed comes
// right before the model call it made room for), then per call tool_call,
// context_injected (per provider output), tool_result; finished is always
// last. The sink must not block; ChanSink documents its drop policy.
package loop
