package queue

// testSignals are typed channels the engine reports states on, for tests to
// wait on instead of polling or sleeping. They are nil outside tests, and a
// send never blocks (a full channel drops the signal), so they cost nothing
// in production.
type testSignals struct {
	// heartbeat receives every heartbeat's outcome.
	heartbeat chan heartbeatSignal
	// swept receives a value after every unserved-operation sweep.
	swept chan struct{}
	// fenced receives the job id of every attempt dropped because another
	// attempt took its lease over.
	fenced chan string
}

// heartbeatSignal is one heartbeat's outcome.
type heartbeatSignal struct {
	jobID string
	err   error
}

// init makes every channel with room for n signals (tests only).
func (s *testSignals) init(n int) {
	s.heartbeat = make(chan heartbeatSignal, n)
	s.swept = make(chan struct{}, n)
	s.fenced = make(chan string, n)
}

// send delivers v on c when a test listens and c has room.
func send[T any](c chan T, v T) {
	if c != nil {
		select {
		case c <- v:
		default:
		}
	}
}
