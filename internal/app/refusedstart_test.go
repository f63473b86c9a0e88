package app_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
)

// Issue 26 item 7: a start refused for its configuration (here: no
// authenticator, and a TLS certificate that does not exist) writes
// nothing to disk: no data store is created.
func TestRefusedStartCreatesNoDataStore(t *testing.T) {
	for name, mod := range map[string]func(*config.Config){
		"no authenticator": func(c *config.Config) {},
		"missing certificate": func(c *config.Config) {
			c.AllowInsecure = true
			c.TLSCertPath, c.TLSKeyPath = filepath.Join(t.TempDir(), "none.pem"), filepath.Join(t.TempDir(), "none.key")
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config.Default()
			cfg.BindAddr = "127.0.0.1:0"
			cfg.MemoryOnly = false
			cfg.DataDir = filepath.Join(t.TempDir(), "data")
			cfg.Auth.AllowPlaintext = true
			mod(&cfg)
			a, err := app.New(cfg, nil)
			if err == nil {
				a.Shutdown(t.Context())
				t.Fatal("the start was not refused")
			}
			if _, serr := os.Stat(cfg.DataDir); !os.IsNotExist(serr) {
				t.Fatalf("refused start (%v) created %s: %v", err, cfg.DataDir, serr)
			}
		})
	}
}
