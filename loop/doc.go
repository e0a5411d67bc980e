// Package loop runs fleet's bounded multi-turn tool loop: one agent on one
// node, turn after turn (model call, tool calls, results), until the model
// calls submit_result, answers in plain text, or a limit ends the run.
//
// The package owns turn orchestration only. The job lifecycle (pulling a
// job, heartbeats, acking, publishing the result and events) lives in the
// queue; models and tools plug in through the small interfaces defined
// here: Model (inference backends), ToolExecutor and ChangeLister (the
// sandboxed .pym tools over a workspace overlay) and EventSink (observers).
// loop imports no NATS, llama.cpp or Monty code.
//
// # Outcomes and error codes
//
// Every run ends in a Result (seed 000's AgentResult plus accounting). The
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
//
// A run that ends with submit_result has the status, summary, details and
// error the model submitted and no ErrorCode, even when its status is
// failed.
//
// # What the model sees
//
// Each tool call is answered by one tool message whose content is an
// Envelope: {"ok":true,"result":...} or
// {"ok":false,"error":{"code":...,"message":...,"details":...}} with the
// codes invalid_args (details.problems, details.required), unknown_function
// (details.valid_tools), tool_error, timeout, internal, repeated_call,
// too_many_calls and not_run.
//
// # Events
//
// A run emits, in order and numbered from 1: turn_started, model_output,
// invalid_response and retry (when they happen), then per call tool_call,
// context_injected (per provider output), tool_result; finished is always
// last. The sink must not block; ChanSink documents its drop policy.
package loop
