package runtime

import (
	"sync/atomic"
	"testing"
)

// docs/resume.md "One active attachment per caller and session": a
// protocol-mode attachment ends the same identity's tracked follows of
// the same session, once each, and nothing else; untracked follows are
// not ended.
func TestAttachmentsSupersedeOnlyTheSameCallerAndSession(t *testing.T) {
	a := (&Runtime{}).Attachments()
	var aliceS1, aliceS1b, aliceS2, bobS1, gone atomic.Int32
	a.Track("alice", "s1", func() { aliceS1.Add(1) })
	a.Track("alice", "s1", func() { aliceS1b.Add(1) })
	a.Track("alice", "s2", func() { aliceS2.Add(1) })
	a.Track("bob", "s1", func() { bobS1.Add(1) })
	untrack := a.Track("alice", "s1", func() { gone.Add(1) })
	untrack()
	untrack() // idempotent
	if n := a.Tracked("alice", "s1"); n != 2 {
		t.Fatalf("tracked %d, want 2", n)
	}
	if n := a.Supersede("alice", "s1"); n != 2 {
		t.Fatalf("superseded %d, want 2", n)
	}
	if n := a.Supersede("alice", "s1"); n != 0 {
		t.Fatalf("superseded again: %d", n)
	}
	if aliceS1.Load() != 1 || aliceS1b.Load() != 1 {
		t.Fatalf("alice's follows of s1 ended %d and %d times, want once each", aliceS1.Load(), aliceS1b.Load())
	}
	if aliceS2.Load() != 0 || bobS1.Load() != 0 || gone.Load() != 0 {
		t.Fatalf("other follows were ended: alice/s2 %d, bob/s1 %d, untracked %d", aliceS2.Load(), bobS1.Load(), gone.Load())
	}
}

// Each runtime has its own registry, the same on every call.
func TestAttachmentsArePerRuntime(t *testing.T) {
	r1, r2 := &Runtime{}, &Runtime{}
	if r1.Attachments() != r1.Attachments() || r1.Attachments() == r2.Attachments() {
		t.Fatal("registries are not one per runtime")
	}
}
