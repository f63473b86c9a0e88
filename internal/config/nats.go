package config

import (
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Session ownership across nodes (MACP_CLUSTER_OWNERSHIP).
const (
	OwnershipShared      = "shared"      // every node serves and holds every session
	OwnershipPartitioned = "partitioned" // one owner node per history partition; calls forwarded to it
)

// Store backends (MACP_STORE).
const (
	StorePebble = "pebble" // embedded Pebble under MACP_DATA_DIR (default)
	StoreNATS   = "nats"   // NATS JetStream, shared by several macpd nodes (docs/cluster.md)
)

// NATSConfig selects the history store and, for MACP_STORE=nats, how to
// reach the NATS cluster (docs/cluster.md). The Pebble store stays the
// default; none of these settings matter for it.
type NATSConfig struct {
	// Store is "pebble" (default) or "nats" (MACP_STORE, --store).
	// MACP_MEMORY_ONLY overrides it with the in-memory store.
	Store string
	// URL lists the NATS servers, comma separated (MACP_NATS_URL,
	// --nats-url). Required with MACP_STORE=nats.
	URL string
	// Name prefixes the JetStream stream, bucket and subjects macpd uses
	// (MACP_NATS_NAME, --nats-name): nodes sharing sessions share it.
	Name string
	// Partitions is how many history streams a new deployment spreads its
	// sessions over, so that their leaders spread over the NATS servers
	// (MACP_NATS_PARTITIONS, --nats-partitions). 0 (the default): the
	// layout recorded when the deployment was created, 8 for a new one. A
	// non-zero value must match the recorded layout (a deployment from
	// before partitions has 1), else macpd refuses to start.
	Partitions int
	// Replicas of the stream and buckets when macpd creates them
	// (MACP_NATS_REPLICAS, --nats-replicas): 3 for a 3-server cluster, 1
	// for a single server.
	Replicas int
	// CredsFile is a NATS user credentials file (JWT + nkey seed)
	// (MACP_NATS_CREDS_FILE); NKeyFile an nkey seed file
	// (MACP_NATS_NKEY_FILE); User/Password (MACP_NATS_USER,
	// MACP_NATS_PASSWORD) and Token (MACP_NATS_TOKEN) the simpler
	// alternatives. At most one kind.
	CredsFile, NKeyFile, User, Password, Token string
	// TLSCAPath verifies the NATS servers' certificates
	// (MACP_NATS_TLS_CA_PATH); TLSCertPath/TLSKeyPath is macpd's client
	// certificate (MACP_NATS_TLS_CERT_PATH, MACP_NATS_TLS_KEY_PATH).
	TLSCAPath, TLSCertPath, TLSKeyPath string
	// Timeout bounds each JetStream request (MACP_NATS_TIMEOUT_MS).
	Timeout time.Duration
	// Bus enables the message-bus binding (MACP_NATS_BUS, --nats-bus):
	// agents submit envelopes and receive accepted ones over NATS subjects
	// (docs/cluster.md "Message-bus binding").
	Bus bool
	// Ownership is how nodes share sessions (MACP_CLUSTER_OWNERSHIP,
	// --cluster-ownership): "partitioned" (the default) leases each
	// history partition to one node, which alone holds its sessions and
	// arms their deadlines, and the others forward calls to it; "shared"
	// lets every node serve and hold every session (docs/cluster.md
	// "Ownership"). "" is the default.
	Ownership string
}

// DefaultNATS returns the NATS defaults.
func DefaultNATS() NATSConfig {
	return NATSConfig{Store: StorePebble, Name: "macp", Replicas: 3, Timeout: 5 * time.Second, Ownership: OwnershipPartitioned}
}

// MaxNATSPartitions bounds MACP_NATS_PARTITIONS (natsstore.MaxPartitions).
const MaxNATSPartitions = 64

var natsName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// validateNATS reports problems with the store selection. Called by
// Config.Validate.
func (c *Config) validateNATS() []error {
	n := &c.NATS
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch n.Store {
	case "", StorePebble:
		if n.Bus {
			bad("MACP_NATS_BUS (--nats-bus) needs MACP_STORE=nats")
		}
		return errs
	case StoreNATS:
	default:
		bad("MACP_STORE (--store) %q must be %q or %q", n.Store, StorePebble, StoreNATS)
		return errs
	}
	if c.MemoryOnly {
		bad("MACP_STORE=nats and MACP_MEMORY_ONLY (--memory-only) exclude each other")
	}
	if strings.TrimSpace(n.URL) == "" {
		bad("MACP_NATS_URL (--nats-url) must be set with MACP_STORE=nats")
	}
	if !natsName.MatchString(n.Name) {
		bad("MACP_NATS_NAME (--nats-name) %q: letters, digits, '-' and '_' only", n.Name)
	}
	if n.Partitions < 0 || n.Partitions > MaxNATSPartitions {
		bad("MACP_NATS_PARTITIONS (--nats-partitions) %d must be between 1 and %d, or 0 for the deployment's recorded layout", n.Partitions, MaxNATSPartitions)
	}
	if n.Replicas < 1 || n.Replicas > 5 {
		bad("MACP_NATS_REPLICAS (--nats-replicas) %d must be between 1 and 5", n.Replicas)
	}
	kinds := 0
	for _, set := range []bool{n.CredsFile != "", n.NKeyFile != "", n.User != "" || n.Password != "", n.Token != ""} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		bad("MACP_NATS_CREDS_FILE, MACP_NATS_NKEY_FILE, MACP_NATS_USER/MACP_NATS_PASSWORD and MACP_NATS_TOKEN: set at most one")
	}
	if (n.TLSCertPath == "") != (n.TLSKeyPath == "") {
		bad("MACP_NATS_TLS_CERT_PATH and MACP_NATS_TLS_KEY_PATH must be set together")
	}
	if n.Ownership != "" && n.Ownership != OwnershipShared && n.Ownership != OwnershipPartitioned {
		bad("MACP_CLUSTER_OWNERSHIP (--cluster-ownership) %q must be %q or %q", n.Ownership, OwnershipPartitioned, OwnershipShared)
	}
	if n.Timeout < time.Millisecond {
		bad("MACP_NATS_TIMEOUT_MS %v must be at least 1ms", n.Timeout)
	}
	return errs
}

// natsFromEnv applies the MACP_STORE and MACP_NATS_* variables.
func (c *Config) natsFromEnv(lookup Env) []error {
	n := &c.NATS
	var errs []error
	for name, dst := range map[string]*string{
		"MACP_STORE": &n.Store, "MACP_NATS_URL": &n.URL, "MACP_NATS_NAME": &n.Name,
		"MACP_NATS_CREDS_FILE": &n.CredsFile, "MACP_NATS_NKEY_FILE": &n.NKeyFile,
		"MACP_NATS_USER": &n.User, "MACP_NATS_PASSWORD": &n.Password, "MACP_NATS_TOKEN": &n.Token,
		"MACP_NATS_TLS_CA_PATH": &n.TLSCAPath, "MACP_NATS_TLS_CERT_PATH": &n.TLSCertPath, "MACP_NATS_TLS_KEY_PATH": &n.TLSKeyPath,
		"MACP_CLUSTER_OWNERSHIP": &n.Ownership,
	} {
		if v, ok := lookup(name); ok && v != "" {
			*dst = v
		}
	}
	if v, ok := lookup("MACP_NATS_REPLICAS"); ok && v != "" {
		r, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("MACP_NATS_REPLICAS: %q is not an integer", v))
		} else {
			n.Replicas = r
		}
	}
	if v, ok := lookup("MACP_NATS_PARTITIONS"); ok && v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("MACP_NATS_PARTITIONS: %q is not an integer", v))
		} else {
			n.Partitions = p
		}
	}
	if v, ok := lookup("MACP_NATS_TIMEOUT_MS"); ok && v != "" {
		ms, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			errs = append(errs, fmt.Errorf("MACP_NATS_TIMEOUT_MS: %q is not an integer number of milliseconds", v))
		} else {
			n.Timeout = time.Duration(ms) * time.Millisecond
		}
	}
	if v, ok := lookup("MACP_NATS_BUS"); ok && v != "" {
		b, err := parseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("MACP_NATS_BUS: %w", err))
		} else {
			n.Bus = b
		}
	}
	return errs
}

// registerNATSFlags binds the store selection flags (secrets and file
// paths are environment-only, like the other credentials).
func (c *Config) registerNATSFlags(fs *flag.FlagSet) {
	n := &c.NATS
	fs.StringVar(&n.Store, "store", n.Store, "history store: pebble or nats (MACP_STORE)")
	fs.StringVar(&n.URL, "nats-url", n.URL, "NATS server URLs, comma separated, for --store=nats (MACP_NATS_URL)")
	fs.StringVar(&n.Name, "nats-name", n.Name, "prefix of the JetStream stream, buckets and subjects (MACP_NATS_NAME)")
	fs.IntVar(&n.Partitions, "nats-partitions", n.Partitions, "history streams of a new deployment; 0: the recorded layout, else 8 (MACP_NATS_PARTITIONS)")
	fs.IntVar(&n.Replicas, "nats-replicas", n.Replicas, "replicas of the stream and buckets macpd creates (MACP_NATS_REPLICAS)")
	fs.DurationVar(&n.Timeout, "nats-timeout", n.Timeout, "bound of each JetStream request (MACP_NATS_TIMEOUT_MS)")
	fs.StringVar(&n.Ownership, "cluster-ownership", n.Ownership, "with --store=nats: partitioned (one owner node per partition) or shared (MACP_CLUSTER_OWNERSHIP)")
	fs.BoolVar(&n.Bus, "nats-bus", n.Bus, "serve the message-bus binding over NATS subjects (MACP_NATS_BUS)")
	fs.StringVar(&n.CredsFile, "nats-creds-file", n.CredsFile, "NATS user credentials file, JWT and nkey seed (MACP_NATS_CREDS_FILE)")
	fs.StringVar(&n.NKeyFile, "nats-nkey-file", n.NKeyFile, "NATS nkey seed file (MACP_NATS_NKEY_FILE)")
	fs.StringVar(&n.TLSCAPath, "nats-tls-ca", n.TLSCAPath, "CA bundle that verifies the NATS servers (MACP_NATS_TLS_CA_PATH)")
	fs.StringVar(&n.TLSCertPath, "nats-tls-cert", n.TLSCertPath, "macpd's client certificate for NATS (MACP_NATS_TLS_CERT_PATH)")
	fs.StringVar(&n.TLSKeyPath, "nats-tls-key", n.TLSKeyPath, "its private key (MACP_NATS_TLS_KEY_PATH)")
}
