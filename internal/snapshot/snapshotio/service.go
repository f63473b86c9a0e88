package snapshotio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/store"
)

// Query selects the profile and window of a state-window request.
type Query struct {
	Profile   snapshot.Class // ProfileDefault when empty
	DecayRuns int            // 0: session window
	// Viewer is the caller; a cross_session_decay window lists only the
	// sessions it may observe.
	Viewer snapshot.Viewer
}

// ServiceOptions configure a Service.
type ServiceOptions struct {
	// EventSource and ServerID form the session key (MACP_EVENT_SOURCE,
	// MACP_SERVER_ID); both required.
	EventSource, ServerID string
	// Dir, if set, is the snapshot directory (MACP_SNAPSHOT_DIR) Payload
	// also looks in (payloads/sha256-<hex>.json).
	Dir string
	// CacheBytes bounds the payloads kept in memory for Payload (default
	// 32 MiB); the oldest go first.
	CacheBytes int
}

// Service computes reports and serves payloads of a running server's
// sessions. Safe for concurrent use.
type Service struct {
	src  Source
	opts ServiceOptions

	idx *startIndex // SessionStarts by initiator (index.go)

	mu    sync.Mutex
	cache map[snapshot.Hash]cached
	order []snapshot.Hash // insertion order, for eviction
	bytes int
}

type cached struct {
	b         []byte
	sessionID string
}

// NewService returns a Service over src.
func NewService(src Source, o ServiceOptions) (*Service, error) {
	if strings.TrimSpace(o.EventSource) == "" || strings.TrimSpace(o.ServerID) == "" {
		return nil, errors.New("snapshot: event source and server id must not be empty")
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 32 << 20
	}
	return &Service{src: src, opts: o, idx: newStartIndex(), cache: map[snapshot.Hash]cached{}}, nil
}

// NoteStart adds a session to the index cross_session_decay windows read
// (the App calls it for every lifecycle CREATED event).
func (s *Service) NoteStart(st snapshot.Start) { s.idx.note(st) }

// InvalidateIndex makes the next cross_session_decay window rebuild the
// index from the Source (after the feed calling NoteStart fell behind).
func (s *Service) InvalidateIndex() { s.idx.invalidate() }

// Snapshot computes the sealed payload of a session from its durable
// history. Errors are *coord.Error: SESSION_NOT_FOUND, INVALID_ENVELOPE
// for a bad query, INTERNAL_ERROR otherwise.
func (s *Service) Snapshot(ctx context.Context, sessionID string, q Query) (snapshot.Sealed, error) {
	if q.Profile == "" {
		q.Profile = snapshot.ProfileDefault
	}
	if q.Profile != snapshot.ProfileDefault && q.Profile != snapshot.ProfileStrict {
		return snapshot.Sealed{}, coord.Errorf(coord.CodeInvalidEnvelope, "profile must be default or strict")
	}
	if q.DecayRuns < 0 || q.DecayRuns > maxDecayRuns {
		return snapshot.Sealed{}, coord.Errorf(coord.CodeInvalidEnvelope, "decay_runs must be between 1 and %d", maxDecayRuns)
	}
	recs, err := s.src.Records(ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return snapshot.Sealed{}, coord.Errorf(coord.CodeSessionNotFound, "session %s not found", sessionID)
	}
	if err != nil {
		return snapshot.Sealed{}, coord.Errorf(coord.CodeInternalError, "reading session history: %v", err)
	}
	in, err := snapshot.InputFromHistory(recs)
	if err != nil {
		return snapshot.Sealed{}, coord.Errorf(coord.CodeInternalError, "%v", err)
	}
	o := snapshot.Options{EventSource: s.opts.EventSource, ServerID: s.opts.ServerID, Profile: q.Profile, DecayRuns: q.DecayRuns}
	if q.DecayRuns > 0 {
		me := snapshot.Start{SessionID: sessionID, Initiator: in.Initiator, Participants: in.Participants, AcceptedAtMs: recs[0].AcceptedAtMs}
		sub, err := s.idx.subsequent(ctx, s.src, me, q.DecayRuns, q.Viewer)
		if err != nil {
			return snapshot.Sealed{}, coord.Errorf(coord.CodeInternalError, "listing sessions: %v", err)
		}
		o.Subsequent = sub
	}
	p, err := snapshot.Build(in, o)
	if err != nil {
		return snapshot.Sealed{}, coord.Errorf(coord.CodeInternalError, "%v", err)
	}
	sealed, err := snapshot.Seal(p)
	if err != nil {
		return snapshot.Sealed{}, coord.Errorf(coord.CodeInternalError, "%v", err)
	}
	s.remember(sealed, sessionID)
	return sealed, nil
}

// maxDecayRuns bounds a cross_session_decay window.
const maxDecayRuns = 1000

// StateWindow returns the session's report (its payload is then served
// by Payload under the report's contents_ref).
func (s *Service) StateWindow(ctx context.Context, sessionID string, q Query) (snapshot.Report, error) {
	sealed, err := s.Snapshot(ctx, sessionID, q)
	if err != nil {
		return snapshot.Report{}, err
	}
	return snapshot.NewReport(sealed), nil
}

func (s *Service) remember(sealed snapshot.Sealed, sessionID string) {
	if len(sealed.Bytes) > s.opts.CacheBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cache[sealed.ID]; ok {
		return
	}
	for s.bytes+len(sealed.Bytes) > s.opts.CacheBytes && len(s.order) > 0 {
		old := s.order[0]
		s.order = s.order[1:]
		s.bytes -= len(s.cache[old].b)
		delete(s.cache, old)
	}
	s.cache[sealed.ID] = cached{b: sealed.Bytes, sessionID: sessionID}
	s.order = append(s.order, sealed.ID)
	s.bytes += len(sealed.Bytes)
}

// Payload returns the canonical payload bytes stored under a content
// address ("sha256:<64 lowercase hex>") and the id of the session it
// describes: from the payloads this Service computed recently, else from
// the snapshot directory. Unknown: SESSION_NOT_FOUND; malformed address:
// INVALID_ENVELOPE.
func (s *Service) Payload(ctx context.Context, addr string) ([]byte, string, error) {
	if !snapshot.ValidHash(addr) {
		return nil, "", coord.Errorf(coord.CodeInvalidEnvelope, "a content address is sha256: and 64 lowercase hex digits")
	}
	s.mu.Lock()
	c, ok := s.cache[snapshot.Hash(addr)]
	s.mu.Unlock()
	if ok {
		return c.b, c.sessionID, nil
	}
	if s.opts.Dir != "" {
		// The payload names its session by an opaque digest; the
		// session id authorization needs is in the sidecar file the
		// server wrote next to it (WriteFiles).
		b, err := os.ReadFile(payloadPath(s.opts.Dir, snapshot.Hash(addr)))
		if err == nil && snapshot.HashBytes(b) == snapshot.Hash(addr) {
			sid, err := os.ReadFile(sessionPath(s.opts.Dir, snapshot.Hash(addr)))
			if err == nil && len(sid) > 0 {
				return b, string(sid), nil
			}
		}
	}
	return nil, "", coord.Errorf(coord.CodeSessionNotFound, "no snapshot payload %s", addr)
}

// Authorize decides whether the caller of r may read the snapshots of
// sessionID; a non-nil error (a *coord.Error: UNAUTHENTICATED, FORBIDDEN,
// SESSION_NOT_FOUND) refuses the request. The transport binding passes its
// own identity check here (the same matrix as GetSession). It returns
// the caller: the Viewer its cross_session_decay windows are computed
// for, and Charge, which takes one unit of the caller's rate limit (a
// decay window reads other sessions; RATE_LIMITED refuses it).
type Authorize func(r *http.Request, sessionID string) (Caller, error)

// Caller is the requester as the binding identified it.
type Caller struct {
	Viewer snapshot.Viewer
	Charge func() error // nil: not charged
}

// Handler serves
//
//	GET /macp/session/{id}/state-window[?profile=strict][&decay_runs=N]  the report
//	GET /macp/snapshots/{sha256:<hex>}                                      the payload
//
// as RFC 8785 JSON (application/json). Errors are JSON {"code","message"}
// with the MACP code's registry HTTP status. auth runs before anything is
// read about the session (for a payload: once it is known which session
// the payload describes; an unknown payload is 404 to everyone).
func (s *Service) Handler(auth Authorize) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /macp/session/{id}/state-window", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		caller, err := auth(r, id)
		if err != nil {
			writeError(w, err)
			return
		}
		q := Query{Profile: snapshot.Class(r.URL.Query().Get("profile")), Viewer: caller.Viewer}
		if v := r.URL.Query().Get("decay_runs"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				writeError(w, coord.Errorf(coord.CodeInvalidEnvelope, "decay_runs must be an integer >= 1"))
				return
			}
			q.DecayRuns = n
			if caller.Charge != nil {
				if err := caller.Charge(); err != nil {
					writeError(w, err)
					return
				}
			}
		}
		rep, err := s.StateWindow(r.Context(), id, q)
		if err != nil {
			writeError(w, err)
			return
		}
		b, err := rep.Bytes()
		if err != nil {
			writeError(w, coord.Errorf(coord.CodeInternalError, "%v", err))
			return
		}
		writeJSON(w, b)
	})
	mux.HandleFunc("GET /macp/snapshots/{addr}", func(w http.ResponseWriter, r *http.Request) {
		b, sid, err := s.Payload(r.Context(), r.PathValue("addr"))
		if err != nil {
			writeError(w, err)
			return
		}
		if _, err := auth(r, sid); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, b)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, err error) {
	e := coord.AsError(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.Mapping().HTTPStatus) // coord's code table, as every binding
	b, _ := json.Marshal(struct {
		Code    coord.Code `json:"code"`
		Message string     `json:"message"`
	}{e.Code, e.Message})
	_, _ = w.Write(b)
}

// payloadPath is where a snapshot directory keeps a payload.
func payloadPath(dir string, h snapshot.Hash) string {
	return filepath.Join(dir, "payloads", "sha256-"+strings.TrimPrefix(string(h), "sha256:")+".json")
}

// sessionPath is where a snapshot directory keeps the id of the session
// a payload describes (server-side only; never served).
func sessionPath(dir string, h snapshot.Hash) string {
	return filepath.Join(dir, "payloads", "sha256-"+strings.TrimPrefix(string(h), "sha256:")+".session")
}

// reportPath is where a snapshot directory keeps a session's latest
// report of a profile.
func reportPath(dir, sessionID string, profile snapshot.Class) string {
	name := sessionID
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			name = strings.TrimPrefix(string(snapshot.HashBytes([]byte(sessionID))), "sha256:")
			break
		}
	}
	if profile == snapshot.ProfileStrict {
		name += ".strict"
	}
	return filepath.Join(dir, "reports", name+".json")
}

// WriteFiles stores sealed's payload under its content address and its
// report under the session id in dir, each written to a temporary file,
// synced and renamed into place.
func WriteFiles(dir, sessionID string, sealed snapshot.Sealed) error {
	rep, err := snapshot.NewReport(sealed).Bytes()
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		b    []byte
	}{{sessionPath(dir, sealed.ID), []byte(sessionID)}, {payloadPath(dir, sealed.ID), sealed.Bytes}, {reportPath(dir, sessionID, sealed.Payload.PrivacyProfile), rep}} {
		if err := writeAtomic(f.path, f.b); err != nil {
			return err
		}
	}
	return nil
}

func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("snapshot: writing %s: %w", path, werr)
	}
	return nil
}
