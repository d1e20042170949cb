/**
 * The runs panel: one HTML page, its style and script inline, no build step.
 * Threads -> runs (status, times) -> stages (status, attempts, durations) ->
 * artifacts (content and sha256) and the timeline; live over SSE; the
 * approve/reject/retry/cancel buttons call the JSON API. Everything shown is
 * set as text (never as HTML), so an artifact or a request cannot inject markup.
 * The page holds no secret: the server's access cookie (HttpOnly, set when
 * the tokened address was opened) goes with every same-origin request it
 * makes, and a 401 (a restarted server has a new token) says to open the
 * address noema serve printed again.
 */
export const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>noema runs</title>
<style>
  :root { --bg: #f7f7f5; --panel: #fff; --line: #e2e2de; --text: #1d1d1b; --dim: #6b6b66; --accent: #3552c8;
    --ok: #1f7a3a; --bad: #b3261e; --wait: #9a6a00; --run: #3552c8; }
  * { box-sizing: border-box; }
  [hidden] { display: none !important; }
  body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg); color: var(--text); }
  header { display: flex; align-items: center; gap: 12px; padding: 10px 18px; border-bottom: 1px solid var(--line); background: var(--panel); }
  header h1 { font-size: 16px; margin: 0; }
  #live { font-size: 12px; color: var(--dim); }
  #live::before { content: ""; display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 6px; background: var(--bad); }
  #live.on::before { background: var(--ok); }
  main { display: grid; grid-template-columns: 260px 360px 1fr; gap: 12px; padding: 12px; align-items: start; }
  section { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 12px; min-width: 0; }
  h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .04em; color: var(--dim); margin: 0 0 8px; }
  h3 { font-size: 14px; margin: 14px 0 6px; }
  ul.list { list-style: none; margin: 0; padding: 0; }
  ul.list li { padding: 6px 8px; border-radius: 6px; cursor: pointer; display: flex; justify-content: space-between; gap: 8px; }
  ul.list li:hover { background: #f0f1f6; }
  ul.list li.selected { background: #e6eafa; }
  .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
  .dim { color: var(--dim); }
  .badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px; border: 1px solid currentColor; white-space: nowrap; }
  .s-completed { color: var(--ok); } .s-failed, .s-canceled { color: var(--bad); }
  .s-waiting_approval { color: var(--wait); } .s-running, .s-queued { color: var(--run); } .s-pending { color: var(--dim); }
  form { display: grid; gap: 6px; margin-top: 10px; }
  input, textarea, select, button { font: inherit; }
  input, textarea, select { border: 1px solid var(--line); border-radius: 6px; padding: 5px 7px; width: 100%; }
  textarea { min-height: 56px; resize: vertical; }
  button { border: 1px solid var(--line); background: #fff; border-radius: 6px; padding: 5px 10px; cursor: pointer; }
  button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
  button:disabled { opacity: .4; cursor: default; }
  .actions { display: flex; gap: 6px; flex-wrap: wrap; margin: 8px 0; }
  table { border-collapse: collapse; width: 100%; }
  td, th { text-align: left; padding: 4px 6px; border-bottom: 1px solid var(--line); vertical-align: top; }
  th { font-weight: 600; font-size: 12px; color: var(--dim); }
  a.artifact { color: var(--accent); cursor: pointer; text-decoration: none; }
  a.artifact:hover { text-decoration: underline; }
  pre { background: #f4f4f1; border: 1px solid var(--line); border-radius: 6px; padding: 10px; white-space: pre-wrap; word-break: break-word; max-height: 420px; overflow: auto; margin: 6px 0; }
  #timeline { max-height: 300px; overflow: auto; }
  #timeline li { padding: 2px 0; border-bottom: 1px dashed var(--line); }
  .error { color: var(--bad); }
  .empty { color: var(--dim); font-style: italic; }
  #notice { min-height: 1.4em; }
</style>
</head>
<body>
<header>
  <h1>noema runs</h1>
  <span id="live" class="off">connecting</span>
  <span id="notice" class="error"></span>
</header>
<main>
  <section>
    <h2>Threads</h2>
    <ul id="threads" class="list"></ul>
    <form id="new-thread">
      <input name="title" placeholder="New thread title" aria-label="title">
      <select name="queue_policy" aria-label="queue policy">
        <option value="reject">one run at a time (reject)</option>
        <option value="enqueue">queue runs (enqueue)</option>
      </select>
      <button class="primary" type="submit">Create thread</button>
    </form>
  </section>
  <section>
    <h2>Runs <span id="thread-title" class="dim"></span></h2>
    <ul id="runs" class="list"></ul>
    <form id="new-run" hidden>
      <textarea name="request" placeholder="What should the run produce?" aria-label="request"></textarea>
      <label class="dim"><input type="checkbox" name="plan" style="width:auto"> let the model plan the stages</label>
      <details><summary class="dim">pipeline (JSON, optional)</summary>
        <textarea name="pipeline" class="mono" placeholder='{"name":"p","stages":[{"key":"draft","instructions":"Write it.","approval":true}]}' aria-label="pipeline"></textarea>
      </details>
      <button class="primary" type="submit">Start run</button>
    </form>
  </section>
  <section id="run">
    <h2>Run</h2>
    <div id="run-empty" class="empty">Choose a run.</div>
    <div id="run-detail" hidden>
      <div><span id="run-id" class="mono"></span> <span id="run-status" class="badge"></span></div>
      <div id="run-request"></div>
      <div id="run-times" class="dim"></div>
      <div id="run-error" class="error"></div>
      <div class="actions">
        <button data-action="approve">Approve</button>
        <button data-action="reject">Reject</button>
        <button data-action="retry">Retry</button>
        <button data-action="cancel">Cancel</button>
        <button data-action="verify">Verify files</button>
      </div>
      <div id="verify" class="mono"></div>
      <h3>Stages</h3>
      <table><thead><tr><th>stage</th><th>status</th><th>attempt</th><th>duration</th><th>artifacts</th></tr></thead>
        <tbody id="stages"></tbody></table>
      <div id="artifact" hidden>
        <h3 id="artifact-title" class="mono"></h3>
        <div class="mono dim">sha256 <span id="artifact-sha"></span> <span id="artifact-check"></span></div>
        <pre id="artifact-content"></pre>
      </div>
      <div id="workflow" class="mono dim"></div>
      <h3>Timeline</h3>
      <ul id="timeline" class="list mono"></ul>
    </div>
  </section>
</main>
<script>
"use strict";
var state = { thread: null, run: null, artifact: null, runView: null };
var $ = function (id) { return document.getElementById(id); };

function el(tag, attrs, children) {
  var node = document.createElement(tag);
  for (var key in attrs || {}) {
    if (key === "text") node.textContent = attrs[key];
    else if (key === "className") node.className = attrs[key];
    else node.setAttribute(key, attrs[key]);
  }
  (children || []).forEach(function (child) { if (child) node.appendChild(child); });
  return node;
}

function notice(text) { $("notice").textContent = text || ""; }

var signedOut = "Not signed in (the server restarted?): open the address noema serve printed.";

/** A same-origin request: the access cookie goes with it. */
function request(path, init) {
  init.credentials = "same-origin";
  return fetch(path, init).then(function (response) {
    if (response.status === 401) throw new Error(signedOut);
    return response;
  });
}

function api(method, path, body) {
  var init = { method: method, headers: {} };
  if (body !== undefined) { init.headers["content-type"] = "application/json"; init.body = JSON.stringify(body); }
  return request(path, init).then(function (response) {
    return response.json().then(function (data) {
      if (!response.ok) throw new Error(data && data.error ? data.error.message : response.statusText);
      return data;
    });
  });
}

function duration(from, to) {
  if (!from) return "";
  var ms = (to ? Date.parse(to) : Date.now()) - Date.parse(from);
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

function time(at) { return at ? new Date(at).toLocaleString() : ""; }

function badge(status) { return el("span", { className: "badge s-" + status, text: status.replace("_", " ") }); }

function writeHash() {
  var parts = [];
  if (state.thread) parts.push("thread=" + encodeURIComponent(state.thread));
  if (state.run) parts.push("run=" + encodeURIComponent(state.run));
  history.replaceState(null, "", parts.length ? "#" + parts.join("&") : "#");
}

function readHash() {
  var params = new URLSearchParams(location.hash.slice(1));
  state.thread = params.get("thread");
  state.run = params.get("run");
}

function renderThreads(threads) {
  var list = $("threads");
  list.replaceChildren();
  if (threads.length === 0) list.appendChild(el("li", { className: "empty", text: "No threads yet." }));
  threads.forEach(function (thread) {
    var item = el("li", { "data-thread-id": thread.id, className: thread.id === state.thread ? "selected" : "" }, [
      el("span", { text: thread.title || thread.id }),
      el("span", { className: "dim", text: thread.status + (thread.queuePolicy === "enqueue" ? " · queue" : "") })
    ]);
    item.addEventListener("click", function () { state.thread = thread.id; state.run = null; state.artifact = null; writeHash(); refresh(); });
    list.appendChild(item);
  });
  var current = threads.find(function (t) { return t.id === state.thread; });
  $("thread-title").textContent = current ? "· " + (current.title || current.id) : "";
  $("new-run").hidden = !current || current.status !== "open";
}

function renderRuns(runs) {
  var list = $("runs");
  list.replaceChildren();
  if (!state.thread) { list.appendChild(el("li", { className: "empty", text: "Choose a thread." })); return; }
  if (runs.length === 0) list.appendChild(el("li", { className: "empty", text: "No runs in this thread." }));
  runs.forEach(function (run) {
    var item = el("li", { "data-run-id": run.runId, "data-status": run.status, className: run.runId === state.run ? "selected" : "" }, [
      el("span", {}, [el("div", { text: run.request.length > 60 ? run.request.slice(0, 60) + "…" : run.request }),
        el("div", { className: "dim mono", text: time(run.createdAt) + (run.startedAt ? " · " + duration(run.startedAt, run.finishedAt) : "") })]),
      badge(run.status)
    ]);
    item.addEventListener("click", function () { state.run = run.runId; state.artifact = null; writeHash(); refresh(); });
    list.appendChild(item);
  });
}

function showArtifact(run, stage, attempt, artifact) {
  state.artifact = [stage.position, attempt.attempt, artifact.path].join("/");
  var url = "/api/runs/" + encodeURIComponent(run.runId) + "/stages/" + stage.position + "/attempts/" + attempt.attempt +
    "/artifacts/" + artifact.path.split("/").map(encodeURIComponent).join("/");
  request(url, {}).then(function (response) {
    if (!response.ok) return response.json().then(function (data) { throw new Error(data.error.message); });
    var matches = response.headers.get("x-sha256-matches") === "true";
    return response.text().then(function (text) {
      $("artifact").hidden = false;
      $("artifact-title").textContent = String(stage.position).padStart(2, "0") + "-" + stage.key + " / attempt " + attempt.attempt + " / " + artifact.path;
      $("artifact-sha").textContent = artifact.sha256;
      $("artifact-check").textContent = matches ? "matches the file" : "differs from the file on disk";
      $("artifact-check").className = matches ? "s-completed" : "error";
      $("artifact-content").textContent = text;
    });
  }).catch(function (error) { notice(error.message); });
}

function renderRun(detail) {
  var run = detail.run;
  state.runView = run;
  $("run-empty").hidden = true;
  $("run-detail").hidden = false;
  $("run-id").textContent = run.runId;
  var status = $("run-status");
  status.textContent = run.status.replace("_", " ");
  status.className = "badge s-" + run.status;
  status.setAttribute("data-status", run.status);
  $("run-request").textContent = run.request;
  $("run-times").textContent = "pipeline " + run.pipeline + " · created " + time(run.createdAt) +
    (run.startedAt ? " · started " + time(run.startedAt) : "") + (run.finishedAt ? " · finished " + time(run.finishedAt) + " (" + duration(run.startedAt || run.createdAt, run.finishedAt) + ")" : "");
  $("run-error").textContent = run.error ? run.error.error_code + ": " + run.error.error_message + (run.error.retryable ? " (retryable)" : "") : "";
  var enabled = {
    approve: run.status === "waiting_approval", reject: run.status === "waiting_approval",
    retry: run.status === "failed", cancel: ["queued", "running", "waiting_approval", "failed"].indexOf(run.status) >= 0, verify: true
  };
  document.querySelectorAll("[data-action]").forEach(function (button) { button.disabled = !enabled[button.getAttribute("data-action")]; });
  var body = $("stages");
  body.replaceChildren();
  run.stages.forEach(function (stage) {
    var name = String(stage.position).padStart(2, "0") + "-" + stage.key;
    var attempts = stage.attempts.length ? stage.attempts : [null];
    attempts.forEach(function (attempt, index) {
      var links = el("div");
      (attempt ? attempt.artifacts : []).forEach(function (artifact) {
        var link = el("a", { className: "artifact mono", "data-artifact": stage.position + "/" + attempt.attempt + "/" + artifact.path, text: artifact.path + " (" + artifact.size + " B)" });
        link.addEventListener("click", function () { showArtifact(run, stage, attempt, artifact); });
        links.appendChild(el("div", {}, [link]));
      });
      var row = el("tr", { "data-stage": name, "data-attempt": attempt ? String(attempt.attempt) : "0" }, [
        el("td", { className: "mono", text: index === 0 ? name + (stage.needsApproval ? (stage.approved ? " · approved" : " · needs approval") : "") : "" }),
        el("td", {}, [badge(attempt ? (index === attempts.length - 1 ? stage.status : attempt.status) : stage.status)]),
        el("td", { text: attempt ? String(attempt.attempt) : "" }),
        el("td", { text: attempt ? duration(attempt.startedAt, attempt.finishedAt) : "" }),
        el("td", {}, [links, attempt && attempt.error ? el("div", { className: "error", text: attempt.error.error_code + ": " + attempt.error.error_message }) : null])
      ]);
      body.appendChild(row);
    });
  });
  var workflow = detail.workflow;
  $("workflow").textContent = workflow
    ? "workflow " + workflow.executionId + " · " + (workflow.completed ? "completed" : "open") + (workflow.interrupted ? " · interrupted" : "") +
      " · activities recorded: " + (workflow.activities.join(", ") || "none") +
      (workflow.deferreds.length ? " · deferreds completed: " + workflow.deferreds.join(", ") : "")
    : "";
  var timeline = $("timeline");
  timeline.replaceChildren();
  detail.events.forEach(function (event) {
    var data = Object.assign({}, event.data);
    var type = data.type;
    delete data.type;
    var rest = Object.keys(data).map(function (key) {
      var value = data[key];
      return key + "=" + (typeof value === "string" ? value : JSON.stringify(value));
    }).join(" ");
    timeline.appendChild(el("li", { "data-type": type, text: String(event.seq).padStart(3, " ") + "  " + new Date(event.at).toLocaleTimeString() + "  " + type + (rest ? "  " + rest : "") }));
  });
}

var refreshing = null;
var again = false;
function refresh() {
  if (refreshing) { again = true; return refreshing; }
  refreshing = api("GET", "/api/threads").then(function (threads) {
    renderThreads(threads);
    return state.thread ? api("GET", "/api/runs?thread=" + encodeURIComponent(state.thread)) : [];
  }).then(function (runs) {
    renderRuns(runs);
    if (!state.run) { $("run-empty").hidden = false; $("run-detail").hidden = true; return; }
    return api("GET", "/api/runs/" + encodeURIComponent(state.run)).then(renderRun);
  }).catch(function (error) { notice(error.message); }).then(function () {
    refreshing = null;
    if (again) { again = false; refresh(); }
  });
  return refreshing;
}

var timer = null;
function soon() { clearTimeout(timer); timer = setTimeout(refresh, 80); }

document.querySelectorAll("[data-action]").forEach(function (button) {
  button.addEventListener("click", function () {
    var action = button.getAttribute("data-action");
    var run = state.run;
    if (!run) return;
    notice("");
    if (action === "verify") {
      api("GET", "/api/runs/" + encodeURIComponent(run) + "/verify").then(function (report) {
        $("verify").className = report.ok ? "mono s-completed" : "mono error";
        var runFile = "run.json " + (report.runFile === "not recorded" ? "not checked (no sha256 recorded for this run)" : report.runFile === "matches" ? "matches its sha256" : "changed");
        $("verify").textContent = report.ok
          ? "verified: " + runFile + "; " + report.artifacts + " artifacts in " + report.checked.length + " stage directories match their manifests and the timeline"
          : "problems: " + report.problems.map(function (p) { return [p.stage, p.path].filter(Boolean).join("/") + ": " + p.problem; }).join("; ");
      }).catch(function (error) { notice(error.message); });
      return;
    }
    var body = {};
    if (action === "reject") {
      var reason = prompt("Why is it rejected?");
      if (!reason) return;
      body.reason = reason;
    }
    if (action === "cancel") body.reason = "canceled from the panel";
    button.disabled = true;
    api("POST", "/api/runs/" + encodeURIComponent(run) + "/" + action, body).then(refresh).catch(function (error) { notice(error.message); refresh(); });
  });
});

$("new-thread").addEventListener("submit", function (event) {
  event.preventDefault();
  var form = event.target;
  api("POST", "/api/threads", { title: form.title.value, queue_policy: form.queue_policy.value }).then(function (thread) {
    form.title.value = "";
    state.thread = thread.id; state.run = null; writeHash(); refresh();
  }).catch(function (error) { notice(error.message); });
});

$("new-run").addEventListener("submit", function (event) {
  event.preventDefault();
  var form = event.target;
  var body = { thread_id: state.thread, request: form.request.value };
  if (form.plan.checked) body.plan = true;
  else if (form.pipeline.value.trim()) {
    try { body.pipeline = JSON.parse(form.pipeline.value); } catch (error) { notice("The pipeline is not JSON: " + error.message); return; }
  }
  notice("");
  api("POST", "/api/runs", body).then(function (run) {
    form.request.value = "";
    state.run = run.runId; writeHash(); refresh();
  }).catch(function (error) { notice(error.message); });
});

function connect() {
  var source = new EventSource("/api/events");
  source.onopen = function () { $("live").className = "on"; $("live").textContent = "live"; soon(); };
  source.onerror = function () {
    $("live").className = "off";
    // A refused connection (401, 503) is not retried by the browser: try again later, as a page reload would.
    if (source.readyState === EventSource.CLOSED) { $("live").textContent = "offline"; setTimeout(connect, 5000); }
    else $("live").textContent = "reconnecting";
  };
  source.addEventListener("run-event", function (message) {
    var event = JSON.parse(message.data);
    document.body.setAttribute("data-cursor", String(event.cursor));
    soon();
  });
}

window.addEventListener("hashchange", function () { readHash(); refresh(); });
readHash();
refresh();
connect();
// Durations of what is running go on counting.
setInterval(function () { if (state.runView && state.runView.status === "running") soon(); }, 1000);
</script>
</body>
</html>
`
