package actor

import (
	"sync"
	"sync/atomic"

	murmur32 "github.com/twmb/murmur3"
)

type ProcessRegistryValue struct {
	SequenceID     uint64
	ActorSystem    *ActorSystem
	Address        string
	LocalPIDs      *SliceMap
	RemoteHandlers []AddressResolver
}

// SliceMap holds the local processes in a fixed set of shards, each a Go map behind a
// lock. meshnode patch: upstream keeps 1,024 concurrent-maps of 32 maps each (32,768
// maps per actor system, allocated when the system starts), and Go maps never give
// their buckets back, so a churn of short-lived actors and futures left its peak size
// behind for good. Here a shard is rebuilt at its current size once most of the
// entries it held at its peak are gone.
type SliceMap struct {
	shards [registryShards]registryShard
}

const (
	registryShards = 64
	// shrinkFloor: shards that never held more than this are never rebuilt.
	shrinkFloor = 256
)

type registryShard struct {
	mu   sync.RWMutex
	m    map[string]Process
	peak int
}

func newSliceMap() *SliceMap {
	sm := &SliceMap{}
	for i := range sm.shards {
		sm.shards[i].m = map[string]Process{}
	}
	return sm
}

func (s *SliceMap) shard(key string) *registryShard {
	return &s.shards[murmur32.StringSum32(key)%registryShards]
}

func (sh *registryShard) setIfAbsent(id string, p Process) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[id]; ok {
		return false
	}
	sh.m[id] = p
	if len(sh.m) > sh.peak {
		sh.peak = len(sh.m)
	}
	return true
}

func (sh *registryShard) pop(id string) (Process, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p, ok := sh.m[id]
	if !ok {
		return nil, false
	}
	delete(sh.m, id)
	if sh.peak >= shrinkFloor && len(sh.m) < sh.peak/4 {
		m := make(map[string]Process, len(sh.m))
		for k, v := range sh.m {
			m[k] = v
		}
		sh.m, sh.peak = m, len(m)
	}
	return p, true
}

func (sh *registryShard) get(id string) (Process, bool) {
	sh.mu.RLock()
	p, ok := sh.m[id]
	sh.mu.RUnlock()
	return p, ok
}

const (
	localAddress = "nonhost"
)

func NewProcessRegistry(actorSystem *ActorSystem) *ProcessRegistryValue {
	return &ProcessRegistryValue{
		ActorSystem: actorSystem,
		Address:     localAddress,
		LocalPIDs:   newSliceMap(),
	}
}

// An AddressResolver is used to resolve remote actors
type AddressResolver func(*PID) (Process, bool)

func (pr *ProcessRegistryValue) RegisterAddressResolver(handler AddressResolver) {
	pr.RemoteHandlers = append(pr.RemoteHandlers, handler)
}

const (
	digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ~+"
)

func uint64ToId(u uint64) string {
	var buf [13]byte
	i := 13
	// base is power of 2: use shifts and masks instead of / and %
	for u >= 64 {
		i--
		buf[i] = digits[uintptr(u)&0x3f]
		u >>= 6
	}
	// u < base
	i--
	buf[i] = digits[uintptr(u)]
	i--
	buf[i] = '$'

	return string(buf[i:])
}

func (pr *ProcessRegistryValue) NextId() string {
	counter := atomic.AddUint64(&pr.SequenceID, 1)

	return uint64ToId(counter)
}

func (pr *ProcessRegistryValue) Add(process Process, id string) (*PID, bool) {
	return &PID{
		Address: pr.Address,
		Id:      id,
	}, pr.LocalPIDs.shard(id).setIfAbsent(id, process)
}

func (pr *ProcessRegistryValue) Remove(pid *PID) {
	ref, _ := pr.LocalPIDs.shard(pid.Id).pop(pid.Id)
	if l, ok := ref.(*ActorProcess); ok {
		atomic.StoreInt32(&l.dead, 1)
	}
}

func (pr *ProcessRegistryValue) Get(pid *PID) (Process, bool) {
	if pid == nil {
		return pr.ActorSystem.DeadLetter, false
	}

	if pid.Address != localAddress && pid.Address != pr.Address {
		for _, handler := range pr.RemoteHandlers {
			ref, ok := handler(pid)
			if ok {
				return ref, true
			}
		}

		return pr.ActorSystem.DeadLetter, false
	}

	ref, ok := pr.LocalPIDs.shard(pid.Id).get(pid.Id)
	if !ok {
		return pr.ActorSystem.DeadLetter, false
	}

	return ref, true
}

func (pr *ProcessRegistryValue) GetLocal(id string) (Process, bool) {
	ref, ok := pr.LocalPIDs.shard(id).get(id)
	if !ok {
		return pr.ActorSystem.DeadLetter, false
	}

	return ref, true
}
