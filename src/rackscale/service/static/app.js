// rackscale dashboard: plain JS, no build step, nothing fetched but this service's own /v1 API.
// It polls every POLL_MS: /v1/cluster, /v1/kpis, /v1/ui/overview (every rack's utilisation, and the grids of
// the racks on screen), /v1/jobs (pending and running) and, while a job is open, /v1/jobs/NAME(/events).
"use strict";
(() => {
  const POLL_MS = 1500;
  const PAGE_SIZE = 16; // racks drawn as grids at once when the cluster is big
  const AGGREGATE_OVER = 16; // more racks than this: aggregate cells + pages of grids
  const LIST_LIMIT = 200; // jobs per list
  const TOKEN_KEY = "rackscale.token";

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === "class") e.className = v;
        else if (k === "text") e.textContent = v;
        else if (k === "style") e.style.cssText = v;
        else if (k.startsWith("data-")) e.setAttribute(k, v);
        else e[k] = v;
      }
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }

  // ------------------------------------------------------------------ formatting
  const pct = (x) => (x * 100).toFixed(1) + "%";
  const gpusFmt = (x) => (Math.abs(x - Math.round(x)) < 1e-9 ? String(Math.round(x)) : x.toFixed(2));
  function dur(s) {
    if (s === null || s === undefined || !isFinite(s)) return "–";
    s = Math.max(0, s);
    if (s < 60) return `${Math.floor(s)}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
    return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  }
  const stamp = (t) => new Date(t * 1000).toISOString().slice(0, 19).replace("T", " ");

  // A stable colour per job name: a hash of the name picks one of these distinct colours (none red: red
  // means failed, none grey: grey means free) and nudges its lightness, so neighbours rarely look alike.
  const PALETTE = [
    [212, 72, 45], [28, 90, 52], [130, 50, 40], [283, 45, 52], [174, 62, 36], [48, 88, 48],
    [24, 38, 42], [320, 58, 55], [190, 80, 42], [78, 60, 40], [255, 55, 58], [150, 70, 32],
    [36, 75, 38], [200, 55, 30], [300, 40, 38], [98, 45, 50], [230, 65, 35], [16, 70, 58],
    [165, 45, 50], [268, 60, 40], [58, 70, 36], [340, 45, 42], [185, 45, 58], [112, 35, 32],
  ];
  const colours = new Map();
  function jobColour(name) {
    let c = colours.get(name);
    if (c) return c;
    let x = 0x811c9dc5;
    for (let i = 0; i < name.length; i++) {
      x ^= name.charCodeAt(i);
      x = Math.imul(x, 0x01000193);
    }
    x ^= x >>> 16; x = Math.imul(x, 0x85ebca6b); x ^= x >>> 13; x = Math.imul(x, 0xc2b2ae35); x ^= x >>> 16;
    x >>>= 0;
    const [hue, sat, light] = PALETTE[x % PALETTE.length];
    const nudge = (Math.floor(x / PALETTE.length) % 3) * 6 - 6;
    c = `hsl(${hue} ${sat}% ${light + nudge}%)`;
    colours.set(name, c);
    return c;
  }
  const swatch = (name) => h("i", { class: "swatch", style: `background:${jobColour(name)}` });

  // ------------------------------------------------------------------ the API
  // `rackscale serve` prints the page's URL as /#token=...: a fragment never reaches a server or a log.
  // Take it, keep it for this tab only, and drop it from the address bar and the history.
  const fromUrl = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl);
    history.replaceState(null, "", location.pathname + location.search);
  }
  let token = sessionStorage.getItem(TOKEN_KEY) || "";

  class AuthError extends Error {}
  class ApiError extends Error {
    constructor(status, msg) { super(msg); this.status = status; }
  }

  async function api(path) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(path, { headers, cache: "no-store" });
    let body = null;
    try { body = await r.json(); } catch (_) { /* not JSON */ }
    if (r.status === 401) throw new AuthError((body && body.detail) || "a token is needed");
    if (!r.ok) {
      const d = body && body.detail;
      throw new ApiError(r.status, typeof d === "string" ? d : `${path}: HTTP ${r.status}`);
    }
    return body;
  }

  // ------------------------------------------------------------------ state
  const S = {
    cluster: null,
    kpis: null,
    overview: null,
    pending: null,
    running: null,
    rackNames: null, // every rack's name, in cluster order (the topology does not change)
    page: 0,
    filter: "",
    focus: null, // a rack to scroll to and outline
    selected: null, // the job in the details panel
    job: null, // its JobOut, or an Error
    events: null,
    login: false,
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
    try {
      const sel = S.selected;
      const overviewUrl = () => "/v1/ui/overview?detail=" + enc(visibleRacks().join(","));
      const asResult = (p) => p.catch((e) => { if (e instanceof AuthError) throw e; return e; });
      const [cluster, kpis, ov, pend, run, job, events] = await Promise.all([
        api("/v1/cluster"),
        api("/v1/kpis"),
        api(overviewUrl()),
        api(`/v1/jobs?status=pending&limit=${LIST_LIMIT}`),
        api(`/v1/jobs?status=running&limit=${LIST_LIMIT}`),
        sel ? asResult(api(`/v1/jobs/${enc(sel)}`)) : null,
        sel ? asResult(api(`/v1/jobs/${enc(sel)}/events?limit=200`)) : null,
      ]);
      S.cluster = cluster; S.kpis = kpis; S.pending = pend; S.running = run;
      if (S.rackNames === null) {
        S.rackNames = ov.racks.map((r) => r.name);
        S.overview = await api(overviewUrl()); // now that the names are known: the grids on screen
      } else {
        S.overview = ov;
      }
      if (sel === S.selected) { S.job = job; S.events = events; }
      setLive("live", "");
      render();
    } catch (e) {
      if (e instanceof AuthError) { showLogin(token ? "the service refused this token: " + e.message : ""); return; }
      setLive("down", "offline: " + e.message + " (retrying)");
    }
  }

  function setLive(state, text) {
    const live = $("live");
    live.className = "live" + (state === "live" ? "" : " " + state);
    if (state === "live") {
      $("live-text").textContent = "live · " + new Date().toLocaleTimeString();
      $("banner").hidden = true;
    } else {
      $("live-text").textContent = "offline";
      $("banner").textContent = text;
      $("banner").hidden = false;
    }
  }

  // ------------------------------------------------------------------ auth
  function showLogin(error) {
    S.login = true;
    $("login").hidden = false;
    $("live").className = "live stale";
    $("live-text").textContent = "token needed";
    $("login-error").textContent = error || "";
    $("token").value = "";
    $("token").focus();
  }

  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    if (!t) { $("login-error").textContent = "paste a token first"; return; }
    token = t;
    try {
      await api("/v1/cluster");
    } catch (e) {
      token = "";
      $("login-error").textContent = e instanceof AuthError ? "the service refused this token: " + e.message : e.message;
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, t);
    S.login = false;
    $("login").hidden = true;
    $("signout").hidden = false;
    tick();
  });

  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    token = "";
    $("signout").hidden = true;
    tick();
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
    $("cluster-info").textContent =
      `${c.name} · ${c.backend} · ${c.racks} racks · ${c.nodes} nodes · ${c.gpus} GPUs · ` +
      `clock ${stamp(c.now)}${c.speed !== 1 ? ` (×${c.speed})` : ""}`;
    $("signout").hidden = !token;
    document.title = `rackscale · ${c.name}`;
  }

  function renderKpis() {
    const k = S.kpis;
    const c = S.cluster;
    const items = [
      ["gpusAllocated", "GPUs allocated", `${gpusFmt(k.gpusAllocated)} / ${k.gpus}`, `${k.gpusFailed} failed`, k.gpus ? k.gpusAllocated / k.gpus : 0],
      ["allocationRatio", "Allocation", pct(k.allocationRatio), "allocated / available GPU-s", k.allocationRatio],
      ["idleRate", "Idle rate", pct(k.idleRate), "idle while work waited", k.idleRate],
      ["intraRackTrafficShare", "Intra-rack traffic", pct(k.intraRackTrafficShare), "NVLink share of bytes", k.intraRackTrafficShare],
      ["pending", "Pending", String(c.pending), "jobs queued", null],
      ["running", "Running", String(c.running), "jobs", null],
      ["completed", "Completed", String(k.completed), "since start", null],
      ["failed", "Failed", String(k.failed), `${k.preemptionVictims} preempted`, null],
      ["costPerHour", "Cost", `${Math.round(k.costPerHour).toLocaleString()}`, `${k.currency} per hour`, null],
    ];
    const box = $("kpis");
    if (box.children.length !== items.length) {
      box.replaceChildren(...items.map(([key]) => h("div", { class: "kpi", "data-kpi": key },
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
    $("racks-count").textContent = `${ov.racks.length} · ${gpusFmt(ov.gpusAllocated)} of ${ov.gpus} GPUs allocated`;

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
    const roots = shown.map((d) => {
      const r = byName.get(d.name);
      let g = rackEls.get(d.name);
      if (!g || g.nodes !== d.nodes.length) { g = buildRack(d); rackEls.set(d.name, g); }
      g.stats.textContent = `${gpusFmt(r.allocated)}/${r.gpus} GPUs · ${r.jobs} job${r.jobs === 1 ? "" : "s"}` +
        (r.failed ? ` · ${r.failed} failed` : "");
      const held = new Map(); // "pos:gpu" -> [[job, milli], ...]
      for (const [pos, gpu, j, milli] of d.cells) {
        const key = pos * 1024 + gpu;
        if (!held.has(key)) held.set(key, []);
        held.get(key).push([ov.jobs[j], milli]);
      }
      const failed = new Set(d.failed.map(([pos, gpu]) => pos * 1024 + gpu));
      d.nodes.forEach((n, pos) => {
        for (let gpu = 0; gpu < n.gpus; gpu++) {
          const key = pos * 1024 + gpu;
          const jobs = held.get(key) || [];
          const bad = n.down || failed.has(key);
          const sel = selected !== null && jobs.some(([j]) => j === selected);
          if (sel) selectedVisible = true;
          paintGpu(g.cells[pos][gpu], { rack: d.name, node: n.name, gpu, jobs, failed: bad, down: n.down }, sel);
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
      cls += " used";
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
    renderRows($("queue"), S.pending.items, (job) => [
      () => h("span", { class: "jobname" }, swatch(job.name), h("span", { text: job.name, title: job.name })),
      [gpusFmt(job.gpus), "num"],
      [job.queue, ""],
      () => h("span", null, job.reason ? h("span", { class: "reason", text: job.reason }) : null, h("span", { class: "msg", text: job.message || "", title: job.message || "" })),
    ], (job) => `${job.reason}|${job.message}|${job.queue}|${job.gpus}`);
    renderRows($("running"), S.running.items, (job) => {
      const racks = job.placement ? job.placement.racks : [];
      const shown = racks.slice(0, 3).join(", ") + (racks.length > 3 ? ` +${racks.length - 3}` : "");
      return [
        () => h("span", { class: "jobname" }, swatch(job.name), h("span", { text: job.name, title: job.name })),
        [gpusFmt(job.gpus), "num"],
        [shown, ""],
        [dur(now - (job.started || now)), "num"],
      ];
    }, (job) => (job.placement ? job.placement.racks.join(",") : "") + "|" + job.gpus);
    $("queue-empty").hidden = S.pending.items.length > 0;
    $("running-empty").hidden = S.running.items.length > 0;
    const more = (list, n) => (list.items.length < n ? ` (first ${list.items.length} of ${n})` : "");
    $("queue-count").textContent = `${S.cluster.pending}${more(S.pending, S.cluster.pending)}`;
    $("running-count").textContent = `${S.cluster.running}${more(S.running, S.cluster.running)}`;
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
          if (td.textContent !== spec[0]) td.textContent = spec[0];
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

  for (const id of ["queue", "running"]) {
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
    if (S.overview) render();
  }

  function route() {
    const m = location.hash.match(/^#(job|rack)\/(.+)$/);
    if (m && m[1] === "job") {
      const name = decodeURIComponent(m[2]);
      if (S.selected !== name) { S.selected = name; S.job = null; S.events = null; }
      $("details").hidden = false;
      if (S.overview) render(); else renderDetails();
      tick();
    } else {
      if (m && m[1] === "rack") focusRack(decodeURIComponent(m[2]));
      if (S.selected) closeJob();
    }
  }
  window.addEventListener("hashchange", route);
  $("d-close").addEventListener("click", closeJob);
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && S.selected) closeJob(); });

  function renderDetails() {
    const name = S.selected;
    const panel = $("details");
    panel.hidden = !name;
    document.body.classList.toggle("with-details", !!name);
    if (!name) return;
    panel.setAttribute("data-job", name);
    $("d-name").textContent = name;
    $("d-swatch").style.background = jobColour(name);
    const body = $("d-body");
    const job = S.job;
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
      return [h("b", { text: i.name }), ` · ${i.region}`, h("br"), `${gpusFmt(i.allocated)} of ${i.gpus} GPUs allocated (${pct(i.gpus ? i.allocated / i.gpus : 0)})`,
        h("br"), `${i.jobs} job${i.jobs === 1 ? "" : "s"}${i.failed ? ` · ${i.failed} GPUs failed` : ""}`];
    }
    const where = [`node ${i.node} · GPU ${i.gpu}`, h("br"), `rack ${i.rack}`];
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
  (async () => {
    await tick();
    if (S.pendingFocus) { const f = S.pendingFocus; S.pendingFocus = null; focusRack(f); }
  })();
  route();
})();
