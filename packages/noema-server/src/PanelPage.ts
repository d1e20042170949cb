/**
 * The panel: one page, a small single page app of plain ES modules in `app/`
 * (no build step: the browser loads them as they are), served under `/app/`.
 * A view switcher (Runs, Sessions, Chat, Traces, Plans, Routines, Resources) keeps its
 * place in the address's hash.
 * Everything shown is set as text (never as HTML), so a message, an artifact
 * or a request cannot inject markup: Markdown is rendered by the page's own
 * small renderer (`app/markdown.js`), which builds elements and sets their
 * text, and links only to http(s) addresses. The page's policy allows scripts
 * from the server itself only, so an injected inline script would not run
 * either. The page holds no secret: the server's access cookie (HttpOnly, set
 * when the tokened address was opened) goes with every same-origin request it
 * makes, and a 401 (a restarted server has a new token) says to open the
 * address noema serve printed again.
 */
import * as fs from "node:fs"
import { RunLease } from "@noema/runs"

/** `text` safe inside an HTML attribute's double quotes. */
const attribute = (text: string) =>
  text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

/**
 * A list's pager: the range shown (`<name>-range`) and its two buttons (`<name>-prev`,
 * `<name>-next`), hidden until the app knows there is more when `hidden`.
 */
const pager = (
  name: string,
  previous = "Newer",
  next = "Older",
  options: { readonly hidden?: boolean } = {}
) => {
  const shown = options.hidden === true ? " hidden" : ""
  return `<div class="pager"><span id="${name}-range" class="dim"></span>
      <button id="${name}-prev" type="button"${shown}>${previous}</button><button id="${name}-next" type="button"${shown}>${next}</button></div>`
}

export const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>noema runs</title>
<link rel="stylesheet" href="/app/panel.css">
<link rel="modulepreload" href="/app/dom.js">
<link rel="modulepreload" href="/app/markdown.js">
<link rel="modulepreload" href="/app/runs.js">
<link rel="modulepreload" href="/app/sessions.js">
<link rel="modulepreload" href="/app/chat.js">
<link rel="modulepreload" href="/app/traces.js">
<link rel="modulepreload" href="/app/plans.js">
<link rel="modulepreload" href="/app/routines.js">
<link rel="modulepreload" href="/app/resources.js">
<script type="module" src="/app/main.js"></script>
</head>
<body data-resume-hint="${attribute(RunLease.resumeHint("RUN"))}">

<header>
  <h1>noema</h1>
  <nav aria-label="views">
    <a href="#" data-view="runs">Runs</a>
    <a href="#view=sessions" data-view="sessions">Sessions</a>
    <a href="#view=chat" data-view="chat">Chat</a>
    <a href="#view=traces" data-view="traces">Traces</a>
    <a href="#view=plans" data-view="plans">Plans</a>
    <a href="#view=routines" data-view="routines">Routines</a>
    <a href="#view=resources" data-view="resources">Resources</a>
  </nav>
  <span id="live" class="off">connecting</span>
  <span id="notice" class="error"></span>
</header>
<main id="view-runs">
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
<main id="view-sessions" class="two" hidden>
  <section>
    <h2>Sessions</h2>
    <form id="session-search-form" role="search">
      <input id="session-search" type="search" placeholder="Search titles and ids (/)" aria-label="search sessions">
      <button type="submit">Search</button>
    </form>
    <ul id="sessions" class="list"></ul>
    ${pager("sessions")}
  </section>
  <section id="session">
    <div id="session-empty" class="empty">Choose a session.</div>
    <div id="session-detail" hidden>
      <h2 id="session-title"></h2>
      <div id="session-meta" class="dim mono"></div>
      <div id="session-prompt" class="dim"></div>
      <div id="session-usage" class="dim"></div>
      ${pager("turns", "Earlier turns", "Later turns", { hidden: true })}
      <div id="session-turns"></div>
    </div>
  </section>
</main>
<main id="view-chat" class="one" hidden>
  <section>
    <h2><span id="chat-title">New chat</span> <a id="chat-open" class="dim small" hidden>open in Sessions</a></h2>
    <div class="actions"><span id="chat-agent" class="dim"></span>
      <button id="chat-new" type="button">New chat</button></div>
    <div id="chat-turns"></div>
    <div id="chat-live" aria-live="polite"></div>
    <ul id="chat-queued" class="list"></ul>
    <div id="chat-approvals"></div>
    <div id="chat-status" class="dim" role="status"></div>
    <form id="chat-form">
      <textarea id="chat-input" placeholder="Message the agent (Enter sends, Shift+Enter: new line)" aria-label="message"></textarea>
      <div class="actions"><button class="primary" type="submit">Send</button>
        <button id="chat-stop" type="button" disabled>Stop (Esc)</button></div>
    </form>
  </section>
</main>
<main id="view-traces" class="two" hidden>
  <section>
    <h2>Traces</h2>
    <div id="traces-filter" class="dim"></div>
    <ul id="traces" class="list"></ul>
    ${pager("traces")}
  </section>
  <section id="trace">
    <div id="trace-empty" class="empty">Choose a trace.</div>
    <div id="trace-detail" hidden>
      <h2 id="trace-title"></h2>
      <div id="trace-meta" class="dim mono"></div>
      <div id="waterfall" role="list" aria-label="spans"></div>
      <div id="span-detail"></div>
    </div>
  </section>
</main>
<main id="view-plans" class="two" hidden>
  <section>
    <h2>Plans</h2>
    <ul id="plans" class="list"></ul>
    ${pager("plans")}
  </section>
  <section id="plan">
    <div id="plan-empty" class="empty">Choose a plan.</div>
    <div id="plan-detail" hidden>
      <h2>Plan</h2>
      <div id="plan-request" class="request"></div>
      <div id="plan-meta" class="dim mono small"></div>
      <div id="plan-progress" class="dim"></div>
      <div id="plan-withheld" class="dim"></div>
      <ul id="plan-tasks" class="tree"></ul>
    </div>
  </section>
</main>
<main id="view-routines" class="two" hidden>
  <section>
    <h2>Routines</h2>
    <ul id="routines" class="list"></ul>
  </section>
  <section id="routine">
    <div id="routine-empty" class="empty">Choose a routine.</div>
    <div id="routine-detail" hidden>
      <div id="routine-name" class="request"></div>
      <div id="routine-meta" class="dim"></div>
      <div id="routine-problem" class="error"></div>
      <div id="routine-goals"></div>
    </div>
  </section>
</main>
<main id="view-resources" class="two" hidden>
  <section>
    <h2>Resources</h2>
    <form id="resource-prefix-form" class="inline">
      <input id="resource-prefix" class="mono" placeholder="URN prefix (empty: the roots)" aria-label="URN prefix">
      <button type="submit">List</button>
    </form>
    <form id="resource-search-form" class="inline" role="search">
      <input id="resource-search" type="search" placeholder="Search (/)" aria-label="search resources">
      <button type="submit">Search</button>
    </form>
    <div id="resource-actor" class="dim small"></div>
    <ul id="resources" class="list"></ul>
    ${pager("resources", "Previous", "Next")}
  </section>
  <section id="resource">
    <div id="resource-empty" class="empty">Choose a resource.</div>
    <div id="resource-detail" hidden>
      <div id="resource-urn" class="request mono"></div>
      <table><thead><tr><th>action</th><th>decision</th><th>reasons</th></tr></thead>
        <tbody id="resource-decisions"></tbody></table>
      <div class="actions"><a id="resource-under" href="#">List what lies under it</a></div>
      <div id="resource-denied" class="error" hidden></div>
      <pre id="resource-json"></pre>
    </div>
  </section>
</main>
</body>
</html>
`

/** The policy the page is served with: its scripts and style from this server only. */
export const policy =
  "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

export interface AppFile {
  readonly contentType: string
  readonly body: Uint8Array
}

const contentTypes: Readonly<Record<string, string>> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8"
}

/** The directory of the page's modules, beside `src/` and `dist/` in the package. */
const appDirectory = new URL("../app/", import.meta.url)

/**
 * The page's files by name (`main.js`), read once when a server starts: what is served is
 * what the package shipped, and nothing else under any name.
 */
export const appFiles = (): ReadonlyMap<string, AppFile> =>
  new Map(
    fs
      .readdirSync(appDirectory)
      .filter((name) => Object.hasOwn(contentTypes, name.slice(name.lastIndexOf("."))))
      .map((name) => [
        name,
        {
          contentType: contentTypes[name.slice(name.lastIndexOf("."))] as string,
          body: new Uint8Array(fs.readFileSync(new URL(name, appDirectory)))
        }
      ])
  )
