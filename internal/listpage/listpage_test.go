package listpage

import (
	"fmt"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

func listed(n int) []*macpv1.SessionMetadata {
	out := make([]*macpv1.SessionMetadata, n)
	for i := range out {
		out[i] = &macpv1.SessionMetadata{SessionId: fmt.Sprintf("s%05d", i), StartedAtUnixMs: int64(i / 3)} // ties on started_at
	}
	return out
}

// Walking the pages visits every session once, in order, whatever the
// size; a session added before the position during the walk is not
// repeated and the walk does not skip one that existed.
func TestWalk(t *testing.T) {
	all := listed(25)
	for _, size := range []int32{1, 2, 7, 25, 26} {
		var got []string
		token := ""
		for pages := 0; ; pages++ {
			page, next, err := Page(all, size, token)
			if err != nil {
				t.Fatal(err)
			}
			if int32(len(page)) > size {
				t.Fatalf("size %d: a page of %d", size, len(page))
			}
			for _, m := range page {
				got = append(got, m.SessionId)
			}
			if next == "" {
				break
			}
			if pages == 0 && size == 7 { // a session that sorts before the position appears mid-walk
				all = append([]*macpv1.SessionMetadata{{SessionId: "a-new", StartedAtUnixMs: 0}}, all...)
			}
			token = next
		}
		if len(got) != 25 {
			t.Fatalf("size %d: walked %d sessions: %v", size, len(got), got)
		}
		for i, id := range got {
			if id != fmt.Sprintf("s%05d", i) {
				t.Fatalf("size %d: position %d is %s", size, i, id)
			}
		}
		all = listed(25)
	}
}

// No size and no token is every session in one page (April clients);
// sizes above MaxSize are capped; bad input is refused.
func TestSizesAndTokens(t *testing.T) {
	all := listed(MaxSize + 5)
	if page, next, err := Page(all, 0, ""); err != nil || len(page) != len(all) || next != "" {
		t.Fatalf("unpaged: %d sessions, next %q, %v", len(page), next, err)
	}
	page, next, err := Page(all, MaxSize+100, "")
	if err != nil || len(page) != MaxSize || next == "" {
		t.Fatalf("capped: %d sessions, next %q, %v", len(page), next, err)
	}
	if page, _, err := Page(all, 0, next); err != nil || len(page) != 5 {
		t.Fatalf("size 0 with a token: %d sessions, %v", len(page), err)
	}
	if _, _, err := Page(all, -1, ""); err != ErrBadSize {
		t.Fatalf("negative size: %v", err)
	}
	for _, bad := range []string{"x", "cDE6", "cDI6MTpz", string(make([]byte, 600))} {
		if _, _, err := Page(all, 3, bad); err != ErrBadToken {
			t.Fatalf("token %q: %v", bad, err)
		}
	}
}
