/**
 * The runs panel: one HTML page, its style and script inline, no build step.
 * Threads -> runs (status, times) -> stages (status, attempts, durations) ->
 * artifacts (content and sha256) and the timeline, one row per event; live over
 * SSE; the approve/reject/retry/cancel buttons call the JSON API (whose keys are
 * snake_case, see Shown). Everything shown is set as text (never as HTML), so
 * an artifact or a request cannot inject markup: a Markdown artifact is
 * rendered by the page's own small renderer (`markdown`), which builds
 * elements and sets their text, and links only to http(s) addresses.
 * The page holds no secret: the server's access cookie (HttpOnly, set when
 * the tokened address was opened) goes with every same-origin request it
 * makes, and a 401 (a restarted server has a new token) says to open the
 * address noema serve printed again.
 */
import { RunLease } from "@noema/runs"

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
  .s-interrupted { color: var(--wait); }
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
  #timeline-box { max-height: 320px; overflow: auto; }
  #timeline td { white-space: nowrap; }
  #timeline td.detail { white-space: normal; word-break: break-word; }
  .markdown { border: 1px solid var(--line); border-radius: 6px; padding: 4px 14px; margin: 6px 0; max-height: 520px; overflow: auto; }
  .markdown h1 { font-size: 20px; } .markdown h2 { font-size: 17px; text-transform: none; letter-spacing: 0; color: var(--text); }
  .markdown h3, .markdown h4, .markdown h5, .markdown h6 { font-size: 14px; }
  .markdown pre { max-height: none; } .markdown code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; background: #f4f4f1; padding: 0 3px; border-radius: 3px; }
  .markdown blockquote { margin: 6px 0; padding-left: 10px; border-left: 3px solid var(--line); color: var(--dim); }
  .markdown a { color: var(--accent); }
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
    <div id="thread-held" class="error"></div>
    <label id="thread-queue-label" class="dim" hidden>while a run is active:
      <select id="thread-queue" aria-label="thread queue policy" style="width:auto">
        <option value="reject">refuse new runs (reject)</option>
        <option value="enqueue">queue them (enqueue)</option>
      </select></label>
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
      <div id="run-interrupted" class="error" hidden></div>
      <div class="actions">
        <button data-action="approve">Approve</button>
        <button data-action="reject">Reject</button>
        <button data-action="retry">Retry</button>
        <button data-action="cancel">Cancel</button>
        <button data-action="verify">Verify files</button>
      </div>
      <div id="retry-refusal" class="error" hidden><span id="retry-reason"></span>
        <button id="retry-anyway">Retry anyway</button></div>
      <div id="verify" class="mono"></div>
      <h3>Stages</h3>
      <table><thead><tr><th>stage</th><th>status</th><th>attempt</th><th>duration</th><th>artifacts</th></tr></thead>
        <tbody id="stages"></tbody></table>
      <div id="artifact" hidden>
        <h3 id="artifact-title" class="mono"></h3>
        <div class="mono dim">sha256 <span id="artifact-sha"></span> <span id="artifact-check"></span></div>
        <div id="artifact-rendered" class="markdown" hidden></div>
        <details id="artifact-source"><summary class="dim">source</summary><pre id="artifact-content"></pre></details>
      </div>
      <div id="workflow" class="mono dim"></div>
      <h3>Timeline</h3>
      <div id="timeline-box"><table id="timeline"><thead><tr><th>time</th><th>event</th><th>stage</th><th>who</th><th>detail</th></tr></thead>
        <tbody id="timeline-rows"></tbody></table></div>
    </div>
  </section>
</main>
<script>
"use strict";
var state = { thread: null, run: null, artifact: null, runView: null, refusedRetry: null };
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
      if (!response.ok) {
        var error = new Error(data && data.error ? data.error.message : response.statusText);
        error.code = data && data.error ? data.error.code : undefined;
        throw error;
      }
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

// ---------------------------------------------------------------------------
// Markdown, as elements whose text is set: nothing of the artifact is ever parsed as HTML
// (a tag in it is shown as the text it is), and a link goes only to an http(s) address.
// ---------------------------------------------------------------------------

/** An http(s) address, or null: javascript:, data:, relative and malformed ones are not links. */
function safeHref(href) {
  try {
    var url = new URL(href);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch (error) { return null; }
}

var inlinePattern = /(\`+)([^\`]|[^\`][\\s\\S]*?[^\`])\\1(?!\`)|\\[([^\\]]*)\\]\\(\\s*(\\S*?)\\s*(?:"[^"]*")?\\s*\\)|\\*\\*(?!\\s)((?:(?!\\*\\*)[\\s\\S])+?)(?<!\\s)\\*\\*|(?<![A-Za-z0-9_])__(?!\\s)((?:(?!__)[\\s\\S])+?)(?<!\\s)__(?![A-Za-z0-9_])|\\*(?!\\s)([^*]+?)(?<!\\s)\\*|(?<![A-Za-z0-9_])_(?!\\s)([^_]+?)(?<!\\s)_(?![A-Za-z0-9_])/g;

/** Appends \`text\`'s inline Markdown to \`parent\`: code spans, links, strong and emphasis. */
function inline(text, parent) {
  var pattern = new RegExp(inlinePattern.source, "g");
  var last = 0;
  var match;
  while ((match = pattern.exec(text)) !== null) {
    if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)));
    if (match[1] !== undefined) parent.appendChild(el("code", { text: match[2] }));
    else if (match[3] !== undefined) {
      var href = safeHref(match[4]);
      if (href === null) parent.appendChild(document.createTextNode(match[0]));
      else {
        var link = el("a", { href: href, rel: "noopener noreferrer", target: "_blank" });
        inline(match[3], link);
        parent.appendChild(link);
      }
    } else if (match[5] !== undefined || match[6] !== undefined) {
      var strong = el("strong");
      inline(match[5] !== undefined ? match[5] : match[6], strong);
      parent.appendChild(strong);
    } else {
      var em = el("em");
      inline(match[7] !== undefined ? match[7] : match[8], em);
      parent.appendChild(em);
    }
    last = pattern.lastIndex;
  }
  if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  return parent;
}

var fencePattern = /^ {0,3}(\`{3,}|~{3,})\\s*([^\`\\s]*)/;
var headingPattern = /^ {0,3}(#{1,6})(?:\\s+(.*?))?(?:\\s+#+)?\\s*$/;
var rulePattern = /^ {0,3}([-*_])(?:\\s*\\1){2,}\\s*$/;
var quotePattern = /^ {0,3}> ?(.*)$/;
var itemPattern = /^( {0,3})([-*+]|\\d{1,9}[.)])\\s+(.*)$/;
var tableRulePattern = /^\\s*\\|?\\s*:?-+:?\\s*(\\|\\s*:?-+:?\\s*)*\\|?\\s*$/;

function blank(line) { return /^\\s*$/.test(line); }

function indented(line) { return /^ {2,}\\S/.test(line); }

function startsBlock(line) {
  return fencePattern.test(line) || headingPattern.test(line) || rulePattern.test(line) || quotePattern.test(line) || itemPattern.test(line);
}

function cells(line) {
  return line.trim().replace(/^\\|/, "").replace(/\\|$/, "").split("|").map(function (cell) { return cell.trim(); });
}

/** \`text\` (Markdown) as a fragment of elements: headings, paragraphs, lists, quotes, code, tables, rules. */
function markdown(text) {
  var out = document.createDocumentFragment();
  var lines = text.replace(/\\r\\n?/g, "\\n").split("\\n");
  var i = 0;
  while (i < lines.length) {
    var line = lines[i];
    var fence = fencePattern.exec(line);
    if (blank(line)) { i++; continue; }
    if (fence) {
      var body = [];
      i++;
      while (i < lines.length && !(lines[i].trim().indexOf(fence[1]) === 0 && lines[i].trim().replace(new RegExp("^" + fence[1].charAt(0) + "+"), "").trim() === "")) body.push(lines[i++]);
      i++;
      var code = el("code", { text: body.join("\\n") });
      if (/^[A-Za-z0-9_+-]+$/.test(fence[2])) code.setAttribute("data-language", fence[2]);
      out.appendChild(el("pre", {}, [code]));
      continue;
    }
    var heading = headingPattern.exec(line);
    if (heading) { out.appendChild(inline(heading[2] || "", el("h" + heading[1].length))); i++; continue; }
    if (rulePattern.test(line)) { out.appendChild(el("hr")); i++; continue; }
    if (quotePattern.test(line)) {
      var quoted = [];
      while (i < lines.length && quotePattern.test(lines[i])) quoted.push(quotePattern.exec(lines[i++])[1]);
      out.appendChild(el("blockquote", {}, [markdown(quoted.join("\\n"))]));
      continue;
    }
    var item = itemPattern.exec(line);
    if (item) {
      var ordered = /\\d/.test(item[2]);
      var list = el(ordered ? "ol" : "ul");
      if (ordered && parseInt(item[2], 10) !== 1) list.setAttribute("start", String(parseInt(item[2], 10)));
      while (i < lines.length) {
        // A blank line between two items keeps them in one list.
        if (blank(lines[i]) && i + 1 < lines.length && itemPattern.test(lines[i + 1])) { i++; continue; }
        var next = itemPattern.exec(lines[i]);
        if (!next || /\\d/.test(next[2]) !== ordered) break;
        // The item's own lines: the first, then those indented under it (a nested list too).
        var own = [next[3]];
        var indent = next[1].length + next[2].length + 1;
        i++;
        while (i < lines.length) {
          if (indented(lines[i])) own.push(lines[i++].replace(/^ +/, function (spaces) { return spaces.slice(Math.min(spaces.length, indent)); }));
          else if (blank(lines[i]) && i + 1 < lines.length && indented(lines[i + 1])) { own.push(""); i++; }
          else break;
        }
        var li = el("li");
        if (own.length === 1) inline(own[0], li);
        else li.appendChild(markdown(own.join("\\n")));
        list.appendChild(li);
      }
      out.appendChild(list);
      continue;
    }
    if (line.indexOf("|") >= 0 && i + 1 < lines.length && tableRulePattern.test(lines[i + 1]) && lines[i + 1].indexOf("-") >= 0) {
      var head = el("tr", {}, cells(line).map(function (cell) { return inline(cell, el("th")); }));
      var rows = el("tbody");
      i += 2;
      while (i < lines.length && !blank(lines[i]) && lines[i].indexOf("|") >= 0)
        rows.appendChild(el("tr", {}, cells(lines[i++]).map(function (cell) { return inline(cell, el("td")); })));
      out.appendChild(el("table", {}, [el("thead", {}, [head]), rows]));
      continue;
    }
    var paragraph = [line.trim()];
    i++;
    while (i < lines.length && !blank(lines[i]) && !startsBlock(lines[i])) paragraph.push(lines[i++].trim());
    out.appendChild(inline(paragraph.join(" "), el("p")));
  }
  return out;
}

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
    var held = thread.active_run && thread.active_run.status === "interrupted";
    var item = el("li", { "data-thread-id": thread.id, className: thread.id === state.thread ? "selected" : "" }, [
      el("span", { text: thread.title || thread.id }),
      el("span", { className: held ? "s-interrupted" : "dim", text: thread.status + (thread.queue_policy === "enqueue" ? " · queue" : "") + (held ? " · held" : "") })
    ]);
    item.addEventListener("click", function () { state.thread = thread.id; state.run = null; state.artifact = null; writeHash(); refresh(); });
    list.appendChild(item);
  });
  var current = threads.find(function (t) { return t.id === state.thread; });
  $("thread-title").textContent = current ? "· " + (current.title || current.id) : "";
  $("new-run").hidden = !current || current.status !== "open";
  $("thread-queue-label").hidden = !current || current.status !== "open";
  if (current) $("thread-queue").value = current.queue_policy;
  var holder = current && current.active_run;
  $("thread-held").textContent = holder && holder.status === "interrupted"
    ? "Held by run " + holder.run_id + ", which was interrupted (no process carries it on): " + resumeHint(holder.run_id) + ", or cancel it."
    : "";
}

/** What carries an interrupted run on, as the CLI says it (RunLease.resumeHint). */
function resumeHint(runId) { return ${JSON.stringify(RunLease.resumeHint("RUN"))}.replace("RUN", runId); }

function renderRuns(runs) {
  var list = $("runs");
  list.replaceChildren();
  if (!state.thread) { list.appendChild(el("li", { className: "empty", text: "Choose a thread." })); return; }
  if (runs.length === 0) list.appendChild(el("li", { className: "empty", text: "No runs in this thread." }));
  runs.forEach(function (run) {
    var item = el("li", { "data-run-id": run.run_id, "data-status": run.status, className: run.run_id === state.run ? "selected" : "" }, [
      el("span", {}, [el("div", { text: run.request.length > 60 ? run.request.slice(0, 60) + "…" : run.request }),
        el("div", { className: "dim mono", text: time(run.created_at) + (run.started_at && run.status !== "interrupted" ? " · " + duration(run.started_at, run.finished_at) : "") })]),
      badge(run.status)
    ]);
    item.addEventListener("click", function () { state.run = run.run_id; state.artifact = null; writeHash(); refresh(); });
    list.appendChild(item);
  });
}

function showArtifact(run, stage, attempt, artifact) {
  state.artifact = [stage.position, attempt.attempt, artifact.path].join("/");
  var url = "/api/runs/" + encodeURIComponent(run.run_id) + "/stages/" + stage.position + "/attempts/" + attempt.attempt +
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
      // Markdown is shown rendered, its source below; anything else as its text.
      var rendered = artifact.kind === "markdown";
      $("artifact-rendered").hidden = !rendered;
      $("artifact-rendered").replaceChildren(rendered ? markdown(text) : document.createTextNode(""));
      $("artifact-source").open = !rendered;
    });
  }).catch(function (error) { notice(error.message); });
}

/** "02-publish" for an event's stage, from the run's stages. */
function stageLabel(run, position) {
  var stage = run.stages.filter(function (s) { return s.position === position; })[0];
  return String(position).padStart(2, "0") + "-" + (stage ? stage.key : "?");
}

function shorten(text, length) { return text.length > length ? text.slice(0, length) + "…" : text; }

/** What an event says in a few words; who did it, where the timeline knows. */
function eventSummary(data) {
  var attempt = data.attempt > 1 ? "attempt " + data.attempt : "";
  switch (data.type) {
    case "RunQueued": return { detail: shorten(data.request, 80) + " · pipeline " + data.pipeline + " · " + data.stages.length + " stages" };
    case "StageStarted": return { who: "agent", detail: attempt };
    case "ArtifactPublished": return { who: "agent", detail: data.path + " · " + data.kind + " · " + data.size + " B · sha256 " + data.sha256.slice(0, 12) + "…" };
    case "StageCompleted": return { who: "agent", detail: attempt };
    case "StageFailed": return { who: "agent", detail: data.error_code + ": " + shorten(data.error_message, 120) + (data.retryable ? " (retryable)" : "") };
    case "ApprovalRequested": return { detail: "waits for approval" };
    case "ApprovalGranted": return { who: data.by || "", detail: "approved" };
    case "ApprovalRejected": return { detail: "rejected: " + shorten(data.reason, 120) };
    case "RunFailed": return { detail: data.error_code + ": " + shorten(data.error_message, 120) };
    case "RunCanceled": return { detail: shorten(data.reason, 120) };
    default: return { detail: "" };
  }
}

/** One row of the timeline: time, event, stage, who, detail (the whole event on hover). */
function timelineRow(run, event) {
  var data = event.data;
  var summary = eventSummary(data);
  return el("tr", { "data-type": data.type, "data-seq": String(event.seq), title: JSON.stringify(data) }, [
    el("td", { className: "mono dim", text: new Date(event.at).toLocaleTimeString() }),
    el("td", { className: "mono", text: data.type }),
    el("td", { className: "mono", text: typeof data.position === "number" ? stageLabel(run, data.position) : "" }),
    el("td", { text: summary.who || "" }),
    el("td", { className: "detail", text: summary.detail })
  ]);
}

function renderRun(detail) {
  var run = detail.run;
  state.runView = run;
  $("run-empty").hidden = true;
  $("run-detail").hidden = false;
  $("run-id").textContent = run.run_id;
  var status = $("run-status");
  status.textContent = run.status.replace("_", " ");
  status.className = "badge s-" + run.status;
  status.setAttribute("data-status", run.status);
  $("run-request").textContent = run.request;
  $("run-times").textContent = "pipeline " + run.pipeline + " · created " + time(run.created_at) +
    (run.started_at ? " · started " + time(run.started_at) : "") + (run.finished_at ? " · finished " + time(run.finished_at) + " (" + duration(run.started_at || run.created_at, run.finished_at) + ")" : "");
  $("run-error").textContent = run.error ? run.error.error_code + ": " + run.error.error_message + (run.error.retryable ? " (retryable)" : "") : "";
  $("run-interrupted").hidden = run.status !== "interrupted";
  $("run-interrupted").textContent = run.status === "interrupted"
    ? "Interrupted: no process carries this run on (its process stopped). " + resumeHint(run.run_id) + " carries it on; completed stages are kept."
    : "";
  var enabled = {
    approve: run.status === "waiting_approval", reject: run.status === "waiting_approval",
    retry: run.status === "failed", cancel: ["queued", "running", "interrupted", "waiting_approval", "failed"].indexOf(run.status) >= 0, verify: true
  };
  document.querySelectorAll("[data-action]").forEach(function (button) { button.disabled = !enabled[button.getAttribute("data-action")]; });
  $("retry-refusal").hidden = !(state.refusedRetry === run.run_id && run.status === "failed");
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
      var shown = attempt ? (index === attempts.length - 1 ? stage.status : attempt.status) : stage.status;
      var row = el("tr", { "data-stage": name, "data-attempt": attempt ? String(attempt.attempt) : "0" }, [
        el("td", { className: "mono", text: index === 0 ? name + (stage.needs_approval ? (stage.approved ? " · approved" : " · needs approval") : "") : "" }),
        el("td", {}, [badge(shown)]),
        el("td", { text: attempt ? String(attempt.attempt) : "" }),
        // An interrupted attempt's clock stopped with its process: no duration that keeps counting.
        el("td", { text: attempt && attempt.status !== "interrupted" ? duration(attempt.started_at, attempt.finished_at) : "" }),
        el("td", {}, [links, attempt && attempt.error ? el("div", { className: "error", text: attempt.error.error_code + ": " + attempt.error.error_message }) : null])
      ]);
      body.appendChild(row);
    });
  });
  var workflow = detail.workflow;
  $("workflow").textContent = workflow
    ? "workflow " + workflow.execution_id + " · " + (workflow.completed ? "completed" : "open") + (workflow.interrupted ? " · interrupted" : "") +
      " · activities recorded: " + (workflow.activities.join(", ") || "none") +
      (workflow.deferreds.length ? " · deferreds completed: " + workflow.deferreds.join(", ") : "")
    : "";
  $("timeline-rows").replaceChildren.apply($("timeline-rows"), detail.events.map(function (event) { return timelineRow(run, event); }));
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
        var runFile = "run.json " + (report.run_file === "not recorded" ? "not checked (no sha256 recorded for this run)" : report.run_file === "matches" ? "matches its sha256" : "changed");
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
    api("POST", "/api/runs/" + encodeURIComponent(run) + "/" + action, body).then(refresh).catch(function (error) {
      // A failure that is not retryable: the server says why; a person may retry it anyway.
      if (action === "retry" && error.code === "NotRetryable") { state.refusedRetry = run; $("retry-reason").textContent = error.message; }
      else notice(error.message);
      refresh();
    });
  });
});

$("retry-anyway").addEventListener("click", function () {
  var run = state.refusedRetry;
  state.refusedRetry = null;
  $("retry-refusal").hidden = true;
  if (!run) return;
  api("POST", "/api/runs/" + encodeURIComponent(run) + "/retry", { force: true }).then(refresh).catch(function (error) { notice(error.message); refresh(); });
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
    state.run = run.run_id; writeHash(); refresh();
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

$("thread-queue").addEventListener("change", function (event) {
  if (!state.thread) return;
  notice("");
  api("POST", "/api/threads/" + encodeURIComponent(state.thread) + "/queue-policy", { queue_policy: event.target.value })
    .then(refresh).catch(function (error) { notice(error.message); refresh(); });
});

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
