package console

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Options configure the console.
type Options struct {
	// Dev reports that dev identities are enabled (MACP_ALLOW_INSECURE or
	// MACP_ALLOW_DEV_IDENTITIES): the pages show a banner and accept
	// ?agent=ID.
	Dev bool
}

// Prefix is the path the console is served under.
const Prefix = "/console/"

// Handler serves the console under Prefix.
func Handler(opts Options) http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	cfg, _ := json.Marshal(map[string]bool{"dev": opts.Dev})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The pages load only their own files and talk only to this origin.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == Prefix+"config.json" {
			h.Set("Content-Type", "application/json")
			_, _ = w.Write(cfg)
			return
		}
		files.ServeHTTP(w, r)
	})
}
