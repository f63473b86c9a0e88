package admin_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/macpd/macpd/internal/admin"
	"github.com/macpd/macpd/internal/config"
	"github.com/prometheus/client_golang/prometheus"
)

// docs/security.md "Storage faults": /healthz answers 503 with the reason
// while the health check fails (a failed store), 200 "ok" otherwise.
func TestHealthzReportsAFailedStore(t *testing.T) {
	s := admin.New(config.Config{}, prometheus.NewRegistry(), nil)
	var failed atomic.Pointer[error]
	s.SetHealth(func() error {
		if p := failed.Load(); p != nil {
			return *p
		}
		return nil
	})
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	if code, body := get(); code != http.StatusOK || body != "ok" {
		t.Fatalf("healthy: %d %q", code, body)
	}
	err := errors.New("store: failed, restart required: fdatasync: input/output error")
	failed.Store(&err)
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "restart required") {
		t.Fatalf("failed store: %d %q, want 503 with the reason", code, body)
	}
}
