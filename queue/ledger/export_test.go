package ledger

// SetClaimHook makes Claim call fn(d) between its reads (stored result, last
// lease) and its lease write on the takeover path, as Memory.SetClaimHook
// does; nil removes it. Tests only.
func (j *JetStream) SetClaimHook(fn func(d *Delivery)) {
	if fn == nil {
		j.claimHook.Store(nil)
		return
	}
	j.claimHook.Store(&fn)
}

// FitTranscript is fitTranscript, for tests.
var FitTranscript = fitTranscript
