package coord_test

import (
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/sdk"
)

// The table covers the registry once each, and its columns agree: the
// close code is 4000 + the HTTP status, only RATE_LIMITED and
// INTERNAL_ERROR may be retried, a failure is never gRPC OK or UNKNOWN.
func TestCodeTable(t *testing.T) {
	rows := coord.CodeTable()
	if len(rows) != 17 {
		t.Fatalf("the table has %d rows, the registry 17 codes", len(rows))
	}
	seen := map[coord.Code]bool{}
	for _, m := range rows {
		if seen[m.Code] {
			t.Fatalf("%s listed twice", m.Code)
		}
		seen[m.Code] = true
		if m.Code.Mapping() != m || !m.Code.Known() {
			t.Errorf("%s: Mapping() = %+v, want %+v", m.Code, m.Code.Mapping(), m)
		}
		if m.CloseCode != 4000+m.HTTPStatus {
			t.Errorf("%s: close code %d, HTTP status %d", m.Code, m.CloseCode, m.HTTPStatus)
		}
		if m.GRPC == 0 || m.GRPC == 2 || m.GRPC > 16 {
			t.Errorf("%s: gRPC code %d", m.Code, m.GRPC)
		}
		wantRetry := coord.RetryNever
		switch m.Code {
		case coord.CodeRateLimited:
			wantRetry = coord.RetryBackoff
		case coord.CodeInternalError:
			wantRetry = coord.RetryTransient
		}
		if m.Retry != wantRetry || m.Code.Retryable() != (wantRetry != coord.RetryNever) {
			t.Errorf("%s: retry class %d", m.Code, m.Retry)
		}
		if m.Code.HTTPStatus() != m.HTTPStatus {
			t.Errorf("%s: HTTPStatus() = %d, table %d", m.Code, m.Code.HTTPStatus(), m.HTTPStatus)
		}
	}
	u := coord.Code("NOPE").Mapping()
	if coord.Code("NOPE").Known() || u.HTTPStatus != 500 || u.CloseCode != 4500 || u.GRPC != coord.GRPCFailedPrecondition || u.Retry != coord.RetryNever || u.Code != "NOPE" {
		t.Errorf("unknown code: %+v", u)
	}
}

// The Go SDK keeps its own copy of the codes (sdk/errors.go; the SDK
// imports no internal package). It must say what the table says: the same
// codes in the same order, the same HTTP status and whether to retry.
func TestSDKCodesMatchTable(t *testing.T) {
	rows := coord.CodeTable()
	codes := sdk.Codes()
	if len(codes) != len(rows) {
		t.Fatalf("sdk.Codes() has %d codes, the table %d", len(codes), len(rows))
	}
	for i, m := range rows {
		c := codes[i]
		if string(c) != string(m.Code) {
			t.Errorf("code %d: sdk %s, table %s", i, c, m.Code)
			continue
		}
		if !c.Known() || c.HTTPStatus() != m.HTTPStatus || c.Retryable() != (m.Retry != coord.RetryNever) {
			t.Errorf("%s: sdk known=%v http=%d retryable=%v; table %+v", c, c.Known(), c.HTTPStatus(), c.Retryable(), m)
		}
	}
	if u := sdk.Code("NOPE"); u.Known() || u.HTTPStatus() != coord.Code("NOPE").HTTPStatus() || u.Retryable() {
		t.Error("sdk and table disagree on an unknown code")
	}
}
