// rackscale dashboard: plain JS, no build step, nothing fetched but this service's own /v1 API.
// It polls every POLL_MS: /v1/cluster, /v1/kpis, /v1/ui/overview (every rack's utilisation, and the grids of
// the racks on screen), /v1/jobs (pending, running, and the latest ended: see "history") and, while a job is
// open, /v1/jobs/NAME(/events); /v1/whoami once per token (who the header says the page is signed in as).
"use strict";
(() => {
  const POLL_MS = 1500;
  const PAGE_SIZE = 16; // racks drawn as grids at once when the cluster is big
  const AGGREGATE_OVER = 16; // more racks than this: aggregate cells + pages of grids
  const LIST_LIMIT = 200; // jobs per list
  const HISTORY = 20; // ended jobs shown
  const ENDED = "completed,failed,cancelled";
  const TOKEN_KEY = "rackscale.token";
  const OTHER_TENANT = "(another tenant)"; // the overview's name for GPUs of jobs this token may not see

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  // Text from the service (a job's message holds the last line of its log) or the address bar, as the CLI's
  // printable() shows it (cli/output.py): controls (C0 but tab and newline, DEL, C1), the line and paragraph
  // separators, the bidi controls and marks (U+202E shows the rest of a line reversed) and lone surrogates are
  // written as escapes ("\x1b", "\u202e"), so a value reads as what it holds. Every text goes through it (h).
  const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]/gu;
  const escapeChar = (c) => {
    const n = c.charCodeAt(0);
    return n < 0x100 ? "\\x" + n.toString(16).padStart(2, "0") : "\\u" + n.toString(16).padStart(4, "0");
  };
  const printable = (s) => String(s).replace(UNSAFE, escapeChar);

  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === "class") e.className = v;
        else if (k === "text") e.textContent = printable(v);
        else if (k === "title") e.title = printable(v);
        else if (k === "style") e.style.cssText = v;
        else if (k.startsWith("data-")) e.setAttribute(k, v);
        else e[k] = v;
      }
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(printable(kid)));
    }
    return e;
  }

  // ------------------------------------------------------------------ formatting
  const pct = (x) => (x === null || x === undefined ? "n/a" : (x * 100).toFixed(1) + "%");  // null: no data yet
  const gpusFmt = (x) => (Math.abs(x - Math.round(x)) < 1e-9 ? String(Math.round(x)) : x.toFixed(2));
  function dur(s) {
    if (s === null || s === undefined || !isFinite(s)) return "–";
    s = Math.max(0, s);
    if (s < 60) return `${Math.floor(s)}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
    return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  }

  // Times: one format everywhere, 24-hour, in the browser's zone, always named: "2025-03-04 17:05:09 UTC+01:00"
  // ("UTC" when the offset is zero). `clock` drops the date when it is the reference time's day.
  const pad = (n) => String(n).padStart(2, "0");
  function zone(d) {
    const off = -d.getTimezoneOffset();
    if (!off) return "UTC";
    const a = Math.abs(off);
    return `UTC${off < 0 ? "-" : "+"}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
  }
  const day = (d) => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  const hms = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  function stamp(t) {
    const d = new Date(t * 1000);
    return `${day(d)} ${hms(d)} ${zone(d)}`;
  }
  function clock(t, ref) {
    const d = new Date(t * 1000);
    return ref !== undefined && day(d) === day(new Date(ref * 1000)) ? `${hms(d)} ${zone(d)}` : stamp(t);
  }

  // Job colours. Twelve hues far apart (CIE76 ΔE >= 32 between any two; none red: red means failed; none
  // grey: grey means free, or another tenant's job). A job gets one when first drawn, chosen to differ from
  // the jobs beside it on a grid (and sharing its GPUs); it keeps it while the page is open. When two
  // neighbours end up alike anyway (a colour given in a list, before the job reached a grid) the younger
  // one is given another.
  const PALETTE = [
    "#2f6fde", "#f28e2b", "#2ca02c", "#8e44c9", "#17becf", "#d6409f",
    "#e8c021", "#8c5a2b", "#1d3b7a", "#b5dc5a", "#c49bf0", "#0e6e64",
  ];
  const TENANT_GREY = "#9ca3af";
  const colourIx = new Map(); // job name -> [palette index, age]
  let colourAge = 0;
  let colourNext = 0; // rotates through the palette among equally good picks
  let colourUse = new Array(PALETTE.length).fill(0); // how many jobs on the grids on screen use each

  function pickColour(avoid) {
    let best = -1;
    for (let k = 0; k < PALETTE.length; k++) {
      const i = (colourNext + k) % PALETTE.length;
      if (avoid.has(i)) continue;
      if (best < 0 || colourUse[i] < colourUse[best]) best = i;
    }
    if (best < 0) best = colourNext % PALETTE.length; // neighbours of every colour: any will do
    colourNext = (best + 1) % PALETTE.length;
    colourUse[best]++;
    return best;
  }
  function giveColour(name, avoid) {
    const i = pickColour(avoid);
    colourIx.set(name, [i, colourAge++]);
    return i;
  }
  function jobColour(name) {
    if (name === OTHER_TENANT) return TENANT_GREY;
    const got = colourIx.get(name);
    return PALETTE[got ? got[0] : giveColour(name, new Set())];
  }
  // Called with the jobs on the grids on screen and which of them touch: keep each job's colour unless a
  // neighbour that had its colour first has the same one.
  function colourGrids(names, touching) {
    colourUse = new Array(PALETTE.length).fill(0);
    const age = (n) => (colourIx.has(n) ? colourIx.get(n)[1] : Infinity);
    const order = names.filter((n) => n !== OTHER_TENANT).map((n, i) => [age(n), i, n]);
    order.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
    const done = new Map(); // name -> palette index, this pass
    for (const [, , n] of order) {
      const avoid = new Set();
      for (const m of touching.get(n) || []) if (done.has(m)) avoid.add(done.get(m));
      const got = colourIx.get(n);
      let i;
      if (got && !avoid.has(got[0])) { i = got[0]; colourUse[i]++; } else i = giveColour(n, avoid);
      done.set(n, i);
    }
    if (colourIx.size > 4096) { // forget jobs long gone
      for (const n of colourIx.keys()) if (!done.has(n)) colourIx.delete(n);
    }
  }
  const swatch = (name, coloured) =>
    h("i", { class: coloured ? "swatch" : "swatch none", style: coloured ? `background:${jobColour(name)}` : null });

  // ------------------------------------------------------------------ the API
  // `rackscale serve` prints the page's URL as /#token=...: a fragment never reaches a server or a log.
  // Take it, keep it for this tab only, and drop it from the address bar and the history. Anyone can make
  // such a link, though: one with the attacker's token would sign the victim's tab in as the attacker, and the
  // tab would show the attacker's queues and jobs as the victim's own (login CSRF). So a link's token never silently replaces the one this tab has: the page asks, naming both
  // identities (offerToken), and the header always says who the page is signed in as (GET /v1/whoami).
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let offered = null; // a link's token waiting for the user's answer (never used for data until then)

  function linkToken() { // the fragment's token ("" for an empty one; null: none), dropped from the address
    const t = new URLSearchParams(location.hash.slice(1)).get("token");
    if (t === null) return null;
    history.replaceState(null, "", location.pathname + location.search);
    return t.trim();
  }
  const fromLink = linkToken();
  if (fromLink && !token) { // nothing to replace: taken (the header names who it is)
    token = fromLink;
    sessionStorage.setItem(TOKEN_KEY, token);
  } else if (fromLink && fromLink !== token) {
    offered = fromLink; // asked once the page is built (start, below)
  }

  class AuthError extends Error {}
  class ApiError extends Error {
    constructor(status, msg) { super(msg); this.status = status; }
  }

  class Unreachable extends Error {}

  async function api(path, tok = token) {
    const headers = { Accept: "application/json" };
    if (tok) headers.Authorization = "Bearer " + tok;
    let r;
    try {
      r = await fetch(path, { headers, cache: "no-store" });
    } catch (e) { // no answer at all: the service is down, or the network
      throw new Unreachable(e && e.message ? e.message : String(e));
    }
    let body = null;
    try { body = await r.json(); } catch (_) { /* not JSON */ }
    const d = body && body.detail;
    // 401: no token or an unknown one; 403 on a read: a token that may not read this (a scrape token).
    if (r.status === 401 || r.status === 403) throw new AuthError(typeof d === "string" ? d : "a token is needed");
    if (!r.ok) throw new ApiError(r.status, typeof d === "string" ? d : `${path}: HTTP ${r.status}`);
    return body;
  }

  // ------------------------------------------------------------------ state
  const S = {
    loaded: false, // a first full answer came back (before it: the loading or error state, no empty lists)
    cluster: null,
    kpis: null,
    overview: null,
    pending: null,
    running: null,
    ended: null, // the latest ended jobs, newest end first
    rackNames: null, // every rack's name, in cluster order (the topology does not change)
    page: 0,
    filter: "",
    focus: null, // a rack to scroll to and outline
    selected: null, // the job in the details panel
    job: null, // its JobOut, or an Error
    events: null,
    login: false,
    me: null, // GET /v1/whoami of meToken: who the page is signed in as
    meToken: null,
    lastOk: null, // wall-clock time of the last answer
  };

  function isBig() { return S.rackNames !== null && S.rackNames.length > AGGREGATE_OVER; }

  function filteredRacks() {
    const names = S.rackNames || [];
    if (!S.filter) return names;
    const f = S.filter.toLowerCase();
    return names.filter((n) => n.toLowerCase().includes(f));
  }

  function pageCount() { return Math.max(1, Math.ceil(filteredRacks().length / PAGE_SIZE)); }

  function visibleRacks() {
    if (S.rackNames === null) return [];
    const names = filteredRacks();
    if (!isBig()) return names;
    S.page = Math.min(Math.max(S.page, 0), pageCount() - 1);
    return names.slice(S.page * PAGE_SIZE, (S.page + 1) * PAGE_SIZE);
  }

  // ------------------------------------------------------------------ history: the latest ended jobs
  // GET /v1/jobs lists oldest first (by submission, `seq`) from a cursor `after`, and cannot list newest
  // first. So the page looks for a cursor with between HISTORY and 2*HISTORY ended jobs after it: a galloping
  // then binary search over `after`, each probe one request of at most 2*HISTORY rows (about 2*log2(jobs)
  // requests, once); afterwards each poll is one request from that cursor, and the search runs again (from
  // there) only when 2*HISTORY more jobs have ended. Those are the ended jobs submitted last; a job submitted
  // long before them that ended recently is added when the page saw it leave the pending or running list.
  const Hist = { after: null, seen: new Map(), active: null };
  const endedAfter = (after) => api(`/v1/jobs?status=${ENDED}&after=${after}&limit=${2 * HISTORY}`);

  async function endedTail() {
    let lo = Hist.after === null ? 0 : Hist.after;
    let got = await endedAfter(lo);
    if (got.items.length < 2 * HISTORY) {
      if (got.items.length < HISTORY && lo > 0) { Hist.after = null; return endedTail(); } // names reused: rows gone
      Hist.after = lo;
      return got.items;
    }
    // Invariant: 2*HISTORY or more ended jobs after lo, fewer than HISTORY after hi. One job less per step
    // of the cursor: some cursor between them has HISTORY to 2*HISTORY - 1 after it.
    let hi = null;
    let step = 2 * HISTORY;
    for (let probes = 0; probes < 200; probes++) {
      const x = hi === null ? Math.min(lo + step, Number.MAX_SAFE_INTEGER) : Math.floor((lo + hi) / 2);
      got = await endedAfter(x);
      const n = got.items.length;
      if (n >= 2 * HISTORY) { lo = x; step *= 2; } else if (n >= HISTORY) { Hist.after = x; return got.items; } else hi = x;
      if (hi !== null && hi - lo <= 1) break;
    }
    Hist.after = lo; // not reached with a consistent store
    return (await endedAfter(lo)).items;
  }

  // Jobs that left the pending and running lists since the last poll: ended (or cancelled) meanwhile.
  async function justEnded(pend, run) {
    const now = new Set([...pend.items, ...run.items].map((j) => j.name));
    const gone = Hist.active ? [...Hist.active].filter((n) => !now.has(n)) : [];
    Hist.active = now;
    const got = await Promise.all(gone.slice(0, HISTORY).map((n) => api(`/v1/jobs/${enc(n)}`).catch((e) => {
      if (e instanceof AuthError) throw e;
      return null;
    })));
    return got.filter((j) => j && j.ended !== null && j.ended !== undefined);
  }

  function latestEnded(tail, fresh) {
    for (const j of fresh) Hist.seen.set(j.name, j);
    // One row per name: a name can be run again once its job ended; its latest ended run is shown.
    const byName = new Map();
    for (const j of [...Hist.seen.values(), ...tail]) {
      if (j.ended === null || j.ended === undefined) continue;
      const had = byName.get(j.name);
      if (!had || j.ended >= had.ended) byName.set(j.name, j);
    }
    const all = [...byName.values()];
    all.sort((a, b) => b.ended - a.ended || (a.name < b.name ? -1 : 1));
    const out = all.slice(0, HISTORY);
    const keep = new Set(out.map((j) => j.name));
    for (const n of Hist.seen.keys()) if (!keep.has(n)) Hist.seen.delete(n);
    return out;
  }

  // ------------------------------------------------------------------ polling
  let timer = null;
  let busy = false;
  let again = false;

  async function tick() {
    if (busy) { again = true; return; }
    busy = true;
    clearTimeout(timer);
    try {
      await refresh();
    } finally {
      busy = false;
      if (again) { again = false; tick(); } else timer = setTimeout(tick, POLL_MS);
    }
  }

  async function refresh() {
    if (S.login) return;
    const asked = token; // a switch of token meanwhile (offerToken, the login) drops this answer
    try {
      const sel = S.selected;
      // one rack= per rack: a rack's name may hold a comma (detail= is comma-separated)
      const overviewUrl = () => "/v1/ui/overview?" + visibleRacks().map((r) => "rack=" + enc(r)).join("&");
      const asResult = (p) => p.catch((e) => { if (e instanceof AuthError) throw e; return e; });
      const [cluster, kpis, ov, pend, run, tail, job, events, me] = await Promise.all([
        api("/v1/cluster"),
        api("/v1/kpis"),
        api(overviewUrl()),
        api(`/v1/jobs?status=pending&limit=${LIST_LIMIT}`),
        api(`/v1/jobs?status=running&limit=${LIST_LIMIT}`),
        endedTail(),
        sel ? asResult(api(`/v1/jobs/${enc(sel)}`)) : null,
        sel ? asResult(api(`/v1/jobs/${enc(sel)}/events?limit=200`)) : null,
        S.meToken === asked && S.me ? S.me : api("/v1/whoami"),
      ]);
      if (asked !== token) return;
      S.me = me; S.meToken = asked;
      const fresh = await justEnded(pend, run);
      S.cluster = cluster; S.kpis = kpis; S.pending = pend; S.running = run;
      S.ended = latestEnded(tail, fresh);
      if (S.rackNames === null) {
        S.rackNames = ov.racks.map((r) => r.name);
        S.overview = await api(overviewUrl()); // now that the names are known: the grids on screen
      } else {
        S.overview = ov;
      }
      if (sel === S.selected) { S.job = job; S.events = events; }
      S.lastOk = Date.now() / 1000;
      S.loaded = true;
      setLive("live", "");
      render();
    } catch (e) {
      if (asked !== token) return;
      if (e instanceof AuthError) {
        showLogin(token ? e.message : "");
        return;
      }
      if (e instanceof Unreachable) setLive("down", `no answer from ${location.host} (${e.message})`, "The service cannot be reached");
      else setLive("down", e.message, "The service answered with an error");
    }
  }

  // The page's state: "loading" (no answer yet), "ready", "unreachable" or "refused" (before any data: a
  // panel says so; after: a banner over the last data), "login" (no token).
  function setState(kind, title, text) {
    document.body.setAttribute("data-state", kind);
    document.body.classList.toggle("loaded", S.loaded);
    const box = $("state");
    box.setAttribute("data-kind", kind);
    $("state-title").textContent = printable(title);
    $("state-text").textContent = printable(text);
    box.hidden = S.loaded || kind === "ready";
    if (!S.loaded) $("cluster-info").textContent = kind === "loading" ? "connecting…" : "not connected";
  }

  function setLive(state, text, title) {
    const live = $("live");
    live.className = "live" + (state === "live" ? "" : " " + state);
    if (state === "live") {
      $("live-text").textContent = "live · " + clock(S.lastOk, S.lastOk);
      $("live").title = `last answer ${stamp(S.lastOk)}; refreshes every ${POLL_MS / 1000} s`;
      $("banner").hidden = true;
      setState("ready", "", "");
    } else {
      const at = clock(Date.now() / 1000, Date.now() / 1000);
      $("live-text").textContent = "offline";
      $("banner").textContent = printable(`${title}: ${text}.`) + ` Showing the data of ` +
        `${S.lastOk ? clock(S.lastOk, Date.now() / 1000) : "–"}; retrying every ${POLL_MS / 1000} s (last try ${at}).`;
      $("banner").hidden = !S.loaded;
      setState("unreachable", title, `${text}. Retrying every ${POLL_MS / 1000} s (last try ${at}).`);
    }
  }

  // ------------------------------------------------------------------ auth
  function forgetData() { // a new token may see less: nothing of the last one's stays on the page
    S.loaded = false;
    S.ended = null;
    Hist.after = null; Hist.seen.clear(); Hist.active = null;
    S.job = null; S.events = null;
    renderDetails();
  }

  function showLogin(error) {
    S.login = true;
    forgetData();
    S.me = null;
    $("whoami").hidden = true;
    $("login").hidden = false;
    $("live").className = "live stale";
    $("live-text").textContent = error ? "token refused" : "token needed";
    $("login-error").textContent = error ? printable("the service refused this token: " + error) : "";
    $("token").value = "";
    $("token").focus();
    if (error) setState("refused", "The service refused the token", `It answered "${error}". Paste a valid token to go on.`);
    else setState("login", "This service needs a token", "Paste a token to see the cluster.");
  }

  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    if (!t) { $("login-error").textContent = "paste a token first"; return; }
    try {
      await api("/v1/cluster", t);
    } catch (e) {
      $("login-error").textContent = printable(e instanceof AuthError ? "the service refused this token: " + e.message : e.message);
      return;
    }
    useToken(t);
  });

  function useToken(t) { // sign the page in with t: nothing of the last token's data stays
    token = t;
    sessionStorage.setItem(TOKEN_KEY, t);
    S.me = null;
    $("whoami").hidden = true;
    forgetData();
    S.login = false;
    $("login").hidden = true;
    $("signout").hidden = false;
    setState("loading", "Loading the cluster…", "Asking the service for racks, jobs and KPIs.");
    tick();
  }

  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    token = "";
    S.me = null;
    $("whoami").hidden = true;
    $("signout").hidden = true;
    tick();
  });

  // Who a /v1/whoami answer is, in words: "team-a (tenant of team-a, team-a-batch)".
  function identity(me) {
    if (!me.auth) return "anonymous (the service runs without auth: anyone is an admin)";
    if (me.role === "tenant") return `${me.name} (tenant of ${me.queues.join(", ")})`;
    return `${me.name} (${me.role})`;
  }

  // A link brought a token other than this tab's: say who each is, and switch only on the user's yes.
  async function offerToken(t) {
    offered = t;
    $("switch").hidden = false;
    $("switch-go").disabled = true;
    $("switch-go").hidden = false;
    $("switch-go").textContent = "Switch";
    $("switch-new").textContent = "Asking the service whose token the link carries…";
    $("switch-now").textContent = "";
    $("switch-keep").focus();
    const ask = (tok) => (tok ? api("/v1/whoami", tok).catch((e) => e) : Promise.resolve(null));
    const [theirs, mine] = await Promise.all([ask(t), ask(token)]);
    if (offered !== t) return; // answered meanwhile, or another link came
    if (theirs instanceof Error) {
      $("switch-new").textContent = printable(`The service refused the link's token (${theirs.message}): it cannot be used.`);
      $("switch-go").hidden = true;
    } else {
      $("switch-new").textContent = printable(`The link's token signs this page in as ${identity(theirs)}.`);
      $("switch-go").textContent = printable(`Switch to ${theirs.name}`);
      $("switch-go").disabled = false;
    }
    $("switch-now").textContent = printable(
      mine instanceof Error ? `The service refuses this tab's token (${mine.message}).`
        : mine ? `This tab is signed in as ${identity(mine)}.` : "This tab has no token.");
  }

  function keepToken() {
    offered = null;
    $("switch").hidden = true;
  }

  $("switch-keep").addEventListener("click", keepToken);
  $("switch-go").addEventListener("click", () => {
    const t = offered;
    keepToken();
    if (t) useToken(t);
  });

  // ------------------------------------------------------------------ rendering
  function render() {
    renderHeader();
    renderKpis();
    renderRacks();
    renderLists();
    renderDetails();
  }

  function renderHeader() {
    const c = S.cluster;
    $("cluster-info").textContent = printable(
      `${c.name} · ${c.backend} · ${c.racks} racks · ${c.nodes} nodes · ${c.gpus} GPUs · ` +
      `clock ${stamp(c.now)}${c.speed !== 1 ? ` (×${c.speed})` : ""}`);
    $("cluster-info").title = "the service's clock" + (c.speed !== 1 ? `, running ${c.speed} times as fast as the wall clock` : "");
    $("signout").hidden = !token;
    const me = S.me;
    $("whoami").hidden = !me;
    if (me) {
      $("whoami").replaceChildren("signed in as ", h("b", { text: me.auth ? me.name : "anonymous" }),
        me.auth ? ` · ${me.role}` : " · no auth");
      $("whoami").title = printable("signed in as " + identity(me));
    }
    document.title = printable(`rackscale · ${c.name}`);
  }

  // Two kinds of figure, named apart: "now" (this instant) and "since start" (summed since the service
  // started: DESIGN section 5). Each card's title gives its definition.
  const KPI_HELP = {
    gpusAllocated: "GPUs held by running jobs at this instant, of all GPUs in the cluster (a GPU shared by " +
      "fractional jobs counts by the shares held). Failed GPUs are not in use.",
    allocationRatio: "Allocation ratio (DESIGN section 5): allocated GPU-seconds / available GPU-seconds, summed " +
      "since the service started. Not the share in use now: see \"GPUs in use now\".",
    idleRate: "Idle rate (DESIGN section 5): GPU-seconds left unallocated while jobs that could use them waited, " +
      "divided by the available GPU-seconds over the same periods, since the service started. GPUs idle " +
      "because no work waits do not count.",
    intraRackTrafficShare: "Intra-rack traffic share (DESIGN section 5): bytes carried on NVLink (inside a rack) " +
      "/ all bytes moved by jobs, since the service started.",
    pending: "Jobs waiting in the queues at this instant.",
    running: "Jobs running at this instant.",
    completed: "Jobs that finished successfully since the service started.",
    failed: "Jobs that failed since the service started; preempted: jobs put back in the queue to make room " +
      "for a more important one.",
    costPerHour: "What the whole cluster costs per hour, in use or not (GPUs x price per GPU-hour).",
  };

  function renderKpis() {
    const k = S.kpis;
    const c = S.cluster;
    const share = k.gpus ? k.gpusAllocated / k.gpus : 0;
    const items = [
      ["gpusAllocated", "GPUs in use now", `${gpusFmt(k.gpusAllocated)} / ${k.gpus}`, `${pct(share)} of all · ${k.gpusFailed} failed`, share],
      ["allocationRatio", "Allocation since start", pct(k.allocationRatio), "allocated / available GPU-seconds", k.allocationRatio],
      ["idleRate", "Idle rate since start", pct(k.idleRate), "idle while work waited", k.idleRate],
      ["intraRackTrafficShare", "Intra-rack traffic since start", pct(k.intraRackTrafficShare), "NVLink share of bytes", k.intraRackTrafficShare],
      ["pending", "Pending now", String(c.pending), "jobs queued", null],
      ["running", "Running now", String(c.running), "jobs", null],
      ["completed", "Completed since start", String(k.completed), "jobs", null],
      ["failed", "Failed since start", String(k.failed), `${k.preemptionVictims} preempted`, null],
      ["costPerHour", "Cost", `${Math.round(k.costPerHour).toLocaleString("en")}`, `${k.currency} per hour`, null],
    ];
    const box = $("kpis");
    if (box.children.length !== items.length) {
      box.replaceChildren(...items.map(([key]) => h("div", { class: "kpi", "data-kpi": key, title: KPI_HELP[key] },
        h("div", { class: "label" }), h("div", { class: "value" }), h("div", { class: "sub" }))));
    }
    items.forEach(([, label, value, sub, bar], i) => {
      const e = box.children[i];
      e.children[0].textContent = label;
      e.children[1].textContent = value;
      e.children[2].textContent = sub;
      let b = e.querySelector(".bar");
      if (bar !== null) {
        if (!b) { b = h("div", { class: "bar" }, h("i")); e.append(b); }
        b.firstChild.style.width = `${Math.min(Math.max(bar, 0), 1) * 100}%`;
      }
    });
  }

  // --- racks
  const rackEls = new Map(); // rack name -> {root, stats, cells[pos][gpu]}
  let aggEls = [];

  function renderRacks() {
    const ov = S.overview;
    const big = isBig();
    const byName = new Map(ov.racks.map((r) => [r.name, r]));
    const visible = new Set(visibleRacks());
    $("racks-count").textContent = `${ov.racks.length} · ${gpusFmt(ov.gpusAllocated)} of ${ov.gpus} GPUs in use`;
    $("legend-tenant").hidden = !ov.jobs.includes(OTHER_TENANT);

    // The aggregate: one cell per rack, coloured by the share of its GPUs allocated.
    $("aggregate").hidden = !big;
    $("pager").hidden = !big;
    if (big) {
      const box = $("agg-cells");
      if (aggEls.length !== ov.racks.length) {
        aggEls = ov.racks.map((r) => h("div", { class: "agg", "data-rack": r.name }));
        box.replaceChildren(...aggEls);
      }
      ov.racks.forEach((r, i) => {
        const frac = r.gpus ? r.allocated / r.gpus : 0;
        const level = frac <= 0 ? 0 : frac >= 1 ? 5 : 1 + Math.min(3, Math.floor(frac * 4));
        const cls = `agg a${level}${r.failed ? " fail" : ""}${visible.has(r.name) ? " shown" : ""}`;
        const e = aggEls[i];
        if (e.className !== cls) e.className = cls;
        e._info = r;
      });
      renderPager();
    }

    // The grids of the racks on screen, from the overview's sparse cells.
    const grids = $("grids");
    const shown = ov.detail.filter((d) => visible.has(d.name));
    const selected = S.selected;
    let selectedVisible = false;
    // Who holds each GPU ("pos:gpu" -> [[job, milli], ...]), and which jobs touch on a grid (side by side,
    // one above the other, or sharing a GPU): those get colours apart.
    const helds = shown.map((d) => {
      const held = new Map();
      for (const [pos, gpu, j, milli] of d.cells) {
        const key = pos * 1024 + gpu;
        if (!held.has(key)) held.set(key, []);
        held.get(key).push([ov.jobs[j], milli]);
      }
      return held;
    });
    const touching = new Map();
    const touch = (a, b) => {
      if (a === b) return;
      if (!touching.has(a)) touching.set(a, new Set());
      if (!touching.has(b)) touching.set(b, new Set());
      touching.get(a).add(b); touching.get(b).add(a);
    };
    const onGrids = [];
    const seen = new Set();
    for (const held of helds) {
      for (const [key, jobs] of held) {
        for (const [j] of jobs) if (!seen.has(j)) { seen.add(j); onGrids.push(j); }
        for (let x = 1; x < jobs.length; x++) touch(jobs[0][0], jobs[x][0]);
        for (const next of [key + 1, key + 1024]) { // the GPU below, the node to the right
          const other = held.get(next);
          if (other) for (const [a] of jobs) for (const [b] of other) touch(a, b);
        }
      }
    }
    colourGrids(onGrids, touching);

    const roots = shown.map((d, slot) => {
      const r = byName.get(d.name);
      let g = rackEls.get(d.name);
      if (!g || g.nodes !== d.nodes.length) { g = buildRack(d); rackEls.set(d.name, g); }
      g.stats.textContent = `${gpusFmt(r.allocated)}/${r.gpus} GPUs in use · ${r.jobs} job${r.jobs === 1 ? "" : "s"}` +
        (r.failed ? ` · ${r.failed} failed` : "");
      const held = helds[slot];
      const failed = new Set(d.failed.map(([pos, gpu]) => pos * 1024 + gpu));
      d.nodes.forEach((n, pos) => {
        for (let gpu = 0; gpu < n.gpus; gpu++) {
          const key = pos * 1024 + gpu;
          const jobs = held.get(key) || [];
          const bad = n.down || failed.has(key);
          const sel = selected !== null && jobs.some(([j]) => j === selected);
          if (sel) selectedVisible = true;
          paintGpu(g.cells[pos][gpu], { rack: d.name, node: n.name, gpu, jobs, failed: bad, down: n.down, hold: n.hold }, sel);
          g.cells[pos][gpu].classList.toggle("held", !!n.hold); // cordoned or draining: no new work there
        }
      });
      g.root.classList.toggle("focus", S.focus === d.name);
      return g.root;
    });
    if (roots.length !== grids.children.length || roots.some((e, i) => grids.children[i] !== e)) {
      grids.replaceChildren(...roots);
      if (!roots.length) {
        grids.append(h("div", { class: "empty", text: S.filter ? `no rack matches "${S.filter}"` : "no racks" }));
      }
    }
    grids.classList.toggle("selecting", selectedVisible);
    grids.classList.toggle("roomy", roots.length > 0 && roots.length <= 4); // few racks: bigger cells
    if (rackEls.size > 4 * PAGE_SIZE) { // forget grids long off screen
      for (const name of rackEls.keys()) if (!visible.has(name)) rackEls.delete(name);
    }
    if (S.focus && visible.has(S.focus) && !S.focusScrolled) {
      const g = rackEls.get(S.focus);
      if (g) { g.root.scrollIntoView({ block: "nearest" }); S.focusScrolled = true; }
    }
  }

  function buildRack(d) {
    const grid = h("div", { class: "grid" });
    const cells = d.nodes.map((n, pos) => {
      const col = [];
      for (let gpu = 0; gpu < n.gpus; gpu++) {
        const e = h("div", { class: "gpu", "data-node": n.name, "data-gpu": String(gpu), style: `grid-column:${pos + 1};grid-row:${gpu + 1}` });
        grid.append(e);
        col.push(e);
      }
      return col;
    });
    const short = (n) => (n.startsWith(d.name + "-") ? n.slice(d.name.length + 1) : n);
    const stats = h("span", { class: "rack-stats" });
    const labels = d.nodes.length
      ? h("div", { class: "node-labels" }, h("span", { text: short(d.nodes[0].name) }), h("span", { text: `${d.nodes.length} nodes` }), h("span", { text: short(d.nodes[d.nodes.length - 1].name) }))
      : null;
    const root = h("div", { class: "rack", "data-rack": d.name },
      h("div", { class: "rack-head" }, h("span", { class: "rack-name", text: d.name }), stats),
      h("div", { style: "display:inline-block" }, grid, labels));
    return { root, stats, cells, nodes: d.nodes.length };
  }

  function paintGpu(e, info, sel) {
    e._info = info;
    let cls = "gpu";
    let bg = "";
    const total = info.jobs.reduce((a, [, m]) => a + m, 0);
    if (info.failed) {
      cls += " failed";
    } else if (info.jobs.length) {
      cls += info.jobs.every(([j]) => j === OTHER_TENANT) ? " used other" : " used";
      if (info.jobs.length === 1 && total >= 1000) {
        bg = jobColour(info.jobs[0][0]);
      } else {
        cls += " shared";
        let at = 0;
        const stops = info.jobs.map(([j, m]) => {
          const from = at; at += (m / 1000) * 100;
          return `${jobColour(j)} ${from.toFixed(1)}% ${at.toFixed(1)}%`;
        });
        bg = `linear-gradient(to top, ${stops.join(", ")}, var(--free) ${at.toFixed(1)}% 100%)`;
      }
    }
    if (sel) cls += " sel";
    if (e.className !== cls) e.className = cls;
    if (e._bg !== bg) { e.style.background = bg; e._bg = bg; }
    const job = info.jobs.length ? info.jobs[0][0] : "";
    if (e.getAttribute("data-job") !== job) {
      if (job) e.setAttribute("data-job", job); else e.removeAttribute("data-job");
    }
  }

  function renderPager() {
    const n = pageCount();
    const total = filteredRacks().length;
    const from = total ? S.page * PAGE_SIZE + 1 : 0;
    const to = Math.min(total, (S.page + 1) * PAGE_SIZE);
    $("page-info").textContent = `racks ${from}–${to} of ${total}${S.filter ? ` matching "${S.filter}"` : ""}`;
    const want = [];
    const add = (p) => { if (p >= 0 && p < n && !want.includes(p)) want.push(p); };
    add(0);
    for (let p = S.page - 2; p <= S.page + 2; p++) add(p);
    add(n - 1);
    want.sort((a, b) => a - b);
    const sig = `${n}:${S.page}:${want.join(",")}`;
    const box = $("pages");
    if (box._sig === sig) return;
    box._sig = sig;
    const kids = [h("button", { "data-page": String(S.page - 1), text: "‹", title: "previous page", disabled: S.page === 0 })];
    want.forEach((p, i) => {
      if (i && p !== want[i - 1] + 1) kids.push(h("span", { class: "gap", text: "…" }));
      kids.push(h("button", { "data-page": String(p), text: String(p + 1), class: p === S.page ? "current" : "" }));
    });
    kids.push(h("button", { "data-page": String(S.page + 1), text: "›", title: "next page", disabled: S.page >= n - 1 }));
    box.replaceChildren(...kids);
  }

  $("pages").addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-page]");
    if (!b || b.disabled) return;
    S.page = Number(b.getAttribute("data-page"));
    S.focus = null;
    renderPagerAndRefresh();
  });

  $("rack-filter").addEventListener("input", (ev) => {
    S.filter = ev.target.value.trim();
    S.page = 0;
    S.focus = null;
    renderPagerAndRefresh();
  });

  function renderPagerAndRefresh() {
    visibleRacks();
    if (isBig()) renderPager();
    tick();
  }

  function focusRack(name) {
    if (S.rackNames === null) { S.pendingFocus = name; return; }
    const i = S.rackNames.indexOf(name);
    if (i < 0) return;
    S.filter = "";
    $("rack-filter").value = "";
    S.page = Math.floor(i / PAGE_SIZE);
    S.focus = name;
    S.focusScrolled = false;
    renderPagerAndRefresh();
  }

  // --- job lists
  function renderLists() {
    const now = S.cluster.now;
    // A pending job holds no GPU: a hollow swatch (no colour on the grids to match).
    renderRows($("queue"), S.pending.items, (job) => [
      () => h("span", { class: "jobname" }, swatch(job.name, false), h("span", { text: job.name, title: job.name })),
      [gpusFmt(job.gpus), "num"],
      [job.queue, ""],
      () => h("span", null, job.reason ? h("span", { class: "reason", text: job.reason }) : null, h("span", { class: "msg", text: job.message || "", title: job.message || "" })),
    ], (job) => `${job.reason}|${job.message}|${job.queue}|${job.gpus}`);
    renderRows($("running"), S.running.items, (job) => {
      const racks = job.placement ? job.placement.racks : [];
      const shown = racks.slice(0, 3).join(", ") + (racks.length > 3 ? ` +${racks.length - 3}` : "");
      return [
        () => h("span", { class: "jobname" }, swatch(job.name, true), h("span", { text: job.name, title: job.name })),
        [gpusFmt(job.gpus), "num"],
        [shown, ""],
        [dur(now - (job.started || now)), "num"],
      ];
    }, (job) => (job.placement ? job.placement.racks.join(",") : "") + "|" + job.gpus + "|" + jobColour(job.name));
    renderRows($("history"), S.ended, (job) => [
      () => h("span", { class: "jobname" }, h("span", { text: job.name, title: `${job.name} (${job.kind}, queue ${job.queue})` })),
      () => h("span", { class: `status ${job.status}`, text: job.status }),
      () => h("span", null, h("span", { class: "reason ended", text: job.reason || "–" }),
        job.message ? h("span", { class: "msg", text: job.message, title: job.message }) : null),
      () => h("span", { title: stamp(job.ended), text: clock(job.ended, now) }),
      [job.started !== null && job.started !== undefined ? dur(job.ended - job.started) : "never ran", "num"],
    ], (job) => `${job.status}|${job.reason}|${job.message}|${job.ended}|${day(new Date(now * 1000))}`);
    const empty = (id, isEmpty, text) => {
      const e = $(id);
      e.hidden = !isEmpty;
      if (e.textContent !== text) e.textContent = text;
    };
    empty("queue-empty", !S.pending.items.length, "no job is waiting");
    empty("running-empty", !S.running.items.length, "nothing is running");
    empty("history-empty", !S.ended.length, "no job has ended yet");
    const more = (list, n) => (list.items.length < n ? ` (first ${list.items.length} of ${n})` : "");
    $("queue-count").textContent = `${S.cluster.pending}${more(S.pending, S.cluster.pending)}`;
    $("running-count").textContent = `${S.cluster.running}${more(S.running, S.cluster.running)}`;
    $("history-count").textContent = S.ended.length ? `latest ${S.ended.length}` : "";
  }

  // Rows keyed by job name; cells are updated in place (so a click between two polls is never lost).
  // A cell spec is [text, class] (updated each time) or a builder function (rebuilt when sig changes).
  function renderRows(table, items, cellsOf, sigOf) {
    const body = table.tBodies[0];
    const old = new Map([...body.rows].map((r) => [r.getAttribute("data-job"), r]));
    const rows = items.map((job) => {
      let tr = old.get(job.name);
      const specs = cellsOf(job);
      const sig = sigOf(job);
      if (!tr) {
        tr = h("tr", { class: "job", "data-job": job.name }, specs.map(() => h("td")));
      }
      specs.forEach((spec, i) => {
        const td = tr.cells[i];
        if (typeof spec === "function") {
          if (tr._sig !== sig || !td.firstChild) td.replaceChildren(spec());
        } else {
          const text = printable(spec[0]);
          if (td.textContent !== text) td.textContent = text;
          if (td.className !== spec[1]) td.className = spec[1];
        }
      });
      tr._sig = sig;
      tr.classList.toggle("sel", job.name === S.selected);
      return tr;
    });
    if (rows.length !== body.rows.length || rows.some((r, i) => body.rows[i] !== r)) body.replaceChildren(...rows);
    table.hidden = rows.length === 0;
  }

  for (const id of ["queue", "running", "history"]) {
    $(id).addEventListener("click", (ev) => {
      const tr = ev.target.closest("tr[data-job]");
      if (tr) openJob(tr.getAttribute("data-job"));
    });
  }

  // --- the details panel
  // "(another tenant)" stands for jobs this token may not see: nothing to open.
  function openJob(name) { if (name && name[0] !== "(") location.hash = "#job/" + enc(name); }

  function closeJob() {
    if (location.hash.startsWith("#job/")) history.pushState(null, "", location.pathname + location.search);
    S.selected = null; S.job = null; S.events = null;
    $("details").hidden = true;
    document.body.classList.remove("with-details");
    if (S.loaded) render();
  }

  function route() {
    const m = location.hash.match(/^#(job|rack)\/(.+)$/);
    if (m && m[1] === "job") {
      const name = decodeURIComponent(m[2]);
      if (S.selected !== name) { S.selected = name; S.job = null; S.events = null; }
      $("details").hidden = false;
      if (S.loaded) render(); else renderDetails();
      tick();
    } else {
      if (m && m[1] === "rack") focusRack(decodeURIComponent(m[2]));
      if (S.selected) closeJob();
    }
  }
  window.addEventListener("hashchange", () => {
    const t = linkToken(); // a link with #token= followed in this tab: the page does not reload
    if (t && t !== token) {
      if (token) offerToken(t); else useToken(t);
    }
    route();
  });
  $("d-close").addEventListener("click", closeJob);
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Escape") return;
    if (!$("switch").hidden) keepToken(); else if (S.selected) closeJob();
  });

  function renderDetails() {
    const name = S.selected;
    const panel = $("details");
    panel.hidden = !name;
    document.body.classList.toggle("with-details", !!name);
    if (!name) return;
    panel.setAttribute("data-job", name);
    $("d-name").textContent = printable(name);
    const body = $("d-body");
    const job = S.job;
    const holds = !!job && !(job instanceof Error) && job.status === "running"; // coloured like its GPUs
    $("d-swatch").className = holds ? "swatch" : "swatch none";
    $("d-swatch").style.background = holds ? jobColour(name) : "";
    if (job === null) { body.replaceChildren(h("div", { class: "empty", text: "loading…" })); return; }
    if (job instanceof Error) {
      body.replaceChildren(h("div", { class: "error", text: job.status === 404 ? `no job named ${name} (or not in your queues)` : job.message }));
      return;
    }
    const now = S.cluster ? S.cluster.now : job.submitted;
    const when = (t) => (t === null || t === undefined ? "–" : `${stamp(t)} (${dur(now - t)} ago)`);
    const rows = [
      ["status", h("span", { class: `status ${job.status}`, "data-field": "status", text: job.status })],
      ["kind", job.kind],
      ["queue", job.queue],
      ["GPUs", gpusFmt(job.gpus)],
      ["priority", String(job.priority)],
      ["reason", h("span", { "data-field": "reason" }, job.reason ? h("b", { text: job.reason }) : "–", job.message ? ` ${job.message}` : "")],
      ["submitted", when(job.submitted)],
      ["started", when(job.started)],
      ["ended", when(job.ended)],
    ];
    if (job.started && !job.ended) rows.push(["running for", dur(now - job.started)]);
    if (job.started && job.ended) rows.push(["ran for", dur(job.ended - job.started)]);
    if (job.exitCode !== null && job.exitCode !== undefined) rows.push(["exit code", String(job.exitCode)]);
    if (job.restarts) rows.push(["restarts", String(job.restarts)]);
    const kids = [h("dl", null, rows.map(([k, v]) => [h("dt", { text: k }), h("dd", null, v)]))];
    const p = job.placement;
    kids.push(h("h3", { text: "placement" }));
    if (p) {
      kids.push(h("div", { class: "placement-racks", "data-field": "racks" },
        `${gpusFmt(p.gpus)} GPUs on ${p.nodes.length} node${p.nodes.length === 1 ? "" : "s"} in rack${p.racks.length === 1 ? "" : "s"} `,
        p.racks.map((r, i) => [i ? ", " : "", h("a", { class: "rack-link", href: "#rack/" + enc(r), "data-rack": r, text: r })])));
      kids.push(h("table", null,
        h("thead", null, h("tr", null, h("th", { text: "node" }), h("th", { text: "rack" }), h("th", { text: "GPUs" }), h("th", { text: "share" }))),
        h("tbody", null, p.nodes.map((n) => h("tr", null,
          h("td", { text: n.node }), h("td", { text: n.rack }), h("td", { text: n.gpus.join(", ") }),
          h("td", { text: n.milliPerGpu >= 1000 ? "whole" : `${n.milliPerGpu / 10}% each` }))))));
    } else {
      kids.push(h("div", { class: "empty", text: job.status === "pending" ? "not placed yet" : "none" }));
    }
    kids.push(h("h3", { text: "events (newest first)" }));
    const ev = S.events;
    if (ev instanceof Error) kids.push(h("div", { class: "error", text: ev.message }));
    else if (ev && ev.items.length) {
      kids.push(h("table", { class: "events" },
        h("thead", null, h("tr", null, h("th", { text: "when" }), h("th", { text: "type" }), h("th", { text: "reason / message" }))),
        h("tbody", null, [...ev.items].reverse().map((e) => h("tr", null,
          h("td", { text: `${dur(now - e.time)} ago`, title: stamp(e.time) }), h("td", { text: e.type }),
          h("td", null, e.reason ? h("b", { text: e.reason }) : null, e.message ? ` ${e.message}` : ""))))));
    } else kids.push(h("div", { class: "empty", text: ev ? "no events" : "loading…" }));
    body.replaceChildren(...kids);
  }

  // ------------------------------------------------------------------ hover and clicks on the grids
  const tip = $("tooltip");
  function tipFor(e) {
    const i = e._info;
    if (!i) return null;
    if (e.classList.contains("agg")) {
      return [h("b", { text: i.name }), ` · ${i.region}`, h("br"), `${gpusFmt(i.allocated)} of ${i.gpus} GPUs in use (${pct(i.gpus ? i.allocated / i.gpus : 0)})`,
        h("br"), `${i.jobs} job${i.jobs === 1 ? "" : "s"}${i.failed ? ` · ${i.failed} GPUs failed` : ""}`];
    }
    const where = [`node ${i.node} · GPU ${i.gpu}`, h("br"), `rack ${i.rack}`, ...(i.hold ? [h("br"), h("b", { text: `node ${i.hold}` })] : [])];
    if (i.failed) return [h("b", { text: i.down ? "node down" : "failed GPU" }), h("br"), ...where];
    if (!i.jobs.length) return ["free", h("br"), ...where];
    const jobs = i.jobs.flatMap(([j, m], k) => [k ? h("br") : null, h("b", { text: j }), m < 1000 ? ` (${m / 10}% of the GPU)` : ""]);
    return [...jobs, h("br"), ...where];
  }
  document.addEventListener("mouseover", (ev) => {
    const e = ev.target.closest && ev.target.closest(".gpu, .agg");
    if (!e) { tip.hidden = true; return; }
    const content = tipFor(e);
    if (!content) return;
    tip.replaceChildren(...content.filter((x) => x !== null));
    tip.hidden = false;
  });
  document.addEventListener("mousemove", (ev) => {
    if (tip.hidden) return;
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = ev.clientY + 16 + tip.offsetHeight > window.innerHeight ? ev.clientY - tip.offsetHeight - 10 : ev.clientY + 16;
    tip.style.left = `${x}px`;
    tip.style.top = `${y}px`;
  });
  document.addEventListener("mouseleave", () => { tip.hidden = true; });

  $("grids").addEventListener("click", (ev) => {
    const e = ev.target.closest(".gpu");
    if (e && e._info && e._info.jobs.length) openJob(e._info.jobs[0][0]);
  });
  $("agg-cells").addEventListener("click", (ev) => {
    const e = ev.target.closest(".agg");
    if (!e) return;
    const want = "#rack/" + enc(e.getAttribute("data-rack"));
    if (location.hash === want) focusRack(e.getAttribute("data-rack")); else location.hash = want;
  });
  $("d-body").addEventListener("click", (ev) => {
    const a = ev.target.closest("a.rack-link");
    if (!a) return;
    ev.preventDefault(); // keep the job open: show its rack beside it
    focusRack(a.getAttribute("data-rack"));
  });

  // ------------------------------------------------------------------ start
  if (offered) offerToken(offered);
  (async () => {
    await tick();
    if (S.pendingFocus) { const f = S.pendingFocus; S.pendingFocus = null; focusRack(f); }
  })();
  route();
})();
