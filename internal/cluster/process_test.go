package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/store/natsstore"
	"github.com/macpd/macpd/internal/testutil"
)

// Separate OS processes, killed with SIGKILL: three nats-server processes
// (JetStream, R3 stream, sync_interval always) and three macpd processes
// (MACP_STORE=nats), built from this module into the test's temporary
// directory. Clients spread over the macpd nodes send Proposals to several
// sessions over gRPC while, in turn, a macpd process and then a NATS server
// process are SIGKILLed and started again. A client whose node fails (a
// transport error, or INTERNAL_ERROR: nothing acknowledged) resends the
// same message_id to the next node until the answer is definite. Followers
// (passive StreamSession subscriptions) move to the next node whenever
// theirs fails and resubscribe after the last sequence number they got.
//
// Checked (issue 17 "Done when"; RFC-MACP-0001 §8.2, §8.4; RFC-MACP-0006
// §3.2 resume):
//   - every acknowledged envelope is in the stored history;
//   - the history's sequence numbers are 1..N and no message_id is stored
//     twice (no sequence number given twice, no envelope accepted twice);
//   - every resubscription on another node starts exactly after the
//     follower's cursor (macp-resume-after header), and each follower
//     received exactly the history's envelopes, in order.
//
// The default is the short configuration CI runs; MACP_CLUSTER_SOAK=1
// runs more rounds and sessions.
func TestProcessKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills macpd processes under load: make test-all")
	}
	if goruntime.GOOS == "windows" {
		t.Fatal("needs POSIX processes and SIGKILL")
	}
	sessions, rounds, minPerClient := 2, 2, 8
	if soak() {
		sessions, rounds, minPerClient = 4, 8, 30
	}
	bins := buildBinaries(t)
	nc := startNATSProcs(t, bins.nats, 3)
	nodes := make([]*macpdProc, 3)
	for i := range nodes {
		nodes[i] = &macpdProc{t: t, bin: bins.macpd, natsURLs: nc.urls(), name: fmt.Sprintf("macpd%d", i)}
		nodes[i].start()
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	cl := &procClients{nodes: nodes, conns: map[string]*grpc.ClientConn{}}
	defer cl.close()

	sids := make([]string, sessions)
	for i := range sids {
		sids[i] = newSID()
		if !cl.sendDefinite(t, i, initID.Sender, startEnv(sids[i], "m0", 600_000)) {
			t.Fatalf("session %d not started", i)
		}
		if !cl.sendDefinite(t, i+1, aliceID.Sender, proposalEnv(sids[i], "m1")) {
			t.Fatalf("session %d: first proposal refused", i)
		}
	}

	// Followers, one per session, from the start.
	type followResult struct {
		ids     []string
		resumes int
		err     error
	}
	results := make([]followResult, sessions)
	var followers sync.WaitGroup
	followCtx, stopFollowers := context.WithCancel(context.Background())
	defer stopFollowers()
	for si, sid := range sids {
		followers.Add(1)
		go func() {
			defer followers.Done()
			res := &results[si]
			// Starting on nodes 0 and 1, which the first rounds kill.
			res.ids, res.resumes, res.err = cl.follow(followCtx, si, sid)
		}()
	}

	var (
		mu    sync.Mutex
		acked = map[string][]string{} // session → acknowledged message ids
	)
	chaosDone := make(chan struct{})
	var clients sync.WaitGroup
	for si, sid := range sids {
		for ci, who := range []string{aliceID.Sender, bobID.Sender} {
			clients.Add(1)
			go func() {
				defer clients.Done()
				// Under load for the whole chaos, and at least minPerClient.
				for k := 1; ; k++ {
					if k > minPerClient && closed(chaosDone) {
						return
					}
					id := fmt.Sprintf("%s-%d", who[len("agent://"):], k)
					if !cl.sendDefinite(t, si*2+ci, who, proposalEnv(sid, id)) {
						t.Errorf("%s: %s refused", sid, id)
						return
					}
					mu.Lock()
					acked[sid] = append(acked[sid], id)
					mu.Unlock()
				}
			}()
		}
	}
	for r := 0; r < rounds; r++ {
		time.Sleep(300 * time.Millisecond) // load flows between failures
		k := r % 3
		nodes[k].kill()
		time.Sleep(300 * time.Millisecond)
		nodes[k].start()
		time.Sleep(300 * time.Millisecond)
		s := (r + 1) % 3
		nc.kill(s)
		time.Sleep(500 * time.Millisecond)
		nc.start(s)
		nc.waitReady(s)
	}
	close(chaosDone)
	clients.Wait()
	if t.Failed() {
		return
	}
	// End every session: the followers then see the end.
	for si, sid := range sids {
		cl.sendDefinite(t, si, initID.Sender, commitEnv(sid, "c", "commit"))
	}
	waited := make(chan struct{})
	go func() { followers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(90 * time.Second):
		stopFollowers()
		<-waited
		t.Fatalf("followers did not see every session end")
	}

	ns := openReader(t, nc.urls())
	for si, sid := range sids {
		recs := history(t, ns, sid)
		var ids []string
		seen := map[string]bool{}
		for i, r := range recs {
			if r.Seq != uint64(i+1) {
				t.Fatalf("%s: record %d has seq %d", sid, i+1, r.Seq)
			}
			if r.Envelope == nil {
				continue
			}
			mid := r.Envelope.MessageId
			if seen[mid] {
				t.Fatalf("%s: message %s stored twice", sid, mid)
			}
			seen[mid] = true
			ids = append(ids, mid)
		}
		for _, id := range acked[sid] {
			if !seen[id] {
				t.Fatalf("%s: acknowledged %s is not in the history", sid, id)
			}
		}
		if !seen["c"] {
			t.Fatalf("%s: the Commitment is not in the history", sid)
		}
		res := results[si]
		if res.err != nil {
			t.Fatalf("follower of %s: %v", sid, res.err)
		}
		if !slices.Equal(res.ids, ids) {
			t.Fatalf("follower of %s received %d envelopes, history has %d:\nfollowed %v\nhistory  %v", sid, len(res.ids), len(ids), res.ids, ids)
		}
		if si < min(rounds, 3) && res.resumes < 2 {
			// Its first node was killed while the session was open.
			t.Fatalf("follower of %s subscribed %d times: it never moved to another node", sid, res.resumes)
		}
		t.Logf("%s: %d records, %d acknowledged by clients, follower subscribed %d times", sid, len(recs), len(acked[sid]), res.resumes)
	}
	t.Logf("%d rounds of SIGKILL (a macpd process, then a nats-server process): history complete, followers exact", rounds)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

type binaries struct{ macpd, nats string }

// buildBinaries builds macpd and nats-server (the server this module
// embeds in tests) into the test's temporary directory.
func buildBinaries(t testing.TB) binaries {
	t.Helper()
	dir := t.TempDir()
	goBin := filepath.Join(goruntime.GOROOT(), "bin", "go")
	root := testutil.RepoRoot(t)
	b := binaries{macpd: filepath.Join(dir, "macpd"), nats: filepath.Join(dir, "nats-server")}
	for pkg, out := range map[string]string{"./cmd/macpd": b.macpd, "github.com/nats-io/nats-server/v2": b.nats} {
		cmd := exec.Command(goBin, "build", "-o", out, pkg)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
		}
	}
	return b
}

// proc is a child process with its combined output.
type proc struct {
	cmd    *exec.Cmd
	out    *testutil.SyncBuffer
	exited chan struct{}
}

func startProc(t testing.TB, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MACP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &proc{cmd: cmd, out: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// natsProcs is a cluster of nats-server processes on ports picked at run
// time, kept across restarts.
type natsProcs struct {
	t     testing.TB
	bin   string
	confs []string
	ports []int
	procs []*proc
}

// startNATSProcs starts n servers in one cluster. They do not advertise
// each other's client addresses (no_advertise), so a client connects
// only to the URLs it was given: TestNemesis's nodes reach NATS only
// through its proxies.
func startNATSProcs(t testing.TB, bin string, n int) *natsProcs {
	t.Helper()
	c := &natsProcs{t: t, bin: bin, ports: natstest.FreePorts(t, n), procs: make([]*proc, n)}
	routePorts := natstest.FreePorts(t, n)
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		conf := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		body := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
max_payload: %d
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 4GB
  sync_interval: always
}
cluster {
  name: macpkill
  listen: 127.0.0.1:%d
  no_advertise: true
  routes: [ %s ]
}
`, i, c.ports[i], natstest.MaxPayload, filepath.Join(dir, fmt.Sprintf("data%d", i)), routePorts[i], strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c.confs = append(c.confs, conf)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
	})
	for i := 0; i < n; i++ {
		c.start(i)
	}
	for i := 0; i < n; i++ {
		c.waitReady(i)
	}
	return c
}

func (c *natsProcs) start(i int) { c.procs[i] = startProc(c.t, c.bin, nil, "-c", c.confs[i]) }

func (c *natsProcs) kill(i int) {
	c.procs[i].kill()
	c.procs[i] = nil
}

func (c *natsProcs) urls() string {
	var us []string
	for _, p := range c.ports {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(us, ",")
}

// waitReady waits until server i answers JetStream requests (the cluster
// has a meta leader and the server has joined it).
func (c *natsProcs) waitReady(i int) {
	c.t.Helper()
	url := fmt.Sprintf("nats://127.0.0.1:%d", c.ports[i])
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		select {
		case <-c.procs[i].exited:
			c.t.Fatalf("nats-server n%d exited:\n%s", i, c.procs[i].out.String())
		default:
		}
		var conn *nats.Conn
		if conn, err = nats.Connect(url, nats.Timeout(time.Second)); err == nil {
			var js jetstream.JetStream
			if js, err = jetstream.New(conn); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err = js.AccountInfo(ctx)
				cancel()
			}
			conn.Close()
			if err == nil {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("nats-server n%d not ready: %v\n%s", i, err, c.procs[i].out.String())
}

// macpdProc is one macpd node process; its gRPC address is picked by the
// kernel (MACP_BIND_ADDR=127.0.0.1:0) and read from its log, so a restart
// gets a new one.
type macpdProc struct {
	t        testing.TB
	bin      string
	natsURLs string
	name     string
	env      []string // more environment (after the defaults)

	mu   sync.Mutex
	p    *proc
	addr string // "" while down
}

var servingRE = regexp.MustCompile(`msg="macpd serving" addr=(\S+)`)

// start starts the node and waits until it serves; a start that fails
// (the NATS cluster electing a leader) is tried again.
func (m *macpdProc) start() {
	m.t.Helper()
	env := []string{
		"MACP_ALLOW_INSECURE=1", "MACP_BIND_ADDR=127.0.0.1:0", "MACP_DATA_DIR=" + m.t.TempDir(),
		"MACP_STORE=nats", "MACP_NATS_URL=" + m.natsURLs, "MACP_NATS_REPLICAS=3", "MACP_NATS_TIMEOUT_MS=2000", "MACP_CLUSTER_OWNERSHIP=" + testOwnership(),
		"MACP_SESSION_START_LIMIT_PER_MINUTE=0", "MACP_MESSAGE_LIMIT_PER_MINUTE=0", "MACP_LOG_FORMAT=text",
	}
	env = append(env, m.env...)
	deadline := time.Now().Add(90 * time.Second)
	for {
		p := startProc(m.t, m.bin, env)
		for {
			if mt := servingRE.FindStringSubmatch(p.out.String()); mt != nil {
				m.mu.Lock()
				m.p, m.addr = p, mt[1]
				m.mu.Unlock()
				return
			}
			select {
			case <-p.exited:
			case <-time.After(20 * time.Millisecond):
				continue
			}
			break
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s did not start:\n%s", m.name, p.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kill SIGKILLs the node.
func (m *macpdProc) kill() {
	m.mu.Lock()
	p := m.p
	m.p, m.addr = nil, ""
	m.mu.Unlock()
	p.kill()
}

func (m *macpdProc) address() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// procClients are gRPC clients of the nodes, one connection per node
// address (identities are per call: dev bearer tokens).
type procClients struct {
	nodes []*macpdProc
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (c *procClients) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

func (c *procClients) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.conns {
		_ = cc.Close()
	}
}

// client returns a runtime client on node i (nil while it is down) and
// a context carrying who's dev identity.
func (c *procClients) client(ctx context.Context, i int, who string) (macpv1.MACPRuntimeServiceClient, context.Context) {
	addr := c.nodes[i%len(c.nodes)].address()
	if addr == "" {
		return nil, nil
	}
	cc, err := c.conn(addr)
	if err != nil {
		return nil, nil
	}
	return macpv1.NewMACPRuntimeServiceClient(cc), metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+who)
}

// sendDefinite sends env as who, starting at node first and moving to the
// next node after every failure that leaves the outcome open (node down,
// transport error, INTERNAL_ERROR), resending the same envelope (same
// message_id) until it is accepted (true) or refused as SESSION_NOT_OPEN
// (false). Any other answer fails the test.
func (c *procClients) sendDefinite(t *testing.T, first int, who string, env *macpv1.Envelope) bool {
	deadline := time.Now().Add(120 * time.Second)
	for attempt := first; ; attempt++ {
		if time.Now().After(deadline) {
			t.Errorf("%s: no definite answer in 120 s", env.MessageId)
			return false
		}
		rpc, ctx := c.client(context.Background(), attempt, who)
		if rpc == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		resp, err := rpc.Send(ctx, &macpv1.SendRequest{Envelope: proto.Clone(env).(*macpv1.Envelope)})
		cancel()
		ack := resp.GetAck()
		switch {
		case err != nil, ack == nil, !ack.Ok && ack.GetError().GetCode() == string(coord.CodeInternalError):
			time.Sleep(50 * time.Millisecond)
			continue
		case ack.Ok:
			return true
		case ack.GetError().GetCode() == string(coord.CodeSessionNotOpen):
			return false
		default:
			t.Errorf("%s: %s", env.MessageId, ackString(ack))
			return false
		}
	}
}

// follow follows sid as alice (a participant) with passive StreamSession
// subscriptions, starting on node first and moving to the next node
// whenever the stream fails; each resubscription asks for the records
// after the last one received and must start exactly there. It returns
// the message ids received, in order, once the session ended.
func (c *procClients) follow(ctx context.Context, first int, sid string) (ids []string, resumes int, err error) {
	var last uint64
	for node := first; ; node++ {
		if ctx.Err() != nil {
			return ids, resumes, fmt.Errorf("stopped after %d envelopes", len(ids))
		}
		rpc, cctx := c.client(ctx, node, aliceID.Sender)
		if rpc == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		done, ferr := func() (bool, error) {
			cctx, cancel := context.WithCancel(cctx)
			defer cancel()
			stream, err := rpc.StreamSession(cctx)
			if err != nil {
				return false, nil
			}
			if err := stream.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sid, AfterSequence: last}); err != nil && !errors.Is(err, io.EOF) {
				return false, nil
			}
			md, err := stream.Header()
			if err != nil {
				return false, nil
			}
			v := md.Get("macp-resume-after")
			if len(v) == 0 {
				return false, nil // the stream failed before it started
			}
			from, perr := strconv.ParseUint(v[0], 10, 64)
			if perr != nil || from != last {
				return true, fmt.Errorf("resubscribed after %d on node %d, which resumed after %q", last, node%len(c.nodes), v[0])
			}
			resumes++
			for {
				resp, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return true, nil // the session ended, everything delivered
				}
				if err != nil {
					return false, nil
				}
				env := resp.GetEnvelope()
				if env == nil || env.GetSessionId() == "" {
					continue // heartbeat
				}
				last++
				ids = append(ids, env.MessageId)
			}
		}()
		if done {
			return ids, resumes, ferr
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openReader opens a store connection of its own, for checking history.
func openReader(t *testing.T, urls string) *natsstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		var ns *natsstore.Store
		if ns, err = natsstore.Open(ctx, natsstore.Options{URL: urls, Replicas: 3, Timeout: 2 * time.Second}); err == nil {
			t.Cleanup(func() { ns.Close() })
			return ns
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("reader: %v", err)
	return nil
}
