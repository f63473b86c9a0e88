package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/metadata"
)

// Acked is one line of an acked log.
type Acked struct {
	SessionID, MessageID string
	// Stream is the sender stream within the session ("" for logs of two
	// columns: then the whole session is one stream).
	Stream string
	// Line is the 1-based line number in the log.
	Line int
}

// ReadAckedLog parses an acked log: lines of at least two tab- or
// space-separated fields, session_id and message_id, then optionally the
// stream; further fields are ignored, as are blank lines and lines
// starting with '#'. A last line without its newline (a log cut short) is
// parsed too.
func ReadAckedLog(r io.Reader) ([]Acked, error) {
	var out []Acked
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want session_id and message_id, got %q", n, line)
		}
		a := Acked{SessionID: f[0], MessageID: f[1], Line: n}
		if len(f) > 2 {
			a.Stream = f[2]
		}
		out = append(out, a)
	}
	return out, sc.Err()
}

// HistoryReader reads a session's accepted history, in acceptance order.
type HistoryReader interface {
	History(ctx context.Context, sessionID string) ([]*macpv1.Envelope, error)
}

// ProblemKind classifies a Problem.
type ProblemKind string

// Problem kinds.
const (
	Missing    ProblemKind = "missing"      // acked, not in history
	Duplicated ProblemKind = "duplicated"   // acked, in history more than once
	OutOfOrder ProblemKind = "out-of-order" // history order differs from ack order
	NoSession  ProblemKind = "no-session"   // the session does not exist
	ReadFailed ProblemKind = "read-failed"  // the session's history could not be read
)

// Problem is one finding of Check.
type Problem struct {
	Kind                 ProblemKind
	SessionID, MessageID string
	Detail               string
}

func (p Problem) String() string {
	if p.MessageID == "" {
		return fmt.Sprintf("%s session %s: %s", p.Kind, p.SessionID, p.Detail)
	}
	return fmt.Sprintf("%s session %s message %s: %s", p.Kind, p.SessionID, p.MessageID, p.Detail)
}

// Report sums up Check.
type Report struct {
	// Sessions is the number of distinct sessions in the log.
	Sessions int
	// Checked counts distinct acked (session, message) pairs.
	Checked, Missing, Duplicated, OutOfOrder int
	// Unreadable counts sessions whose existence or history could not be
	// established (their messages are not counted as missing).
	Unreadable int
	Problems   []Problem
}

// OK reports whether no problem was found.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Summary is "N acked checked, N missing, N duplicated, N out of order".
func (r *Report) Summary() string {
	s := fmt.Sprintf("%d acked checked, %d missing, %d duplicated, %d out of order", r.Checked, r.Missing, r.Duplicated, r.OutOfOrder)
	if r.Unreadable > 0 {
		s += fmt.Sprintf(", %d session(s) unreadable", r.Unreadable)
	}
	return s
}

// CheckHistory checks one session's acked entries (in log order) against
// its history: every acked message_id must appear exactly once, and within
// each stream the acked order must be a subsequence of the history order.
// Entries repeating an earlier entry's message_id (a duplicate Ack) are
// checked once, at their first position. It returns the problems found and
// the number of distinct message ids checked.
func CheckHistory(sessionID string, acked []Acked, history []*macpv1.Envelope) ([]Problem, int) {
	pos := make(map[string]int, len(history)) // first position
	count := make(map[string]int, len(history))
	for i, env := range history {
		id := env.GetMessageId()
		if _, ok := pos[id]; !ok {
			pos[id] = i
		}
		count[id]++
	}
	var problems []Problem
	seen := make(map[string]bool, len(acked))
	type last struct {
		pos int
		id  string
		ok  bool
	}
	streams := map[string]last{}
	for _, a := range acked {
		if seen[a.MessageID] {
			continue
		}
		seen[a.MessageID] = true
		p, ok := pos[a.MessageID]
		if !ok {
			problems = append(problems, Problem{Missing, sessionID, a.MessageID,
				fmt.Sprintf("acked (log line %d) but not in the session's history of %d envelope(s)", a.Line, len(history))})
			continue
		}
		if n := count[a.MessageID]; n > 1 {
			problems = append(problems, Problem{Duplicated, sessionID, a.MessageID,
				fmt.Sprintf("appears %d times in history", n)})
		}
		prev := streams[a.Stream]
		if prev.ok && p < prev.pos {
			problems = append(problems, Problem{OutOfOrder, sessionID, a.MessageID,
				fmt.Sprintf("acked after %s (log line %d) but precedes it in history (position %d < %d)", prev.id, a.Line, p+1, prev.pos+1)})
			continue // keep the later high-water mark
		}
		streams[a.Stream] = last{p, a.MessageID, true}
	}
	return problems, len(seen)
}

// Checker verifies an acked log against a runtime.
type Checker struct {
	History HistoryReader
	// Exists, if set, is asked first whether the session exists; an error
	// wrapping ErrNoSession marks all its messages missing.
	Exists func(ctx context.Context, sessionID string) error
	// Parallel is the number of sessions checked at once (default 8).
	Parallel int
}

// ErrNoSession reports that a session does not exist.
var ErrNoSession = errors.New("session not found")

// Check verifies acked (in log order) session by session.
func (c Checker) Check(ctx context.Context, acked []Acked) *Report {
	var order []string
	bySession := map[string][]Acked{}
	for _, a := range acked {
		if _, ok := bySession[a.SessionID]; !ok {
			order = append(order, a.SessionID)
		}
		bySession[a.SessionID] = append(bySession[a.SessionID], a)
	}
	type result struct {
		problems   []Problem
		checked    int
		unreadable bool
	}
	results := make([]result, len(order))
	par := c.Parallel
	if par <= 0 {
		par = 8
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, sid := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			entries := bySession[sid]
			distinct := 0
			seen := map[string]bool{}
			for _, a := range entries {
				if !seen[a.MessageID] {
					seen[a.MessageID] = true
					distinct++
				}
			}
			if c.Exists != nil {
				if err := c.Exists(ctx, sid); err != nil {
					if errors.Is(err, ErrNoSession) {
						ps := []Problem{{NoSession, sid, "", err.Error()}}
						for _, a := range entries {
							if seen[a.MessageID] {
								delete(seen, a.MessageID)
								ps = append(ps, Problem{Missing, sid, a.MessageID, fmt.Sprintf("acked (log line %d) but the session does not exist", a.Line)})
							}
						}
						results[i] = result{problems: ps, checked: distinct}
						return
					}
					results[i] = result{problems: []Problem{{ReadFailed, sid, "", "GetSession: " + err.Error()}}, checked: distinct, unreadable: true}
					return
				}
			}
			hist, err := c.History.History(ctx, sid)
			if err != nil {
				results[i] = result{problems: []Problem{{ReadFailed, sid, "", "history: " + err.Error()}}, checked: distinct, unreadable: true}
				return
			}
			ps, n := CheckHistory(sid, entries, hist)
			results[i] = result{problems: ps, checked: n}
		}()
	}
	wg.Wait()
	rep := &Report{Sessions: len(order)}
	for _, r := range results {
		rep.Checked += r.checked
		if r.unreadable {
			rep.Unreadable++
		}
		for _, p := range r.problems {
			switch p.Kind {
			case Missing:
				rep.Missing++
			case Duplicated:
				rep.Duplicated++
			case OutOfOrder:
				rep.OutOfOrder++
			}
		}
		rep.Problems = append(rep.Problems, r.problems...)
	}
	return rep
}

// StreamHistory reads a session's history with a StreamSession passive
// subscription (RFC-MACP-0006 §3.2): one StreamSessionRequest with
// subscribe_session_id and after_sequence 0, then the session's envelopes
// until the server ends the stream, a terminal envelope arrives, or none
// of the session's envelopes arrives for Idle. Envelopes of no or another
// session (heartbeat Signals) are skipped.
type StreamHistory struct {
	Client macpv1.MACPRuntimeServiceClient
	// Identity is the dev bearer identity subscribing (the initiator or a
	// participant may read the session); "" sends no authorization.
	Identity string
	// Idle ends the read when no envelope arrived for this long (default
	// 500ms). The first envelope is awaited up to FirstWait (default 10s).
	Idle, FirstWait time.Duration
	// Terminal reports a message type after which nothing more can be
	// accepted (default: Commitment).
	Terminal func(messageType string) bool
}

// History implements HistoryReader.
func (s StreamHistory) History(ctx context.Context, sessionID string) ([]*macpv1.Envelope, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.Identity != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.Identity)
	}
	idle, first := s.Idle, s.FirstWait
	if idle <= 0 {
		idle = 500 * time.Millisecond
	}
	if first <= 0 {
		first = 10 * time.Second
	}
	terminal := s.Terminal
	if terminal == nil {
		terminal = func(t string) bool { return t == "Commitment" }
	}
	stream, err := s.Client.StreamSession(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sessionID, AfterSequence: 0}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	type frame struct {
		r   *macpv1.StreamSessionResponse
		err error
	}
	frames := make(chan frame, 64)
	go func() {
		for {
			r, err := stream.Recv()
			select {
			case frames <- frame{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var envs []*macpv1.Envelope
	timer := time.NewTimer(first)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return envs, nil
		case f := <-frames:
			switch {
			case errors.Is(f.err, io.EOF):
				return envs, nil
			case f.err != nil:
				return nil, f.err
			case f.r.GetError() != nil:
				e := f.r.GetError()
				return nil, fmt.Errorf("%s: %s", e.GetCode(), e.GetMessage())
			}
			env := f.r.GetEnvelope()
			// Only the session's own envelopes are history: ambient
			// frames on the stream (macpd's heartbeat Signals carry no
			// session id) neither count nor keep the read alive.
			if env == nil || env.GetSessionId() != sessionID {
				continue
			}
			envs = append(envs, env)
			if terminal(env.GetMessageType()) {
				return envs, nil
			}
			timer.Reset(idle)
		}
	}
}
