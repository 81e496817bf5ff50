package services

import (
	"encoding/json"
	"fmt"
	"sort"
)

// A session worker moves with its services: the actor host captures it in a turn of
// the source (Snapshot) and restores it on the target before its Started. What moves:
// the worker's topic (the nodes with attached presentations keep their subscription),
// its attachments and what each subscribes to, the values and sequences of its
// singleton states, the sequences of its events and of its keyed services'
// directories, the keyed services' generations, and what its publisher had not
// published yet. What does not: calls in flight (the source answers them, with their
// result when they finished, else session_unavailable), private references (their
// holders get stale_reference), a facet's other memory (it rebuilds it when it
// activates, from its states or durable records), and keyed instances (the facet
// adds them again: new generations).

// workerSnapshot is a worker's moved state (JSON).
type workerSnapshot struct {
	Topic   string           `json:"topic"`
	Clients []snapClient     `json:"clients,omitempty"`
	Slots   []snapSlot       `json:"slots,omitempty"`
	Gens    map[string]gens  `json:"gens,omitempty"`
	Outbox  []snapPublishing `json:"outbox,omitempty"`
}

type gens map[string]uint64

type snapClient struct {
	Key        string     `json:"key"`
	ID         string     `json:"id"`
	Transport  string     `json:"transport,omitempty"`
	Attachment string     `json:"attachment,omitempty"`
	Subs       []snapAddr `json:"subs,omitempty"`
}

type snapAddr struct {
	Svc    string `json:"svc"`
	Key    string `json:"key,omitempty"`
	Gen    uint64 `json:"gen,omitempty"`
	Member string `json:"member"`
	Sid    uint64 `json:"sid,omitempty"` // the client's id of the subscription (0: none)
}

// snapSlot is a published member's sequence, and a state's (or directory's) value.
type snapSlot struct {
	Svc    string          `json:"svc"`
	Member string          `json:"member"`
	Seq    uint64          `json:"seq"`
	Raw    json.RawMessage `json:"raw,omitempty"`
}

type snapPublishing struct {
	Header pubHeader       `json:"header"`
	Value  json.RawMessage `json:"value,omitempty"`
}

// Snapshot captures the worker for a move (actor.Snapshotter), in its turn.
func (w *worker) Snapshot() ([]byte, error) {
	snap := workerSnapshot{Topic: w.topic}
	keys := make([]string, 0, len(w.clients))
	for k := range w.clients {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := w.clients[k]
		sc := snapClient{Key: k, ID: c.client.ID, Transport: c.client.Transport, Attachment: c.client.Attachment}
		c.ep.mu.Lock()
		for a, es := range c.ep.subs {
			if a.ref == "" {
				sc.Subs = append(sc.Subs, snapAddr{Svc: a.svc, Key: a.key, Gen: a.gen, Member: a.member, Sid: es.sid})
			}
		}
		c.ep.mu.Unlock()
		snap.Clients = append(snap.Clients, sc)
	}
	if w.host != nil {
		for _, s := range w.host.serviceList() {
			for name, sl := range s.slots {
				seq, raw, _, _ := sl.snapshot()
				if sl.kind == kindEvents {
					raw = nil
				}
				snap.Slots = append(snap.Slots, snapSlot{Svc: s.id, Member: name, Seq: seq, Raw: raw})
			}
			if s.mode == Keyed {
				seq, _, _, _ := s.dir.snapshot()
				snap.Slots = append(snap.Slots, snapSlot{Svc: s.id, Member: MemberInstances, Seq: seq})
				s.mu.Lock()
				if len(s.gens) > 0 {
					if snap.Gens == nil {
						snap.Gens = map[string]gens{}
					}
					g := gens{}
					for k, n := range s.gens {
						g[k] = n
					}
					snap.Gens[s.id] = g
				}
				s.mu.Unlock()
			}
		}
	}
	if w.pub != nil {
		for _, it := range w.pub.take() {
			snap.Outbox = append(snap.Outbox, snapPublishing{Header: pubOf(it.addr, it.d, w.self.ObjectGeneration), Value: it.d.raw})
		}
	}
	return json.Marshal(snap)
}

// Restore takes a moved worker's state on the target, before its Started
// (actor.Snapshotter).
func (w *worker) Restore(data []byte) error {
	var snap workerSnapshot
	if err := json.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("services: a moved worker's state: %w", err)
	}
	w.moved = &snap
	return nil
}

// restoreServices installs the moved values into the new host, after its assembly and
// before its activation: the facets activate with their states as they were, and the
// generations they add instances under follow the source's.
func (w *worker) restoreServices(h *Host) error {
	snap := w.moved
	for _, ss := range snap.Slots {
		h.mu.Lock()
		s := h.services[ss.Svc]
		h.mu.Unlock()
		if s == nil {
			continue // the facets changed meanwhile: nothing to restore into
		}
		if ss.Member == MemberInstances {
			if s.dir != nil {
				s.dir.restoreSeq(ss.Seq)
			}
			continue
		}
		sl := s.slots[ss.Member]
		if sl == nil {
			continue
		}
		if sl.kind == kindState && len(ss.Raw) > 0 {
			if m, ok := s.pending.members[ss.Member]; ok && m.pub != nil {
				if r, ok := m.pub.(interface{ restore(json.RawMessage) error }); ok {
					if err := r.restore(ss.Raw); err != nil {
						return fmt.Errorf("services: restore %s.%s: %w", ss.Svc, ss.Member, err)
					}
				}
			}
			_, val := s.pending.members[ss.Member].pub.current()
			sl.restore(ss.Seq, ss.Raw, val)
			continue
		}
		sl.restoreSeq(ss.Seq)
	}
	for id, g := range snap.Gens {
		h.mu.Lock()
		s := h.services[id]
		h.mu.Unlock()
		if s == nil || s.mode != Keyed {
			continue
		}
		s.mu.Lock()
		if s.gens == nil {
			s.gens = map[string]uint64{}
		}
		for k, n := range g {
			s.gens[k] = max(s.gens[k], n)
		}
		s.mu.Unlock()
	}
	return nil
}

// restore sets a slot's sequence and value (a moved worker's, before anyone watches).
func (s *slot) restore(seq uint64, raw json.RawMessage, val any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq, s.raw, s.val = seq, raw, val
}

// restoreSeq sets a slot's sequence.
func (s *slot) restoreSeq(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = seq
}
