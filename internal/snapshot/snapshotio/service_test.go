package snapshotio_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
	"github.com/macpd/macpd/internal/store/memstore"
)

func filledStore(t *testing.T, hs ...*hist) *memstore.Store {
	t.Helper()
	st := memstore.New()
	for _, h := range hs {
		if err := st.Append(context.Background(), h.recs); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// The HTTP handler: the report of GET /macp/session/{id}/state-window
// names a contents_ref that GET /macp/snapshots/{ref} serves; the
// authorization callback decides both; errors carry the registry's HTTP
// status (SESSION_NOT_FOUND 404, FORBIDDEN 403, INVALID_ENVELOPE 400).
func TestHandler(t *testing.T) {
	h := resolved(t, sidA)
	st := filledStore(t, h, newHist(t, startOpts{id: sidB, t: baseMs + 1000}))
	svc, err := snapshotio.NewService(snapshotio.StoreSource{Store: st}, snapshotio.ServiceOptions{EventSource: "macpd", ServerID: "default"})
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	charged := 0
	auth := func(r *http.Request, sid string) (snapshotio.Caller, error) {
		asked = append(asked, sid)
		switch r.Header.Get("Authorization") {
		case "Bearer coord":
			return snapshotio.Caller{Viewer: snapshot.Viewer{Sender: "coord"}, Charge: func() error { charged++; return nil }}, nil
		case "Bearer limited":
			return snapshotio.Caller{Viewer: snapshot.Viewer{Sender: "coord"}, Charge: func() error { return coord.Errorf(coord.CodeRateLimited, "slow down") }}, nil
		case "":
			return snapshotio.Caller{}, coord.Errorf(coord.CodeUnauthenticated, "no credentials")
		}
		return snapshotio.Caller{}, coord.Errorf(coord.CodeForbidden, "not yours")
	}
	srv := httptest.NewServer(svc.Handler(auth))
	defer srv.Close()
	get := func(path, who string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if who != "" {
			req.Header.Set("Authorization", "Bearer "+who)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	code, body := get("/macp/session/"+sidA+"/state-window", "coord")
	if code != 200 {
		t.Fatalf("state-window: %d %s", code, body)
	}
	if err := snapshot.ValidateReportJSON(body); err != nil {
		t.Fatal(err)
	}
	var rep snapshot.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	want := seal(t, h.recs, keyOpts)
	if rep.Snapshot.StateSnapshotID != want.ID || rep.Snapshot.ContentsRef != want.ID {
		t.Fatalf("report id %s, offline id %s", rep.Snapshot.StateSnapshotID, want.ID)
	}
	code, body = get("/macp/snapshots/"+string(rep.Snapshot.ContentsRef), "coord")
	if code != 200 || string(body) != string(want.Bytes) {
		t.Fatalf("payload: %d %s", code, body)
	}

	code, body = get("/macp/session/"+sidA+"/state-window?profile=strict&decay_runs=2", "coord")
	if code != 200 {
		t.Fatalf("strict decay: %d %s", code, body)
	}
	_ = json.Unmarshal(body, &rep)
	if rep.Window.Kind != snapshot.WindowCrossSessionDecay || rep.Window.DecayRuns != 2 {
		t.Errorf("window %+v", rep.Window)
	}
	_, pay := get("/macp/snapshots/"+string(rep.Snapshot.ContentsRef), "coord")
	var p snapshot.Payload
	if err := json.Unmarshal(pay, &p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Window.Subsequent, []snapshot.ID{snapshot.Opaque("macpd", "default", sidB)}) || p.PrivacyProfile != snapshot.ProfileStrict {
		t.Errorf("decay payload window %+v profile %s", p.Window, p.PrivacyProfile)
	}
	// A decay window is charged to the caller's rate limit; a session
	// window is not.
	if charged != 1 {
		t.Errorf("charged %d times, want 1", charged)
	}

	for _, c := range []struct {
		path, who string
		status    int
	}{
		{"/macp/session/" + sidA + "/state-window", "", 401},
		{"/macp/session/" + sidA + "/state-window", "mallory", 403},
		{"/macp/session/" + sidD + "/state-window", "coord", 404},
		{"/macp/session/" + sidA + "/state-window?profile=raw", "coord", 400},
		{"/macp/session/" + sidA + "/state-window?decay_runs=0", "coord", 400},
		{"/macp/session/" + sidA + "/state-window?decay_runs=2", "limited", 429},
		{"/macp/session/" + sidA + "/state-window", "limited", 200},
		{"/macp/snapshots/" + string(want.ID), "mallory", 403},
		{"/macp/snapshots/sha256:" + "00000000000000000000000000000000000000000000000000000000000000ff", "coord", 404},
		{"/macp/snapshots/SHA256:abc", "coord", 400},
	} {
		if code, body := get(c.path, c.who); code != c.status {
			t.Errorf("%s as %q: %d %s, want %d", c.path, c.who, code, body, c.status)
		}
	}
	for _, sid := range asked {
		if sid != sidA && sid != sidD {
			t.Errorf("authorize asked about %q", sid)
		}
	}
}

// The Writer writes payload and report files that Payload then serves,
// even from a fresh Service (after a restart).
func TestWriterFiles(t *testing.T) {
	h := resolved(t, sidA)
	st := filledStore(t, h)
	dir := t.TempDir()
	o := snapshotio.ServiceOptions{EventSource: "macpd", ServerID: "default", Dir: dir}
	svc, _ := snapshotio.NewService(snapshotio.StoreSource{Store: st}, o)
	w := snapshotio.NewWriter(svc, dir, nil)
	go w.Run(context.Background())
	if !w.Enqueue(sidA) || !w.Enqueue(sidD) {
		t.Fatal("queue full")
	}
	w.Close()
	if written, failed, dropped := w.Stats(); written != 1 || failed != 1 || dropped != 0 {
		t.Fatalf("written %d failed %d dropped %d", written, failed, dropped)
	}
	want := seal(t, h.recs, keyOpts)
	rep, err := os.ReadFile(filepath.Join(dir, "reports", sidA+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.ValidateReportJSON(rep); err != nil {
		t.Fatal(err)
	}
	fresh, _ := snapshotio.NewService(snapshotio.StoreSource{Store: memstore.New()}, o)
	b, sid, err := fresh.Payload(context.Background(), string(want.ID))
	if err != nil || sid != sidA || string(b) != string(want.Bytes) {
		t.Fatalf("payload from dir: %v %q", err, sid)
	}
}

// Durable bounds what the server-side source reads.
func TestStoreSourceDurableLimit(t *testing.T) {
	h := resolved(t, sidA)
	st := filledStore(t, h)
	src := snapshotio.StoreSource{Store: st, Durable: func(string) (uint64, bool) { return 2, true }}
	recs, err := src.Records(context.Background(), sidA)
	if err != nil || len(recs) != 2 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	in, err := snapshot.InputFromHistory(recs)
	if err != nil || in.State != session.Open.Proto() {
		t.Fatalf("%v %v", in.State, err)
	}
}
