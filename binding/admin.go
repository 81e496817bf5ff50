package binding

// BoundSessions returns, for each of actorIDs, how many of this node's sessions hold a
// current binding to it (the session-owner side; summed over the members it is the
// Actor's bound-session count). It walks the node's sessions once: for operators'
// pages of Actors, not for a hot path.
func (b *Binder) BoundSessions(actorIDs []string) []int {
	out := make([]int, len(actorIDs))
	if len(actorIDs) == 0 {
		return out
	}
	index := make(map[string]int, len(actorIDs))
	for i, id := range actorIDs {
		index[id] = i
	}
	b.mu.Lock()
	sessions := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()
	for _, s := range sessions {
		s.mu.Lock()
		for id := range s.binds {
			if i, ok := index[id]; ok {
				out[i]++
			}
		}
		s.mu.Unlock()
	}
	return out
}
