package config

import (
	"strings"
	"testing"
	"time"
)

// MACP_STORE=nats with its settings; the Pebble store stays the default.
func TestNATSFromEnvAndValidate(t *testing.T) {
	c := Default()
	c.AllowInsecure = true
	if c.NATS.Store != StorePebble {
		t.Fatalf("default store %q", c.NATS.Store)
	}
	env := map[string]string{
		"MACP_STORE": "nats", "MACP_NATS_URL": "nats://a:4222,nats://b:4222", "MACP_NATS_NAME": "prod",
		"MACP_NATS_REPLICAS": "5", "MACP_NATS_CREDS_FILE": "/etc/macp/nats.creds", "MACP_NATS_TLS_CA_PATH": "/ca.pem",
		"MACP_NATS_TIMEOUT_MS": "2500", "MACP_NATS_BUS": "1", "MACP_NATS_PARTITIONS": "16",
		"MACP_CLUSTER_OWNERSHIP": "shared",
	}
	if err := c.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	want := NATSConfig{Store: "nats", URL: "nats://a:4222,nats://b:4222", Name: "prod", Partitions: 16, Replicas: 5,
		CredsFile: "/etc/macp/nats.creds", TLSCAPath: "/ca.pem", Timeout: 2500 * time.Millisecond, Bus: true, Ownership: OwnershipShared}
	if c.NATS != want {
		t.Fatalf("got %+v\nwant %+v", c.NATS, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"MACP_NATS_URL":          func(c *Config) { c.NATS.URL = "" },
		"MACP_MEMORY_ONLY":       func(c *Config) { c.MemoryOnly = true },
		"MACP_NATS_NAME":         func(c *Config) { c.NATS.Name = "a.b" },
		"MACP_NATS_REPLICAS":     func(c *Config) { c.NATS.Replicas = 0 },
		"MACP_NATS_PARTITIONS":   func(c *Config) { c.NATS.Partitions = 65 },
		"set at most one":        func(c *Config) { c.NATS.Token = "t" },
		"MACP_NATS_TLS_CERT":     func(c *Config) { c.NATS.TLSCertPath = "c" },
		"MACP_STORE (--store)":   func(c *Config) { c.NATS.Store = "etcd" },
		"MACP_NATS_BUS":          func(c *Config) { c.NATS.Store = StorePebble },
		"MACP_CLUSTER_OWNERSHIP": func(c *Config) { c.NATS.Ownership = "sticky" },
	} {
		bad := c
		mut(&bad)
		err := bad.Validate()
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
	if err := c.FromEnv(func(k string) (string, bool) {
		return map[string]string{"MACP_NATS_REPLICAS": "x"}[k], k == "MACP_NATS_REPLICAS"
	}); err == nil {
		t.Fatal("bad MACP_NATS_REPLICAS accepted")
	}
	if err := c.FromEnv(func(k string) (string, bool) {
		return map[string]string{"MACP_NATS_PARTITIONS": "eight"}[k], k == "MACP_NATS_PARTITIONS"
	}); err == nil {
		t.Fatal("bad MACP_NATS_PARTITIONS accepted")
	}
	if c := Default(); c.NATS.Ownership != OwnershipPartitioned {
		t.Fatalf("default ownership %q", c.NATS.Ownership)
	}
	if c := Default(); c.NATS.Partitions != 0 {
		t.Fatalf("default MACP_NATS_PARTITIONS %d, want 0 (the recorded layout, 8 for a new deployment)", c.NATS.Partitions)
	}
}
