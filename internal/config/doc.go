// Package config holds macpd's configuration: one Config struct with
// documented defaults and Validate. Sources override each other in the
// order defaults < environment (MACP_*, the reference runtime's names where
// they exist, so macpd is a drop-in replacement) < command-line flags.
package config
