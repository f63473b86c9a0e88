package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/httpapi"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/wire"
)

// Protocol-mode attachments (issue 32; docs/simulation.md "Attachments"):
// simulated clients open WebSocket connections to the real HTTP listener
// (httpapi.Server's handler, served by net/http over the in-memory network
// of memnet_test.go) and attach to sessions with session/resume, so every
// sessionEventId, envelope notification, state notification (N.5),
// catch-up, replay-window cut, supersession (notifications/macp/detached)
// and end notification they get is produced by the product's attachment
// code (internal/httpapi resume.go, ws_session.go, ws.go, wsbatch.go,
// feedwindow.go) over the runtime's Follow. The seed draws: attach (no
// cursor), stall a connection (its client stops reading), let it read
// again, drop it, resume from a received notification's id (an envelope's
// N or a state notification's N.5) on a new or another connection, and
// reattach live (the same caller on another connection supersedes the
// live attachment).
//
// What the trace records is what is a function of the seed after
// quiescence: each request's answer (catchup, from), the envelope
// notifications an attachment received (their count and last id), its end
// or detachment. Which intermediate state notifications are sent is not:
// states are coalesced, so whether the state after record N is sent
// before record N+1 is delivered depends on the scheduler. They are
// checked as invariants, never traced.

// replayWindow is the listener's session/resume replay window: small, so
// that resumes from an early cursor of a long session are cut (catchup
// false) while most are not.
const replayWindow = 4

// simAuth authenticates the bearer token as the identity of that sender
// (the observer keeps its capability).
type simAuth struct{}

func (simAuth) Authenticate(_ context.Context, c *auth.Credentials) (coord.Identity, error) {
	tok := c.BearerToken()
	for _, id := range append(append(append([]coord.Identity{}, initiators...), agents...), outsider, observer) {
		if id.Sender == tok {
			return id, nil
		}
	}
	return coord.Identity{}, auth.ErrNoCredentials
}

// api is the HTTP listener of one process (replaced at every crash).
type api struct {
	srv  *httpapi.Server
	hs   *http.Server
	lis  *memListener
	wg   sync.WaitGroup // handlers in flight (a WebSocket handler runs as long as its connection)
	done chan struct{}
}

func (w *world) startAPI() {
	a := &api{lis: newMemListener(), done: make(chan struct{})}
	a.srv = httpapi.New(w.rt, simAuth{}, httpapi.Options{
		Hosts: []string{"sim"},
		// No wall-clock timeout may decide anything: a ping or a write
		// timeout would end a stalled client's connection after a
		// duration of the wall clock.
		KeepAlive: 1_000_000 * time.Hour, WriteTimeout: 1_000_000 * time.Hour,
		ReplayWindow: replayWindow, Registry: w.reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	h := a.srv.Handler()
	a.hs = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		a.wg.Add(1)
		defer a.wg.Done()
		h.ServeHTTP(rw, r)
	}), ErrorLog: nil}
	go func() { defer close(a.done); _ = a.hs.Serve(a.lis) }()
	w.api = a
}

// stopAPI ends the listener with the process: the clients' connections
// close first (nothing more is received), then the server's ends, and
// every handler returns.
func (w *world) stopAPI() {
	if w.api == nil {
		return
	}
	for _, c := range w.conns {
		c.drop()
	}
	for _, f := range w.feeds {
		f.drop()
	}
	a := w.api
	_ = a.lis.Close()
	_ = a.hs.Close()
	<-a.done
	ok := make(chan struct{})
	go func() { a.wg.Wait(); close(ok) }()
	select {
	case <-ok:
	case <-waitCh():
		panic(failure{"HTTP handlers did not return"})
	}
	w.api = nil
	for _, at := range w.atts {
		at.dead = true
	}
	for _, f := range w.feeds {
		f.dead = true
	}
}

// attStats counts what the attachments exercised (the run's last line).
type attStats struct{ fromEnvelope, fromState, cut, detached, stalls int }

func (s attStats) String() string {
	return fmt.Sprintf("%d resumed from an envelope's id, %d from a state id, %d cut by the replay window, %d superseded, %d stalls",
		s.fromEnvelope, s.fromState, s.cut, s.detached, s.stalls)
}

// note is one session-scoped notification as an attachment received it.
type note struct {
	method string
	key    uint64 // sessionEventId N as 2N, N.5 as 2N+1 (0 for end/detached/error)
	msgID  string // an envelope's message id
	md     any    // a state notification's metadata (decoded JSON)
	last   uint64 // lastSequence (end) or lastSessionEventId (detached)
	code   string // an error notification's MACP code
}

func idString(key uint64) string {
	if key%2 == 1 {
		return fmt.Sprintf("%d.5", key/2)
	}
	return strconv.FormatUint(key/2, 10)
}

// simConn is one client WebSocket connection to the listener.
type simConn struct {
	n                int
	who              coord.Identity
	c                *websocket.Conn
	mc               *memConn // the client's end
	mu               sync.Mutex
	closed           bool // its reader ended
	next             int
	wait             map[string]chan rpcResp
	atts             map[string]*simAttach // by session: each session at most once per connection
	stalled, dropped bool
	stray            []string // messages no attachment accounts for (guarded by mu)
}

type rpcResp struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// simAttach is one attachment (one session/resume accepted).
type simAttach struct {
	n                int
	s                *simSession
	who              coord.Identity
	conn             *simConn
	cursor           string // lastSessionEventId sent ("none", N or N.5)
	startKey         uint64 // every id it gets is above this
	startSeq         uint64 // envelopes from startSeq+1 on
	known            any    // the state the client knows (from the cursor's state notification, then received)
	knownSeq         uint64 // ... as of record knownSeq
	hasKnown         bool
	batch            bool
	notes            []note // guarded by conn.mu, in arrival order
	checked          int
	lastKey          uint64
	lastEnv          uint64 // last envelope's N (or startSeq)
	ended            string // "end", "detached" or "error" once received
	logged           bool
	envs             int // envelope notifications checked
	marks            []uint64
	superseded, dead bool
}

func (w *world) dialConn(who coord.Identity) *simConn {
	var mc *memConn
	lis := w.api.lis
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, n, a string) (_ net.Conn, err error) {
		c, err := lis.dial(ctx, n, a)
		if err == nil {
			mc = c.(*memConn)
		}
		return c, err
	}}}
	c, _, err := websocket.Dial(w.ctx, "ws://sim/macp/ws", &websocket.DialOptions{
		HTTPClient: hc, HTTPHeader: http.Header{"Authorization": {"Bearer " + who.Sender}},
	})
	if err != nil {
		w.fail("dial the listener as %s: %v", who.Sender, err)
	}
	c.SetReadLimit(-1)
	sc := &simConn{n: len(w.conns) + 1, who: who, c: c, mc: mc, wait: make(map[string]chan rpcResp), atts: make(map[string]*simAttach)}
	w.conns = append(w.conns, sc)
	go sc.read()
	return sc
}

// read is the client's reader: responses go to their callers,
// notifications to the attachment of their session.
func (sc *simConn) read() {
	defer func() {
		sc.mu.Lock()
		sc.closed = true
		for _, ch := range sc.wait {
			close(ch)
		}
		sc.wait = map[string]chan rpcResp{}
		sc.mu.Unlock()
	}()
	for {
		_, b, err := sc.c.Read(context.Background())
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(b, &m) != nil {
			sc.protocolError("not JSON: %.200s", b)
			return
		}
		if len(m.ID) > 0 {
			var r rpcResp
			_ = json.Unmarshal(b, &r)
			sc.mu.Lock()
			ch := sc.wait[string(m.ID)]
			delete(sc.wait, string(m.ID))
			sc.mu.Unlock()
			if ch != nil {
				ch <- r
			}
			continue
		}
		sc.notification(m.Method, m.Params, b)
	}
}

// protocolError records a message no attachment can account for; the
// next settle fails on it.
func (sc *simConn) protocolError(format string, args ...any) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.stray = append(sc.stray, fmt.Sprintf(format, args...))
}

// parseKey parses a sessionEventId: N as 2N, and N.5 (a state
// notification's only) as 2N+1. A state notification with an integer id
// gets 2N, the key of envelope N: the uniqueness check then reports it.
func parseKey(raw json.RawMessage, state bool) (uint64, bool) {
	v := string(raw)
	w := strings.TrimSuffix(v, ".5")
	n, err := strconv.ParseUint(w, 10, 64)
	if err != nil || (w != v && !state) {
		return 0, false
	}
	if w != v {
		return 2*n + 1, true
	}
	return 2 * n, true
}

func (sc *simConn) notification(method string, params json.RawMessage, raw []byte) {
	var p struct {
		SessionID      string          `json:"sessionId"`
		SessionEventID json.RawMessage `json:"sessionEventId"`
		Envelope       json.RawMessage `json:"envelope"`
		Envelopes      []struct {
			SessionEventID json.RawMessage `json:"sessionEventId"`
			Envelope       json.RawMessage `json:"envelope"`
		} `json:"envelopes"`
		Metadata     json.RawMessage `json:"metadata"`
		LastSequence uint64          `json:"lastSequence"`
		LastEventID  uint64          `json:"lastSessionEventId"`
		Error        struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(params, &p) != nil {
		sc.protocolError("params of %s: %.200s", method, raw)
		return
	}
	var add []note
	bad := func() { add = append(add, note{method: fmt.Sprintf("bad: %.300s", raw)}) }
	envNote := func(id, env json.RawMessage) {
		k, ok := parseKey(id, false)
		var e struct {
			MessageID  string `json:"messageId"`
			MessageID2 string `json:"message_id"`
		}
		if !ok || json.Unmarshal(env, &e) != nil {
			bad()
			return
		}
		add = append(add, note{method: "envelope", key: k, msgID: e.MessageID + e.MessageID2})
	}
	switch method {
	case "notifications/macp/envelope":
		envNote(p.SessionEventID, p.Envelope)
	case "notifications/macp/envelopes":
		if len(p.Envelopes) == 0 {
			bad()
		}
		for _, it := range p.Envelopes {
			envNote(it.SessionEventID, it.Envelope)
		}
	case "notifications/macp/session":
		k, ok := parseKey(p.SessionEventID, true)
		var md any
		if !ok || json.Unmarshal(p.Metadata, &md) != nil {
			bad()
			break
		}
		add = append(add, note{method: "state", key: k, md: md})
	case "notifications/macp/end":
		add = append(add, note{method: "end", last: p.LastSequence})
	case "notifications/macp/detached":
		add = append(add, note{method: "detached", last: p.LastEventID})
	case "notifications/macp/error":
		add = append(add, note{method: "error", last: p.LastSequence, code: p.Error.Code})
	default:
		bad()
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	a := sc.atts[p.SessionID]
	if a == nil {
		sc.stray = append(sc.stray, fmt.Sprintf("for a session this connection is not attached to: %.300s", raw))
		return
	}
	a.notes = append(a.notes, add...)
}

// call sends one request and waits for its response (the connection
// reads: it is not stalled).
func (sc *simConn) call(method string, params any) (rpcResp, bool) {
	sc.mu.Lock()
	sc.next++
	id := strconv.Itoa(sc.next)
	ch := make(chan rpcResp, 1)
	sc.wait[id] = ch
	closed := sc.closed
	sc.mu.Unlock()
	if closed {
		return rpcResp{}, false
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": sc.next, "method": method, "params": params})
	if err := sc.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		return rpcResp{}, false
	}
	select {
	case r, ok := <-ch:
		return r, ok
	case <-waitCh():
		return rpcResp{}, false
	}
}

func (sc *simConn) drop() {
	if sc.dropped {
		return
	}
	sc.dropped = true
	_ = sc.c.CloseNow()
	_ = sc.mc.Close()
}

func (sc *simConn) stall(on bool) {
	sc.stalled = on
	sc.mc.stall(on)
}

// live reports whether a may still receive something the checks wait
// for: its connection is up and reads, and it has not ended.
func (a *simAttach) live() bool {
	return !a.dead && !a.conn.dropped && a.ended == ""
}

// attachable is a connection that reads and is up.
func (sc *simConn) attachable() bool {
	sc.mu.Lock()
	closed := sc.closed
	sc.mu.Unlock()
	return !sc.dropped && !sc.stalled && !closed
}

// actAttach is the attachments' step: the seed picks one of the
// attachment actions.
func (w *world) actAttach() {
	switch n := w.pick(20); {
	case n < 6:
		w.attachNew()
	case n < 9:
		w.stallConn()
	case n < 12:
		w.unstallConn()
	case n < 14:
		w.dropConn()
	case n < 18:
		w.resumeFromCursor(false)
	default:
		w.resumeFromCursor(true)
	}
}

// attachWho draws the caller of an attachment to s.
func (w *world) attachWho(s *simSession) coord.Identity {
	switch n := w.pick(10); {
	case n < 4:
		return observer
	case n < 6:
		return s.initiator
	case n < 9:
		return s.parts[w.pick(len(s.parts))]
	default:
		return outsider
	}
}

// connFor picks a connection of who that reads and is not attached to s
// (sometimes), or dials a new one.
func (w *world) connFor(who coord.Identity, s *simSession) *simConn {
	var cands []*simConn
	for _, c := range w.conns {
		if c.who.Sender == who.Sender && c.attachable() && c.atts[s.id] == nil {
			cands = append(cands, c)
		}
	}
	if len(cands) > 0 && w.chance(50) {
		return cands[w.pick(len(cands))]
	}
	return w.dialConn(who)
}

func (w *world) attachNew() {
	s := w.openSession() // mostly a session that is live: ended ones are refused
	if s == nil || w.chance(15) {
		s = w.anySession()
	}
	if s == nil {
		return
	}
	who := w.attachWho(s)
	w.resume(s, who, w.connFor(who, s), "none", nil)
}

// resume sends session/resume for s on conn after cursor ("none", N or
// N.5) and records the attachment it makes. prev is the attachment the
// cursor comes from (its known state, if the cursor is a state id).
func (w *world) resume(s *simSession, who coord.Identity, sc *simConn, cursor string, known *simAttach) *simAttach {
	params := map[string]any{"sessionId": s.id}
	var after, startKey uint64
	stateSeen := false
	if cursor != "none" {
		params["lastSessionEventId"] = json.Number(cursor)
		k, _ := parseKey(json.RawMessage(cursor), strings.HasSuffix(cursor, ".5"))
		after, startKey, stateSeen = k/2, k, k%2 == 1
	}
	batch := w.chance(30)
	if batch {
		params["batch"] = true
	}
	a := &simAttach{n: len(w.atts) + 1, s: s, who: who, conn: sc, cursor: cursor, batch: batch}
	// Register before the request: notifications follow the response at
	// once.
	sc.mu.Lock()
	sc.atts[s.id] = a
	sc.mu.Unlock()
	// Sometimes the attachment's catch-up is parked inside its store pass
	// (after its first record is read) while a participant's message is
	// committed: the catch-up and the live tail meet, and nothing but the
	// catch-up's records may be sent before they are (no state labelled
	// with the cursor and carrying a later state).
	var park *parkPoint
	if n := uint64(len(w.history(s.id))); n > after && n-after <= replayWindow && s.mode == decision.ModeID &&
		s.started && !s.terminal && s.status == session.Open && !w.hasLiveFeed(s, who) && w.chance(40) {
		park = newParkPoint("catch-up")
		w.pst.arm(s.id, after+1, park)
	}
	r, ok := sc.call("session/resume", params)
	if park != nil && (!ok || r.Error != nil) {
		w.pst.arm("", 0, nil) // refused: no catch-up to park
		park = nil
	}
	how := ""
	if batch {
		how = " (batch)"
	}
	if !ok {
		w.fail("session/resume of %s on c%d: no response (connection ended)", s.id, sc.n)
	}
	if r.Error != nil {
		var me struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(r.Error.Data, &me)
		w.logf("attach %s by %s on c%d after %s%s -> %d %s", s.id, who.Sender, sc.n, cursor, how, r.Error.Code, me.Code)
		sc.mu.Lock()
		delete(sc.atts, s.id)
		notes := len(a.notes)
		sc.mu.Unlock()
		if notes > 0 {
			w.fail("session/resume of %s refused, yet %d notifications came for it", s.id, notes)
		}
		return nil
	}
	var res struct {
		Resumed        bool   `json:"resumed"`
		Catchup        bool   `json:"catchup"`
		SessionEventID uint64 `json:"sessionEventId"`
	}
	if json.Unmarshal(r.Result, &res) != nil || !res.Resumed {
		w.fail("session/resume of %s: result %s", s.id, r.Result)
	}
	w.atts = append(w.atts, a)
	switch {
	case !res.Catchup:
		w.attStats.cut++
	case stateSeen:
		w.attStats.fromState++
	case cursor != "none":
		w.attStats.fromEnvelope++
	}
	// The same caller's other live attachments to s are superseded, and
	// so are its SSE feeds of s.
	for _, o := range w.atts {
		if o != a && o.s == s && o.who.Sender == who.Sender && !o.dead && o.ended == "" && !o.conn.dropped {
			o.superseded = true
		}
	}
	w.supersedeFeeds(s, who)
	hist := w.history(s.id)
	// The replay window counts records: beyond it, the attachment starts
	// at the end and nothing missed is replayed.
	cut := uint64(len(hist)) > after && uint64(len(hist))-after > replayWindow
	if res.Catchup {
		if cut || res.SessionEventID != after {
			w.fail("a%d: resumed after %s with catch-up from %d (%d records, window %d)", a.n, cursor, res.SessionEventID, len(hist), replayWindow)
		}
	} else {
		if !cut || res.SessionEventID != uint64(len(hist)) {
			w.fail("a%d: resumed after %s without catch-up, from %d (%d records, window %d)", a.n, cursor, res.SessionEventID, len(hist), replayWindow)
		}
		startKey = 2 * res.SessionEventID
		stateSeen = false
	}
	a.startKey, a.lastKey, a.startSeq, a.lastEnv = startKey, startKey, startKey/2, startKey/2
	if stateSeen && known != nil {
		a.known, a.knownSeq, a.hasKnown = known.stateAt(startKey), startKey/2, true
	}
	w.logf("attach a%d %s by %s on c%d after %s%s -> catchup %v from %d", a.n, s.id, who.Sender, sc.n, cursor, how, res.Catchup, res.SessionEventID)
	if park != nil {
		w.parkedCommit(s, park)
		hist = w.history(s.id)
	}
	w.snapshotStates()
	w.settleAttach(a, hist)
	return a
}

// parkedCommit waits for a resume's catch-up to park in its store pass,
// commits a participant's message of s meanwhile, and lets it go on.
func (w *world) parkedCommit(s *simSession, p *parkPoint) {
	select {
	case <-p.reached:
	case <-waitCh():
		w.pst.arm("", 0, nil)
		w.fail("the catch-up of a resume of %s never reached its store pass", s.id)
	}
	w.logf("catch-up of %s parked in its store pass", s.id)
	w.send(s, s.parts[w.pick(len(s.parts))], w.messageEnv(s), "parked-catch-up message")
	close(p.resume)
}

// stateAt is the metadata of a's state notification with id key.
func (a *simAttach) stateAt(key uint64) any {
	a.conn.mu.Lock()
	defer a.conn.mu.Unlock()
	for _, n := range a.notes {
		if n.method == "state" && n.key == key {
			return n.md
		}
	}
	return nil
}

func (w *world) pickConn(ok func(*simConn) bool) *simConn {
	var cands []*simConn
	for _, c := range w.conns {
		if !c.dropped && ok(c) {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.pick(len(cands))]
}

// hasLive: c carries a live attachment.
func (w *world) hasLive(c *simConn) bool {
	for _, a := range w.atts {
		if a.conn == c && a.live() {
			return true
		}
	}
	return false
}

func (w *world) stallConn() {
	c := w.pickConn(func(c *simConn) bool { return !c.stalled && w.hasLive(c) })
	if c == nil {
		w.attachNew()
		return
	}
	c.stall(true)
	w.attStats.stalls++
	w.logf("stall c%d", c.n)
}

func (w *world) unstallConn() {
	c := w.pickConn(func(c *simConn) bool { return c.stalled })
	if c == nil {
		w.attachNew()
		return
	}
	c.stall(false)
	w.logf("unstall c%d", c.n)
}

func (w *world) dropConn() {
	c := w.pickConn(func(*simConn) bool { return true })
	if c == nil {
		w.attachNew()
		return
	}
	stalled := ""
	if c.stalled {
		stalled = " (stalled)"
	}
	c.drop()
	w.logf("drop c%d%s", c.n, stalled)
	for _, a := range w.atts {
		if a.conn == c {
			w.logf("  a%d of %s had envelopes through %d (%d)", a.n, a.s.id, a.lastEnv, a.envs)
		}
	}
}

// resumeFromCursor resumes an attachment's session from the id of a
// notification it received (an envelope's N, or a state notification's
// N.5 that was the latest it had at a quiescent point), on a new
// connection or another one of the caller. live: the attachment is
// still live, and is superseded (reattach).
func (w *world) resumeFromCursor(live bool) {
	var cands []*simAttach
	ended := w.chance(15) // sometimes one whose session ended (refused)
	for _, a := range w.atts {
		if a.live() == live && !a.conn.stalled && (live || ended || !a.s.terminal) {
			cands = append(cands, a)
		}
	}
	if len(cands) == 0 {
		w.attachNew()
		return
	}
	a := cands[w.pick(len(cands))]
	var keys []uint64
	a.conn.mu.Lock()
	for _, n := range a.notes[:a.checked] {
		if n.method == "envelope" {
			keys = append(keys, n.key)
		}
	}
	a.conn.mu.Unlock()
	keys = append(keys, a.marks...)
	cursor := "none"
	if live && len(keys) > 0 {
		cursor = idString(slices.Max(keys)) // reattach live: from the latest
	} else if len(keys) > 0 {
		cursor = idString(keys[w.pick(len(keys))])
	}
	what := "resume"
	if live {
		what = "reattach"
	}
	w.logf("%s a%d (%s by %s) from %s", what, a.n, a.s.id, a.who.Sender, cursor)
	w.resume(a.s, a.who, w.connFor(a.who, a.s), cursor, a)
}

// snapshotStates records the metadata of every session at its current
// record (the state a state notification with that id must carry), when
// not recorded yet: once per record the session reached at a quiescent
// point (records committed together in one step are seen only at the
// last of them).
func (w *world) snapshotStates() {
	if w.states == nil {
		w.states = make(map[string]map[uint64]any)
	}
	for _, s := range w.sessions {
		if !s.started {
			continue
		}
		if last, ok := w.rt.LastSeq(s.id); ok {
			if _, seen := w.states[s.id][last]; seen {
				continue
			}
		}
		var seq uint64
		var b []byte
		_ = w.rt.Inspect(w.ctx, s.id, func(ss *session.Session) {
			seq = ss.Seq
			b, _ = wire.Compact(ss.Metadata())
		})
		var md any
		if b == nil || json.Unmarshal(b, &md) != nil {
			continue
		}
		m := w.states[s.id]
		if m == nil {
			m = make(map[uint64]any)
			w.states[s.id] = m
		}
		m[seq] = md
	}
}

// pending: a may still receive something, or has unchecked notifications.
func (a *simAttach) pending() bool {
	if a.live() {
		return true
	}
	a.conn.mu.Lock()
	defer a.conn.mu.Unlock()
	return a.checked < len(a.notes)
}

// settleAttachments waits for every live attachment whose connection
// reads to have everything (settleAttach) and checks every attachment's
// notifications.
func (w *world) settleAttachments() {
	for _, c := range w.conns {
		c.mu.Lock()
		stray := slices.Clone(c.stray)
		c.mu.Unlock()
		if len(stray) > 0 {
			w.fail("connection c%d of %s got a message no attachment accounts for: %s", c.n, c.who.Sender, stray[0])
		}
	}
	w.snapshotStates()
	hists := make(map[string][]session.Record)
	for _, a := range w.atts {
		if !a.pending() {
			continue
		}
		h, ok := hists[a.s.id]
		if !ok {
			h = w.history(a.s.id)
			hists[a.s.id] = h
		}
		w.settleAttach(a, h)
	}
}

// historyEnd describes a session's history: its length, whether it ended,
// and the sequence number of its last record holding an envelope (0: none).
func historyEnd(hist []session.Record) (last uint64, over bool, lastEnvRec uint64) {
	last = uint64(len(hist))
	over = last > 0 && hist[last-1].Status.Terminal()
	for i := len(hist); i > 0; i-- {
		if hist[i-1].Envelope != nil {
			return last, over, uint64(i)
		}
	}
	return last, over, 0
}

// settleAttach waits until a has everything it must get by now (unless
// its connection is stalled or gone), then checks what it got:
//
//   - superseded: the detached notification;
//   - its session ended: every envelope, then the end notification;
//   - otherwise: every envelope of the history after its start, and the
//     latest state it knows is the session's current state.
func (w *world) settleAttach(a *simAttach, hist []session.Record) {
	last, over, lastEnvRec := historyEnd(hist)
	cur := w.states[a.s.id][last]
	if a.live() && !a.conn.stalled {
		done := func() bool {
			a.conn.mu.Lock()
			defer a.conn.mu.Unlock()
			w.scan(a, hist, false)
			switch {
			case a.superseded:
				return a.ended == "detached"
			case over:
				return a.ended != ""
			}
			return (a.lastEnv >= lastEnvRec || a.startSeq >= lastEnvRec) && a.hasKnown && a.knownSeq <= last && reflect.DeepEqual(a.known, cur)
		}
		if !wait(done) {
			a.conn.mu.Lock()
			got := len(a.notes)
			a.conn.mu.Unlock()
			w.fail("attachment a%d of %s (c%d) stuck: envelopes through %d of %d records (last with an envelope %d), %d notifications, state known as of %d (current: %v), ended %q, superseded %v",
				a.n, a.s.id, a.conn.n, a.lastEnv, last, lastEnvRec, got, a.knownSeq, reflect.DeepEqual(a.known, cur), a.ended, a.superseded)
		}
		if !a.superseded && !over && a.ended == "" {
			a.marks = appendNew(a.marks, 2*a.knownSeq+1, a.hasKnown && a.knownSeq >= a.startSeq && a.knownKeyReceived())
		}
	}
	a.conn.mu.Lock()
	w.scan(a, hist, true)
	a.conn.mu.Unlock()
	if a.ended != "" && !a.logged {
		a.logged = true
		if a.ended == "detached" {
			w.attStats.detached++
		}
		w.logf("  a%d of %s: %s, envelopes through %d (%d)", a.n, a.s.id, a.ended, a.lastEnv, a.envs)
	}
}

func appendNew(s []uint64, k uint64, ok bool) []uint64 {
	if !ok || slices.Contains(s, k) {
		return s
	}
	return append(s, k)
}

// knownKeyReceived: the state the client knows came in a notification
// of this attachment (not from the cursor it resumed from).
func (a *simAttach) knownKeyReceived() bool {
	a.conn.mu.Lock()
	defer a.conn.mu.Unlock()
	for _, n := range a.notes[:a.checked] {
		if n.method == "state" && n.key == 2*a.knownSeq+1 {
			return true
		}
	}
	return false
}

// scan checks a's notifications not checked yet (conn.mu held), in
// arrival order: every session-scoped one's sessionEventId above the one
// before it (and above the cursor); each envelope N is record N of the
// history, the next record with an envelope after the previous one (no
// gap, no duplicate); each state N.5 is the session's state after record
// N (when the harness saw the session at N) and comes after every
// envelope up to N; end and detached come last, after every envelope up
// to their sequence number. With final false, a note that needs a
// history the harness has not read yet is left for the final scan.
func (w *world) scan(a *simAttach, hist []session.Record, final bool) {
	for a.checked < len(a.notes) {
		n := a.notes[a.checked]
		if a.ended != "" {
			w.failAttach(a, "%s after %s", describe(n), a.ended)
		}
		seq := n.key / 2
		switch n.method {
		case "envelope", "state":
			if n.key <= a.lastKey {
				w.failAttach(a, "sessionEventId %s after %s (not unique and increasing; resumed after %s)", idString(n.key), idString(a.lastKey), a.cursor)
			}
			if seq > uint64(len(hist)) {
				if !final {
					return
				}
				w.failAttach(a, "%s beyond the history's %d records", describe(n), len(hist))
			}
			if k := firstEnvelope(hist, a.lastEnv, seq-boolU(n.method == "envelope")); k > 0 {
				w.failAttach(a, "%s, but envelope %d (after %d, the last it got) never came: a gap", describe(n), k, a.lastEnv)
			}
			if n.method == "envelope" {
				r := hist[seq-1]
				if r.Envelope == nil || r.Envelope.MessageId != n.msgID {
					w.failAttach(a, "%s (%s), the history's record %d is %s", describe(n), n.msgID, seq, recKey(r))
				}
				a.lastEnv = seq
				a.envs++
			} else {
				if seq == 0 {
					w.failAttach(a, "state notification 0.5: there is no state before the session's first record")
				}
				if md, ok := w.states[a.s.id][seq]; ok && !reflect.DeepEqual(md, n.md) {
					w.failAttach(a, "state notification %s carries a state other than the session's after record %d", idString(n.key), seq)
				}
				a.known, a.knownSeq, a.hasKnown = n.md, seq, true
			}
			a.lastKey = n.key
		case "end", "detached":
			if n.method == "detached" && !a.superseded {
				w.failAttach(a, "detached, but no newer attachment of %s to %s", a.who.Sender, a.s.id)
			}
			if n.method == "end" && (n.last != uint64(len(hist)) || !hist[len(hist)-1].Status.Terminal()) {
				if !final {
					return
				}
				w.failAttach(a, "end at %d, the history has %d records (%s)", n.last, len(hist), kinds(hist))
			}
			if n.last < a.lastEnv {
				w.failAttach(a, "%s at %d after envelope %d", n.method, n.last, a.lastEnv)
			}
			if n.last > uint64(len(hist)) {
				if !final {
					return
				}
				w.failAttach(a, "%s at %d beyond the history's %d records", n.method, n.last, len(hist))
			}
			if k := firstEnvelope(hist, a.lastEnv, n.last); k > 0 {
				w.failAttach(a, "%s at %d, but envelope %d never came", n.method, n.last, k)
			}
			a.ended = n.method
		case "error":
			if n.code != string(coord.CodeRateLimited) {
				w.failAttach(a, "error notification %s", n.code)
			}
			a.ended = "error " + n.code
		default:
			w.failAttach(a, "%s", n.method)
		}
		a.checked++
	}
}

func boolU(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// firstEnvelope is the first record with an envelope in (from, to], 0 if
// none.
func firstEnvelope(hist []session.Record, from, to uint64) uint64 {
	for s := from + 1; s <= to && int(s) <= len(hist); s++ {
		if hist[s-1].Envelope != nil {
			return s
		}
	}
	return 0
}

func describe(n note) string {
	switch n.method {
	case "envelope", "state":
		return n.method + " notification " + idString(n.key)
	}
	return n.method
}

// failAttach fails with a's context (conn.mu held by the caller).
func (w *world) failAttach(a *simAttach, format string, args ...any) {
	var ids []string
	for _, n := range a.notes {
		if n.method == "envelope" || n.method == "state" {
			ids = append(ids, idString(n.key))
		} else {
			ids = append(ids, n.method)
		}
	}
	w.fail("attachment a%d of %s by %s (c%d, after %s): %s; received %s", a.n, a.s.id, a.who.Sender, a.conn.n, a.cursor, fmt.Sprintf(format, args...), strings.Join(ids, " "))
}

// recheckAttachments compares what every attachment received with the
// store after a crash: it was published only once durable.
func (w *world) recheckAttachments() {
	for _, a := range w.atts {
		hist := w.history(a.s.id)
		a.conn.mu.Lock()
		for _, n := range a.notes[:a.checked] {
			if n.method != "envelope" {
				continue
			}
			seq := n.key / 2
			if seq > uint64(len(hist)) || hist[seq-1].Envelope == nil || hist[seq-1].Envelope.MessageId != n.msgID {
				w.failAttach(a, "envelope %d (%s) it received is not the history's after the crash", seq, n.msgID)
			}
		}
		a.conn.mu.Unlock()
	}
}
