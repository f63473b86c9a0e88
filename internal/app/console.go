package app

import "github.com/macpd/macpd/internal/console"

// mountConsole serves the operator console (internal/console) at
// /console/ on the HTTP listener. The pages use only the public
// HTTP/SSE routes, so they are authenticated and authorized like any
// client.
func (a *App) mountConsole() {
	a.http.srv.Handle("GET "+console.Prefix, console.Handler(console.Options{Dev: a.cfg.DevIdentitiesAllowed()}))
}
