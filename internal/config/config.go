package config

import (
	"errors"
	"flag"
	"fmt"
	"github.com/macpd/macpd/internal/coord"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is the complete runtime configuration.
type Config struct {
	// BindAddr is the gRPC listen address (MACP_BIND_ADDR).
	BindAddr string
	// DataDir holds durable state (MACP_DATA_DIR).
	DataDir string
	// MemoryOnly keeps history in memory only (MACP_MEMORY_ONLY).
	MemoryOnly bool
	// StrictRecovery refuses to start when stored history fails integrity
	// checks or replay, instead of quarantining the session
	// (MACP_STRICT_RECOVERY).
	StrictRecovery bool
	// Retention purges whole terminal sessions that ended longer ago; 0
	// keeps history forever (MACP_SESSION_RETENTION_SECS).
	Retention time.Duration
	// EvictAfter drops ended sessions from memory after this long; they are
	// reloaded from the store on demand (MACP_EVICT_AFTER_MS).
	EvictAfter time.Duration
	// AllowInsecure permits plaintext transport and dev bearer identities
	// (MACP_ALLOW_INSECURE). Never use it in production.
	AllowInsecure bool
	// TLSCertPath and TLSKeyPath enable TLS (MACP_TLS_CERT_PATH,
	// MACP_TLS_KEY_PATH).
	TLSCertPath, TLSKeyPath string
	// MaxPayloadBytes caps Envelope.payload (MACP_MAX_PAYLOAD_BYTES).
	MaxPayloadBytes int
	// MaxTTL caps SessionStart.ttl_ms (MACP_MAX_TTL_MS).
	MaxTTL time.Duration
	// Profile is the MACP semantics profile new sessions are bound to
	// (MACP_PROFILE): "2026-04" (the default: the April 2026 spec, where
	// CancelSession ends a session EXPIRED) or "latest" / "2026-09" (the
	// newest spec macpd implements). A session keeps the profile it was
	// started under for ever (coord/profile.go).
	Profile string
	// MaxSuspend caps SessionStart.max_suspend_ms and is the cap a session
	// that asks for 0 gets (MACP_MAX_SUSPEND_MS, default 7 days).
	MaxSuspend time.Duration
	// MaxParticipants caps declared participants (MACP_MAX_PARTICIPANTS).
	MaxParticipants int
	// MaxOpenSessions caps OPEN sessions per initiator, 0 = no cap
	// (MACP_MAX_OPEN_SESSIONS).
	MaxOpenSessions int
	// StartSkew is the tolerated difference between a SessionStart's
	// timestamp and the runtime clock, 0 = unchecked (MACP_START_SKEW_MS).
	StartSkew time.Duration
	// LogLevel is debug|info|warn|error (MACP_LOG_LEVEL); LogFormat is
	// text|json (MACP_LOG_FORMAT).
	LogLevel, LogFormat string
	// StreamHeartbeat is the interval of heartbeat Signals on idle bound
	// StreamSession streams, 0 = none (MACP_STREAM_HEARTBEAT_MS).
	StreamHeartbeat time.Duration
	// ShutdownGrace bounds graceful shutdown (MACP_SHUTDOWN_GRACE_MS).
	ShutdownGrace time.Duration
	// AdminAddr is the listen address of the admin HTTP endpoint
	// (/metrics, /healthz and, with AdminPprof, /debug/pprof/), "" = off
	// (MACP_ADMIN_ADDR). It is plaintext and unauthenticated: bind it to
	// loopback or a private interface.
	AdminAddr string
	// AdminPprof mounts the Go profiler (/debug/pprof/) on the admin
	// endpoint (MACP_ADMIN_PPROF). Profiles expose the process's
	// internals; it has no effect without AdminAddr.
	AdminPprof bool
	// GCPercent is the Go collector's GC percent for the macpd process
	// (MACP_GC_PERCENT); the GOGC environment variable, when set, wins.
	GCPercent int
	// GCMinHeap is the smallest heap target the collector is paced to, in
	// bytes (MACP_GC_MIN_HEAP_BYTES), 0 = none: while the live heap is
	// small the GC percent is raised so that a collection waits for at
	// least this much heap (gctune.Floor). Not applied when GOGC is set.
	GCMinHeap int64
	// MemoryLimit is the Go runtime's soft memory limit in bytes, 0 =
	// automatic: 90% of the cgroup memory limit, if any
	// (MACP_MEMORY_LIMIT_BYTES); GOMEMLIMIT, when set, wins.
	MemoryLimit int64
	// Auth holds the authentication settings (static tokens, JWT, client
	// certificates) and the plaintext / dev-identity switches (auth.go).
	Auth AuthConfig
	// Limits holds the abuse limits: rates, connections, streams,
	// timeouts (limits.go).
	Limits LimitsConfig
	// Snapshots holds the session snapshot settings (snapshots.go).
	Snapshots SnapshotConfig
	// HTTP holds the HTTP/SSE/WebSocket bindings' settings (http.go).
	HTTP HTTPConfig
	// NATS selects the store (MACP_STORE) and holds the NATS JetStream
	// settings for MACP_STORE=nats (nats.go).
	NATS NATSConfig
	// Resume holds the protocol-mode session settings (resume.go).
	Resume ResumeConfig
}

// Default returns the documented defaults.
func Default() Config {
	return Config{
		BindAddr:        "127.0.0.1:50051",
		DataDir:         ".macp-data",
		MemoryOnly:      false,
		MaxPayloadBytes: 1 << 20,
		MaxTTL:          24 * time.Hour,
		Profile:         coord.ProfileApril,
		MaxSuspend:      7 * 24 * time.Hour,
		MaxParticipants: 1000,
		MaxOpenSessions: 100,
		StartSkew:       5 * time.Minute,
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownGrace:   10 * time.Second,
		StreamHeartbeat: 15 * time.Second,
		EvictAfter:      5 * time.Minute,
		GCPercent:       200,
		GCMinHeap:       64 << 20,
		Limits:          DefaultLimits(),
		Snapshots:       DefaultSnapshots(),
		HTTP:            DefaultHTTP(),
		NATS:            DefaultNATS(),
		Resume:          DefaultResume(),
	}
}

// Validate reports every problem at once, each naming the setting by its
// environment variable and flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		bad("MACP_BIND_ADDR (--addr) %q: %v", c.BindAddr, err)
	}
	if c.AdminAddr != "" {
		if _, port, err := net.SplitHostPort(c.AdminAddr); err != nil {
			bad("MACP_ADMIN_ADDR (--admin-addr) %q: %v", c.AdminAddr, err)
		} else if c.AdminAddr == c.BindAddr && port != "0" {
			bad("MACP_ADMIN_ADDR (--admin-addr) %q must differ from MACP_BIND_ADDR (--addr)", c.AdminAddr)
		}
	}
	if !c.MemoryOnly && c.DataDir == "" {
		bad("MACP_DATA_DIR (--data-dir) must be set unless MACP_MEMORY_ONLY (--memory-only) is on")
	}
	if (c.TLSCertPath == "") != (c.TLSKeyPath == "") {
		bad("MACP_TLS_CERT_PATH (--tls-cert) and MACP_TLS_KEY_PATH (--tls-key) must be set together")
	}
	if c.MaxPayloadBytes < 1 || c.MaxPayloadBytes > 64<<20 {
		bad("MACP_MAX_PAYLOAD_BYTES (--max-payload-bytes) %d must be between 1 and %d", c.MaxPayloadBytes, 64<<20)
	}
	if c.MaxTTL < time.Millisecond {
		bad("MACP_MAX_TTL_MS (--max-ttl) %v must be at least 1ms", c.MaxTTL)
	}
	if p, ok := coord.ResolveProfile(c.Profile); !ok {
		bad("MACP_PROFILE (--profile) %q is not a profile this runtime serves: use 2026-04 (the default) or latest (2026-09)", c.Profile)
	} else {
		c.Profile = p
	}
	if c.MaxSuspend < time.Millisecond {
		bad("MACP_MAX_SUSPEND_MS (--max-suspend) %v must be at least 1ms", c.MaxSuspend)
	}
	if c.MaxParticipants < 1 {
		bad("MACP_MAX_PARTICIPANTS (--max-participants) %d must be at least 1", c.MaxParticipants)
	}
	if c.MaxOpenSessions < 0 {
		bad("MACP_MAX_OPEN_SESSIONS (--max-open-sessions) %d must not be negative (0 = unlimited)", c.MaxOpenSessions)
	}
	if c.StartSkew < 0 {
		bad("MACP_START_SKEW_MS (--start-skew) %v must not be negative (0 = unchecked)", c.StartSkew)
	}
	if c.Retention < 0 {
		bad("MACP_SESSION_RETENTION_SECS (--retention) %v must not be negative", c.Retention)
	}
	if c.EvictAfter < 0 {
		bad("MACP_EVICT_AFTER_MS (--evict-after) %v must not be negative", c.EvictAfter)
	}
	if c.StreamHeartbeat < 0 {
		bad("MACP_STREAM_HEARTBEAT_MS (--stream-heartbeat) %v must not be negative", c.StreamHeartbeat)
	}
	if c.ShutdownGrace < 0 {
		bad("MACP_SHUTDOWN_GRACE_MS (--shutdown-grace) %v must not be negative", c.ShutdownGrace)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("MACP_LOG_LEVEL (--log-level) %q: use debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		bad("MACP_LOG_FORMAT (--log-format) %q: use text or json", c.LogFormat)
	}
	if c.TLSCertPath == "" && !c.PlaintextAllowed() {
		errs = append(errs, errors.New("no transport security configured: set MACP_TLS_CERT_PATH and MACP_TLS_KEY_PATH, "+
			"or for local development set MACP_ALLOW_PLAINTEXT=1 (--allow-plaintext) to serve plaintext, "+
			"or MACP_ALLOW_INSECURE=1 (--insecure) to serve plaintext with dev bearer identities"))
	}
	if c.GCPercent < 10 || c.GCPercent > 10000 {
		bad("MACP_GC_PERCENT (--gc-percent) %d must be between 10 and 10000", c.GCPercent)
	}
	if c.GCMinHeap < 0 {
		bad("MACP_GC_MIN_HEAP_BYTES (--gc-min-heap) %d must not be negative (0 = none)", c.GCMinHeap)
	}
	if c.MemoryLimit < 0 {
		bad("MACP_MEMORY_LIMIT_BYTES (--memory-limit) %d must not be negative (0 = automatic)", c.MemoryLimit)
	}
	errs = append(errs, c.validateAuth()...)
	errs = append(errs, c.validateLimits()...)
	errs = append(errs, c.validateSnapshots()...)
	errs = append(errs, c.validateHTTP()...)
	errs = append(errs, c.validateNATS()...)
	errs = append(errs, c.validateResume()...)
	return errors.Join(errs...)
}

// Env is the environment lookup, os.LookupEnv by default.
type Env func(string) (string, bool)

// FromEnv applies MACP_* variables to c.
func (c *Config) FromEnv(lookup Env) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var errs []error
	str := func(name string, dst *string) {
		if v, ok := lookup(name); ok && v != "" {
			*dst = v
		}
	}
	boolean := func(name string, dst *bool) {
		if v, ok := lookup(name); ok && v != "" {
			b, err := parseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", name, err))
				return
			}
			*dst = b
		}
	}
	integer := func(name string, dst *int) {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.Atoi(v)
			if errors.Is(err, strconv.ErrRange) {
				errs = append(errs, fmt.Errorf("%s: %q is out of range", name, v))
				return
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not an integer", name, v))
				return
			}
			*dst = n
		}
	}
	millis := func(name string, dst *time.Duration) {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				errs = append(errs, fmt.Errorf("%s: %q is not an integer number of milliseconds", name, v))
				return
			}
			// A time.Duration counts nanoseconds in an int64: larger
			// millisecond counts would silently wrap.
			const maxMs = int64(math.MaxInt64 / time.Millisecond)
			if err != nil || n > maxMs || n < -maxMs {
				errs = append(errs, fmt.Errorf("%s: %q is out of range (at most %d ms)", name, v, maxMs))
				return
			}
			*dst = time.Duration(n) * time.Millisecond
		}
	}
	str("MACP_BIND_ADDR", &c.BindAddr)
	str("MACP_DATA_DIR", &c.DataDir)
	boolean("MACP_MEMORY_ONLY", &c.MemoryOnly)
	boolean("MACP_STRICT_RECOVERY", &c.StrictRecovery)
	millis("MACP_EVICT_AFTER_MS", &c.EvictAfter)
	if v, ok := lookup("MACP_SESSION_RETENTION_SECS"); ok && v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > int64(math.MaxInt64/int64(time.Second)) {
			errs = append(errs, fmt.Errorf("MACP_SESSION_RETENTION_SECS: %q is not a number of seconds", v))
		} else {
			c.Retention = time.Duration(n) * time.Second
		}
	}
	boolean("MACP_ALLOW_INSECURE", &c.AllowInsecure)
	str("MACP_TLS_CERT_PATH", &c.TLSCertPath)
	str("MACP_TLS_KEY_PATH", &c.TLSKeyPath)
	integer("MACP_MAX_PAYLOAD_BYTES", &c.MaxPayloadBytes)
	millis("MACP_MAX_TTL_MS", &c.MaxTTL)
	str("MACP_PROFILE", &c.Profile)
	millis("MACP_MAX_SUSPEND_MS", &c.MaxSuspend)
	integer("MACP_MAX_PARTICIPANTS", &c.MaxParticipants)
	integer("MACP_MAX_OPEN_SESSIONS", &c.MaxOpenSessions)
	millis("MACP_START_SKEW_MS", &c.StartSkew)
	str("MACP_LOG_LEVEL", &c.LogLevel)
	str("MACP_LOG_FORMAT", &c.LogFormat)
	millis("MACP_SHUTDOWN_GRACE_MS", &c.ShutdownGrace)
	millis("MACP_STREAM_HEARTBEAT_MS", &c.StreamHeartbeat)
	str("MACP_ADMIN_ADDR", &c.AdminAddr)
	boolean("MACP_ADMIN_PPROF", &c.AdminPprof)
	integer("MACP_GC_PERCENT", &c.GCPercent)
	byteCount := func(name string, dst *int64) {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not a number of bytes", name, v))
				return
			}
			*dst = n
		}
	}
	byteCount("MACP_GC_MIN_HEAP_BYTES", &c.GCMinHeap)
	byteCount("MACP_MEMORY_LIMIT_BYTES", &c.MemoryLimit)
	errs = append(errs, c.authFromEnv(lookup)...)
	errs = append(errs, c.limitsFromEnv(lookup)...)
	errs = append(errs, c.snapshotsFromEnv(lookup)...)
	errs = append(errs, c.httpFromEnv(lookup)...)
	errs = append(errs, c.natsFromEnv(lookup)...)
	errs = append(errs, c.resumeFromEnv(lookup)...)
	return errors.Join(errs...)
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (use 1/0, true/false)", v)
}

// RegisterFlags binds command-line flags to c; flags parsed later override
// whatever c holds when RegisterFlags is called (so call FromEnv first).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.BindAddr, "addr", c.BindAddr, "gRPC listen address (MACP_BIND_ADDR)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for durable state (MACP_DATA_DIR)")
	fs.BoolVar(&c.MemoryOnly, "memory-only", c.MemoryOnly, "keep history in memory only (MACP_MEMORY_ONLY)")
	fs.BoolVar(&c.StrictRecovery, "strict-recovery", c.StrictRecovery, "refuse to start if stored history fails verification, instead of quarantining the session (MACP_STRICT_RECOVERY)")
	fs.DurationVar(&c.Retention, "retention", c.Retention, "purge terminal sessions that ended longer ago than this, 0 = keep forever (MACP_SESSION_RETENTION_SECS)")
	fs.DurationVar(&c.EvictAfter, "evict-after", c.EvictAfter, "drop ended sessions from memory after this long, 0 = never (MACP_EVICT_AFTER_MS)")
	fs.BoolVar(&c.AllowInsecure, "insecure", c.AllowInsecure, "serve plaintext and accept dev bearer identities; development only (MACP_ALLOW_INSECURE)")
	fs.StringVar(&c.TLSCertPath, "tls-cert", c.TLSCertPath, "TLS certificate file (MACP_TLS_CERT_PATH)")
	fs.StringVar(&c.TLSKeyPath, "tls-key", c.TLSKeyPath, "TLS private key file (MACP_TLS_KEY_PATH)")
	fs.IntVar(&c.MaxPayloadBytes, "max-payload-bytes", c.MaxPayloadBytes, "maximum envelope payload size (MACP_MAX_PAYLOAD_BYTES)")
	fs.DurationVar(&c.MaxTTL, "max-ttl", c.MaxTTL, "maximum session ttl (MACP_MAX_TTL_MS)")
	fs.StringVar(&c.Profile, "profile", c.Profile, "MACP profile new sessions are bound to: 2026-04 or latest (MACP_PROFILE)")
	fs.DurationVar(&c.MaxSuspend, "max-suspend", c.MaxSuspend, "cap on a session's cumulative suspended time, and the cap of sessions that ask for 0 (MACP_MAX_SUSPEND_MS)")
	fs.IntVar(&c.MaxParticipants, "max-participants", c.MaxParticipants, "maximum declared participants per session (MACP_MAX_PARTICIPANTS)")
	fs.IntVar(&c.MaxOpenSessions, "max-open-sessions", c.MaxOpenSessions, "maximum OPEN sessions per initiator, 0 = unlimited (MACP_MAX_OPEN_SESSIONS)")
	fs.DurationVar(&c.StartSkew, "start-skew", c.StartSkew, "tolerated SessionStart timestamp skew, 0 = unchecked (MACP_START_SKEW_MS)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (MACP_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json (MACP_LOG_FORMAT)")
	fs.DurationVar(&c.StreamHeartbeat, "stream-heartbeat", c.StreamHeartbeat, "heartbeat Signal interval on idle StreamSession streams, 0 = none (MACP_STREAM_HEARTBEAT_MS)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "graceful shutdown timeout (MACP_SHUTDOWN_GRACE_MS)")
	fs.StringVar(&c.AdminAddr, "admin-addr", c.AdminAddr, "admin HTTP listen address for /metrics and /healthz, empty = off; plaintext and unauthenticated, bind it to loopback or a private interface (MACP_ADMIN_ADDR)")
	fs.BoolVar(&c.AdminPprof, "admin-pprof", c.AdminPprof, "serve the Go profiler under /debug/pprof/ on the admin endpoint; exposes process internals (MACP_ADMIN_PPROF)")
	fs.IntVar(&c.GCPercent, "gc-percent", c.GCPercent, "Go GC percent of the process; GOGC wins when set (MACP_GC_PERCENT)")
	fs.Int64Var(&c.GCMinHeap, "gc-min-heap", c.GCMinHeap, "smallest Go heap target in bytes: the GC percent is raised while the live heap is small, 0 = none; not applied when GOGC is set (MACP_GC_MIN_HEAP_BYTES)")
	fs.Int64Var(&c.MemoryLimit, "memory-limit", c.MemoryLimit, "Go soft memory limit in bytes, 0 = 90% of the cgroup limit if any; GOMEMLIMIT wins when set (MACP_MEMORY_LIMIT_BYTES)")
	c.registerAuthFlags(fs)
	c.registerLimitFlags(fs)
	c.registerSnapshotFlags(fs)
	c.registerHTTPFlags(fs)
	c.registerNATSFlags(fs)
	c.registerResumeFlags(fs)
}
