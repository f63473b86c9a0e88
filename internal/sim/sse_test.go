package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/httpapi"
	"github.com/macpd/macpd/internal/session"
)

// SSE feeds (docs/simulation.md "SSE feeds"): simulated clients stream a
// session's envelopes over the real HTTP listener's SSE route
// (GET /macp/session/{id}/events, internal/httpapi sse.go), each feed on
// its own in-memory connection (memnet_test.go), so every event id, the
// resume from Last-Event-ID or ?after_sequence=, the 204 of a terminal
// session with nothing left, the end event and the superseded event are
// the product's. The seed draws: open a feed (no cursor), stall its
// connection (the client stops reading: the server's writer backs up
// once the connection's buffers are full), let it read again, drop it,
// resume a feed that ended or was dropped (from the last event id it
// received, another id it received, 0, or beyond the end: "live from
// now"), and open a second feed live (from the latest id of a feed that
// is still live; SSE feeds do not supersede each other). A session/resume
// of the same caller over WebSocket (attach_test.go) supersedes a live
// feed: it must end with event "superseded".
//
// What the trace records is a function of the seed after quiescence:
// each request's answer (status, the X-MACP-Resume-After and
// X-MACP-Session-Sequence headers), each feed's last event id and count
// at a drop or an end. A feed superseded while its client was stalled is
// the exception: which of its end and its supersession it reports, and
// how many envelopes came before, depends on the scheduler (the handler
// was blocked in a write when the supersession cancelled it), so its
// counts are never traced and its ids never become a cursor; what it
// received is checked all the same.

// sseBufCap is the capacity of an SSE connection's buffer towards its
// client: smaller than one envelope event, so that a stalled client backs
// the handler's writes up at its first event (the WebSocket connections
// keep memBufCap: their writer has its own queue behind it).
const sseBufCap = 256

// sseEvent is one dispatched event as the client parsed it.
type sseEvent struct {
	name   string // "" (an envelope), "end", "superseded", "error", or "bad: ..."
	id     uint64
	hasID  bool
	msgID  string
	last   uint64 // last_sequence (end, superseded)
	reason string // superseded
	raw    string // data, for the report
}

// sseFeed is one SSE response of status 200 and what its client got.
type sseFeed struct {
	n      int
	s      *simSession
	who    coord.Identity
	mc     *memConn // the client's end
	body   io.ReadCloser
	cursor string // the cursor sent ("none" or N)
	from   uint64 // X-MACP-Resume-After: every id is above it

	mu    sync.Mutex
	evs   []sseEvent // in arrival order (guarded by mu)
	retry bool       // the retry field came before any event (guarded by mu)

	checked                        int
	lastID                         uint64 // last envelope id checked (or from)
	envs                           int
	ended                          string // "end" or "superseded" once checked
	superseded, murky              bool   // murky: superseded while stalled (see above)
	stalled, dropped, dead, logged bool
}

// sseStats counts what the SSE feeds exercised (the run's last line).
type sseStats struct {
	feeds, resumed, fromZero, beyond, noContent, refused, superseded, murky, stalls int
}

func (s sseStats) String() string {
	return fmt.Sprintf("%d SSE feeds: %d resumed (%d from 0, %d beyond the end), %d answered 204, %d refused, %d superseded, %d superseded while stalled, %d stalls",
		s.feeds, s.resumed, s.fromZero, s.beyond, s.noContent, s.refused, s.superseded, s.murky, s.stalls)
}

// live: f may still receive something the checks wait for.
func (f *sseFeed) live() bool { return !f.dead && !f.dropped && f.ended == "" }

func (f *sseFeed) pending() bool {
	if f.live() {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checked < len(f.evs)
}

// actSSE is the SSE feeds' step: the seed picks one of their actions.
func (w *world) actSSE() {
	switch n := w.pick(20); {
	case n < 5:
		w.sseNew()
	case n < 9:
		w.sseStall()
	case n < 12:
		w.sseUnstall()
	case n < 14:
		w.sseDrop()
	case n < 18:
		w.sseResume(false)
	default:
		w.sseResume(true)
	}
}

func (w *world) sseNew() *sseFeed {
	s := w.openSession()
	if s == nil || w.chance(15) {
		s = w.anySession()
	}
	if s == nil {
		return nil
	}
	who := w.attachWho(s)
	return w.openFeed(s, who, "none")
}

// sseResume opens a feed of the session and caller of an earlier one:
// live false, of one that ended or was dropped, from the last id it
// received, another id it received, 0 or beyond the end; live true, of
// one still live, from the latest id it received (both stay live).
func (w *world) sseResume(live bool) {
	var cands []*sseFeed
	ended := w.chance(40) // often one whose session ended (204, or the rest and the end)
	for _, f := range w.feeds {
		if f.murky || f.stalled && !f.dropped {
			continue
		}
		if f.live() == live && (live || ended || !f.s.terminal) {
			cands = append(cands, f)
		}
	}
	if len(cands) == 0 {
		w.sseNew()
		return
	}
	f := cands[w.pick(len(cands))]
	ids := []uint64{}
	f.mu.Lock()
	for _, e := range f.evs[:f.checked] {
		if e.name == "" {
			ids = append(ids, e.id)
		}
	}
	f.mu.Unlock()
	latest := f.from
	if len(ids) > 0 {
		latest = slices.Max(ids)
	}
	cursor := latest
	if !live {
		switch n := w.pick(10); {
		case n < 5:
		case n < 8:
			if len(ids) > 0 {
				cursor = ids[w.pick(len(ids))]
			}
		case n < 9:
			cursor = 0
			w.sseStats.fromZero++
		default:
			cursor = uint64(len(w.history(f.s.id))) + 1 + uint64(w.pick(3))
			w.sseStats.beyond++
		}
	}
	what := "resume"
	if live {
		what = "second live feed of"
	}
	w.logf("sse %s s%d (%s by %s) from %d", what, f.n, f.s.id, f.who.Sender, cursor)
	w.sseStats.resumed++
	w.openFeed(f.s, f.who, strconv.FormatUint(cursor, 10))
}

// openFeed requests the SSE feed of s as who after cursor ("none" or N),
// sent as Last-Event-ID, ?after_sequence=, or both (equal, or, drawn
// rarely, different: refused), checks the answer and records the feed.
func (w *world) openFeed(s *simSession, who coord.Identity, cursor string) *sseFeed {
	how := "header"
	if cursor != "none" {
		switch n := w.pick(20); {
		case n < 10:
		case n < 16:
			how = "query"
		case n < 19:
			how = "both"
		default:
			how = "both, different"
		}
	}
	view := w.chance(20)
	q := url.Values{}
	if view {
		q.Set("payload", "json")
	}
	after := uint64(0)
	hdr := ""
	if cursor != "none" {
		after, _ = strconv.ParseUint(cursor, 10, 64)
		switch how {
		case "header":
			hdr = cursor
		case "query":
			q.Set("after_sequence", cursor)
		case "both":
			hdr = cursor
			q.Set("after_sequence", cursor)
		default:
			hdr = cursor
			q.Set("after_sequence", strconv.FormatUint(after+1, 10))
		}
	}
	u := "http://sim/macp/session/" + s.id + "/events"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var mc *memConn
	lis := w.api.lis
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
		c, err := lis.dial(ctx, n, a)
		if err == nil {
			mc = c.(*memConn)
			mc.rx.set(func(m *memBuf) { m.limit = sseBufCap })
		}
		return c, err
	}}}
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+who.Sender)
	if hdr != "" {
		req.Header.Set("Last-Event-ID", hdr)
	}
	type answer struct {
		r   *http.Response
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		r, err := hc.Do(req)
		ch <- answer{r, err}
	}()
	var resp *http.Response
	select {
	case a := <-ch:
		if a.err != nil {
			w.fail("SSE request of %s as %s: %v", s.id, who.Sender, a.err)
		}
		resp = a.r
	case <-waitCh():
		w.fail("SSE request of %s as %s after %s: no response", s.id, who.Sender, cursor)
	}
	desc := fmt.Sprintf("%s by %s after %s (%s)", s.id, who.Sender, cursor, how)
	if view {
		desc += " json"
	}
	hist := w.history(s.id)
	last := uint64(len(hist))
	over := last > 0 && hist[last-1].Status.Terminal()
	refuse := !mayRead(hist, who) || how == "both, different"
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = mc.Close()
		var me struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(b, &me)
		w.logf("sse %s -> %d %s", desc, resp.StatusCode, me.Code)
		switch {
		case resp.StatusCode == http.StatusNoContent:
			w.sseStats.noContent++
			if refuse || !over || after < last {
				w.fail("SSE feed %s answered 204; the session has %d records (%s), ended %v", desc, last, kinds(hist), over)
			}
			if len(b) > 0 {
				w.fail("SSE feed %s answered 204 with a body: %.200s", desc, b)
			}
		case !refuse:
			w.fail("SSE feed %s refused (%d %s): %.200s", desc, resp.StatusCode, me.Code, b)
		case how == "both, different" && mayRead(hist, who) && me.Code != string(coord.CodeInvalidEnvelope):
			w.fail("SSE feed %s with Last-Event-ID and after_sequence disagreeing: %d %s, want INVALID_ENVELOPE", desc, resp.StatusCode, me.Code)
		default:
			w.sseStats.refused++
		}
		return nil
	}
	if refuse || over && after >= last {
		_ = resp.Body.Close()
		_ = mc.Close()
		w.fail("SSE feed %s answered 200; the session has %d records (%s), ended %v", desc, last, kinds(hist), over)
	}
	from, err1 := strconv.ParseUint(resp.Header.Get(httpapi.HeaderResumeAfter), 10, 64)
	seq, err2 := strconv.ParseUint(resp.Header.Get(httpapi.HeaderSessionSeq), 10, 64)
	if err1 != nil || err2 != nil || seq != last || from != liveFrom(hist, after, w.clk.NowMs()) || resp.Header.Get("Content-Type") != "text/event-stream" {
		_ = resp.Body.Close()
		_ = mc.Close()
		w.fail("SSE feed %s: headers %v, the session has %d records", desc, resp.Header, last)
	}
	f := &sseFeed{n: len(w.feeds) + 1, s: s, who: who, mc: mc, body: resp.Body, cursor: cursor, from: from, lastID: from}
	w.feeds = append(w.feeds, f)
	w.sseStats.feeds++
	w.logf("sse s%d %s -> 200 from %d (session at %d)", f.n, desc, from, seq)
	go f.read()
	w.settleFeed(f, hist)
	return f
}

// mayRead: who may read the session of hist: the observer, its
// initiator and its participants, as its stored SessionStart names them
// (a start resent for an existing id may have been stored with other
// participants than the harness drew first).
func mayRead(hist []session.Record, who coord.Identity) bool {
	if len(hist) == 0 || hist[0].Envelope == nil {
		return false
	}
	if who.Caps.IsObserver || hist[0].Envelope.Sender == who.Sender {
		return true
	}
	var pl macpv1.SessionStartPayload
	if proto.Unmarshal(hist[0].Envelope.Payload, &pl) != nil {
		return false
	}
	return slices.Contains(pl.Participants, who.Sender)
}

// liveFrom is where a feed after cursor starts (docs/resume.md): at the
// cursor, or, beyond the end of the history, "live from when the request
// arrived": after the last record accepted before that millisecond (the
// fake clock's now), so the records of the same millisecond are sent.
func liveFrom(hist []session.Record, after uint64, nowMs int64) uint64 {
	if after <= uint64(len(hist)) {
		return after
	}
	from := uint64(0)
	for _, r := range hist {
		if r.AcceptedAtMs >= nowMs {
			break
		}
		from = r.Seq
	}
	return from
}

// read is the client's EventSource: it parses the stream into events.
func (f *sseFeed) read() {
	defer f.body.Close()
	br := bufio.NewReader(f.body)
	var (
		ev   sseEvent
		data []string
		have bool
	)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if have || len(data) > 0 {
				f.dispatch(ev, strings.Join(data, "\n"))
			}
			ev, data, have = sseEvent{}, nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a keep-alive comment
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "retry":
			f.mu.Lock()
			f.retry = f.retry || len(f.evs) == 0
			f.mu.Unlock()
		case "id":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				ev.name = "bad: id " + v
			}
			ev.id, ev.hasID, have = n, true, true
		case "event":
			if !strings.HasPrefix(ev.name, "bad") {
				ev.name = v
			}
			have = true
		case "data":
			data = append(data, v)
		default:
			ev.name, have = "bad: field "+k, true
		}
	}
}

func (f *sseFeed) dispatch(ev sseEvent, data string) {
	ev.raw = data
	switch ev.name {
	case "":
		var e struct {
			MessageID  string `json:"messageId"`
			MessageID2 string `json:"message_id"`
		}
		if !ev.hasID || json.Unmarshal([]byte(data), &e) != nil {
			ev.name = "bad: envelope event"
		}
		ev.msgID = e.MessageID + e.MessageID2
	case "end", "superseded":
		var p struct {
			Last   *uint64 `json:"last_sequence"`
			Reason string  `json:"reason"`
		}
		if ev.hasID || json.Unmarshal([]byte(data), &p) != nil || p.Last == nil {
			ev.name = "bad: " + ev.name
		} else {
			ev.last, ev.reason = *p.Last, p.Reason
		}
	}
	f.mu.Lock()
	f.evs = append(f.evs, ev)
	f.mu.Unlock()
}

func (w *world) pickFeed(ok func(*sseFeed) bool) *sseFeed {
	var cands []*sseFeed
	for _, f := range w.feeds {
		if !f.dead && !f.dropped && ok(f) {
			cands = append(cands, f)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.pick(len(cands))]
}

func (w *world) sseStall() {
	f := w.pickFeed(func(f *sseFeed) bool { return !f.stalled && f.live() })
	if f == nil {
		// None to stall: open one (mostly of a live session) and stall
		// it once it has everything.
		if f = w.sseNew(); f == nil || !f.live() {
			return
		}
	}
	f.stalled = true
	f.mc.stall(true)
	w.sseStats.stalls++
	w.logf("sse stall s%d", f.n)
}

func (w *world) sseUnstall() {
	f := w.pickFeed(func(f *sseFeed) bool { return f.stalled })
	if f == nil {
		w.sseStall()
		return
	}
	f.stalled = false
	f.mc.stall(false)
	w.logf("sse unstall s%d", f.n)
}

func (w *world) sseDrop() {
	f := w.pickFeed(func(*sseFeed) bool { return true })
	if f == nil {
		w.sseNew()
		return
	}
	stalled := ""
	if f.stalled {
		stalled = " (stalled)"
	}
	f.drop()
	if f.murky {
		w.logf("sse drop s%d%s", f.n, stalled)
		return
	}
	w.logf("sse drop s%d%s: events through %d (%d)", f.n, stalled, f.lastID, f.envs)
}

func (f *sseFeed) drop() {
	if f.dropped {
		return
	}
	f.dropped = true
	_ = f.mc.Close()
	_ = f.body.Close()
}

// hasLiveFeed: who has a feed of s that a session/resume would supersede.
func (w *world) hasLiveFeed(s *simSession, who coord.Identity) bool {
	for _, f := range w.feeds {
		if f.s == s && f.who.Sender == who.Sender && f.live() {
			return true
		}
	}
	return false
}

// supersedeFeeds marks who's live feeds of s superseded (a session/resume
// of who to s was accepted).
func (w *world) supersedeFeeds(s *simSession, who coord.Identity) {
	for _, f := range w.feeds {
		if f.s == s && f.who.Sender == who.Sender && f.live() && !f.superseded {
			f.superseded, f.murky = true, f.stalled
			if f.murky {
				w.sseStats.murky++
			}
		}
	}
}

// settleFeeds waits for every live feed whose connection reads to have
// everything (settleFeed) and checks every feed's events.
func (w *world) settleFeeds() {
	hists := make(map[string][]session.Record)
	for _, f := range w.feeds {
		if !f.pending() {
			continue
		}
		h, ok := hists[f.s.id]
		if !ok {
			h = w.history(f.s.id)
			hists[f.s.id] = h
		}
		w.settleFeed(f, h)
	}
}

// settleFeed waits until f has everything it must have by now (unless
// its connection is stalled or gone): if superseded, the superseded
// event; if its session ended, every envelope and then the end event;
// otherwise every envelope of the history after its start. Then it
// checks what came.
func (w *world) settleFeed(f *sseFeed, hist []session.Record) {
	last, over, lastEnvRec := historyEnd(hist)
	if f.live() && !f.stalled {
		done := func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			w.scanFeed(f, hist, false)
			if f.superseded || over {
				return f.ended != ""
			}
			return f.lastID >= lastEnvRec
		}
		if !wait(done) {
			f.mu.Lock()
			got := len(f.evs)
			f.mu.Unlock()
			w.fail("SSE feed s%d of %s stuck: events through %d of %d records (last with an envelope %d), %d events, ended %q, superseded %v",
				f.n, f.s.id, f.lastID, last, lastEnvRec, got, f.ended, f.superseded)
		}
	}
	f.mu.Lock()
	w.scanFeed(f, hist, true)
	f.mu.Unlock()
	if f.ended != "" && !f.logged {
		f.logged = true
		if f.murky {
			w.logf("  s%d of %s: ended, superseded while stalled", f.n, f.s.id)
			return
		}
		if f.ended == "superseded" {
			w.sseStats.superseded++
		}
		w.logf("  s%d of %s: %s, events through %d (%d)", f.n, f.s.id, f.ended, f.lastID, f.envs)
	}
}

// scanFeed checks f's events not checked yet (f.mu held), in arrival
// order: the retry field first; each envelope event's id above the one
// before it (and above the cursor), the history's record with that
// sequence number, the next record with an envelope after the previous
// one (no gap, no duplicate); end only once the session ended, after
// every envelope, with last_sequence the last id sent; superseded only
// after a session/resume of the same caller, with last_sequence the last
// id sent; nothing after either. With final false, an event that needs
// a history the harness has not read yet is left for the final scan.
func (w *world) scanFeed(f *sseFeed, hist []session.Record, final bool) {
	for f.checked < len(f.evs) {
		e := f.evs[f.checked]
		if !f.retry {
			w.failFeed(f, "an event before the retry field")
		}
		if f.ended != "" {
			w.failFeed(f, "%s after %s", describeSSE(e), f.ended)
		}
		switch e.name {
		case "":
			if e.id <= f.lastID {
				w.failFeed(f, "event id %d after %d (not unique and increasing; resumed after %s, from %d)", e.id, f.lastID, f.cursor, f.from)
			}
			if e.id > uint64(len(hist)) {
				if !final {
					return
				}
				w.failFeed(f, "event %d beyond the history's %d records", e.id, len(hist))
			}
			if k := firstEnvelope(hist, f.lastID, e.id-1); k > 0 {
				w.failFeed(f, "event %d, but envelope %d (after %d, the last it got) never came: a gap", e.id, k, f.lastID)
			}
			if r := hist[e.id-1]; r.Envelope == nil || r.Envelope.MessageId != e.msgID {
				w.failFeed(f, "event %d (%s), the history's record %d is %s", e.id, e.msgID, e.id, recKey(r))
			}
			f.lastID = e.id
			f.envs++
		case "end":
			if len(hist) == 0 || !hist[len(hist)-1].Status.Terminal() {
				if !final {
					return
				}
				w.failFeed(f, "end, but the session has not ended (%s)", kinds(hist))
			}
			if f.superseded && !f.murky {
				w.failFeed(f, "end after a session/resume of %s superseded it", f.who.Sender)
			}
			if e.last != f.lastID {
				w.failFeed(f, "end with last_sequence %d, the last event id it sent is %d", e.last, f.lastID)
			}
			if k := firstEnvelope(hist, f.lastID, uint64(len(hist))); k > 0 {
				w.failFeed(f, "end, but envelope %d never came", k)
			}
			f.ended = "end"
		case "superseded":
			if !f.superseded {
				w.failFeed(f, "superseded, but no session/resume of %s to %s", f.who.Sender, f.s.id)
			}
			if e.last != f.lastID || e.reason == "" {
				w.failFeed(f, "superseded with last_sequence %d and reason %q, the last event id it sent is %d", e.last, e.reason, f.lastID)
			}
			f.ended = "superseded"
		default:
			w.failFeed(f, "%s", describeSSE(e))
		}
		f.checked++
	}
}

func describeSSE(e sseEvent) string {
	switch e.name {
	case "":
		return fmt.Sprintf("event %d", e.id)
	case "end", "superseded":
		return e.name
	}
	return fmt.Sprintf("event %q: %.200s", e.name, e.raw)
}

// failFeed fails with f's context (f.mu held by the caller).
func (w *world) failFeed(f *sseFeed, format string, args ...any) {
	var got []string
	for _, e := range f.evs {
		if e.name == "" {
			got = append(got, strconv.FormatUint(e.id, 10))
		} else {
			got = append(got, strings.SplitN(e.name, ":", 2)[0])
		}
	}
	w.fail("SSE feed s%d of %s by %s (after %s, from %d): %s; received %s", f.n, f.s.id, f.who.Sender, f.cursor, f.from, fmt.Sprintf(format, args...), strings.Join(got, " "))
}

// recheckFeeds compares what every feed received with the store after a
// crash (and at the end): it was sent only once durable.
func (w *world) recheckFeeds() {
	for _, f := range w.feeds {
		hist := w.history(f.s.id)
		f.mu.Lock()
		for _, e := range f.evs[:f.checked] {
			if e.name != "" {
				continue
			}
			if e.id > uint64(len(hist)) || hist[e.id-1].Envelope == nil || hist[e.id-1].Envelope.MessageId != e.msgID {
				w.failFeed(f, "event %d (%s) it received is not the history's after the crash", e.id, e.msgID)
			}
		}
		f.mu.Unlock()
	}
}
