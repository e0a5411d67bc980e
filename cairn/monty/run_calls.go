package monty

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
)

// answer builds the reply to a suspension.
func (r *run) answer(ctx context.Context, ev childEvent) func([]byte) []byte {
	switch ev.kind {
	case evFunctionCall:
		id := ev.callID
		res := r.functionCall(ctx, ev)
		return func(b []byte) []byte { return encodeResumeCall(b, id, res) }
	case evOsCall:
		id := ev.callID
		res := osCallResult(ev)
		return func(b []byte) []byte { return encodeResumeCall(b, id, res) }
	case evNameLookup:
		var value []byte
		if r.declared(ev.name) != nil {
			value = appendSub(nil, objFunction, func(b []byte) []byte { return appendStringField(b, 1, ev.name) })
		}
		return func(b []byte) []byte { return encodeResumeNameLookup(b, value) }
	default: // evResolveFutures
		ids := slices.Clone(ev.pending)
		slices.Sort(ids)
		results := make([]futureResult, 0, len(ids))
		for _, id := range ids {
			if r.park != nil && r.park.callID == id {
				continue // parked: left outstanding for the dump
			}
			c, ok := r.pending[id]
			var res extResult
			if !ok {
				res = errResult("RuntimeError", fmt.Sprintf("unknown future %d", id))
			} else {
				delete(r.pending, id)
				var pr *ParkRequest
				res, pr = r.invokeAwaited(ctx, c)
				if pr != nil {
					r.park = &parkPending{callID: id, name: c.name, detail: pr.Detail}
					continue
				}
			}
			results = append(results, futureResult{callID: id, result: res})
		}
		if len(results) == 0 && r.park != nil {
			return nil // dump (drive)
		}
		return func(b []byte) []byte { return encodeResumeFutures(b, results) }
	}
}

func (r *run) declared(name string) *External {
	for i := range r.script.Externals {
		if r.script.Externals[i].Name == name {
			return &r.script.Externals[i]
		}
	}
	return nil
}

// functionCall answers a FunctionCall: Input() from the inputs, declared
// externals (async ones with a future), anything else not_found.
func (r *run) functionCall(ctx context.Context, ev childEvent) extResult {
	ext := r.declared(ev.name)
	if ext == nil {
		if ev.name == "Input" {
			return r.input(ev)
		}
		return extResult{kind: extNotFound, name: ev.name}
	}
	c := call{name: ev.name}
	c.args, c.kwargs, c.err = decodeArgs(ev)
	if ext.Async {
		if r.pending == nil {
			r.pending = make(map[uint32]call)
		}
		r.pending[ev.callID] = c
		return extResult{kind: extFuture, futureID: ev.callID}
	}
	return r.invoke(ctx, c)
}

// input answers Input("name", default=...).
func (r *run) input(ev childEvent) extResult {
	if len(ev.args) == 0 {
		return errResult("TypeError", "Input() needs the input's name")
	}
	nameV, err := valueToGo(ev.args[0])
	name, ok := nameV.(string)
	if err != nil || !ok {
		return errResult("TypeError", "Input() name must be a string")
	}
	if v, ok := r.inputs[name]; ok {
		enc, err := encodeValue(nil, v)
		if err != nil {
			return errResult("ValueError", fmt.Sprintf("input %q: %v", name, err))
		}
		return extResult{kind: extReturnValue, value: enc}
	}
	for _, kw := range ev.kwargs {
		if k, _ := valueToGo(kw.key); k == "default" {
			return extResult{kind: extReturnValue, value: kw.value}
		}
	}
	if len(ev.args) > 1 {
		return extResult{kind: extReturnValue, value: ev.args[1]}
	}
	return errResult("ValueError", fmt.Sprintf("missing required input %q", name))
}

// invokeAwaited calls the host for an awaited call, which may park the run
// (a *ParkRequest; only one call of a run parks at a time), and answers a
// resumed parked call with its preset answer.
func (r *run) invokeAwaited(ctx context.Context, c call) (extResult, *ParkRequest) {
	if c.preset != nil {
		return extResult{kind: extReturnValue, value: c.preset}, nil
	}
	if c.err != nil || r.ext == nil || r.park != nil {
		return r.invoke(ctx, c), nil
	}
	var pr *ParkRequest
	res := r.invokeWith(ctx, c, func(err error) bool { return errors.As(err, &pr) })
	return res, pr
}

// invoke calls the host for one external call. A call asking to park that
// cannot (a plain def external, a second park) raises RuntimeError.
func (r *run) invoke(ctx context.Context, c call) (res extResult) {
	return r.invokeWith(ctx, c, nil)
}

// invokeWith calls the host; when parks(err) reports true the error is a
// park request and the result is not used.
func (r *run) invokeWith(ctx context.Context, c call, parks func(error) bool) (res extResult) {
	if c.err != nil {
		return errResult("TypeError", fmt.Sprintf("%s(): %v", c.name, c.err))
	}
	if r.ext == nil {
		return extResult{kind: extNotFound, name: c.name}
	}
	defer func() {
		if p := recover(); p != nil {
			r.pool.log.Error("monty: external panicked", "external", c.name, "panic", p, "stack", string(debug.Stack()))
			res = errResult("RuntimeError", fmt.Sprintf("internal error in %s()", c.name))
		}
	}()
	v, err := r.ext(ctx, c.name, c.args, c.kwargs)
	if err != nil {
		if parks != nil && parks(err) {
			return extResult{}
		}
		if _, ok := err.(*ParkRequest); ok || errors.As(err, new(*ParkRequest)) {
			return errResult("RuntimeError", fmt.Sprintf("%s() can only be awaited once at a time, from an async def external declaration", c.name))
		}
		typ, msg := hostException(err)
		return errResult(typ, msg)
	}
	enc, err := encodeValue(nil, v)
	if err != nil {
		return errResult("TypeError", fmt.Sprintf("%s() returned a value the sandbox cannot hold: %v", c.name, err))
	}
	if max := r.pool.cfg.MaxValueBytes; len(enc) > max {
		return errResult("ValueError", fmt.Sprintf("%s() returned %d bytes, over the %d-byte cap", c.name, len(enc), max))
	}
	return extResult{kind: extReturnValue, value: enc}
}

func errResult(typ, msg string) extResult {
	if !acceptedExceptions[typ] {
		typ = "RuntimeError"
	}
	return extResult{kind: extError, excType: typ, excMsg: msg}
}

// decodeArgs converts a FunctionCall's arguments to Go values (copies, so
// they outlive the frame buffer).
func decodeArgs(ev childEvent) ([]any, map[string]any, error) {
	args := make([]any, 0, len(ev.args))
	for _, a := range ev.args {
		v, err := valueToGo(a)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	var kwargs map[string]any
	if len(ev.kwargs) > 0 {
		kwargs = make(map[string]any, len(ev.kwargs))
		for _, kw := range ev.kwargs {
			k, err := valueToGo(kw.key)
			if err != nil {
				return nil, nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, nil, fmt.Errorf("keyword argument name %v is not a string", k)
			}
			v, err := valueToGo(kw.value)
			if err != nil {
				return nil, nil, err
			}
			kwargs[ks] = v
		}
	}
	return args, kwargs, nil
}

// osCallResult answers OS calls: the clock is served, everything else is
// not_handled (PermissionError for filesystem calls, RuntimeError else).
func osCallResult(ev childEvent) extResult {
	now := time.Now().UTC()
	switch ev.osArm {
	case osDateToday:
		v := appendSub(nil, objDate, func(b []byte) []byte {
			b = appendVarintField(b, 1, uint64(now.Year()))
			b = appendVarintField(b, 2, uint64(now.Month()))
			return appendVarintField(b, 3, uint64(now.Day()))
		})
		return extResult{kind: extReturnValue, value: v}
	case osDateTimeNow:
		// A tz argument makes an aware datetime in that offset; without one
		// Python returns local (here: UTC) naive time.
		off, aware := tzOffset(ev.osPayload)
		t := now
		if aware {
			t = now.In(time.FixedZone("", int(off)))
		}
		v := appendSub(nil, objDateTime, func(b []byte) []byte {
			b = appendVarintField(b, 1, uint64(t.Year()))
			b = appendVarintField(b, 2, uint64(t.Month()))
			b = appendVarintField(b, 3, uint64(t.Day()))
			b = appendVarintField(b, 4, uint64(t.Hour()))
			b = appendVarintField(b, 5, uint64(t.Minute()))
			b = appendVarintField(b, 6, uint64(t.Second()))
			b = appendVarintField(b, 7, uint64(t.Nanosecond()/1000))
			if aware {
				b = appendVarintField(b, 8, uint64(int64(off)))
			}
			return b
		})
		return extResult{kind: extReturnValue, value: v}
	}
	return extResult{kind: extNotHandled}
}

// tzOffset reads DateTimeNow{tz = 1: TimeZone{offset_seconds = 1}}.
func tzOffset(payload []byte) (int32, bool) {
	tz, err := decodeBytesField(payload, 1)
	if err != nil || tz == nil {
		return 0, false
	}
	f, err := uintFields(tz, 1)
	if err != nil {
		return 0, false
	}
	return int32(f[1]), true
}
