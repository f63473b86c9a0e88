// Package sim is a deterministic simulation of the runtime (issue 32): the
// real internal/runtime over the real Pebble store, on an in-memory
// crashable filesystem with injected faults, driven by simulated clients
// whose every action, every fault and every crash point is drawn from one
// seeded PRNG. A failing seed reruns exactly:
//
//	go test ./internal/sim -run TestSim -seed N -simtrace
//
// The package has no product code; everything is in its _test.go files,
// and docs/simulation.md describes the approach, what it explores and what
// it does not, the invariants, and how to read a trace.
//
// Approach: step-driven, not a seeded scheduler. One test goroutine drives
// the runtime through its public API. Every step is one client action (or
// one fault, crash or clock advance) and the harness waits for quiescence
// after it (the ack returned, the due TTL expiries stored, every follower
// caught up with the store) before drawing the next. Time is a
// clocktest.Fake that moves only in steps. The goroutines the runtime
// starts (committer, completer, timer loop, expiry workers, follower
// relays) and Pebble's own still run on the Go scheduler, but between two
// steps nothing is left for them to do, so what the trace records (acks,
// stored histories, what each follower received, what survived each
// crash) is a function of the seed. The interleavings explored are those
// reachable by orderings of whole steps plus the pipelined bursts
// (SendPipelined: several envelopes decided in a fixed order and then
// committed together), the appends held in a slow sync while the clock
// moves or the process crashes, and a follower parked by the seed at one
// of three points inside Follow while a record of its session is committed
// (interleave_test.go); other races inside one step between runtime
// goroutines are not chosen by the seed (see docs/simulation.md).
//
// Protocol-mode attachments (attach_test.go, memnet_test.go): the same
// runs serve the real HTTP listener (httpapi.Server's handler under
// net/http) over an in-memory network, and simulated clients attach to
// sessions over WebSocket with session/resume: they attach, stall (stop
// reading: the connection's buffer fills and the server's writer waits),
// read again, drop the connection, resume from the id of a notification
// they received (an envelope's N or a state notification's N.5), and
// reattach live (the same caller on another connection supersedes the
// attachment); a resume's catch-up may be parked in its store pass while
// a message of its session is committed. Every sessionEventId, catch-up, replay-window cut, state
// notification, supersession and end they see is the product's attachment
// code over the runtime's Follow, not a model of it; settle waits until
// every reading attachment has everything, and the checks (ids unique and
// increasing per attachment, above the cursor; envelopes exactly the
// history after it, no gap or duplicate; each state N.5 the session's
// state after record N) run on what arrived, in arrival order. Only what
// is a function of the seed after quiescence is traced: not which
// intermediate state notifications were sent (states are coalesced).
//
// SSE feeds (sse_test.go): the same listener's session SSE route
// (GET /macp/session/{id}/events), requested by simulated EventSource
// clients, one in-memory connection each, whose buffer towards the
// client is smaller than one event, so a stalled client backs the
// handler's writes up. The seed draws: open a feed, stall it, let it read
// again, drop it, resume from Last-Event-ID and/or ?after_sequence= (the
// last id received, another one, 0, beyond the end), open a second live
// feed; a session/resume of the same caller supersedes its feeds. The
// checks (after every step, in arrival order): the answer (refused, 204
// for a terminal session with nothing after the cursor, else 200 and
// its start headers), ids unique and increasing above the resume point,
// the envelopes exactly the history after it, end and superseded last
// with the last id sent, and after a crash, everything received still in
// the history. A feed superseded while stalled may report either end,
// so its counts are left out of the trace.
//
// TestSimBudget (budget_test.go) simulates the stream budget
// (internal/streambudget) on its own: simulated streams charge, hand on,
// release, drop and close, and Acquire calls wait, are cancelled and stall
// on the fake clock, every choice from the seed, with the accounting, the
// bounds (on what the streams really hold), the fair wake-up order and the
// stall limit checked after every step:
//
//	go test ./internal/sim -run TestSimBudget -seed N -simtrace
package sim
