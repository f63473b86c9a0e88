package cluster_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/natsstore"
	"github.com/macpd/macpd/internal/testutil"
)

// soak reports whether the long configuration runs (MACP_CLUSTER_SOAK=1,
// docs/cluster.md); the default is the short one CI runs.
func soak() bool { return os.Getenv("MACP_CLUSTER_SOAK") == "1" }

// testOwnership is the nodes' MACP_CLUSTER_OWNERSHIP: the default
// (partitioned) unless MACP_TEST_OWNERSHIP says otherwise (shared).
func testOwnership() string {
	if v := os.Getenv("MACP_TEST_OWNERSHIP"); v != "" {
		return v
	}
	return config.DefaultNATS().Ownership
}

var (
	initID  = coord.Identity{Sender: "agent://init"}
	aliceID = coord.Identity{Sender: "agent://alice"}
	bobID   = coord.Identity{Sender: "agent://bob"}
)

const cfgVersion = testutil.DefaultCfgVersion

// env is a cluster of JetStream servers and macpd nodes (Apps with
// MACP_STORE=nats) on loopback.
type env struct {
	t     testing.TB
	nats  *natstest.Cluster
	mu    sync.Mutex
	nodes []*app.App // nil: killed
	bus   bool       // MACP_NATS_BUS on every node started after it is set
	// profiles binds the new sessions of node i to profiles[i]
	// (MACP_PROFILE); absent = the default.
	profiles map[int]string
}

func newEnv(t testing.TB, servers, nodes int) *env {
	t.Helper()
	return newEnvBus(t, servers, nodes, false)
}

func newEnvBus(t testing.TB, servers, nodes int, bus bool) *env {
	t.Helper()
	return newEnvProfiles(t, servers, nodes, bus, nil)
}

// newEnvProfiles is newEnvBus with node i binding new sessions to
// profiles[i] (a missing or empty entry: the default profile).
func newEnvProfiles(t testing.TB, servers, nodes int, bus bool, profiles []string) *env {
	t.Helper()
	e := &env{t: t, nats: natstest.RunCluster(t, servers), bus: bus, profiles: map[int]string{}}
	for i, p := range profiles {
		e.profiles[i] = p
	}
	for i := 0; i < nodes; i++ {
		e.nodes = append(e.nodes, nil)
		e.startNode(i)
	}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, a := range e.nodes {
			if a != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = a.Shutdown(ctx)
				cancel()
			}
		}
	})
	return e
}

func (e *env) config() config.Config {
	cfg := config.Default()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	cfg.Limits.SessionStartsPerMinute = 0
	cfg.Limits.MessagesPerMinute = 0
	cfg.NATS = config.NATSConfig{Store: config.StoreNATS, URL: e.nats.AllURLs(), Name: "macp", Partitions: benchParts, Replicas: 3, Timeout: 2 * time.Second, Bus: e.bus, Ownership: testOwnership()}
	return cfg
}

// startNode starts (or restarts) node i.
func (e *env) startNode(i int) {
	e.t.Helper()
	var a *app.App
	var err error
	deadline := time.Now().Add(60 * time.Second)
	cfg := e.config()
	if p := e.profiles[i]; p != "" {
		cfg.Profile = p
	}
	for {
		a, err = app.New(cfg, nil)
		if err == nil {
			if err = a.Start(context.Background()); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node %d: %v", i, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.mu.Lock()
	e.nodes[i] = a
	e.mu.Unlock()
}

// kill stops node i abruptly (app.Kill: no drain, appends cut off).
func (e *env) kill(i int) {
	e.mu.Lock()
	a := e.nodes[i]
	e.nodes[i] = nil
	e.mu.Unlock()
	if a != nil {
		a.Kill()
	}
}

// node returns node i, or nil while it is down.
func (e *env) node(i int) *app.App {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.nodes[i]
}

// reader opens a store connection of its own, for checking history.
func (e *env) reader() *natsstore.Store {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ns *natsstore.Store
	var err error
	for ctx.Err() == nil {
		if ns, err = natsstore.Open(ctx, natsstore.Options{URL: e.nats.AllURLs(), Replicas: 3, Timeout: 2 * time.Second}); err == nil {
			e.t.Cleanup(func() { ns.Close() })
			return ns
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Fatalf("reader: %v", err)
	return nil
}

// history reads a session's stored records (retrying while the cluster
// elects leaders).
func history(t testing.TB, ns *natsstore.Store, sid string) []session.Record {
	t.Helper()
	var recs []session.Record
	var err error
	for i := 0; i < 100; i++ {
		recs = recs[:0]
		err = ns.Read(context.Background(), sid, 1, func(r session.Record) error {
			recs = append(recs, r)
			return nil
		})
		if err == nil {
			return recs
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("reading %s: %v", sid, err)
	return nil
}

func mustMarshal(m proto.Message) []byte { return testutil.Marshal(m) }

// startEnv is a valid Decision SessionStart with participants alice and bob.
func startEnv(sid, msgID string, ttlMs int64) *macpv1.Envelope {
	return testutil.DecisionStart(sid, msgID, ttlMs, aliceID.Sender, bobID.Sender)
}

func sessionEnv(sid, msgID, typ string, payload []byte) *macpv1.Envelope {
	return testutil.DecisionEnv(sid, msgID, typ, payload)
}

// proposalEnv proposes option proposal_id "p-"+msgID (unique per message).
func proposalEnv(sid, msgID string) *macpv1.Envelope { return testutil.DecisionProposal(sid, msgID) }

// commitEnv is a valid negative Commitment (always allowed once a proposal
// exists) with commitment_id cid.
func commitEnv(sid, msgID, cid string) *macpv1.Envelope {
	return testutil.DecisionRejection(sid, msgID, cid)
}

// send sends env as id through node i's runtime (the transports are thin
// adapters over it); nil if the node is down.
func (e *env) send(i int, id coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	a := e.node(i)
	if a == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return a.Runtime().Send(ctx, id, proto.Clone(env).(*macpv1.Envelope))
}

func newSID() string { return uuid.NewString() }

func ackString(a *macpv1.Ack) string {
	if a == nil {
		return "<node down>"
	}
	return fmt.Sprintf("ok=%v dup=%v err=%s %s", a.Ok, a.Duplicate, a.GetError().GetCode(), a.GetError().GetMessage())
}
