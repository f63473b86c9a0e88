// Package streambudget is the accounting of stream buffers
// (docs/security.md "Stream buffers"): what every stream that delivers
// session records holds for a client that has not taken it yet, bounded
// per stream, per identity, per session and globally, with fair waiting
// and a stall limit. It is self-contained: it knows records only by their
// cost (Cost) and time only through the clock it is given (package
// clock), and it starts no goroutine.
//
// Contract: a transport opens one Window per stream (Budget.NewWindow),
// names the identity and session it follows (Window.Bind), charges each
// record before it is read or handed on (Window.Acquire, TryAcquire),
// releases it once the client really took it (Release, or Sent then
// ReleaseSent) and closes the window when the stream and everything it
// handed to the transport are done (Close returns every charge at once).
// Acquire fails with a RATE_LIMITED *coord.Error when the window is
// stalled (Options.StallTimeout) and with the context's error when its
// context ends. Every method of Budget and Window is safe for concurrent
// use. internal/runtime owns the process's Budget (Runtime.StreamBudget)
// and re-exports the names its follow API uses.
package streambudget
