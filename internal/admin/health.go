package admin

import (
	"net/http"
	"sync/atomic"
)

// HealthCheck reports why the process cannot serve (nil: healthy).
type HealthCheck func() error

// SetHealth makes /healthz answer 503 with the check's error while it
// fails (for example a failed store: store.ErrFailed), 200 "ok"
// otherwise.
func (s *Server) SetHealth(check HealthCheck) { s.health.Store(&check) }

type healthState struct{ check atomic.Pointer[HealthCheck] }

func (h *healthState) Store(c *HealthCheck) { h.check.Store(c) }

func (h *healthState) serve(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if c := h.check.Load(); c != nil {
		if err := (*c)(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("unhealthy: " + err.Error()))
			return
		}
	}
	_, _ = w.Write([]byte("ok"))
}
