package server_test

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The server announces static inbound windows (grpc.go: no bandwidth
// estimator, so no PING and window update per burst of small Sends):
// 1 MiB per stream in its SETTINGS, 4 MiB for the connection through a
// WINDOW_UPDATE on stream 0 (HTTP/2 starts every window at 65,535).
func TestStaticFlowControlWindows(t *testing.T) {
	e := startApp(t, testConfig())
	c, err := net.Dial("tcp", e.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var streamWindow uint32
	var sawSettings bool
	var connIncrement uint32
	for !sawSettings || connIncrement == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's frames: %v (settings %v, stream window %d, connection increment %d)", err, sawSettings, streamWindow, connIncrement)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			sawSettings = true
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				streamWindow = v
			}
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connIncrement = f.Increment
			}
		}
	}
	if streamWindow != 1<<20 {
		t.Errorf("stream window %d, want %d", streamWindow, 1<<20)
	}
	if connIncrement != 4<<20-65535 {
		t.Errorf("connection window raised by %d, want to %d (+%d)", connIncrement, 4<<20, 4<<20-65535)
	}
}
