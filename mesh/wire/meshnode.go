package wire

// meshnode's own records. They use the service-wire v1 framing (the same head layout,
// field types, metadata and payload frames) under their own magic, "MN", so that no
// zlink command can ever be taken for one of them: their command ids lie in the range
// the zlink schema reserves (54–255), and the decoder accepts each id only under the
// magic of its family. docs/records.md describes them beside the zlink ones.

// Magic of meshnode's own records.
const (
	MeshnodeMagic0 = 'M'
	MeshnodeMagic1 = 'N'
)

// meshnode's own commands (magic "MN").
const (
	// CmdTopicPublish carries one publish to a topic to a node with subscribers to it.
	CmdTopicPublish Command = 0xE0
	// CmdTopicInterest tells the other nodes how many sessions of the sender subscribe to
	// topics: a change, or (Reset) the sender's whole set.
	CmdTopicInterest Command = 0xE1
	// CmdTopicInterestAck acknowledges the interest records of one sender up to a version.
	CmdTopicInterestAck Command = 0xE2
)

// meshnodeCommand reports whether c is one of meshnode's own commands (magic "MN").
func meshnodeCommand(c Command) bool { return c >= CmdTopicPublish && c <= CmdTopicInterestAck }

// Bounds of meshnode's own records.
const (
	// MaxTopicLen bounds a topic name (1..MaxTopicLen bytes of text).
	MaxTopicLen = 255
	// MaxPublisherLen bounds a publisher identity (1..MaxPublisherLen bytes of text).
	MaxPublisherLen = 1024
	// MaxInterestEntries bounds the entries of one interest record.
	MaxInterestEntries = 4096
)

// TopicPublish is meshnode command 0xE0 (payload required; metadata allowed): one
// publish of Publisher to Topic, its Sequence-th to that topic (from 1, per publisher
// and topic). The payload envelope holds the packet name, content type and data the
// subscribers receive.
type TopicPublish struct {
	Topic     string
	Publisher string
	Sequence  uint64
}

// TopicCount is one topic of an interest record and how many of the sender's sessions
// subscribe to it (0: none any more).
type TopicCount struct {
	Topic       string
	Subscribers uint32
}

// TopicInterest is meshnode command 0xE1 (no payload, no flags). Version orders one
// sender lifecycle's interest records (from 1, each record a larger one). With Reset the
// entries are the sender's whole set, replacing what the receiver held of it (a set
// larger than one record is sent as several records of one version, the first with
// Reset); otherwise they are changes. Ack asks the receiver to acknowledge (0xE2).
type TopicInterest struct {
	Version uint64
	Reset   bool
	Ack     bool
	Entries []TopicCount
}

// TopicInterestAck is meshnode command 0xE2 (no payload, no flags): the receiver holds
// the sender's interest records up to Version.
type TopicInterestAck struct {
	Version uint64
}

func (*TopicPublish) Command() Command     { return CmdTopicPublish }
func (*TopicInterest) Command() Command    { return CmdTopicInterest }
func (*TopicInterestAck) Command() Command { return CmdTopicInterestAck }
func (*TopicPublish) flags() byte          { return 0 }
func (*TopicInterest) flags() byte         { return 0 }
func (*TopicInterestAck) flags() byte      { return 0 }

// interest flags (u8)
const (
	interestReset = 0x01
	interestAck   = 0x02
)

func (b *TopicPublish) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.text8("topic", b.Topic, 1)
	w.text16("publisher", b.Publisher, 1, MaxPublisherLen)
	w.nz("sequence", b.Sequence)
}

func (b *TopicPublish) decode(r *reader) {
	b.Topic = r.text8("topic", 1)
	b.Publisher = r.text16("publisher", 1, MaxPublisherLen)
	b.Sequence = r.nz("sequence")
}

func (b *TopicInterest) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.nz("version", b.Version)
	var f byte
	if b.Reset {
		f |= interestReset
	}
	if b.Ack {
		f |= interestAck
	}
	w.u8(f)
	if len(b.Entries) > MaxInterestEntries {
		w.fail(ClassInvalidField, "entries", reasonTooLong)
		return
	}
	w.u16(uint16(len(b.Entries)))
	w.path.push("entries")
	for i := range b.Entries {
		w.text8("topic", b.Entries[i].Topic, 1)
		w.u32(b.Entries[i].Subscribers)
	}
	w.path.pop()
}

func (b *TopicInterest) decode(r *reader) {
	b.Version = r.nz("version")
	start := r.off
	f := r.u8("flags")
	if r.err == nil && f&^(interestReset|interestAck) != 0 {
		r.failAt(start, ClassInvalidField, "flags", "unknown interest flag")
	}
	b.Reset, b.Ack = f&interestReset != 0, f&interestAck != 0
	start = r.off
	n := int(r.u16("entries"))
	if r.err != nil {
		return
	}
	if n > MaxInterestEntries {
		r.failAt(start, ClassInvalidField, "entries", reasonTooLong)
		return
	}
	// Each entry takes at least 6 bytes: a count that the frame cannot hold is refused
	// before anything is allocated for it.
	if !r.need(r.off, 6*n, "entries") {
		return
	}
	if n > 0 {
		b.Entries = make([]TopicCount, n)
	}
	r.path.push("entries")
	for i := 0; i < n && r.err == nil; i++ {
		b.Entries[i].Topic = r.text8("topic", 1)
		b.Entries[i].Subscribers = r.u32("subscribers")
	}
	r.path.pop()
}

func (b *TopicInterestAck) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.nz("version", b.Version)
}

func (b *TopicInterestAck) decode(r *reader) {
	b.Version = r.nz("version")
}
