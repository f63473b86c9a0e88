package config

import (
	"strings"
	"testing"
	"time"
)

// The HTTP settings: off by default, env and flags set them, and
// Validate names the bad ones by variable.
func TestHTTPConfig(t *testing.T) {
	c := Default()
	if c.HTTP.Addr != "" || c.HTTP.Origins() != nil {
		t.Fatalf("defaults: %+v", c.HTTP)
	}
	env := map[string]string{"MACP_HTTP_ADDR": "127.0.0.1:8080", "MACP_HTTP_CORS_ORIGINS": "https://a.example, https://b.example/",
		"MACP_HTTP_KEEPALIVE_MS": "5000", "MACP_WS_MAX_SUBSCRIPTIONS": "8"}
	if err := c.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:8080" || strings.Join(c.HTTP.Origins(), " ") != "https://a.example https://b.example" ||
		c.HTTP.KeepAlive != 5*time.Second || c.HTTP.MaxSubscriptions != 8 {
		t.Fatalf("from env: %+v", c.HTTP)
	}
	c.AllowInsecure = true
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.HTTP.Addr = "nohost" },
		func(c *Config) { c.HTTP.Addr = c.BindAddr },
		func(c *Config) { c.HTTP.CORSOrigins = "console.example" },
		func(c *Config) { c.HTTP.MaxSubscriptions = -1 },
		func(c *Config) { c.HTTP.TicketTTL = time.Hour },
	} {
		d := Default()
		d.AllowInsecure = true
		bad(&d)
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "MACP_") {
			t.Errorf("%+v: %v", d.HTTP, err)
		}
	}
}
