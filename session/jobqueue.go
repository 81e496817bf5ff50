package session

// JobQueueStats is the host-wide application job queue at one moment (digest §9), for
// operators: the same figures as the zlink.host.application_job_queue metrics.
type JobQueueStats struct {
	Limit   int64 // permits in all
	InUse   int64 // permits taken: packets pulled whose callbacks have not started
	Queued  int64 // of InUse, handed to a session's mailbox
	Peak    int64 // the most ever in use at once
	Waiters int64 // sessions waiting for a permit now
	Waits   int64 // acquisitions that waited, since start
	Paused  bool  // the queue is over its pause threshold: sources are not pulled
}

// JobQueue reads the job queue's counters; the zero value before Start.
func (h *Host) JobQueue() JobQueueStats {
	h.mu.Lock()
	p := h.permits
	h.mu.Unlock()
	if p == nil {
		return JobQueueStats{}
	}
	s := p.stats()
	s.queued = h.queuedPermits()
	return JobQueueStats{Limit: s.limit, InUse: s.inUse, Queued: s.queued, Peak: s.peak,
		Waiters: s.waiters, Waits: s.waits, Paused: s.paused}
}
