"""The worker's dashboard: one self-contained HTML page (inline CSS and JS, nothing fetched from
elsewhere) that polls ``/jobs/{job}/heatmap`` every 1.5 s and draws

* a rows x recent-steps heatmap of each rank's compute-time ratio to its peers' median (a
  straggler is a warm horizontal stripe; rows become nodes, then node ranges, on big jobs),
  with the rows named by open alerts marked;
* the step-rate line;
* the open alerts with their suspected cause, recommended action and evidence, and buttons to mark
  each confirmed, false or duplicate (``POST /alerts/<id>/feedback``), and the alerts resolved since
  the page opened (the last ``RESOLVED_KEPT``, newest first).

Without a job (``/dashboard``) it lists the worker's jobs.
"""

from __future__ import annotations

import html
import json
import re

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>stepwatch __TITLE__</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
:root { --bg:#12151a; --panel:#1a1e25; --fg:#d8dde6; --dim:#8a93a3; --hot:#ff3b30; --warn:#f0a020; --ok:#3fb950; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg); font:13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; }
header { display:flex; flex-wrap:wrap; gap:18px; align-items:baseline; padding:10px 16px; background:var(--panel);
         border-bottom:1px solid #2a303a; }
header h1 { font-size:16px; margin:0; }
.kv { color:var(--dim); } .kv b { color:var(--fg); font-weight:600; }
#conn.bad { color:var(--hot); } #conn.good { color:var(--ok); }
main { display:grid; grid-template-columns: minmax(420px, 1fr) 420px; gap:12px; padding:12px; }
section { background:var(--panel); border:1px solid #2a303a; border-radius:6px; padding:10px; min-width:0; }
h2 { font-size:13px; margin:0 0 8px; color:var(--dim); text-transform:uppercase; letter-spacing:.05em; }
#heat { display:flex; align-items:flex-start; overflow:auto; max-height:92vh; }
#labels { flex:none; width:150px; font:11px/1 ui-monospace, Menlo, monospace; }
#labels .row { white-space:nowrap; overflow:hidden; color:var(--dim); padding-right:6px; text-align:right;
               display:flex; align-items:center; justify-content:flex-end; border-right:3px solid transparent; }
#labels .row.marked { color:#fff; font-weight:700; border-right-color:var(--hot); overflow:visible; }
#labels .row.marked.hang { border-right-color:var(--warn); color:var(--warn); font-weight:400; }
#labels .row.marked.culprit { border-right-color:var(--hot); color:#fff; font-weight:700; background:#5a1d1d; }
#rate.stalled { color:var(--hot); }
#labels.tiny .row:not(.marked) { font-size:0; }
canvas { image-rendering: pixelated; display:block; }
#axis { display:flex; justify-content:space-between; color:var(--dim); font-size:11px; margin-left:150px; }
.legend { display:flex; gap:10px; align-items:center; color:var(--dim); font-size:11px; margin-top:6px; flex-wrap:wrap; }
.legend i { display:inline-block; width:14px; height:10px; vertical-align:middle; margin-right:3px; }
.alert { border-left:4px solid var(--warn); padding:6px 8px; margin-bottom:8px; background:#20252e; }
.alert.critical { border-left-color:var(--hot); }
.alert.info { border-left-color:var(--dim); }
.alert .sev { font-weight:700; text-transform:uppercase; font-size:11px; }
.alert .cause { margin-top:4px; } .alert .cause b { color:#fff; }
.alert .action { margin-top:4px; color:#9fe0a8; }
.alert .feedback { margin-top:4px; font-size:11px; color:var(--dim); } .alert .feedback button { font-size:11px; }
.alert pre.stack { font-size:11px; margin:2px 0 0 0; white-space:pre-wrap; word-break:break-all; color:#cfd6e0; }
.alert table { font-size:11px; color:var(--dim); border-collapse:collapse; margin-top:4px; }
.alert td { padding:1px 6px 1px 0; vertical-align:top; word-break:break-all; }
#none { color:var(--dim); }
svg text { fill:var(--dim); font-size:10px; }
ul#jobs a { color:#6cb6ff; }
</style></head>
<body>
<header>
  <h1>stepwatch &middot; <span id="job">__TITLE__</span></h1>
  <span class="kv">step <b id="step">-</b></span>
  <span class="kv" id="ratebox">rate <b id="rate">-</b> steps/s</span>
  <span class="kv">tokens/s <b id="tokens">-</b></span>
  <span class="kv">ranks <b id="ranks">-</b></span>
  <span class="kv">phase <b id="phase">-</b></span>
  <span class="kv">open alerts <b id="nalerts">-</b></span>
  <span class="kv">threshold <b id="thr">-</b></span>
  <span class="kv" id="conn">connecting...</span>
</header>
<main id="main">
  <section>
    <h2>Compute time / peer median, per <span id="level">rank</span> &times; recent step</h2>
    <div id="heat"><div id="labels"></div><canvas id="canvas" width="10" height="10"></canvas></div>
    <div id="axis"><span id="s0"></span><span id="s1"></span></div>
    <div class="legend"><span>&#9664; <b style="color:var(--hot)">culprit</b> / <span style="color:var(--warn)">waiting</span></span><span><i style="background:#2b5d8a"></i>faster</span><span><i style="background:#2d3440"></i>= peers</span>
      <span><i style="background:#c9a227"></i>slower</span><span><i style="background:#e8702a"></i>&ge; threshold</span>
      <span><i style="background:#ff2d2d"></i>&ge; critical</span><span><i style="background:#1b1e24;border:1px solid #333"></i>not judged</span>
      <span id="rowsinfo"></span></div>
  </section>
  <div>
    <section><h2>Step rate (steps/s)</h2><svg id="rateplot" width="400" height="120"></svg></section>
    <section style="margin-top:12px"><h2>Open alerts</h2><div id="alerts"><div id="none">none</div></div></section>
    <section style="margin-top:12px"><h2>Recently resolved</h2><ul id="resolved"><li class="none">none since this page opened</li></ul></section>
  </div>
</main>
<script>
"use strict";
const JOB = __JOB__;
const POLL_MS = 1500;
const RESOLVED_KEPT = 20;
let lastOpen = new Map(), resolved = [];
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c]));
const fmt = (v, d) => (v === null || v === undefined) ? "-" : Number(v).toFixed(d);

function mix(a, b, t) {
  const pa = [1,3,5].map(i => parseInt(a.substr(i,2),16)), pb = [1,3,5].map(i => parseInt(b.substr(i,2),16));
  return "rgb(" + pa.map((x, i) => Math.round(x + (pb[i]-x)*Math.max(0, Math.min(1, t)))).join(",") + ")";
}
function color(r, thr, crit) {
  if (r === null || r === undefined) return "#1b1e24";
  // Quadratic below the threshold: the noise around 1.0 stays quiet, what nears the threshold shows.
  if (r <= 1) return mix("#2d3440", "#2b5d8a", Math.pow((1 - r) / 0.1, 2));
  if (r < thr) return mix("#2d3440", "#c9a227", Math.pow((r - 1) / Math.max(1e-6, thr - 1), 2));
  return mix("#e8702a", "#ff2d2d", (r - thr) / Math.max(1e-6, crit - thr));
}

// A hang's culprits (evidence.culprits) apart from the ranks that only wait for them.
function hangCulprits(alerts) {
  const out = new Set();
  for (const a of alerts) if (a.type === "hang") for (const c of ((a.evidence || {}).culprits || [])) out.add(c.rank);
  return out;
}
function rowMark(r, culprits) {
  if (!r.marked) return "";
  if (r.mark !== "hang") return r.mark || "";
  const lo = r.ranks[0], hi = r.ranks[r.ranks.length - 1];
  for (const c of culprits) if (c >= lo && c <= hi) return "hang culprit";
  return "hang waiting";
}

function drawHeatmap(d) {
  const culprits = hangCulprits(d.alerts || []);
  const rows = d.rows, steps = d.steps, n = rows.length, m = Math.max(1, steps.length);
  const rowH = Math.max(2, Math.min(14, Math.floor(800 / Math.max(1, n))));
  const cellW = Math.max(4, Math.min(14, Math.floor(720 / m)));
  const MARK = 8;  // marker strip right of the cells
  const cv = $("canvas"); cv.width = m * cellW + MARK; cv.height = Math.max(1, n) * rowH;
  const ctx = cv.getContext("2d");
  ctx.fillStyle = "#1b1e24"; ctx.fillRect(0, 0, cv.width, cv.height);
  for (let i = 0; i < n; i++) {
    const vals = d.values[i];
    for (let j = 0; j < steps.length; j++) {
      ctx.fillStyle = color(vals[j], d.thresholds.ratio, d.thresholds.critical);
      ctx.fillRect(j * cellW, i * rowH, cellW - (cellW > 5 ? 1 : 0), rowH - (rowH > 4 ? 1 : 0));
    }
    if (rows[i].marked) {  // a marker at both ends of the row; the cells themselves stay readable
      ctx.fillStyle = rowMark(rows[i], culprits) === "hang waiting" ? "#f0a020" : "#ff3b30";
      ctx.fillRect(m * cellW + 2, i * rowH - (rowH < 6 ? 2 : 0), MARK - 2, Math.max(rowH, 6));
    }
  }
  const labels = $("labels");
  labels.className = rowH < 9 ? "tiny" : "";
  labels.innerHTML = rows.map((r, i) =>
    '<div class="row' + (r.marked ? " marked " + esc(rowMark(r, culprits)) : "") + '" style="height:' + rowH + 'px" ' +
    'data-row="' + i + '" data-ranks="' + esc(r.ranks.join("-")) + '"' +
    (r.marked ? ' data-marked-ranks="' + esc(r.marked_ranks.join(",")) + '"' : "") +
    ' title="' + esc(r.label) + '">' + (rowMark(r, culprits).endsWith("culprit") ? "&#9664; culprit " :
      r.marked ? "&#9664; " : "") + esc(r.label) + "</div>").join("");
  $("axis").style.width = (cv.width + 150) + "px";
  $("s0").textContent = steps.length ? "step " + steps[0] : "no judged steps yet";
  $("s1").textContent = steps.length ? "step " + steps[steps.length - 1] : "";
  $("level").textContent = d.level;
  $("rowsinfo").textContent = d.rank_count + " ranks" + (d.level !== "rank" ? " in " + n + " rows (max per row)" : "");
  cv.onmousemove = (e) => {
    const i = Math.floor(e.offsetY / rowH), j = Math.floor(e.offsetX / cellW);
    if (i < n && j < steps.length) cv.title = rows[i].label + ", step " + steps[j] + ": " + fmt(d.values[i][j], 3);
  };
}

function drawRate(series) {
  const svg = $("rateplot"), W = 400, H = 120, pad = 28;
  if (series.length < 2) { svg.innerHTML = '<text x="10" y="60">waiting for steps...</text>'; return; }
  const xs = series.map(p => p.step), ys = series.map(p => p.rate);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y1 = Math.max(...ys) * 1.1 || 1;
  const px = (x) => pad + (W - pad - 6) * (x - x0) / Math.max(1, x1 - x0);
  const py = (y) => H - 16 - (H - 24) * y / y1;
  const pts = series.map(p => px(p.step).toFixed(1) + "," + py(p.rate).toFixed(1)).join(" ");
  svg.innerHTML = '<polyline fill="none" stroke="#6cb6ff" stroke-width="1.5" points="' + pts + '"/>' +
    '<text x="2" y="12">' + y1.toFixed(2) + '</text><text x="2" y="' + (H - 16) + '">0</text>' +
    '<text x="' + pad + '" y="' + (H - 2) + '">step ' + x0 + '</text>' +
    '<text x="' + (W - 70) + '" y="' + (H - 2) + '">step ' + x1 + '</text>';
}

function cause(a) {
  // The first suspected cause: what correlated telemetry blames, else a hang's culprit; never the symptom again.
  const e = a.evidence || {};
  const c = e.suspected_causes || e.suspected_cause || e.causes || e.cause;
  const one = (x) => typeof x !== "object" || x === null ? String(x) :
      x.category ? x.category + ": " + (x.component || "") + (x.node ? " on " + x.node : "") + (x.hint ? " (" + x.hint + ")" : "") :
      (x.cause || x.name || JSON.stringify(x));
  if (c && (!Array.isArray(c) || c.length)) return one(Array.isArray(c) ? c[0] : c);
  if (a.type === "hang" && (e.culprits || []).length) {
    const k = e.culprits[0];
    return "rank " + k.rank + (k.node ? " on " + k.node : "") + " (" + (k.state || "behind") + ")" +
      (e.case ? ", " + e.case : "");
  }
  if (a.type === "hang") return (e.case || "") + (e.reason ? ": " + e.reason : "");
  return "";
}

function stack(e) {
  // A hang's culprit stack (evidence.stacks: culprits first, innermost frame last), and who did not answer.
  // Only a culprit's stack is shown as the culprit's (models/hang/stacks.py culprit_stack): a waiting rank's never is.
  const stacks = e.stacks || {};
  const culprits = Array.isArray(e.culprits) ? e.culprits.map(c => String(c.rank)) : Object.keys(stacks);
  const ranks = culprits.filter(r => r in stacks);
  let out = e.process_group ? '<div class="cause">process group <b>' + esc(e.process_group) + "</b>" +
      (e.process_group_ranks ? " (ranks " + esc(e.process_group_ranks.join(",")) + ")" : "") +
      ", collective " + esc(e.collective_seq) + "</div>" : "";
  if (ranks.length) out += '<div class="cause">stack of rank <b>' + esc(ranks[0]) + '</b>:</div><pre class="stack">' +
      e.stacks[ranks[0]].map(esc).join("\n") + "</pre>";
  if ((e.stack_pending || []).length) out += '<div class="cause">stacks pending from rank(s) ' + esc(e.stack_pending.join(", ")) + "</div>";
  if ((e.stack_missing || []).length) out += '<div class="cause">no stack from rank(s) ' + esc(e.stack_missing.join(", ")) + "</div>";
  return out;
}

function action(a) {
  // The on-call sentence, else what evidence.action says to do (kind, nodes, detail), else the runbook.
  const ann = a.annotations || {}, act = (a.evidence || {}).action;
  if (ann.recommended_action || a.recommended_action) return ann.recommended_action || a.recommended_action;
  if (act && typeof act === "object" && act.kind)
    return act.kind.replace(/_/g, " ") + ((act.nodes || []).length ? " (" + act.nodes.join(", ") + ")" : "") +
      (act.detail ? ": " + act.detail : "");
  if (typeof act === "string" && act) return act;
  return "see docs/runbooks/" + a.type + ".md";
}

function trackResolved(alerts, now) {
  // An alert that leaves the open list resolved: kept listed (newest first) with when it went.
  const open = new Map(alerts.map(a => [a.id, a]));
  for (const [id, a] of lastOpen) if (!open.has(id)) resolved.unshift({a: a, at: now});
  resolved = resolved.slice(0, RESOLVED_KEPT);
  lastOpen = open;
  $("resolved").innerHTML = resolved.length ? resolved.map(r =>
    '<li class="resolved" data-alert-id="' + esc(r.a.id) + '">' + esc(new Date(r.at * 1000).toISOString().substr(11, 8)) +
    "Z " + esc(r.a.severity) + " " + esc(r.a.type) + ": " + esc(r.a.summary) + "</li>").join("") :
    '<li class="none">none since this page opened</li>';
}

function drawAlerts(alerts) {
  const box = $("alerts");
  if (!alerts.length) { box.innerHTML = '<div id="none">none</div>'; return; }
  box.innerHTML = alerts.map(a => {
    const ev = Object.entries(a.evidence || {}).filter(([k, v]) => typeof v !== "object" || v === null || Array.isArray(v))
      .slice(0, 24).map(([k, v]) => "<tr><td>" + esc(k) + "</td><td>" + esc(Array.isArray(v) ? v.slice(0, 20).join(", ") : v) + "</td></tr>").join("");
    return '<div class="alert ' + esc(a.severity) + '" data-alert-id="' + esc(a.id) + '" data-type="' + esc(a.type) + '" data-ranks="' + esc(a.ranks.join(",")) + '">' +
      '<span class="sev">' + esc(a.severity) + " " + esc(a.type) + "</span> &middot; since " +
      esc(new Date(a.starts_at * 1000).toISOString().substr(11, 8)) + "Z<div>" + esc(a.summary) + "</div>" +
      '<div class="cause">suspected cause: <b>' + esc(cause(a) || "none found yet (no correlated telemetry)") + "</b></div>" +
      (a.type === "straggler" ? '<div class="cause">symptom: ' + esc((a.evidence || {}).signal || "") + " " +
        esc(fmt((a.evidence || {}).ratio, 2)) + "x peer median</div>" : "") +
      '<div class="action">action: ' + esc(action(a)) + "</div>" +
      stack(a.evidence || {}) +
      "<details><summary>evidence</summary><table>" + ev + "</table></details>" +
      '<div class="feedback">was it right? ' + VERDICTS.map(v => '<button data-verdict="' + v + '">' + v + "</button>").join(" ") +
      ' <span class="said">' + esc(said.get(a.id) || "") + "</span></div></div>";
  }).join("");
}

// Feedback buttons (POST /alerts/<id>/feedback, streams/feedback_feed.py): the cards are redrawn on each poll,
// so one listener on the page, and what was said kept here to draw it again.
const VERDICTS = ["confirmed", "false", "duplicate"];
const said = new Map();
document.addEventListener("click", async ev => {
  const b = ev.target.closest("button[data-verdict]"); if (!b) return;
  const card = b.closest("[data-alert-id]"), id = card.dataset.alertId;
  let text;
  try {
    const r = await fetch("/alerts/" + encodeURIComponent(id) + "/feedback", {method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({verdict: b.dataset.verdict, type: card.dataset.type, job: JOB || ""})});
    text = r.ok ? "marked " + b.dataset.verdict : "not recorded: " + ((await r.json()).error || r.status);
  } catch (err) { text = "not recorded: " + err.message; }
  said.set(id, text);
  card.querySelector(".said").textContent = text;
});

function render(d) {
  const s = d.summary;
  $("step").textContent = s.latest_step;
  // In a hang no step completes: a steps/s figure would be stale, so say how long the job has stood still.
  const hang = (d.alerts || []).find(a => a.type === "hang" && a.status === "firing" && (a.evidence || {}).stalled_since);
  if (hang) {
    $("ratebox").innerHTML = '<b id="rate" class="stalled"></b>';
    // Event time: the detector's own count (a replayed or sped-up job's clock is not the page's).
    const e = hang.evidence, counted = typeof e.stalled_seconds === "number" ? e.stalled_seconds : 0;
    $("rate").textContent = "no step for " + Math.max(0, Math.round(Math.max(counted, d.now - e.stalled_since))) + " s";
  } else {
    $("ratebox").innerHTML = 'rate <b id="rate"></b> steps/s';
    $("rate").textContent = fmt(s.step_rate, 2);
  }
  $("tokens").textContent = s.tokens_per_second === null ? "-" : Math.round(s.tokens_per_second).toLocaleString("en-US");
  $("ranks").textContent = s.ranks; $("phase").textContent = s.phase + (s.ended ? " (ended)" : "");
  $("nalerts").textContent = s.open_alerts;
  $("thr").textContent = d.thresholds.ratio + "x / " + d.thresholds.critical + "x";
  drawHeatmap(d); drawRate(d.series); drawAlerts(d.alerts); trackResolved(d.alerts || [], d.now);
  document.body.dataset.ready = "1";
}

async function poll() {
  try {
    const r = await fetch("/jobs/" + encodeURIComponent(JOB) + "/heatmap", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status + " " + (await r.text()).slice(0, 200));
    render(await r.json());
    $("conn").textContent = "live " + new Date().toISOString().substr(11, 8) + "Z"; $("conn").className = "kv good";
  } catch (err) {
    $("conn").textContent = "no data: " + err.message; $("conn").className = "kv bad";
  }
  setTimeout(poll, POLL_MS);
}

async function listJobs() {
  if (!$("jobs")) $("main").innerHTML = '<section><h2>Jobs on this worker</h2><ul id="jobs"></ul></section>';
  try {
    const r = await fetch("/jobs", {cache: "no-store"}); const d = await r.json();
    $("jobs").innerHTML = d.jobs.map(j => '<li><a href="/dashboard/' + encodeURIComponent(j.job) + '">' + esc(j.job) +
      "</a> &middot; " + j.ranks + " ranks, step " + j.latest_step + ", " + j.open_alerts + " open alerts</li>").join("") || "<li>none yet</li>";
    $("conn").textContent = ""; document.body.dataset.ready = "1";
  } catch (err) { $("conn").textContent = "no data: " + err.message; }
  setTimeout(listJobs, 5000);
}

if (JOB) poll(); else listJobs();
</script>
</body></html>
"""


_PLACEHOLDER = re.compile("__TITLE__|__JOB__")


def render_dashboard(job: str | None) -> str:
    """The page for ``job`` (or the job list when None); the job id is escaped for HTML and JS.

    Both placeholders are filled in one pass: a second ``replace`` would rewrite placeholders that the
    first one put in from the job id (a job named ``__JOB__<img ...>`` got its raw tag into the title).
    """
    title = html.escape(job) if job else "jobs"
    # A JS string literal with <, > and & as \u escapes: a job id cannot close the script or open a tag.
    literal = (json.dumps(job).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
               if job else "null")
    values = {"__TITLE__": title, "__JOB__": literal}
    return _PLACEHOLDER.sub(lambda m: values[m.group(0)], PAGE)
