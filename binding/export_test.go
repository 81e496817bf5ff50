package binding

// Hooks for the black-box tests of this package (package binding_test), which play
// the relocation's source and target against a real session.

// SessionsForTest returns the sessions that have binding state on this node.
func (b *Binder) SessionsForTest() []*Session {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		out = append(out, s)
	}
	return out
}

// RIDForTest returns the session's identity on the wire (sessionRid).
func (s *Session) RIDForTest() string { return s.rid }
