package config

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/macpd/macpd/internal/limits"
)

// LimitsConfig holds the abuse limits (docs/security.md "Limits"). Every
// limit is a setting; 0 disables a limit unless its comment says
// otherwise. Payload size, participants, TTL and open sessions per
// initiator are the Config fields of the same names.
type LimitsConfig struct {
	// SessionStartsPerMinute is the per-sender SessionStart rate, a token
	// bucket with a burst of one minute's allowance (RATE_LIMITED beyond)
	// (MACP_SESSION_START_LIMIT_PER_MINUTE, --session-start-limit).
	SessionStartsPerMinute int
	// MessagesPerMinute is the per-sender rate of every other envelope,
	// Signals and Progress included (MACP_MESSAGE_LIMIT_PER_MINUTE,
	// --message-limit).
	MessagesPerMinute int
	// Transport are the limits the gRPC binding enforces, one type with
	// server.Limits (documented in internal/limits). Their settings:
	// MaxConcurrentStreams (MACP_MAX_CONCURRENT_STREAMS,
	// --max-concurrent-streams), MaxStreamsPerIdentity
	// (MACP_MAX_STREAMS_PER_IDENTITY, --max-streams-per-identity),
	// MaxStreamsPerSession (MACP_MAX_STREAMS_PER_SESSION,
	// --max-streams-per-session), UnaryTimeout (MACP_UNARY_TIMEOUT_MS,
	// --unary-timeout), HandshakeTimeout (MACP_HANDSHAKE_TIMEOUT_MS,
	// --handshake-timeout), MaxConnectionIdle (MACP_MAX_CONNECTION_IDLE_MS,
	// --max-connection-idle), KeepaliveTime, KeepaliveTimeout and
	// KeepaliveMinTime (MACP_KEEPALIVE_TIME_MS, MACP_KEEPALIVE_TIMEOUT_MS,
	// MACP_KEEPALIVE_MIN_TIME_MS; --keepalive-time, --keepalive-timeout,
	// --keepalive-min-time), MaxConnections (MACP_MAX_CONNECTIONS,
	// --max-connections), MaxConnectionsPerAddr
	// (MACP_MAX_CONNECTIONS_PER_ADDR, --max-connections-per-addr),
	// MaxConnectionsPerPrefix64 (MACP_MAX_CONNECTIONS_PER_PREFIX64,
	// --max-connections-per-prefix64), FirstCallTimeout
	// (MACP_FIRST_CALL_TIMEOUT_MS, --first-call-timeout). The last four
	// apply to the HTTP listener too.
	limits.Transport
	// StreamBufferBytes bounds what one stream holds for a client that has
	// not taken it yet (records read for it, queued, or in the HTTP/2 send
	// queue); one record is always allowed (MACP_STREAM_BUFFER_BYTES,
	// --stream-buffer-bytes). Not 0.
	StreamBufferBytes int64
	// StreamBufferBudgetBytes bounds what all streams hold together
	// (MACP_STREAM_BUFFER_BUDGET_BYTES, --stream-buffer-budget). Not 0.
	StreamBufferBudgetBytes int64
	// StreamBufferIdentityBytes bounds what the streams of one identity
	// hold together, and StreamBufferSessionBytes what the streams of one
	// session hold together; an identity or session that holds nothing may
	// always take one record (MACP_STREAM_BUFFER_IDENTITY_BYTES,
	// --stream-buffer-identity-bytes; MACP_STREAM_BUFFER_SESSION_BYTES,
	// --stream-buffer-session-bytes). 0 = 1/8 (1/4) of
	// StreamBufferBudgetBytes: 32 MiB (64 MiB) by default.
	StreamBufferIdentityBytes, StreamBufferSessionBytes int64
	// StreamStallTimeout ends a stream whose client took nothing for this
	// long while records were waiting for it, with RATE_LIMITED; the
	// client resumes from its cursor (MACP_STREAM_STALL_TIMEOUT_MS,
	// --stream-stall-timeout). 0 = never.
	StreamStallTimeout time.Duration
	// MaxExtModes, MaxPolicies and MaxDescriptorBytes bound what clients
	// may register (MACP_MAX_EXT_MODES, MACP_MAX_POLICIES,
	// MACP_MAX_DESCRIPTOR_BYTES; --max-ext-modes, --max-policies,
	// --max-descriptor-bytes). Not 0.
	MaxExtModes, MaxPolicies, MaxDescriptorBytes int
}

// DefaultLimits returns the documented defaults. The two rates are the
// reference runtime's.
func DefaultLimits() LimitsConfig {
	return LimitsConfig{
		SessionStartsPerMinute: 60,
		MessagesPerMinute:      600,
		Transport: limits.Transport{
			MaxConnections:        4096,
			MaxConcurrentStreams:  100,
			MaxStreamsPerIdentity: 256,
			MaxStreamsPerSession:  1024,
			UnaryTimeout:          30 * time.Second,
			HandshakeTimeout:      10 * time.Second,
			MaxConnectionIdle:     5 * time.Minute,
			KeepaliveTime:         time.Minute,
			KeepaliveTimeout:      20 * time.Second,
			KeepaliveMinTime:      10 * time.Second,
			MaxConnectionsPerAddr: 128,
			// One IPv6 subscriber network (/64) may hold twice what one
			// address may.
			MaxConnectionsPerPrefix64: 256,
			FirstCallTimeout:          15 * time.Second,
		},
		// What one stream and all streams may hold (internal/streambudget).
		StreamBufferBytes:       1 << 20,
		StreamBufferBudgetBytes: 256 << 20,
		StreamStallTimeout:      30 * time.Second,
		MaxExtModes:             64,
		MaxPolicies:             256,
		MaxDescriptorBytes:      128 << 10, // a policy's rules alone may take 64 KiB
	}
}

// validateLimits reports problems with the limits, each naming its
// environment variable and flag. Called by Config.Validate.
func (c *Config) validateLimits() []error {
	l := &c.Limits
	var errs []error
	nonNegative := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d must not be negative (0 = no limit)", name, v))
		}
	}
	nonNegative("MACP_SESSION_START_LIMIT_PER_MINUTE (--session-start-limit)", int64(l.SessionStartsPerMinute))
	nonNegative("MACP_MESSAGE_LIMIT_PER_MINUTE (--message-limit)", int64(l.MessagesPerMinute))
	nonNegative("MACP_MAX_CONNECTIONS (--max-connections)", int64(l.MaxConnections))
	nonNegative("MACP_MAX_STREAMS_PER_IDENTITY (--max-streams-per-identity)", int64(l.MaxStreamsPerIdentity))
	nonNegative("MACP_MAX_STREAMS_PER_SESSION (--max-streams-per-session)", int64(l.MaxStreamsPerSession))
	nonNegative("MACP_MAX_CONNECTIONS_PER_ADDR (--max-connections-per-addr)", int64(l.MaxConnectionsPerAddr))
	nonNegative("MACP_MAX_CONNECTIONS_PER_PREFIX64 (--max-connections-per-prefix64)", int64(l.MaxConnectionsPerPrefix64))
	for _, v := range []struct {
		name string
		n    int
	}{
		{"MACP_MAX_EXT_MODES (--max-ext-modes)", l.MaxExtModes},
		{"MACP_MAX_POLICIES (--max-policies)", l.MaxPolicies},
		{"MACP_MAX_DESCRIPTOR_BYTES (--max-descriptor-bytes)", l.MaxDescriptorBytes},
	} {
		if v.n <= 0 {
			errs = append(errs, fmt.Errorf("%s %d must be positive", v.name, v.n))
		}
	}
	if l.StreamBufferBytes <= 0 {
		errs = append(errs, fmt.Errorf("MACP_STREAM_BUFFER_BYTES (--stream-buffer-bytes) %d must be positive", l.StreamBufferBytes))
	}
	if l.StreamBufferBudgetBytes < l.StreamBufferBytes {
		errs = append(errs, fmt.Errorf("MACP_STREAM_BUFFER_BUDGET_BYTES (--stream-buffer-budget) %d must be at least MACP_STREAM_BUFFER_BYTES (%d)",
			l.StreamBufferBudgetBytes, l.StreamBufferBytes))
	}
	nonNegative("MACP_STREAM_BUFFER_IDENTITY_BYTES (--stream-buffer-identity-bytes)", l.StreamBufferIdentityBytes)
	nonNegative("MACP_STREAM_BUFFER_SESSION_BYTES (--stream-buffer-session-bytes)", l.StreamBufferSessionBytes)
	if l.MaxConcurrentStreams < 0 || int64(l.MaxConcurrentStreams) > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("MACP_MAX_CONCURRENT_STREAMS (--max-concurrent-streams) %d must be between 0 (no limit) and %d",
			l.MaxConcurrentStreams, uint32(math.MaxUint32)))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"MACP_UNARY_TIMEOUT_MS (--unary-timeout)", l.UnaryTimeout},
		{"MACP_HANDSHAKE_TIMEOUT_MS (--handshake-timeout)", l.HandshakeTimeout},
		{"MACP_MAX_CONNECTION_IDLE_MS (--max-connection-idle)", l.MaxConnectionIdle},
		{"MACP_KEEPALIVE_TIME_MS (--keepalive-time)", l.KeepaliveTime},
		{"MACP_KEEPALIVE_TIMEOUT_MS (--keepalive-timeout)", l.KeepaliveTimeout},
		{"MACP_KEEPALIVE_MIN_TIME_MS (--keepalive-min-time)", l.KeepaliveMinTime},
		{"MACP_STREAM_STALL_TIMEOUT_MS (--stream-stall-timeout)", l.StreamStallTimeout},
		{"MACP_FIRST_CALL_TIMEOUT_MS (--first-call-timeout)", l.FirstCallTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v must not be negative", d.name, d.v))
		}
	}
	return errs
}

// limitsFromEnv applies the MACP_* limit variables.
func (c *Config) limitsFromEnv(lookup Env) []error {
	l := &c.Limits
	var errs []error
	integer := func(name string, dst *int) {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				if errors.Is(err, strconv.ErrRange) {
					errs = append(errs, fmt.Errorf("%s: %q is out of range", name, v))
				} else {
					errs = append(errs, fmt.Errorf("%s: %q is not an integer", name, v))
				}
				return
			}
			*dst = n
		}
	}
	millis := func(name string, dst *time.Duration) {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			const maxMs = int64(math.MaxInt64 / time.Millisecond)
			if err != nil || n > maxMs || n < -maxMs {
				errs = append(errs, fmt.Errorf("%s: %q is not an integer number of milliseconds (at most %d)", name, v, maxMs))
				return
			}
			*dst = time.Duration(n) * time.Millisecond
		}
	}
	integer("MACP_SESSION_START_LIMIT_PER_MINUTE", &l.SessionStartsPerMinute)
	integer("MACP_MESSAGE_LIMIT_PER_MINUTE", &l.MessagesPerMinute)
	integer("MACP_MAX_CONNECTIONS", &l.MaxConnections)
	integer("MACP_MAX_CONCURRENT_STREAMS", &l.MaxConcurrentStreams)
	integer("MACP_MAX_STREAMS_PER_IDENTITY", &l.MaxStreamsPerIdentity)
	integer("MACP_MAX_STREAMS_PER_SESSION", &l.MaxStreamsPerSession)
	millis("MACP_UNARY_TIMEOUT_MS", &l.UnaryTimeout)
	millis("MACP_HANDSHAKE_TIMEOUT_MS", &l.HandshakeTimeout)
	millis("MACP_MAX_CONNECTION_IDLE_MS", &l.MaxConnectionIdle)
	millis("MACP_KEEPALIVE_TIME_MS", &l.KeepaliveTime)
	millis("MACP_KEEPALIVE_TIMEOUT_MS", &l.KeepaliveTimeout)
	millis("MACP_KEEPALIVE_MIN_TIME_MS", &l.KeepaliveMinTime)
	millis("MACP_STREAM_STALL_TIMEOUT_MS", &l.StreamStallTimeout)
	millis("MACP_FIRST_CALL_TIMEOUT_MS", &l.FirstCallTimeout)
	integer("MACP_MAX_CONNECTIONS_PER_ADDR", &l.MaxConnectionsPerAddr)
	integer("MACP_MAX_CONNECTIONS_PER_PREFIX64", &l.MaxConnectionsPerPrefix64)
	integer("MACP_MAX_EXT_MODES", &l.MaxExtModes)
	integer("MACP_MAX_POLICIES", &l.MaxPolicies)
	integer("MACP_MAX_DESCRIPTOR_BYTES", &l.MaxDescriptorBytes)
	integer64 := func(name string, dst *int64) {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not an integer number of bytes", name, v))
				return
			}
			*dst = n
		}
	}
	integer64("MACP_STREAM_BUFFER_BYTES", &l.StreamBufferBytes)
	integer64("MACP_STREAM_BUFFER_BUDGET_BYTES", &l.StreamBufferBudgetBytes)
	integer64("MACP_STREAM_BUFFER_IDENTITY_BYTES", &l.StreamBufferIdentityBytes)
	integer64("MACP_STREAM_BUFFER_SESSION_BYTES", &l.StreamBufferSessionBytes)
	return errs
}

// registerLimitFlags binds the limit flags.
func (c *Config) registerLimitFlags(fs *flag.FlagSet) {
	l := &c.Limits
	fs.IntVar(&l.SessionStartsPerMinute, "session-start-limit", l.SessionStartsPerMinute,
		"SessionStarts per sender per minute, 0 = unlimited (MACP_SESSION_START_LIMIT_PER_MINUTE)")
	fs.IntVar(&l.MessagesPerMinute, "message-limit", l.MessagesPerMinute,
		"other envelopes per sender per minute, 0 = unlimited (MACP_MESSAGE_LIMIT_PER_MINUTE)")
	fs.IntVar(&l.MaxConnections, "max-connections", l.MaxConnections, "concurrent client connections, 0 = unlimited (MACP_MAX_CONNECTIONS)")
	fs.IntVar(&l.MaxConcurrentStreams, "max-concurrent-streams", l.MaxConcurrentStreams,
		"concurrent calls per connection, 0 = unlimited (MACP_MAX_CONCURRENT_STREAMS)")
	fs.IntVar(&l.MaxStreamsPerIdentity, "max-streams-per-identity", l.MaxStreamsPerIdentity,
		"open streaming calls per identity, 0 = unlimited (MACP_MAX_STREAMS_PER_IDENTITY)")
	fs.IntVar(&l.MaxStreamsPerSession, "max-streams-per-session", l.MaxStreamsPerSession,
		"StreamSession streams per session, 0 = unlimited (MACP_MAX_STREAMS_PER_SESSION)")
	fs.DurationVar(&l.UnaryTimeout, "unary-timeout", l.UnaryTimeout, "longest unary call, 0 = the client's deadline (MACP_UNARY_TIMEOUT_MS)")
	fs.DurationVar(&l.HandshakeTimeout, "handshake-timeout", l.HandshakeTimeout,
		"TLS handshake and HTTP/2 preface timeout of new connections, 0 = 120s (MACP_HANDSHAKE_TIMEOUT_MS)")
	fs.DurationVar(&l.MaxConnectionIdle, "max-connection-idle", l.MaxConnectionIdle,
		"close connections without calls for this long, 0 = never (MACP_MAX_CONNECTION_IDLE_MS)")
	fs.DurationVar(&l.KeepaliveTime, "keepalive-time", l.KeepaliveTime, "ping connections silent for this long, 0 = 2h (MACP_KEEPALIVE_TIME_MS)")
	fs.DurationVar(&l.KeepaliveTimeout, "keepalive-timeout", l.KeepaliveTimeout,
		"close a pinged connection that does not answer within this, 0 = 20s (MACP_KEEPALIVE_TIMEOUT_MS)")
	fs.IntVar(&l.MaxConnectionsPerAddr, "max-connections-per-addr", l.MaxConnectionsPerAddr,
		"connections per client IP address, 0 = unlimited (MACP_MAX_CONNECTIONS_PER_ADDR)")
	fs.IntVar(&l.MaxConnectionsPerPrefix64, "max-connections-per-prefix64", l.MaxConnectionsPerPrefix64,
		"connections per client IPv6 /64 prefix, 0 = unlimited (MACP_MAX_CONNECTIONS_PER_PREFIX64)")
	fs.DurationVar(&l.FirstCallTimeout, "first-call-timeout", l.FirstCallTimeout,
		"close connections that start no call this long after connecting, 0 = never (MACP_FIRST_CALL_TIMEOUT_MS)")
	fs.IntVar(&l.MaxExtModes, "max-ext-modes", l.MaxExtModes, "registered extension modes (MACP_MAX_EXT_MODES)")
	fs.IntVar(&l.MaxPolicies, "max-policies", l.MaxPolicies, "registered policies (MACP_MAX_POLICIES)")
	fs.IntVar(&l.MaxDescriptorBytes, "max-descriptor-bytes", l.MaxDescriptorBytes,
		"encoded size of one registered mode or policy descriptor (MACP_MAX_DESCRIPTOR_BYTES)")
	fs.Int64Var(&l.StreamBufferBytes, "stream-buffer-bytes", l.StreamBufferBytes,
		"bytes one stream may hold for a client that has not read them (MACP_STREAM_BUFFER_BYTES)")
	fs.Int64Var(&l.StreamBufferBudgetBytes, "stream-buffer-budget", l.StreamBufferBudgetBytes,
		"bytes all streams may hold together (MACP_STREAM_BUFFER_BUDGET_BYTES)")
	fs.Int64Var(&l.StreamBufferIdentityBytes, "stream-buffer-identity-bytes", l.StreamBufferIdentityBytes,
		"bytes the streams of one identity may hold together, 0 = 1/8 of the budget (MACP_STREAM_BUFFER_IDENTITY_BYTES)")
	fs.Int64Var(&l.StreamBufferSessionBytes, "stream-buffer-session-bytes", l.StreamBufferSessionBytes,
		"bytes the streams of one session may hold together, 0 = 1/4 of the budget (MACP_STREAM_BUFFER_SESSION_BYTES)")
	fs.DurationVar(&l.StreamStallTimeout, "stream-stall-timeout", l.StreamStallTimeout,
		"end a stream whose client took nothing for this long, 0 = never (MACP_STREAM_STALL_TIMEOUT_MS)")
	fs.DurationVar(&l.KeepaliveMinTime, "keepalive-min-time", l.KeepaliveMinTime,
		"shortest keepalive ping interval allowed to clients, 0 = 5m (MACP_KEEPALIVE_MIN_TIME_MS)")
}
