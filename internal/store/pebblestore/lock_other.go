//go:build !(linux || darwin)

package pebblestore

// lockHolder is unknown on this platform.
func lockHolder(string) int { return 0 }
