package app

import (
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
	"github.com/macpd/macpd/internal/streambudget"
)

// Abuse limits from the configuration (docs/security.md "Limits").

// runtimeRates are the per-sender rates the runtime enforces.
func runtimeRates(cfg config.Config) runtime.RateLimits {
	return runtime.RateLimits{
		SessionStartsPerMinute: cfg.Limits.SessionStartsPerMinute,
		MessagesPerMinute:      cfg.Limits.MessagesPerMinute,
	}
}

// serverLimits are the transport limits of the gRPC binding.
func serverLimits(cfg config.Config) server.Limits { return cfg.Limits.Transport }

// streamBuffers are the bounds of stream buffers (internal/streambudget).
func streamBuffers(cfg config.Config) streambudget.Options {
	stall := cfg.Limits.StreamStallTimeout
	if stall == 0 {
		stall = -1 // never
	}
	return streambudget.Options{
		PerStream:    cfg.Limits.StreamBufferBytes,
		Total:        cfg.Limits.StreamBufferBudgetBytes,
		PerIdentity:  cfg.Limits.StreamBufferIdentityBytes,
		PerSession:   cfg.Limits.StreamBufferSessionBytes,
		StallTimeout: stall,
	}
}

// registryLimits bound registered extension modes and policies.
func registryLimits(cfg config.Config) registry.Limits {
	return registry.Limits{
		MaxExtModes:        cfg.Limits.MaxExtModes,
		MaxPolicies:        cfg.Limits.MaxPolicies,
		MaxDescriptorBytes: cfg.Limits.MaxDescriptorBytes,
	}
}

// commitsInFlight is the runtime's commit pipeline depth for the store:
// the runtime's default for Pebble, whose syncs coalesce on one disk;
// deeper for NATS, where each append is a replicated round trip and the
// store pipelines appends (natsstore.AppendAsync), so that the groups of
// many concurrent clients are in flight together (docs/cluster.md).
func commitsInFlight(cfg config.Config) int {
	if cfg.NATS.Store == config.StoreNATS {
		return 32
	}
	return 0
}
