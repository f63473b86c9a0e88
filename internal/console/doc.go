// Package console is macpd's built-in operator console: a few static
// pages (HTML, CSS and JavaScript embedded with embed; no build step, no
// external fonts, scripts or CDNs) served at /console/ on the HTTP
// listener. The pages use only the public HTTP/SSE API of
// internal/httpapi, so the console is also a working example of it:
//
//   - the session list reads GET /macp/sessions and then follows
//     GET /macp/sessions/events, the lifecycle feed (both filtered by the
//     caller's authorization, exactly as for any client), so new sessions
//     appear and states change without a reload; after a dropped feed it
//     re-reads the list and watches again;
//   - the session view reads GET /macp/session/{id} and follows
//     GET /macp/session/{id}/events?payload=json (decoded payloads) with
//     an EventSource opened by a single-use ticket from
//     POST /macp/auth/ticket; after a dropped connection it gets a new
//     ticket and resumes after the last sequence number it showed
//     (after_sequence, the same cursor as Last-Event-ID), so the
//     transcript has no gaps and no duplicates;
//   - the session view also reads GET /macp/session/{id}/resolution for
//     the session's bound profile (2026-04 or 2026-09) and, once RESOLVED,
//     its commitment hash; a Commitment whose payload has supersedes
//     links to the superseded session;
//   - the session's initiator gets Suspend, Resume and Cancel buttons
//     (POST /macp/session/{id}/suspend, /resume, /cancel), shown as the
//     state allows (suspend: OPEN; resume: SUSPENDED; cancel: either);
//     other identities get none, since the runtime allows only the
//     initiator. SUSPENDED is live: the feed stays open; CANCELLED (profile
//     latest) and EXPIRED end it. Lists, filters and the health counts
//     know OPEN, SUSPENDED, RESOLVED, EXPIRED and CANCELLED;
//   - the snapshot button reads GET /macp/session/{id}/state-window and
//     offers the report for download;
//   - modes, policies and health come from GET /macp/modes,
//     GET /macp/policies and GET /.well-known/macp.json.
//
// Credentials: a bearer token typed into the page is kept in the tab's
// sessionStorage and sent as an Authorization header, never in a URL;
// a browser client certificate (mTLS) needs nothing. In development mode
// (dev identities enabled) every page shows a banner and /console/?agent=ID
// acts as that dev identity (X-MACP-Agent-Id header).
//
// The handler serves only the embedded files and /console/config.json
// ({"dev": bool}); it holds no state and reads no session data itself.
package console
