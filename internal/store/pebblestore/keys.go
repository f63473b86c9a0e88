package pebblestore

import (
	"bytes"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
)

// Key prefixes (package doc: key layout).
const (
	formatKey = "f"
	// formatValue marks a store that keeps the open set; formatV1 one
	// written before it (package doc: open set). The first writable Open
	// of a v1 store builds the set and writes v2, so that a build that
	// reads only v1 refuses the store instead of running without its open
	// set.
	formatValue = "macpd.store.v2"
	formatV1    = "macpd.store.v1"

	// openSetKey marks a store whose open set (o/) is kept: written with
	// the format marker into a new store, and once by Open into a store
	// written before the open set existed (package doc: open set).
	openSetKey   = "f/open-set"
	openSetValue = "1"

	histPrefix  = "h/"
	indexPrefix = "i/"
	openPrefix  = "o/"
	quarPrefix  = "q/"
	metaPrefix  = "m/"
)

// histStart is the first key of a session's records: h/<id> 0x00.
func histStart(id string) []byte {
	k := make([]byte, 0, len(histPrefix)+len(id)+1+8)
	k = append(k, histPrefix...)
	k = append(k, id...)
	return append(k, 0)
}

// histKey is the key of record seq of a session.
func histKey(id string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(histStart(id), seq)
}

// appendHistKey appends histKey(id, seq) to dst.
func appendHistKey(dst []byte, id string, seq uint64) []byte {
	dst = append(dst, histPrefix...)
	dst = append(dst, id...)
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// histEnd bounds a session's records from above: h/<id> 0x01.
func histEnd(id string) []byte {
	k := histStart(id)
	k[len(k)-1] = 1
	return k
}

// parseHistKey splits a key of the h/ space into session id and seq. ok is
// false for a key that does not have the layout (the id is then the best
// guess, for naming the damage).
// A key outside the h/ space (such as the 1-byte format key "f", which a
// WAL scan meets) is not a record key: "", 0, false.
func parseHistKey(k []byte) (id string, seq uint64, ok bool) {
	if !bytes.HasPrefix(k, []byte(histPrefix)) {
		return "", 0, false
	}
	rest := k[len(histPrefix):]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return string(rest), 0, false
	}
	id = string(rest[:i])
	if len(rest) != i+1+8 {
		return id, 0, false
	}
	return id, binary.BigEndian.Uint64(rest[i+1:]), true
}

// keySuffix returns what follows prefix in k; ok is false when k does not
// start with prefix. Every parser of keys checks the prefix before it
// slices: a damaged store or WAL may hold any key.
func keySuffix(k []byte, prefix string) (rest string, ok bool) {
	if !bytes.HasPrefix(k, []byte(prefix)) {
		return "", false
	}
	return string(k[len(prefix):]), true
}

// suffix is keySuffix for keys from an iterator bounded by prefix (which
// never yields another key); "" otherwise.
func suffix(k []byte, prefix string) string {
	rest, _ := keySuffix(k, prefix)
	return rest
}

func indexKey(id string) []byte { return append([]byte(indexPrefix), id...) }
func openKey(id string) []byte  { return append([]byte(openPrefix), id...) }
func quarKey(id string) []byte  { return append([]byte(quarPrefix), id...) }
func metaKey(k string) []byte   { return append([]byte(metaPrefix), k...) }

// prefixBounds are iterator bounds covering exactly the keys that start
// with prefix.
func prefixBounds(prefix string) *pebble.IterOptions {
	return &pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd([]byte(prefix))}
}

// prefixEnd returns the smallest key greater than every key starting with
// prefix (prefix is never all 0xff here).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// RecordKey is the Pebble key of record seq of a session, and IndexKey the
// key of its index entry (package doc: key layout), for tools and tests
// that inspect or deliberately damage a store's Pebble directly.
func RecordKey(sessionID string, seq uint64) []byte { return histKey(sessionID, seq) }

// IndexKey: see RecordKey.
func IndexKey(sessionID string) []byte { return indexKey(sessionID) }

// OpenKey is the key of a session's entry in the open set, and OpenSetKey
// the marker saying the store keeps one (package doc: key layout): see
// RecordKey.
func OpenKey(sessionID string) []byte { return openKey(sessionID) }

// OpenSetKey: see OpenKey.
func OpenSetKey() []byte { return []byte(openSetKey) }
