// macpd console: plain JavaScript over the public HTTP/SSE API (see
// internal/console/doc.go). Every piece of session data is inserted as
// text (textContent), never as HTML.
"use strict";
(() => {
  const S = {
    dev: false, agent: null, token: null, sender: "",
    sessions: [], listTimer: null, listGen: 0,
    sid: null, feed: null, feedGen: 0, feedConnects: 0, feedDone: false,
    lastSeq: 0, gaps: 0, duplicates: 0, rows: [], metaTimer: null,
    res: null, // GET /macp/session/{id}/resolution: bound profile, commitment hash
  };
  window.macpConsole = S; // read by the browser tests and handy in devtools

  const $ = (id) => document.getElementById(id);
  const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; };
  const stateName = (s) => String(s || "").replace("SESSION_STATE_", "");
  // Live states may still change; RESOLVED, EXPIRED and CANCELLED are final.
  const live = (st) => st === "SESSION_STATE_OPEN" || st === "SESSION_STATE_SUSPENDED";
  const when = (ms) => { const n = Number(ms); return n > 0 ? new Date(n).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "—"; };

  class APIError extends Error {
    constructor(status, body) {
      super((body && (body.code ? body.code + ": " + (body.message || "") : body.message)) || ("HTTP " + status));
      this.status = status; this.body = body;
    }
  }

  function authHeaders() {
    if (S.token) return { Authorization: "Bearer " + S.token };
    if (S.agent) return { "X-MACP-Agent-Id": S.agent };
    return {}; // a browser client certificate (mTLS), or nothing
  }

  async function api(path, opts = {}) {
    const r = await fetch(path, { ...opts, headers: { ...authHeaders(), ...(opts.headers || {}) }, cache: "no-store", credentials: "same-origin" });
    const text = await r.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
    if (!r.ok) throw new APIError(r.status, body);
    return body;
  }

  // devHint: in development mode an UNAUTHENTICATED answer to a page
  // without an identity most likely means it was opened without ?agent=ID.
  function devHint(e) {
    if (!S.dev || S.agent || S.token || !e || e.status !== 401) return "";
    return " — development mode: open the console as " + location.pathname + "?agent=ID (for example ?agent=coord) to act as a dev identity";
  }

  function showError(e) {
    const p = $("error");
    if (!e) { p.hidden = true; p.textContent = ""; return; }
    p.hidden = false; p.textContent = String(e.message || e) + devHint(e);
  }

  // --- identity --------------------------------------------------------
  async function whoami() {
    const w = $("whoami");
    try {
      // A ticket names the identity it was issued to: the cheapest way to
      // learn who the server thinks we are.
      const t = await api("/macp/auth/ticket", { method: "POST" });
      S.sender = t.sender || "";
      w.textContent = "Signed in as " + S.sender;
    } catch (e) {
      S.sender = "";
      w.textContent = e.status === 401 ? "Not signed in" + devHint(e) : "Identity unknown (" + e.message + ")";
    }
  }

  // --- routing ---------------------------------------------------------
  const pages = ["sessions", "session", "modes", "health"];
  function route() {
    const h = location.hash.replace(/^#/, "") || "/";
    const m = h.match(/^\/session\/(.+)$/);
    stopList(); stopSession();
    showError(null);
    let page = "sessions";
    if (m) page = "session";
    else if (h === "/modes") page = "modes";
    else if (h === "/health") page = "health";
    for (const p of pages) $("page-" + p).hidden = p !== page;
    for (const [id, p] of [["nav-sessions", "sessions"], ["nav-modes", "modes"], ["nav-health", "health"]]) {
      if (p === page) $(id).setAttribute("aria-current", "page"); else $(id).removeAttribute("aria-current");
    }
    if (page === "sessions") startList();
    if (page === "session") openSession(decodeURIComponent(m[1]));
    if (page === "modes") loadModes();
    if (page === "health") loadHealth();
  }

  // --- session list ----------------------------------------------------
  // Reads GET /macp/sessions, then follows GET /macp/sessions/events (the
  // lifecycle feed) with a single-use ticket; both are filtered by the
  // caller's authorization on the server, exactly as for an agent. After a
  // dropped feed it re-reads the list and watches again.
  function startList() {
    const gen = ++S.listGen;
    const sync = async (attempt) => {
      if (gen !== S.listGen) return;
      const again = (ms) => { if (gen === S.listGen) S.listTimer = setTimeout(() => sync(attempt + 1), ms); };
      let ticket;
      try {
        const r = await api("/macp/sessions");
        if (gen !== S.listGen) return;
        S.sessions = (r && r.sessions) || [];
        renderList();
        ticket = (await api("/macp/auth/ticket", { method: "POST" })).ticket;
        showError(null);
      } catch (e) {
        showError(e); again(Math.min(10000, 1000 * (attempt + 1))); return;
      }
      if (gen !== S.listGen) return;
      const es = new EventSource("/macp/sessions/events?ticket=" + encodeURIComponent(ticket));
      S.listFeed = es;
      es.onopen = () => { attempt = 0; S.listConnects = (S.listConnects || 0) + 1; $("list-status").textContent = "Live (" + S.sessions.length + " visible to this identity)"; };
      es.addEventListener("lifecycle", (ev) => {
        let e; try { e = JSON.parse(ev.data); } catch (_) { return; }
        const md = e.session; if (!md || !md.session_id) return;
        const i = S.sessions.findIndex((x) => x.session_id === md.session_id);
        if (i >= 0) S.sessions[i] = md; else S.sessions.push(md);
        renderList();
        $("list-status").textContent = "Live (" + S.sessions.length + " visible to this identity); last change " + new Date().toLocaleTimeString();
      });
      es.onerror = () => {
        es.close();
        if (gen !== S.listGen) return;
        $("list-status").textContent = "Connection lost; reconnecting…";
        again(500);
      };
    };
    sync(0);
  }
  function stopList() { S.listGen++; clearTimeout(S.listTimer); if (S.listFeed) { S.listFeed.close(); S.listFeed = null; } }

  function renderList() {
    const fs = $("f-state").value, fm = $("f-mode").value, fp = $("f-participant").value.trim().toLowerCase();
    const modeSel = $("f-mode");
    const modes = new Set(S.sessions.map((s) => s.mode));
    for (const m of modes) {
      if (![...modeSel.options].some((o) => o.value === m)) modeSel.append(new Option(m, m));
    }
    const list = S.sessions.filter((s) =>
      (!fs || s.state === fs) && (!fm || s.mode === fm) &&
      (!fp || [s.initiator, ...(s.participants || [])].some((p) => String(p).toLowerCase().includes(fp))));
    list.sort((a, b) => Number(b.started_at_unix_ms) - Number(a.started_at_unix_ms) || String(a.session_id).localeCompare(b.session_id));
    const tb = $("sessions").tBodies[0];
    const rows = list.map((s) => {
      const tr = el("tr");
      tr.dataset.sid = s.session_id; tr.dataset.state = stateName(s.state);
      const a = el("a", s.session_id); a.href = "#/session/" + encodeURIComponent(s.session_id);
      const td = el("td"); td.append(a); tr.append(td);
      const st = el("td"); st.append(el("span", stateName(s.state), "state " + stateName(s.state))); tr.append(st);
      tr.append(el("td", s.mode), el("td", s.initiator), el("td", (s.participants || []).join(", ")), el("td", when(s.started_at_unix_ms)), el("td", when(s.expires_at_unix_ms)));
      return tr;
    });
    // Keep keyboard focus on the link it was on across refreshes.
    const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest("#sessions tr");
    const fsid = focused && focused.dataset.sid;
    tb.replaceChildren(...rows);
    if (!rows.length) { const tr = el("tr"); const td = el("td", "No sessions match.", "muted"); td.colSpan = 7; tr.append(td); tb.append(tr); }
    if (fsid) { const r = tb.querySelector('tr[data-sid="' + CSS.escape(fsid) + '"] a'); if (r) r.focus(); }
  }
  for (const id of ["f-state", "f-mode", "f-participant"]) $(id).addEventListener("input", renderList);
  $("filters").addEventListener("submit", (e) => e.preventDefault());

  // --- session view ----------------------------------------------------
  function stopSession() {
    S.feedGen++;
    if (S.feed) { S.feed.close(); S.feed = null; }
    clearTimeout(S.metaTimer);
  }

  function openSession(sid) {
    S.sid = sid; S.lastSeq = 0; S.rows = []; S.gaps = 0; S.duplicates = 0; S.feedDone = false; S.feedConnects = 0; S.res = null; S.meta = null; S.pausedShown = false;
    $("s-id").textContent = sid; $("s-state").textContent = ""; $("s-state").className = "state";
    $("s-meta").replaceChildren(); $("s-parts").tBodies[0].replaceChildren();
    $("transcript").tBodies[0].replaceChildren(); $("trail").replaceChildren();
    $("snap-out").textContent = ""; $("act-status").textContent = ""; $("s-controls").hidden = true;
    const gen = S.feedGen;
    const meta = async () => {
      if (gen !== S.feedGen) return;
      try {
        const m = await api("/macp/session/" + encodeURIComponent(sid));
        // The bound profile never changes; the commitment hash appears
        // once the session is RESOLVED: re-read only when the state moved.
        if (!S.res || S.res.state !== m.state) S.res = await api("/macp/session/" + encodeURIComponent(sid) + "/resolution");
        if (gen !== S.feedGen) return;
        renderMeta(m); showError(null);
      } catch (e) { if (gen === S.feedGen) showError(e); }
      if (gen === S.feedGen) S.metaTimer = setTimeout(meta, 2000);
    };
    meta();
    openFeed(sid, gen, 0);
  }

  function renderMeta(m) {
    S.meta = m;
    const st = stateName(m.state);
    $("s-state").textContent = st; $("s-state").className = "state " + st;
    $("page-session").dataset.state = st;
    const dl = $("s-meta");
    const pairs = [["Mode", m.mode], ["Mode version", m.mode_version], ["Configuration version", m.configuration_version],
      ["Policy version", m.policy_version], ["Initiator", m.initiator], ["Participants", (m.participants || []).join(", ")],
      ["Started", when(m.started_at_unix_ms)], ["Expires", when(m.expires_at_unix_ms)], ["Context id", m.context_id || "—"],
      ["Profile", (S.res && S.res.profile) || "—"]];
    if (S.res && S.res.commitment_hash) pairs.push(["Commitment hash", S.res.commitment_hash]);
    dl.replaceChildren(...pairs.flatMap(([k, v]) => { const dd = el("dd", v); dd.dataset.key = k; return [el("dt", k), dd]; }));
    renderControls(m);
    renderTrail();
    // A SUSPENDED session is not over: its feed stays open and delivers the
    // SessionResume (or SessionCancel) when it comes.
    if (!S.feedDone && S.feedConnects > 0) {
      if (st === "SUSPENDED") { S.pausedShown = true; feedStatus("Suspended after seq " + S.lastSeq + "; still following (nothing arrives until the initiator resumes or cancels it)"); }
      else if (S.pausedShown) { S.pausedShown = false; feedStatus("Following live"); }
    }
    const acts = new Map((m.participant_activity || []).map((a) => [a.participant_id, a]));
    const names = [...new Set([m.initiator, ...(m.participants || []), ...acts.keys()])].filter(Boolean);
    $("s-parts").tBodies[0].replaceChildren(...names.map((n) => {
      const a = acts.get(n) || {};
      const tr = el("tr"); tr.append(el("td", n), el("td", a.message_count || 0), el("td", when(a.last_message_at_unix_ms))); return tr;
    }));
  }

  // --- suspend, resume, cancel ---------------------------------------------
  // Shown to the session's initiator only: the runtime allows nobody else
  // (FORBIDDEN), so other identities see no buttons. Suspend needs OPEN,
  // resume SUSPENDED, cancel either.
  function renderControls(m) {
    const mine = !!S.sender && m.initiator === S.sender;
    const st = m.state;
    $("act-suspend").hidden = st !== "SESSION_STATE_OPEN";
    $("act-resume").hidden = st !== "SESSION_STATE_SUSPENDED";
    $("act-cancel").hidden = !live(st);
    $("s-controls").hidden = !mine || !live(st);
  }
  async function control(op) {
    const sid = S.sid, out = $("act-status");
    out.textContent = op + "…";
    try {
      const ack = await api("/macp/session/" + encodeURIComponent(sid) + "/" + op, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ reason: op + " from the console" }) });
      if (sid !== S.sid) return;
      out.textContent = op + ": " + stateName(ack && ack.session_state);
      const m = await api("/macp/session/" + encodeURIComponent(sid));
      const res = await api("/macp/session/" + encodeURIComponent(sid) + "/resolution"); // the state moved
      if (sid !== S.sid) return;
      S.res = res; renderMeta(m);
    } catch (e) { if (sid === S.sid) out.textContent = op + " refused: " + e.message; }
  }
  for (const op of ["suspend", "resume", "cancel"]) $("act-" + op).addEventListener("click", () => control(op));

  function feedStatus(t) { $("feed-status").textContent = t; }

  // openFeed follows the session's SSE feed from S.lastSeq with a fresh
  // single-use ticket; after a drop it resumes from the last sequence
  // number shown (the server's cursor; the same as Last-Event-ID).
  async function openFeed(sid, gen, attempt) {
    if (gen !== S.feedGen || S.feedDone) return;
    const retry = (ms) => setTimeout(() => openFeed(sid, gen, attempt + 1), ms);
    let ticket;
    try { ticket = (await api("/macp/auth/ticket", { method: "POST" })).ticket; }
    catch (e) { feedStatus("Cannot get a stream ticket: " + e.message + "; retrying"); retry(Math.min(10000, 1000 * (attempt + 1))); return; }
    if (gen !== S.feedGen) return;
    const url = "/macp/session/" + encodeURIComponent(sid) + "/events?payload=json&after_sequence=" + S.lastSeq + "&ticket=" + encodeURIComponent(ticket);
    const es = new EventSource(url);
    S.feed = es;
    let opened = false;
    es.onopen = () => { opened = true; attempt = 0; S.feedConnects++; feedStatus("Following live" + (S.feedConnects > 1 ? " (resumed after seq " + S.lastSeq + ")" : "")); };
    es.onmessage = (ev) => {
      const seq = Number(ev.lastEventId);
      if (seq <= S.lastSeq) { S.duplicates++; return; }
      if (seq !== S.lastSeq + 1) S.gaps++;
      S.lastSeq = seq;
      let env; try { env = JSON.parse(ev.data); } catch (_) { env = { message_type: "?", payload: ev.data }; }
      addRow(seq, env);
    };
    es.addEventListener("end", () => {
      es.close(); S.feedDone = true;
      feedStatus("Session ended; transcript complete (" + S.lastSeq + " envelopes)");
    });
    // Final: this identity resumed the session on another connection
    // (session/resume makes it the only active one); do not reconnect.
    es.addEventListener("superseded", () => {
      es.close(); S.feedDone = true; S.superseded = true;
      feedStatus("Stopped after seq " + S.lastSeq + ": you resumed this session on another connection");
    });
    es.onerror = async () => {
      es.close();
      if (gen !== S.feedGen || S.feedDone) return;
      if (!opened) {
        // 204 (terminal, nothing left) or a refusal: ask the session.
        try {
          const m = await api("/macp/session/" + encodeURIComponent(sid));
          if (!live(m.state) && S.lastSeq > 0) { S.feedDone = true; feedStatus("Session ended; transcript complete (" + S.lastSeq + " envelopes)"); return; }
        } catch (e) { showError(e); }
      }
      feedStatus("Connection lost; resuming after seq " + S.lastSeq + "…");
      retry(opened ? 300 : Math.min(10000, 1000 * (attempt + 1)));
    };
  }

  function addRow(seq, env) {
    S.rows.push({ seq, sender: env.sender, type: env.message_type, id: env.message_id, payload: env.payload });
    const tr = el("tr"); tr.dataset.seq = seq;
    const pre = el("pre", typeof env.payload === "string" ? env.payload : JSON.stringify(env.payload, null, 1));
    const td = el("td"); td.append(pre);
    tr.append(el("td", seq), el("td", env.sender), el("td", env.message_type), el("td", env.message_id), td);
    $("transcript").tBodies[0].append(tr);
    renderTrail();
  }

  // --- decision trail ----------------------------------------------------
  // One block per subject (proposal, task, handoff or approval request):
  // what was put forward, then who answered what, with a tally; then the
  // commitment. Field names are those of the standard modes' payloads.
  const SUBJECT = ["proposal_id", "task_id", "handoff_id", "request_id"];
  const FIELDS = ["option", "title", "summary", "vote", "recommendation", "confidence", "severity", "reason", "rationale", "status", "progress", "output", "error", "target_participant", "scope", "action", "outcome_positive", "authority_scope"];
  // Tallies are kept per kind of answer, never mixed: a Decision Vote and
  // an Evaluation's recommendation are different questions, and a Quorum
  // ballot is its message type.
  function tallyKey(r) {
    const p = r.payload || {};
    if (r.type === "Vote" && p.vote) return ["Votes", String(p.vote)];
    if (r.type === "Evaluation" && p.recommendation) return ["Evaluations", String(p.recommendation)];
    if (["Approve", "Reject", "Abstain"].includes(r.type) && p.request_id !== undefined) return ["Ballots", r.type.toUpperCase()];
    return null;
  }
  function tallyText(tallies) {
    return [...tallies].map(([kind, m]) => kind + ": " + [...m].map(([k, n]) => k + " " + n).join(", ")).join(" · ");
  }
  const short = (v) => { const s = typeof v === "object" ? JSON.stringify(v) : String(v); return s.length > 80 ? s.slice(0, 77) + "…" : s; };
  function summary(p) {
    if (!p || typeof p !== "object") return "";
    return FIELDS.filter((k) => p[k] !== undefined && p[k] !== "").map((k) => k.replace(/_/g, " ") + ": " + short(p[k])).join("; ");
  }
  function renderTrail() {
    const box = $("trail");
    const groups = new Map(); const loose = []; let commit = null;
    for (const r of S.rows) {
      if (r.type === "SessionStart") continue;
      if (r.type === "Commitment") { commit = r; continue; }
      const p = r.payload || {};
      const key = SUBJECT.map((k) => p[k]).find((v) => v !== undefined && v !== "");
      if (key === undefined) { loose.push(r); continue; }
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(r);
    }
    const out = [];
    for (const [key, rs] of groups) {
      const d = el("div", null, "trail-item"); d.dataset.subject = key;
      d.append(el("strong", key + " — " + (summary(rs[0].payload) || rs[0].type)));
      const ul = el("ul");
      const tally = new Map();
      for (const r of rs) {
        ul.append(el("li", r.sender + " · " + r.type + (summary(r.payload) ? " · " + summary(r.payload) : "")));
        const tk = tallyKey(r);
        if (tk) {
          if (!tally.has(tk[0])) tally.set(tk[0], new Map());
          const m = tally.get(tk[0]); m.set(tk[1], (m.get(tk[1]) || 0) + 1);
        }
        if (["Reject", "Objection", "TaskFail", "HandoffDecline"].includes(r.type)) d.classList.add("neg");
      }
      d.append(ul);
      if (tally.size) d.append(el("div", tallyText(tally), "tally"));
      out.push(d);
    }
    for (const r of loose) out.push(el("div", r.sender + " · " + r.type + (summary(r.payload) ? " · " + summary(r.payload) : ""), "trail-item"));
    if (commit) {
      const d = el("div", null, "trail-item commit"); d.id = "trail-commitment";
      const pos = commit.payload && commit.payload.outcome_positive;
      d.append(el("strong", "Commitment by " + commit.sender + (pos === false ? " (negative outcome)" : "")), el("div", summary(commit.payload)));
      // A Commitment that supersedes an earlier one links to its session.
      const sup = commit.payload && commit.payload.supersedes;
      if (sup && sup.session_id) {
        const p = el("div", "Supersedes the commitment of session ");
        const a = el("a", sup.session_id); a.id = "trail-supersedes"; a.href = "#/session/" + encodeURIComponent(sup.session_id);
        p.append(a, el("span", " (" + (sup.commitment_hash || "no hash") + ")", "muted"));
        d.append(p);
      }
      if (S.res && S.res.commitment_hash) d.append(el("div", "commitment hash " + S.res.commitment_hash, "muted"));
      out.push(d);
    }
    if (!out.length) out.push(el("p", "Nothing proposed yet.", "muted"));
    box.replaceChildren(...out);
  }

  // --- snapshot --------------------------------------------------------
  function findKey(o, k) {
    if (!o || typeof o !== "object") return undefined;
    if (o[k] !== undefined) return o[k];
    for (const v of Object.values(o)) { const f = findKey(v, k); if (f !== undefined) return f; }
    return undefined;
  }
  $("snap").addEventListener("click", async () => {
    const out = $("snap-out"); out.textContent = "Computing…";
    try {
      const rep = await api("/macp/session/" + encodeURIComponent(S.sid) + "/state-window");
      const id = findKey(rep, "state_snapshot_id") || "(none)";
      out.replaceChildren(el("span", "state_snapshot_id "), el("code", id), el("br"));
      const a = el("a", "Download the report (JSON)");
      a.href = URL.createObjectURL(new Blob([JSON.stringify(rep, null, 2)], { type: "application/json" }));
      a.download = S.sid + ".state-window.json"; a.id = "snap-download";
      out.append(a);
    } catch (e) { out.textContent = "Snapshot unavailable: " + e.message; }
  });

  // --- modes, policies, health -------------------------------------------
  async function loadModes() {
    try {
      const m = await api("/macp/modes");
      $("modes").tBodies[0].replaceChildren(...((m && m.modes) || []).map((d) => {
        const tr = el("tr"); tr.append(el("td", d.mode), el("td", d.mode_version), el("td", d.participant_model), el("td", (d.message_types || []).join(", ")), el("td", d.description)); return tr;
      }));
      const p = await api("/macp/policies");
      $("policies").tBodies[0].replaceChildren(...((p && p.descriptors) || []).map((d) => {
        const pre = el("pre", d.rules); const td = el("td"); td.append(pre);
        const tr = el("tr"); tr.append(el("td", d.policy_id), el("td", d.mode), el("td", d.description), td); return tr;
      }));
    } catch (e) { showError(e); }
  }

  async function loadHealth() {
    const dl = $("health");
    const t0 = performance.now();
    try {
      const m = await api("/.well-known/macp.json");
      const ms = Math.round(performance.now() - t0);
      const md = m.metadata || {};
      dl.replaceChildren(...[["Status", "reachable"], ["Round trip", ms + " ms"], ["Runtime", (md.runtime || m.agent_id) + " " + (md.version || "")],
        ["Supported modes", (m.supported_modes || []).join(", ")], ["Signed in as", S.sender || "—"]].flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
      $("transports").tBodies[0].replaceChildren(...(m.transport_endpoints || []).map((t) => {
        const tr = el("tr"); tr.append(el("td", t.transport), el("td", t.uri), el("td", (t.content_types || []).join(", "))); return tr;
      }));
      const s = await api("/macp/sessions");
      const counts = new Map();
      for (const x of (s && s.sessions) || []) counts.set(stateName(x.state), (counts.get(stateName(x.state)) || 0) + 1);
      $("counts").tBodies[0].replaceChildren(...["OPEN", "SUSPENDED", "RESOLVED", "EXPIRED", "CANCELLED"].map((k) => { const tr = el("tr"); tr.append(el("td", k), el("td", counts.get(k) || 0)); return tr; }));
    } catch (e) {
      dl.replaceChildren(el("dt", "Status"), el("dd", "unreachable: " + e.message));
    }
  }

  // --- start -----------------------------------------------------------
  $("signin").addEventListener("submit", (e) => {
    e.preventDefault();
    const v = $("token").value.trim();
    if (v) { S.token = v; sessionStorage.setItem("macp.token", v); }
    $("token").value = "";
    whoami().then(route);
  });
  $("signout").addEventListener("click", () => { S.token = null; sessionStorage.removeItem("macp.token"); whoami().then(route); });

  async function init() {
    try { const c = await (await fetch("config.json", { cache: "no-store" })).json(); S.dev = !!c.dev; } catch (_) { S.dev = false; }
    $("dev-banner").hidden = !S.dev;
    S.token = sessionStorage.getItem("macp.token");
    const agent = new URLSearchParams(location.search).get("agent");
    if (S.dev && agent) sessionStorage.setItem("macp.agent", agent);
    S.agent = S.dev ? sessionStorage.getItem("macp.agent") : null;
    await whoami();
    window.addEventListener("hashchange", route);
    route();
  }
  init();
})();
