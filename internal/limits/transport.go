package limits

import "time"

// Transport are the abuse limits of a transport binding: one type for the
// configuration (internal/config's LimitsConfig embeds it; the MACP_*
// variables and flags are listed there) and the gRPC binding
// (server.Options.Limits). A zero field disables its limit (or, for the
// keepalive and handshake settings, leaves gRPC's default).
type Transport struct {
	// MaxConcurrentStreams caps concurrent calls per connection (HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS); configuration validation keeps it
	// within a uint32.
	MaxConcurrentStreams int
	// MaxStreamsPerIdentity caps the streaming calls (StreamSession and the
	// Watch* calls) one identity has open at once; unauthenticated
	// discovery watches count per client IP address.
	MaxStreamsPerIdentity int
	// MaxStreamsPerSession caps the StreamSession streams attached to one
	// session by its members and observers.
	MaxStreamsPerSession int
	// UnaryTimeout is the longest a unary call may run: a client deadline
	// that is later or absent is replaced by it. Send is the exception:
	// its only open-ended wait is its commit, which the runtime bounds
	// (runtime.Options.CommitTimeout; the app sets both from one setting).
	UnaryTimeout time.Duration
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface (grpc.ConnectionTimeout); 0 means gRPC's default, 120 s.
	HandshakeTimeout time.Duration
	// MaxConnectionIdle sends GOAWAY to a connection that had no call in
	// flight for this long, so idle connections do not pile up.
	MaxConnectionIdle time.Duration
	// KeepaliveTime and KeepaliveTimeout: a connection silent for
	// KeepaliveTime is pinged, and closed if the ping is not answered
	// within KeepaliveTimeout (dead peers release their streams). 0 means
	// gRPC's defaults, 2 h and 20 s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the shortest client ping interval tolerated
	// (with or without calls in flight); faster pingers are disconnected
	// (GOAWAY ENHANCE_YOUR_CALM). 0 means gRPC's default, 5 min.
	KeepaliveMinTime time.Duration
	// MaxConnections caps the connections of each listener (gRPC, and HTTP
	// when on) open at once; further ones are closed when accepted, not
	// left waiting in the listen backlog (MACP_MAX_CONNECTIONS,
	// --max-connections).
	MaxConnections int
	// MaxConnectionsPerAddr caps the connections one client IP address has
	// open; further ones are closed when accepted.
	MaxConnectionsPerAddr int
	// MaxConnectionsPerPrefix64 caps the connections the IPv6 addresses
	// of one /64 prefix (one subscriber's network) have open together;
	// further ones are closed when accepted. IPv4 addresses count only
	// per address.
	MaxConnectionsPerPrefix64 int
	// FirstCallTimeout closes a connection that has not started a call
	// this long after it was accepted, and one that made only
	// unauthenticated calls once it has had none in flight for this long.
	FirstCallTimeout time.Duration
}
