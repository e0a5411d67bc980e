package queue

import "sync/atomic"

// Stats counts what a worker did. All fields are totals since Start.
type Stats struct {
	// Started counts processor runs begun.
	Started int64
	// Succeeded, Failed and Canceled count results published by state.
	Succeeded, Failed, Canceled int64
	// Dead counts requests dead-lettered (poison, exhausted, by advisory).
	Dead int64
	// Duplicates counts deliveries acknowledged without running because the
	// job already had a terminal status or a stored result.
	Duplicates int64
	// Retried counts transient failures handed back with a delay.
	Retried int64
	// Requeued counts jobs handed back by a shutdown.
	Requeued int64
	// EventsDropped counts events not published.
	EventsDropped int64
	// ResultRetries counts result writes that failed and were tried again
	// (the run is never computed again for it).
	ResultRetries int64
	// Fenced counts attempts whose lease another attempt took over (this
	// worker paused or was cut off past the ack wait): they wrote nothing.
	Fenced int64
	// Overdelivered counts jobs a pull brought while no slot was free (a
	// long-poll of the worker's last idle moment answered after the slots
	// filled up), handed back to the queue at once.
	Overdelivered int64
	// Parked counts jobs parked on a question (park.go).
	Parked int64
}

type stats struct {
	started, succeeded, failed, canceled, dead, duplicates, retried, requeued, eventsDropped, overdelivered, fenced, resultRetries, parked atomic.Int64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Started: w.st.started.Load(), Succeeded: w.st.succeeded.Load(), Failed: w.st.failed.Load(),
		Canceled: w.st.canceled.Load(), Dead: w.st.dead.Load(), Duplicates: w.st.duplicates.Load(),
		Retried: w.st.retried.Load(), Requeued: w.st.requeued.Load(), EventsDropped: w.st.eventsDropped.Load(),
		Overdelivered: w.st.overdelivered.Load(), Fenced: w.st.fenced.Load(), ResultRetries: w.st.resultRetries.Load(),
		Parked: w.st.parked.Load(),
	}
}
