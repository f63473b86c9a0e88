package crashtest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/sdk"
)

// killKind says when a round kills macpd.
type killKind int

const (
	// afterTime: a random moment of steady load.
	afterTime killKind = iota
	// afterAcks: right after the N-th ack of the steady load (inside the
	// client interceptor, with the other Sends in flight).
	afterAcks
	// inBurst: a burst of extra sessions starts, and macpd is killed right
	// after the N-th ack of the burst.
	inBurst
	// atStart: within milliseconds of serving, while the clients
	// reconnect and the first writes after recovery go in.
	atStart
)

func (k killKind) String() string {
	return [...]string{"after-time", "after-acks", "in-burst", "at-start"}[k]
}

// round is one kill/restart.
type round struct {
	kind  killKind
	n     int64         // afterAcks, inBurst: the ack that triggers the kill
	delay time.Duration // afterTime, atStart: how long after serving
	pause time.Duration // how long macpd stays down
	pad   int           // inBurst: payload padding of the burst's envelopes
}

func (r round) String() string {
	switch r.kind {
	case afterAcks:
		return fmt.Sprintf("%s n=%d pause=%v", r.kind, r.n, r.pause)
	case inBurst:
		return fmt.Sprintf("%s n=%d pad=%d pause=%v", r.kind, r.n, r.pad, r.pause)
	}
	return fmt.Sprintf("%s delay=%v pause=%v", r.kind, r.delay, r.pause)
}

// TestCrashRandom kills macpd at random moments (a seeded schedule: the
// seed is logged, MACP_CRASH_SEED replays it; timing itself is not
// reproducible) at least once in a burst, after an ack count and after a
// delay.
func TestCrashRandom(t *testing.T) {
	seed := time.Now().UnixNano()
	if v := os.Getenv("MACP_CRASH_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("MACP_CRASH_SEED %q: %v", v, err)
		}
		seed = s
	}
	t.Logf("seed %d (MACP_CRASH_SEED=%d reproduces the kill schedule)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6d616370637261))
	n := max(int(envInt("MACP_CRASH_ROUNDS", 6)), 3)
	kinds := []killKind{inBurst, afterAcks, afterTime}
	for len(kinds) < n {
		kinds = append(kinds, killKind(rng.IntN(4)))
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	var rounds []round
	for _, k := range kinds {
		r := round{kind: k, pause: time.Duration(rng.IntN(150)) * time.Millisecond}
		switch k {
		case afterTime:
			r.delay = time.Duration(50+rng.IntN(1450)) * time.Millisecond
		case atStart:
			r.delay = time.Duration(rng.IntN(40)) * time.Millisecond
		case afterAcks:
			if rng.IntN(2) == 0 {
				r.n = 1 + rng.Int64N(30)
			} else {
				r.n = 30 + rng.Int64N(2500)
			}
		case inBurst:
			r.n = 1 + rng.Int64N(1200)
			r.pad = []int{128, 1 << 10, 16 << 10}[rng.IntN(3)]
		}
		rounds = append(rounds, r)
	}
	runCrash(t, "random", seed, rounds)
}

// TestCrashFixedPoints kills macpd at fixed points, so that every run
// covers a kill at the first ack, during steady load, early in and deep
// into a write burst, and right after a restart.
func TestCrashFixedPoints(t *testing.T) {
	runCrash(t, "fixed", 0, []round{
		{kind: afterAcks, n: 1},
		{kind: afterAcks, n: 500},
		{kind: inBurst, n: 100},
		{kind: atStart, delay: 0},
		{kind: inBurst, n: 1000, pause: 100 * time.Millisecond},
		{kind: afterAcks, n: 2000},
		{kind: inBurst, n: 2500, pad: 16 << 10},
	})
}

// load is one loadgen.Run in the background.
type load struct {
	tag    string
	log    string
	cancel context.CancelFunc
	done   chan struct{}
	res    *loadgen.Result
	err    error
}

func runCrash(t *testing.T, variant string, seed int64, rounds []round) {
	if testing.Short() {
		t.Skip("crash test: builds macpd and kills it repeatedly under load")
	}
	bin, err := buildMacpd()
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("", "macp-crashtest-"+variant+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("MACP_CRASH_KEEP") == "1" {
			t.Logf("evidence kept in %s (data/, macpd.log, acked-*.log, problems.txt)", work)
			return
		}
		os.RemoveAll(work)
	})
	d := newDaemon(t, bin, work)
	// Incarnations alternate profiles on the one data directory: the
	// default (2026-04), latest (by its alias), 2026-04 by name, 2026-09.
	d.profiles = []string{"", "latest", coord.ProfileApril, coord.ProfileLatest}
	tr := newTracker(d.kill)
	tr.incarnation = d.incarnation
	began := time.Now()
	d.start()

	var loadsMu sync.Mutex
	var loads []*load
	startLoad := func(tag string, cfg loadgen.Config) *load {
		ctx, cancel := context.WithCancel(context.Background())
		l := &load{tag: tag, log: filepath.Join(work, "acked-"+tag+".log"), cancel: cancel, done: make(chan struct{})}
		f, err := os.Create(l.log)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Mode = "decision"
		cfg.Initiator = initiator
		cfg.Commit = true
		cfg.Duration = 10 * time.Minute // until cancelled
		cfg.GiveUpAfter = -1            // ride out the restarts
		cfg.CallTimeout = 5 * time.Second
		cfg.AckedLog = f
		cfg.Dial = func(context.Context) (macpv1.MACPRuntimeServiceClient, io.Closer, error) { return tr.dial(d.addr, tag) }
		go func() {
			defer close(l.done)
			defer f.Close()
			l.res, l.err = loadgen.Run(ctx, cfg)
		}()
		loadsMu.Lock()
		loads = append(loads, l)
		loadsMu.Unlock()
		return l
	}
	// Steady load: short single-sender sessions (many SessionStarts and
	// Commitments), long sessions with four concurrent senders, and
	// sessions driven over pipelined StreamSession calls (up to 16
	// envelopes in flight per stream, each acknowledged by its echo).
	startLoad("single", loadgen.Config{Concurrency: 6, SendersPerSession: 1, Messages: 10, Pad: 64})
	startLoad("multi", loadgen.Config{Concurrency: 3, SendersPerSession: 4, Messages: 48, Pad: 256})
	startLoad("stream", loadgen.Config{Concurrency: 3, Stream: true, Window: 16, Messages: 30, Pad: 128})
	// Session control: suspend, resume and cancel under both profiles.
	ctlCl, ctlCloser, err := tr.dial(d.addr, "control")
	if err != nil {
		t.Fatal(err)
	}
	defer ctlCloser.Close()
	ctlCtx, ctlStop := context.WithCancel(context.Background())
	ctlDone := make(chan struct{})
	var ctlEntries []loadgen.Acked
	go func() {
		defer close(ctlDone)
		ctlEntries = controlLoad(ctlCtx, ctlCl, uint64(seed), 2)
	}()

	// Before its round's kill can come, each incarnation leaves one
	// session SUSPENDED and takes another through suspend, resume and
	// cancel, so every control call and end state the checks below ask
	// for exists under each profile whatever the schedule (the control
	// scripts cover them too, but short rounds can give a profile's
	// incarnations no time for them).
	var pinned []loadgen.Acked
	pinControls := func() {
		logAck := func(sid, mid string) {
			pinned = append(pinned, loadgen.Acked{SessionID: sid, MessageID: mid, Stream: "control-pinned", Line: len(pinned) + 1})
		}
		for _, script := range [][]step{{stepSuspend}, {stepSuspend, stepResume, stepCancel}} {
			deadline := time.Now().Add(20 * time.Second)
			for !playScript(context.Background(), ctlCl, script, logAck) {
				if time.Now().After(deadline) {
					t.Fatalf("incarnation %d: control script %v not acked in 20s", d.incarnation(), script)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	var lastRestart time.Time
	for i, r := range rounds {
		pinControls()
		t0 := time.Now()
		before := tr.total.Load()
		timedOut := false
		waitFired := func(fired <-chan struct{}) {
			select {
			case <-fired:
			case <-time.After(20 * time.Second):
				tr.disarm()
				timedOut = true
				d.kill()
			}
		}
		switch r.kind {
		case afterTime, atStart:
			time.Sleep(r.delay)
			d.kill()
		case afterAcks:
			waitFired(tr.arm("", r.n))
		case inBurst:
			tag := fmt.Sprintf("burst%d", i+1)
			fired := tr.arm(tag, r.n)
			b := startLoad(tag, loadgen.Config{Concurrency: 16, SendersPerSession: 2, Messages: 16, Pad: max(r.pad, 128)})
			waitFired(fired)
			b.cancel() // its Sends in flight fail with the server gone
		}
		d.waitExit()
		upFor, acks := time.Since(t0), tr.total.Load()-before
		d.logf("round %d (%s): killed after %v, %d acks in the round", i+1, r, upFor, acks)
		time.Sleep(r.pause)
		recovery := d.start()
		lastRestart = time.Now()
		note := ""
		if timedOut {
			note = " (ack threshold not reached in 20s: killed anyway)"
		}
		t.Logf("round %d %-36s killed %6.0fms into the round after %4d acks%s; serving again in %v", i+1, r, float64(upFor)/1e6, acks, note, recovery.Round(time.Millisecond))
	}

	pinControls()
	// Some load after the last restart, then stop it.
	after := tr.total.Load()
	for deadline := time.Now().Add(10 * time.Second); tr.total.Load()-after < 100 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	loadsMu.Lock()
	all := slices.Clone(loads)
	loadsMu.Unlock()
	for _, l := range all {
		l.cancel()
	}
	ctlStop()
	select {
	case <-ctlDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the control workload did not stop")
	}
	for _, l := range all {
		select {
		case <-l.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("load %s did not stop", l.tag)
		}
		if l.err != nil {
			t.Fatalf("load %s: %v", l.tag, l.err)
		}
		if l.res.AckedLogError != "" {
			t.Fatalf("load %s: acked log: %s", l.tag, l.res.AckedLogError)
		}
	}

	ctx := context.Background()
	cl, closer, err := tr.dial(d.addr, "post")
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	// Sessions left OPEN by a crash still take envelopes after recovery,
	// continuing their sequence and hash chain.
	// The pinned sessions stay as they were left.
	keep := make(map[string]bool)
	for _, e := range pinned {
		keep[e.SessionID] = true
	}
	postEntries, continued := continueSessions(t, ctx, cl, tr, lastRestart, keep)

	var entries []loadgen.Acked
	for _, l := range all {
		f, err := os.Open(l.log)
		if err != nil {
			t.Fatal(err)
		}
		es, err := loadgen.ReadAckedLog(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", l.log, err)
		}
		entries = append(entries, es...)
	}
	entries = append(entries, postEntries...)
	entries = append(entries, ctlEntries...)
	entries = append(entries, pinned...)

	f, views := checkOnline(ctx, cl, tr, entries, d.profileOf)

	// A last crash, then the store read offline.
	d.kill()
	d.waitExit()
	verified, vfailed := checkOffline(f, d.dir, views)
	t.Logf("offline (after a last SIGKILL): verify, as macpctl verify --data-dir: %d sessions verified, %d failed", verified, vfailed)
	if verified+vfailed != f.Present {
		f.add("verify checked %d sessions, %d exist", verified+vfailed, f.Present)
	}

	var sends, unknowns int
	_, order, _ := tr.snapshot()
	for _, rec := range order {
		sends++
		if rec.out == unknown {
			unknowns++
		}
	}
	ctlAcked, ctlUnknown := map[string]int{}, 0
	for _, cs := range tr.controls() {
		for _, c := range cs {
			if c.out == acked {
				ctlAcked[c.typ+"/"+c.state.String()]++
			} else if c.out == unknown {
				ctlUnknown++
			}
		}
	}
	byProfile := map[string]int{}
	for _, v := range views {
		if v.meta != nil {
			byProfile[cmp.Or(v.profile, "unknown")+"/"+v.meta.GetState().String()]++
		}
	}
	t.Logf("control calls acked %v, unanswered %d; sessions by profile and state %v", ctlAcked, ctlUnknown, byProfile)
	for _, want := range []string{
		"SessionSuspend/SESSION_STATE_SUSPENDED", "SessionResume/SESSION_STATE_OPEN",
		"SessionCancel/SESSION_STATE_EXPIRED", "SessionCancel/SESSION_STATE_CANCELLED",
	} {
		if ctlAcked[want] == 0 {
			f.add("no %s was acked: the control workload did not cover it", want)
		}
	}
	for _, want := range []string{coord.ProfileApril, coord.ProfileLatest} {
		if byProfile[want+"/SESSION_STATE_SUSPENDED"] == 0 {
			f.add("no session of profile %s is SUSPENDED at the end", want)
		}
	}
	t.Logf("CRASHTEST variant=%s seed=%d rounds=%d kills=%d sends=%d acked=%d stream_acked=%d checked=%d lost=%d duplicated=%d out_of_order=%d phantom=%d gaps=%d bad_state=%d "+
		"sessions=%d present=%d verified=%d envelopes=%d unanswered=%d unanswered_in_history=%d unanswered_absent=%d rejected=%d continued=%d elapsed=%v ok=%v",
		variant, seed, len(rounds), d.killCount(), sends, tr.total.Load(), tr.acksOf("stream"), f.Checked, f.Lost, f.Duplicated, f.OutOfOrder, f.Phantom, f.Gaps, f.BadState,
		f.Sessions, f.Present, verified, f.Envelopes, unknowns, f.UnknownPresent, f.UnknownAbsent, f.Rejected, continued, time.Since(began).Round(time.Millisecond), f.ok())
	if f.Checked == 0 {
		f.add("no acked envelope was checked")
	}
	if !f.ok() {
		report := fmt.Sprintf("variant %s seed %d rounds %v\n%s\n", variant, seed, rounds, strings.Join(f.problems, "\n"))
		_ = os.WriteFile(filepath.Join(work, "problems.txt"), []byte(report), 0o644)
		show := f.problems
		if len(show) > 40 {
			show = append(show[:40:40], fmt.Sprintf("... and %d more (problems.txt)", len(f.problems)-40))
		}
		t.Errorf("%d problem(s) (seed %d, data dir %s):\n%s", len(f.problems), seed, d.dir, strings.Join(show, "\n"))
	}
}

// continueSessions sends one more envelope into up to 20 sessions that are
// OPEN and were started before the last restart: a Commitment where the
// session has a proposal, else a Proposal; and resumes up to 10 that are
// SUSPENDED, leaving out the sessions in keep. Each must be accepted. It
// returns acked-log entries for the envelopes and how many were sent.
func continueSessions(t *testing.T, ctx context.Context, cl macpv1.MACPRuntimeServiceClient, tr *tracker, lastRestart time.Time, keep map[string]bool) ([]loadgen.Acked, int) {
	t.Helper()
	_, order, _ := tr.snapshot()
	var cands []string
	for _, rec := range order {
		if rec.typ == sdk.TypeSessionStart && rec.out == acked && rec.end.Before(lastRestart) && !keep[rec.sid] {
			cands = append(cands, rec.sid)
		}
	}
	sort.Strings(cands)
	var out []loadgen.Acked
	sent, resumed := 0, 0
	for _, sid := range cands {
		if sent == 20 && resumed == 10 {
			break
		}
		gctx, cancel := context.WithTimeout(asIdentity(ctx, initiator), 10*time.Second)
		resp, err := cl.GetSession(gctx, &macpv1.GetSessionRequest{SessionId: sid})
		cancel()
		if err != nil {
			continue // the checks report it
		}
		meta := resp.GetMetadata()
		if meta.GetState() == macpv1.SessionState_SESSION_STATE_SUSPENDED && resumed < 10 {
			// A session left SUSPENDED by a crash resumes after recovery
			// (a tracked control call: the checks find its record).
			rctx, cancel := context.WithTimeout(asIdentity(ctx, initiator), 10*time.Second)
			rresp, err := cl.ResumeSession(rctx, &macpv1.ResumeSessionRequest{SessionId: sid, Reason: "after recovery"})
			cancel()
			resumed++
			if err != nil || !rresp.GetAck().GetOk() || rresp.GetAck().GetSessionState() != macpv1.SessionState_SESSION_STATE_OPEN {
				t.Errorf("session %s (recovered SUSPENDED): ResumeSession after recovery: %v %v", sid, err, rresp.GetAck())
			}
			continue
		}
		if meta.GetState() != macpv1.SessionState_SESSION_STATE_OPEN || sent == 20 {
			continue
		}
		hist, _, err := readHistory(ctx, cl, sid)
		if err != nil {
			continue
		}
		hasProposal := false
		for _, env := range hist {
			hasProposal = hasProposal || env.GetMessageType() == sdk.TypeProposal
		}
		var env *macpv1.Envelope
		if hasProposal {
			env, err = sdk.NewCommitment(sid, meta.GetMode(), &macpv1.CommitmentPayload{
				CommitmentId: "commit-after-crash", Action: "decision.selected", AuthorityScope: "crashtest",
				Reason: "continued after recovery", ModeVersion: meta.GetModeVersion(),
				ConfigurationVersion: meta.GetConfigurationVersion(), PolicyVersion: meta.GetPolicyVersion(), OutcomePositive: true,
			})
		} else {
			env, err = sdk.NewProposal(sid, &decisionv1.ProposalPayload{ProposalId: "prop-after-crash", Option: "after crash"})
		}
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(asIdentity(ctx, initiator), 10*time.Second)
		sresp, err := cl.Send(sctx, &macpv1.SendRequest{Envelope: env})
		cancel()
		sent++
		if err != nil || !sresp.GetAck().GetOk() {
			t.Errorf("session %s (recovered, %d envelopes): %s after recovery refused: %v %v", sid, len(hist), env.GetMessageType(), err, sresp.GetAck().GetError())
			continue
		}
		out = append(out, loadgen.Acked{SessionID: sid, MessageID: env.GetMessageId(), Stream: "post"})
	}
	return out, sent
}
