package bench

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	bolt "go.etcd.io/bbolt"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/internal/testkit/pgtest"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/boltstore"
	"github.com/meshnode/meshnode/store/pgstore"
)

// Persistence (issue 27, item 9): a save through the Actor API (a request to a local
// Actor whose turn calls Context.Save and then replies) against the raw store (a plain
// bbolt put in its own transaction; a plain pgx upsert), interleaved in one run so that
// both see the same disk and the same load; and a turn that saves against one that
// does not. Each benchmark reports both sides and the ratio of their throughput:
// goal >= 0.8 of the raw store.

type benchSave struct{ N int }
type benchSaved struct{ N int }

type benchLedger struct{ st struct{ N int } }

func (l *benchLedger) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*benchSave); ok {
		l.st.N += m.N
		if err := ctx.Save(); err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		_ = ctx.Reply(&benchSaved{N: l.st.N})
	}
}

func benchLedgerNode(b *testing.B, st store.Store) *actor.Host {
	c := meshtest.Start(b, 1, meshtest.Options{NoTap: true, Config: func(_ int, cfg *meshnode.Config) {
		state := func(a actor.Actor) any { return &a.(*benchLedger).st }
		cfg.Kinds = []actor.Kind{
			{Name: "saving", New: func() actor.Actor { return &benchLedger{} }, State: state, Persist: actor.SaveExplicitly},
			{Name: "memory", New: func() actor.Actor { return &benchLedger{} }, State: state},
		}
		cfg.Messages = []actor.MessageType{actor.MessageOf[benchSave]("bench.save"), actor.MessageOf[benchSaved]("bench.saved")}
		cfg.Store = st
	}})
	return c.Node(0).Actors()
}

// interleave runs a and b alternately b.N times each and reports their throughput,
// p99 latency and the throughput ratio a/b.
func interleave(bm *testing.B, aName, bName string, a, b func(i int) error) {
	la, lb := make([]time.Duration, 0, bm.N), make([]time.Duration, 0, bm.N)
	bm.ResetTimer()
	for i := 0; i < bm.N; i++ {
		t0 := time.Now()
		if err := a(i); err != nil {
			bm.Fatal(err)
		}
		t1 := time.Now()
		if err := b(i); err != nil {
			bm.Fatal(err)
		}
		la, lb = append(la, t1.Sub(t0)), append(lb, time.Since(t1))
	}
	bm.StopTimer()
	report := func(name string, l []time.Duration) float64 {
		var sum time.Duration
		for _, d := range l {
			sum += d
		}
		slices.Sort(l)
		rate := float64(len(l)) / sum.Seconds()
		bm.ReportMetric(rate, name+"-ops/s")
		bm.ReportMetric(float64(l[len(l)*99/100].Microseconds()), name+"-p99-µs")
		return rate
	}
	ra, rb := report(aName, la), report(bName, lb)
	bm.ReportMetric(ra/rb, "ratio")
	// The same as a time ratio, the unit of the alternated benchmarks that benchreport
	// judges (x-...-time: its inverse is the throughput ratio a goal bounds).
	bm.ReportMetric(rb/ra, "x-"+bName+"-time")
}

func saveThroughActor(h *actor.Host, kind, id string) func(int) error {
	addr := actor.Address{Kind: kind, ID: id}
	return func(int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := h.Request(ctx, addr, benchSave{N: 1})
		return err
	}
}

// BenchmarkPersistenceSaveBolt: the Actor API's save against a plain bbolt put, each
// an fsync'd transaction on the same disk.
func BenchmarkPersistenceSaveBolt(b *testing.B) {
	dir := b.TempDir()
	st, err := boltstore.Open(filepath.Join(dir, "node", boltstore.FileName), boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	h := benchLedgerNode(b, st)
	raw, err := bolt.Open(filepath.Join(dir, "raw.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	bucket := []byte("raw")
	if err := raw.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucket); return err }); err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 16) // about what the ledger's envelope holds
	rawPut := func(i int) error {
		binary.BigEndian.PutUint64(val, uint64(i))
		return raw.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte("ledger/acct"), val) })
	}
	interleave(b, "actor", "rawbolt", saveThroughActor(h, "saving", "acct"), rawPut)
}

// BenchmarkPersistenceSavePostgres: the Actor API's save against a plain pgx upsert on
// the same server, through a pool of the same size.
func BenchmarkPersistenceSavePostgres(b *testing.B) {
	srv := pgtest.Start(b, pgtest.Options{})
	ctx := context.Background()
	st, err := pgstore.Open(ctx, srv.URL(""), pgstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	h := benchLedgerNode(b, st)
	pool, err := pgxpool.New(ctx, srv.URL("")+"&pool_max_conns=8")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE raw_state (kind text, id text, data bytea, PRIMARY KEY (kind, id))`); err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 16)
	rawUpsert := func(i int) error {
		binary.BigEndian.PutUint64(val, uint64(i))
		_, err := pool.Exec(ctx, `INSERT INTO raw_state (kind, id, data) VALUES ('ledger', 'acct', $1)
			ON CONFLICT (kind, id) DO UPDATE SET data = excluded.data`, val)
		return err
	}
	interleave(b, "actor", "rawpgx", saveThroughActor(h, "saving", "acct"), rawUpsert)
}

// BenchmarkPersistenceTurnCost: a turn that saves (bbolt) against the same turn of a
// kind that does not persist (Context.Save returns at once): what durability costs a
// request.
func BenchmarkPersistenceTurnCost(b *testing.B) {
	st, err := boltstore.Open(filepath.Join(b.TempDir(), boltstore.FileName), boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	h := benchLedgerNode(b, st)
	interleave(b, "saving", "memory", saveThroughActor(h, "saving", "acct"), saveThroughActor(h, "memory", "acct2"))
}
