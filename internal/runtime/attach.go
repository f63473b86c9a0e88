package runtime

import (
	"sync"
	"weak"
)

// Attachments is the runtime-wide part of the rule "one active
// attachment per caller and session" (docs/resume.md, issue #14): a
// protocol-mode attachment (session/start, session/resume, on any
// transport) supersedes the same identity's earlier follows of the same
// session on the transports that have no protocol mode, gRPC
// StreamSession. Those transports Track each follow; the protocol-mode
// transport calls Supersede when it attaches, which ends them (each end
// func is called once, outside the lock). Follows of other identities and
// other sessions are untouched, and tracked follows do not supersede each
// other (docs/spec-decisions.md).
type Attachments struct {
	mu sync.Mutex
	m  map[attachKey]map[*attachEntry]struct{}
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

// Supersede ends every tracked follow of sessionID by sender and returns
// how many there were.
func (a *Attachments) Supersede(sender, sessionID string) int {
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
