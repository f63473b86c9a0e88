// Package record is the storage codec for session history, shared by every
// store (memstore, pebblestore): the binary record format, the integrity
// chain (RFC-MACP-0003 §6) and the per-session index entry.
//
// # Record values
//
// A record is stored as one self-checking value, a valid encoding of the
// protobuf message macpd.store.v1.Record (proto/macpd/store/v1/record.proto):
//
//	+--------------------------------------+------------------------+------------------------+
//	| canonical bytes (N bytes)            | 0x72 0x20 prev_hash    | 0x7a 0x20 hash         |
//	| deterministic encoding of fields 1-8 | field 14, 32 bytes     | field 15, 32 bytes     |
//	+--------------------------------------+------------------------+------------------------+
//	                                         \______ fixed 68-byte trailer ______/
//
//	hash = SHA-256(prev_hash || canonical bytes)
//
// The canonical bytes are the record without its hashes: session_id, seq,
// kind, accepted_at_ms, envelope (macp.v1.Envelope, payload bytes verbatim),
// start (the resolved policy descriptor and the computed deadline), status
// and final (macp.v1.SessionMetadata), encoded with deterministic
// marshalling at append time. Verification never re-encodes: Decode hashes
// the stored prefix exactly as it is, so the chain does not depend on the
// protobuf library's encoder staying byte-stable across versions. Because
// protobuf allows fields in any order, the whole value still decodes as a
// Record carrying prev_hash and hash.
//
// prev_hash is the hash of the session's previous record, and 32 zero bytes
// (store.ZeroHash) for seq 1. The last record's hash is the final session
// hash of a terminal session. A record is self-contained: everything replay
// needs (RFC-MACP-0003 §3) is in it.
//
// # Failures
//
// Every failure is marked with store.ErrCorrupt and names the session (and
// seq when known): a value shorter than the trailer or with a malformed
// trailer, a hash that does not match the bytes, canonical bytes that do
// not decode or carry hashes of their own, an unknown kind or status, and
// (Chain) a record out of sequence, filed under another session, or whose
// prev_hash is not its predecessor's hash.
//
// # Index entries
//
// The per-session summary (store.SessionInfo without Quarantined) is stored
// as macpd.store.v1.SessionIndex with deterministic marshalling. It is derived
// data: InfoOf(last record) recomputes it, and stores cross-check it with
// CheckIndex against the last record, whose hash is self-checked.
package record

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	storev1 "github.com/macpd/macpd/gen/macpd/store/v1"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// HashSize is the size of Hash and PrevHash.
const HashSize = sha256.Size

// Field numbers of the trailer.
const (
	fieldPrevHash protowire.Number = 14
	fieldHash     protowire.Number = 15
)

// TrailerSize is the size of the fixed trailer: two length-delimited fields
// of HashSize bytes with one-byte tags and lengths.
const TrailerSize = 2 * (2 + HashSize)

var (
	tagPrev = byte(protowire.EncodeTag(fieldPrevHash, protowire.BytesType))
	tagHash = byte(protowire.EncodeTag(fieldHash, protowire.BytesType))
)

var deterministic = proto.MarshalOptions{Deterministic: true}

// Corruptf returns an error marked with store.ErrCorrupt naming the session
// and, when seq > 0, the record.
func Corruptf(sessionID string, seq uint64, format string, args ...any) error {
	if seq > 0 {
		return fmt.Errorf("%w: session %s record %d: %s", store.ErrCorrupt, sessionID, seq, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%w: session %s: %s", store.ErrCorrupt, sessionID, fmt.Sprintf(format, args...))
}

// toProto converts rec without its hashes. It shares rec's envelope and
// final metadata (read only).
func toProto(rec session.Record) *storev1.Record {
	pb := &storev1.Record{}
	fillProto(pb, rec)
	if rec.Start != nil {
		pb.Start = &storev1.StartInfo{}
		fillStart(pb.Start, &storev1.PolicyDescriptor{}, rec.Start)
	}
	return pb
}

// fillProto sets pb's fields from rec, except Start.
func fillProto(pb *storev1.Record, rec session.Record) {
	pb.SessionId = rec.SessionID
	pb.Seq = rec.Seq
	pb.Kind = storev1.RecordKind(rec.Kind)
	pb.AcceptedAtMs = rec.AcceptedAtMs
	pb.Envelope = rec.Envelope
	pb.Status = rec.Status.Proto()
	pb.Final = rec.Final
}

func fillStart(st *storev1.StartInfo, pol *storev1.PolicyDescriptor, si *session.StartInfo) {
	p := si.Policy
	pol.Id, pol.Mode, pol.Description, pol.Rules, pol.SchemaVersion = p.ID, p.Mode, p.Description, p.Rules, p.SchemaVersion
	st.Policy = pol
	st.DeadlineMs = si.DeadlineMs
	st.Profile = si.Profile
	st.MaxSuspendMs = si.MaxSuspendMs
}

// fromProto converts a decoded record (without hashes).
func fromProto(pb *storev1.Record) (session.Record, error) {
	rec := session.Record{
		SessionID:    pb.SessionId,
		Seq:          pb.Seq,
		Kind:         session.Kind(pb.Kind),
		AcceptedAtMs: pb.AcceptedAtMs,
		Envelope:     pb.Envelope,
		Status:       session.Status(pb.Status),
		Final:        pb.Final,
	}
	if pb.Kind < storev1.RecordKind_RECORD_KIND_START || pb.Kind > storev1.RecordKind_RECORD_KIND_IMPLICIT {
		return rec, fmt.Errorf("unknown record kind %d", pb.Kind)
	}
	if pb.Status < 0 || pb.Status > macpv1.SessionState_SESSION_STATE_CANCELLED {
		return rec, fmt.Errorf("unknown status %d", pb.Status)
	}
	if pb.Start != nil {
		rec.Start = &session.StartInfo{DeadlineMs: pb.Start.DeadlineMs, Profile: pb.Start.Profile, MaxSuspendMs: pb.Start.MaxSuspendMs}
		if p := pb.Start.Policy; p != nil {
			rec.Start.Policy = policy.Descriptor{
				ID: p.Id, Mode: p.Mode, Description: p.Description, Rules: p.Rules, SchemaVersion: p.SchemaVersion,
			}
		}
	}
	return rec, nil
}

// Canonical returns the canonical bytes of rec: the deterministic encoding
// of every field but Hash and PrevHash.
func Canonical(rec session.Record) ([]byte, error) {
	return deterministic.Marshal(toProto(rec))
}

// HashOf returns SHA-256(prev || Canonical(rec)): the Hash rec gets when it
// follows a record whose Hash is prev.
func HashOf(prev []byte, rec session.Record) ([]byte, error) {
	body, err := Canonical(rec)
	if err != nil {
		return nil, err
	}
	return sum(prev, body), nil
}

func sum(prev, body []byte) []byte {
	var h [HashSize]byte
	sumInto(&h, prev, body)
	return h[:]
}

// digests recycles SHA-256 states: records are hashed on the append path.
var digests = sync.Pool{New: func() any { return sha256.New() }}

func sumInto(dst *[HashSize]byte, prev, body []byte) {
	h := digests.Get().(hash.Hash)
	h.Reset()
	h.Write(prev)
	h.Write(body)
	h.Sum(dst[:0])
	digests.Put(h)
}

// Encode returns the stored value of rec chained after prev (the previous
// record's Hash, or store.ZeroHash for Seq 1) and rec's Hash. rec.Hash and
// rec.PrevHash are ignored.
func Encode(rec session.Record, prev []byte) (value, hash []byte, err error) {
	value, err = EncodeTo(nil, rec, prev)
	if err != nil {
		return nil, nil, err
	}
	return value, value[len(value)-HashSize:], nil
}

// EncodeTo is Encode reusing dst's capacity: it returns the stored value
// of rec in dst[:0] (or a larger new slice); rec's Hash is the value's last
// HashSize bytes.
func EncodeTo(dst []byte, rec session.Record, prev []byte) ([]byte, error) {
	var e Encoder
	return e.EncodeTo(dst, rec, prev)
}

// Encoder is EncodeTo without the allocation of its protobuf messages
// per record (they escape to the heap through the marshaller): it reuses
// its own. The zero value is ready; an Encoder is not safe for concurrent
// use and keeps no reference to a record after EncodeTo returns.
type Encoder struct {
	pb    storev1.Record
	start storev1.StartInfo
	pol   storev1.PolicyDescriptor
	sum   [HashSize]byte // the hash goes through an interface: here, not on the heap per call
}

// EncodeTo is the package's EncodeTo, reusing e's messages.
func (e *Encoder) EncodeTo(dst []byte, rec session.Record, prev []byte) ([]byte, error) {
	if len(prev) != HashSize {
		return nil, fmt.Errorf("record: previous hash has %d bytes, want %d", len(prev), HashSize)
	}
	pb := &e.pb
	defer e.reset()
	fillProto(pb, rec)
	if rec.Start != nil {
		fillStart(&e.start, &e.pol, rec.Start)
		pb.Start = &e.start
	}
	size := deterministic.Size(pb)
	value := dst[:0]
	if cap(value) < size+TrailerSize {
		value = make([]byte, 0, size+TrailerSize)
	}
	value, err := deterministic.MarshalAppend(value, pb)
	if err != nil {
		return nil, fmt.Errorf("record: encoding session %s record %d: %w", rec.SessionID, rec.Seq, err)
	}
	sumInto(&e.sum, prev, value)
	value = append(value, tagPrev, HashSize)
	value = append(value, prev...)
	value = append(value, tagHash, HashSize)
	return append(value, e.sum[:]...), nil
}

// reset drops the references the messages hold (the record's envelope,
// payloads and policy) so that nothing outlives the call.
func (e *Encoder) reset() {
	e.pb.Reset()
	e.start.Reset()
	e.pol.Reset()
}

// Decode parses a stored value, checks its self hash and returns the record
// with Hash and PrevHash set. sessionID and seq name the record in errors
// (the caller's key for it) and must match the decoded record. The result
// does not alias value.
func Decode(value []byte, sessionID string, seq uint64) (session.Record, error) {
	n := len(value)
	if n < TrailerSize {
		return session.Record{}, Corruptf(sessionID, seq, "value of %d bytes is shorter than the %d-byte trailer", n, TrailerSize)
	}
	t := value[n-TrailerSize:]
	if t[0] != tagPrev || t[1] != HashSize || t[2+HashSize] != tagHash || t[3+HashSize] != HashSize {
		return session.Record{}, Corruptf(sessionID, seq, "malformed hash trailer")
	}
	body, prev, hash := value[:n-TrailerSize], t[2:2+HashSize], t[4+HashSize:]
	if !bytes.Equal(sum(prev, body), hash) {
		return session.Record{}, Corruptf(sessionID, seq, "hash mismatch: the record's bytes changed after it was written")
	}
	var pb storev1.Record
	if err := proto.Unmarshal(body, &pb); err != nil {
		return session.Record{}, Corruptf(sessionID, seq, "undecodable record: %v", err)
	}
	if len(pb.PrevHash) != 0 || len(pb.Hash) != 0 {
		return session.Record{}, Corruptf(sessionID, seq, "canonical bytes carry hashes")
	}
	rec, err := fromProto(&pb)
	if err != nil {
		return session.Record{}, Corruptf(sessionID, seq, "%v", err)
	}
	if rec.SessionID != sessionID || rec.Seq != seq {
		return session.Record{}, Corruptf(sessionID, seq, "stored record is session %q record %d", rec.SessionID, rec.Seq)
	}
	rec.PrevHash = bytes.Clone(prev)
	rec.Hash = bytes.Clone(hash)
	return rec, nil
}

// Chain checks that decoded records follow each other within one session.
type Chain struct {
	SessionID string
	// Seq and Hash are those of the last record checked (0 and
	// store.ZeroHash before the first record).
	Seq  uint64
	Hash []byte
}

// NewChain starts checking a session's history from its first record.
func NewChain(sessionID string) *Chain {
	return &Chain{SessionID: sessionID, Hash: store.ZeroHash}
}

// Next checks that rec follows the last checked record: same session, next
// Seq, PrevHash equal to the last Hash. It then advances to rec.
func (c *Chain) Next(rec session.Record) error {
	switch {
	case rec.SessionID != c.SessionID:
		return Corruptf(c.SessionID, rec.Seq, "record of session %q in this history", rec.SessionID)
	case rec.Seq != c.Seq+1:
		return Corruptf(c.SessionID, c.Seq+1, "missing record: found record %d after %d", rec.Seq, c.Seq)
	case !bytes.Equal(rec.PrevHash, c.Hash):
		return Corruptf(c.SessionID, rec.Seq, "chain broken: prev_hash is not the hash of record %d", c.Seq)
	}
	c.Seq, c.Hash = rec.Seq, rec.Hash
	return nil
}

// InfoOf returns the summary of a session whose last record is last.
func InfoOf(last session.Record) store.SessionInfo {
	info := store.SessionInfo{
		SessionID:      last.SessionID,
		LastSeq:        last.Seq,
		Status:         last.Status,
		LastAcceptedMs: last.AcceptedAtMs,
		LastHash:       last.Hash,
	}
	if last.Final != nil {
		info.Final = proto.Clone(last.Final).(*macpv1.SessionMetadata)
	}
	return info
}

// EncodeIndex returns the stored index entry for info.
func EncodeIndex(info store.SessionInfo) ([]byte, error) {
	return EncodeIndexTo(nil, info)
}

// EncodeIndexTo is EncodeIndex reusing dst's capacity.
func EncodeIndexTo(dst []byte, info store.SessionInfo) ([]byte, error) {
	return deterministic.MarshalAppend(dst[:0], &storev1.SessionIndex{
		SessionId:      info.SessionID,
		LastSeq:        info.LastSeq,
		Status:         info.Status.Proto(),
		LastAcceptedMs: info.LastAcceptedMs,
		LastHash:       info.LastHash,
		Final:          info.Final,
	})
}

// DecodeIndex parses an index entry stored under sessionID.
func DecodeIndex(b []byte, sessionID string) (store.SessionInfo, error) {
	var pb storev1.SessionIndex
	if err := proto.Unmarshal(b, &pb); err != nil {
		return store.SessionInfo{SessionID: sessionID}, Corruptf(sessionID, 0, "undecodable index entry: %v", err)
	}
	info := store.SessionInfo{
		SessionID:      pb.SessionId,
		LastSeq:        pb.LastSeq,
		Status:         session.Status(pb.Status),
		LastAcceptedMs: pb.LastAcceptedMs,
		LastHash:       pb.LastHash,
		Final:          pb.Final,
	}
	switch {
	case pb.SessionId != sessionID:
		return info, Corruptf(sessionID, 0, "index entry names session %q", pb.SessionId)
	case pb.LastSeq == 0:
		return info, Corruptf(sessionID, 0, "index entry has no last record")
	case pb.Status < 0 || pb.Status > macpv1.SessionState_SESSION_STATE_CANCELLED:
		return info, Corruptf(sessionID, 0, "index entry has unknown status %d", pb.Status)
	}
	return info, nil
}

// CheckIndex cross-checks an index entry against the session's last record
// (already decoded, so self-checked).
func CheckIndex(info store.SessionInfo, last session.Record) error {
	want := InfoOf(last)
	switch {
	case info.LastSeq != want.LastSeq:
		return Corruptf(info.SessionID, 0, "index says the last record is %d, found %d", info.LastSeq, want.LastSeq)
	case !bytes.Equal(info.LastHash, want.LastHash):
		return Corruptf(info.SessionID, want.LastSeq, "index hash differs from the last record's hash")
	case info.Status != want.Status || info.LastAcceptedMs != want.LastAcceptedMs || !proto.Equal(info.Final, want.Final):
		return Corruptf(info.SessionID, want.LastSeq, "index summary differs from the last record")
	}
	return nil
}
