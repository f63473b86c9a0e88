package runtime

import (
	"sync"
	"weak"
)

// Attachments is the runtime-wide part of the rule "one active
// connection per caller and session" (docs/resume.md): a protocol-mode
// attachment (session/start, session/resume, on any transport)
// supersedes the same identity's earlier follows of the same session:
// gRPC StreamSession subscriptions, SSE feeds, WebSocket macp/subscribe
// and earlier protocol-mode attachments, on this node and, through
// SetPublish, on every node of a cluster. Those transports Track each follow; the protocol-mode
// transport calls Supersede when it attaches, which ends them (each end
// func is called once, outside the lock). Follows of other identities and
// other sessions are untouched, and tracked follows do not supersede each
// other (docs/spec-decisions.md).
type Attachments struct {
	mu sync.Mutex
	m  map[attachKey]map[*attachEntry]struct{}
	// publish, when set (internal/cluster), carries each Supersede to the
	// other nodes, which apply it with SupersedeLocal.
	publish func(sender, sessionID string)
}

type attachKey struct{ sender, session string }

type attachEntry struct{ end func() }

// attachRegistries holds each runtime's Attachments, keyed weakly so that
// a runtime that is gone does not stay reachable through it.
var attachRegistries sync.Map // weak.Pointer[Runtime] -> *Attachments

// Attachments returns the runtime's registry.
func (r *Runtime) Attachments() *Attachments {
	k := weak.Make(r)
	if v, ok := attachRegistries.Load(k); ok {
		return v.(*Attachments)
	}
	v, _ := attachRegistries.LoadOrStore(k, &Attachments{m: make(map[attachKey]map[*attachEntry]struct{})})
	return v.(*Attachments)
}

// Track registers a follow of sessionID by sender; end is called (once)
// if a protocol-mode attachment of the same sender and session
// supersedes it. untrack removes it (call it when the follow ends).
func (a *Attachments) Track(sender, sessionID string, end func()) (untrack func()) {
	k := attachKey{sender, sessionID}
	e := &attachEntry{end: end}
	a.mu.Lock()
	set := a.m[k]
	if set == nil {
		set = make(map[*attachEntry]struct{})
		a.m[k] = set
	}
	set[e] = struct{}{}
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if set := a.m[k]; set != nil {
			delete(set, e)
			if len(set) == 0 {
				delete(a.m, k)
			}
		}
	}
}

// SetPublish installs (or with nil removes) the function that carries
// every Supersede to the cluster's other nodes (internal/cluster).
func (a *Attachments) SetPublish(f func(sender, sessionID string)) {
	a.mu.Lock()
	a.publish = f
	a.mu.Unlock()
}

// Supersede ends every tracked follow of sessionID by sender on this node,
// publishes the notice to the other nodes of a cluster (SetPublish), and
// returns how many follows it ended here.
func (a *Attachments) Supersede(sender, sessionID string) int {
	n := a.SupersedeLocal(sender, sessionID)
	a.mu.Lock()
	pub := a.publish
	a.mu.Unlock()
	if pub != nil {
		pub(sender, sessionID)
	}
	return n
}

// SupersedeLocal ends every tracked follow of sessionID by sender on this
// node only (a notice from another node) and returns how many there were.
func (a *Attachments) SupersedeLocal(sender, sessionID string) int {
	k := attachKey{sender, sessionID}
	a.mu.Lock()
	set := a.m[k]
	delete(a.m, k)
	a.mu.Unlock()
	for e := range set {
		e.end()
	}
	return len(set)
}

// Tracked returns how many follows of sessionID by sender are tracked.
func (a *Attachments) Tracked(sender, sessionID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m[attachKey{sender, sessionID}])
}
