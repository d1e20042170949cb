/**
 * runs: the Runs view. Threads -> runs (status, times) -> stages (status,
 * attempts, durations) -> artifacts (content and sha256, Markdown rendered by
 * `markdown`) and the timeline, one row per event; the approve, reject, retry
 * and cancel buttons call the JSON API. Its place in the address:
 * `#thread=ID&run=ID`.
 */
import { $, activatable, api, arrowKeys, badge, duration, el, notice, request, shorten, time } from "./dom.js"
import { markdown } from "./markdown.js"

const state = { thread: null, run: null, artifact: null, runView: null, refusedRetry: null }

function writeHash() {
  const parts = []
  if (state.thread) parts.push(`thread=${encodeURIComponent(state.thread)}`)
  if (state.run) parts.push(`run=${encodeURIComponent(state.run)}`)
  history.replaceState(null, "", parts.length ? `#${parts.join("&")}` : "#")
}

/** The entry of `list` that has the keyboard's focus, by its `attribute`, to give it back once redrawn. */
function focusedIn(list, attribute) {
  return list.contains(document.activeElement) ? document.activeElement.getAttribute(attribute) : null
}

function refocus(list, attribute, value) {
  if (value === null) return
  for (const item of list.children) if (item.getAttribute(attribute) === value) item.focus()
}

function renderThreads(threads) {
  const list = $("threads")
  const focused = focusedIn(list, "data-thread-id")
  list.replaceChildren()
  if (threads.length === 0) list.appendChild(el("li", { className: "empty", text: "No threads yet." }))
  threads.forEach((thread) => {
    const held = thread.active_run && thread.active_run.status === "interrupted"
    const item = el(
      "li",
      { "data-thread-id": thread.id, className: thread.id === state.thread ? "selected" : "" },
      [
        el("span", { text: thread.title || thread.id }),
        el("span", {
          className: held ? "s-interrupted" : "dim",
          text:
            thread.status + (thread.queue_policy === "enqueue" ? " · queue" : "") + (held ? " · held" : "")
        })
      ]
    )
    activatable(item, () => {
      state.thread = thread.id
      state.run = null
      state.artifact = null
      writeHash()
      refresh()
    })
    list.appendChild(item)
  })
  refocus(list, "data-thread-id", focused)
  const current = threads.find((t) => t.id === state.thread)
  $("thread-title").textContent = current ? `· ${current.title || current.id}` : ""
  $("new-run").hidden = current?.status !== "open"
  $("thread-queue-label").hidden = current?.status !== "open"
  if (current) $("thread-queue").value = current.queue_policy
  const holder = current?.active_run
  $("thread-held").textContent =
    holder && holder.status === "interrupted"
      ? "Held by run " +
        holder.run_id +
        ", which was interrupted (no process carries it on): " +
        resumeHint(holder.run_id) +
        ", or cancel it."
      : ""
}

/** What carries an interrupted run on, as the CLI says it (RunLease.resumeHint). */
function resumeHint(runId) {
  return document.body.getAttribute("data-resume-hint").replace("RUN", runId)
}

function renderRuns(runs) {
  const list = $("runs")
  const focused = focusedIn(list, "data-run-id")
  list.replaceChildren()
  if (!state.thread) {
    list.appendChild(el("li", { className: "empty", text: "Choose a thread." }))
    return
  }
  if (runs.length === 0) list.appendChild(el("li", { className: "empty", text: "No runs in this thread." }))
  runs.forEach((run) => {
    const item = el(
      "li",
      {
        "data-run-id": run.run_id,
        "data-status": run.status,
        className: run.run_id === state.run ? "selected" : ""
      },
      [
        el("span", {}, [
          el("div", { text: run.request.length > 60 ? `${run.request.slice(0, 60)}…` : run.request }),
          el("div", {
            className: "dim mono",
            text:
              time(run.created_at) +
              (run.started_at && run.status !== "interrupted"
                ? ` · ${duration(run.started_at, run.finished_at)}`
                : "")
          })
        ]),
        badge(run.status)
      ]
    )
    activatable(item, () => {
      state.run = run.run_id
      state.artifact = null
      writeHash()
      refresh()
    })
    list.appendChild(item)
  })
  refocus(list, "data-run-id", focused)
}

function showArtifact(run, stage, attempt, artifact) {
  state.artifact = [stage.position, attempt.attempt, artifact.path].join("/")
  const url =
    "/api/runs/" +
    encodeURIComponent(run.run_id) +
    "/stages/" +
    stage.position +
    "/attempts/" +
    attempt.attempt +
    "/artifacts/" +
    artifact.path.split("/").map(encodeURIComponent).join("/")
  request(url, {})
    .then((response) => {
      if (!response.ok)
        return response.json().then((data) => {
          throw new Error(data.error.message)
        })
      const matches = response.headers.get("x-sha256-matches") === "true"
      return response.text().then((text) => {
        $("artifact").hidden = false
        $("artifact-title").textContent =
          String(stage.position).padStart(2, "0") +
          "-" +
          stage.key +
          " / attempt " +
          attempt.attempt +
          " / " +
          artifact.path
        $("artifact-sha").textContent = artifact.sha256
        $("artifact-check").textContent = matches ? "matches the file" : "differs from the file on disk"
        $("artifact-check").className = matches ? "s-completed" : "error"
        $("artifact-content").textContent = text
        // Markdown is shown rendered, its source below; anything else as its text.
        const rendered = artifact.kind === "markdown"
        $("artifact-rendered").hidden = !rendered
        $("artifact-rendered").replaceChildren(rendered ? markdown(text) : document.createTextNode(""))
        $("artifact-source").open = !rendered
      })
    })
    .catch((error) => {
      notice(error.message)
    })
}

/** "02-publish" for an event's stage, from the run's stages. */
function stageLabel(run, position) {
  const stage = run.stages.filter((s) => s.position === position)[0]
  return `${String(position).padStart(2, "0")}-${stage ? stage.key : "?"}`
}

/** What an event says in a few words; who did it, where the timeline knows. */
function eventSummary(data) {
  const attempt = data.attempt > 1 ? `attempt ${data.attempt}` : ""
  switch (data.type) {
    case "RunQueued":
      return {
        detail: `${shorten(data.request, 80)} · pipeline ${data.pipeline} · ${data.stages.length} stages`
      }
    case "StageStarted":
      return { who: "agent", detail: attempt }
    case "ArtifactPublished":
      return {
        who: "agent",
        detail: `${data.path} · ${data.kind} · ${data.size} B · sha256 ${data.sha256.slice(0, 12)}…`
      }
    case "StageCompleted":
      return { who: "agent", detail: attempt }
    case "StageFailed":
      return {
        who: "agent",
        detail: `${data.error_code}: ${shorten(data.error_message, 120)}${data.retryable ? " (retryable)" : ""}`
      }
    case "ApprovalRequested":
      return { detail: "waits for approval" }
    case "ApprovalGranted":
      return { who: data.by || "", detail: "approved" }
    case "ApprovalRejected":
      return { detail: `rejected: ${shorten(data.reason, 120)}` }
    case "RunFailed":
      return { detail: `${data.error_code}: ${shorten(data.error_message, 120)}` }
    case "RunCanceled":
      return { detail: shorten(data.reason, 120) }
    default:
      return { detail: "" }
  }
}

/** One row of the timeline: time, event, stage, who, detail (the whole event on hover). */
function timelineRow(run, event) {
  const data = event.data
  const summary = eventSummary(data)
  return el("tr", { "data-type": data.type, "data-seq": String(event.seq), title: JSON.stringify(data) }, [
    el("td", { className: "mono dim", text: new Date(event.at).toLocaleTimeString() }),
    el("td", { className: "mono", text: data.type }),
    el("td", {
      className: "mono",
      text: typeof data.position === "number" ? stageLabel(run, data.position) : ""
    }),
    el("td", { text: summary.who || "" }),
    el("td", { className: "detail", text: summary.detail })
  ])
}

function renderRun(detail) {
  const run = detail.run
  state.runView = run
  $("run-empty").hidden = true
  $("run-detail").hidden = false
  $("run-id").textContent = run.run_id
  const status = $("run-status")
  status.textContent = run.status.replace("_", " ")
  status.className = `badge s-${run.status}`
  status.setAttribute("data-status", run.status)
  $("run-request").textContent = run.request
  $("run-times").textContent =
    "pipeline " +
    run.pipeline +
    " · created " +
    time(run.created_at) +
    (run.started_at ? ` · started ${time(run.started_at)}` : "") +
    (run.finished_at
      ? " · finished " +
        time(run.finished_at) +
        " (" +
        duration(run.started_at || run.created_at, run.finished_at) +
        ")"
      : "")
  $("run-error").textContent = run.error
    ? `${run.error.error_code}: ${run.error.error_message}${run.error.retryable ? " (retryable)" : ""}`
    : ""
  $("run-interrupted").hidden = run.status !== "interrupted"
  $("run-interrupted").textContent =
    run.status === "interrupted"
      ? "Interrupted: no process carries this run on (its process stopped). " +
        resumeHint(run.run_id) +
        " carries it on; completed stages are kept."
      : ""
  const enabled = {
    approve: run.status === "waiting_approval",
    reject: run.status === "waiting_approval",
    retry: run.status === "failed",
    cancel: ["queued", "running", "interrupted", "waiting_approval", "failed"].indexOf(run.status) >= 0,
    verify: true
  }
  document.querySelectorAll("[data-action]").forEach((button) => {
    button.disabled = !enabled[button.getAttribute("data-action")]
  })
  $("retry-refusal").hidden = !(state.refusedRetry === run.run_id && run.status === "failed")
  const body = $("stages")
  body.replaceChildren()
  run.stages.forEach((stage) => {
    const name = `${String(stage.position).padStart(2, "0")}-${stage.key}`
    const attempts = stage.attempts.length ? stage.attempts : [null]
    attempts.forEach((attempt, index) => {
      const links = el("div")
      ;(attempt ? attempt.artifacts : []).forEach((artifact) => {
        const link = el("a", {
          className: "artifact mono",
          "data-artifact": `${stage.position}/${attempt.attempt}/${artifact.path}`,
          text: `${artifact.path} (${artifact.size} B)`
        })
        link.addEventListener("click", () => {
          showArtifact(run, stage, attempt, artifact)
        })
        links.appendChild(el("div", {}, [link]))
      })
      const shown = attempt ? (index === attempts.length - 1 ? stage.status : attempt.status) : stage.status
      const row = el("tr", { "data-stage": name, "data-attempt": attempt ? String(attempt.attempt) : "0" }, [
        el("td", {
          className: "mono",
          text:
            index === 0
              ? name + (stage.needs_approval ? (stage.approved ? " · approved" : " · needs approval") : "")
              : ""
        }),
        el("td", {}, [badge(shown)]),
        el("td", { text: attempt ? String(attempt.attempt) : "" }),
        // An interrupted attempt's clock stopped with its process: no duration that keeps counting.
        el("td", {
          text:
            attempt && attempt.status !== "interrupted"
              ? duration(attempt.started_at, attempt.finished_at)
              : ""
        }),
        el("td", {}, [
          links,
          attempt?.error
            ? el("div", {
                className: "error",
                text: `${attempt.error.error_code}: ${attempt.error.error_message}`
              })
            : null
        ])
      ])
      body.appendChild(row)
    })
  })
  const workflow = detail.workflow
  $("workflow").textContent = workflow
    ? "workflow " +
      workflow.execution_id +
      " · " +
      (workflow.completed ? "completed" : "open") +
      (workflow.interrupted ? " · interrupted" : "") +
      " · activities recorded: " +
      (workflow.activities.join(", ") || "none") +
      (workflow.deferreds.length ? ` · deferreds completed: ${workflow.deferreds.join(", ")}` : "")
    : ""
  $("timeline-rows").replaceChildren.apply(
    $("timeline-rows"),
    detail.events.map((event) => timelineRow(run, event))
  )
}

let refreshing = null
let again = false
function refresh() {
  if (refreshing) {
    again = true
    return refreshing
  }
  refreshing = api("GET", "/api/threads")
    .then((threads) => {
      renderThreads(threads)
      return state.thread ? api("GET", `/api/runs?thread=${encodeURIComponent(state.thread)}`) : []
    })
    .then((runs) => {
      renderRuns(runs)
      if (!state.run) {
        $("run-empty").hidden = false
        $("run-detail").hidden = true
        return
      }
      return api("GET", `/api/runs/${encodeURIComponent(state.run)}`).then(renderRun)
    })
    .catch((error) => {
      notice(error.message)
    })
    .then(() => {
      refreshing = null
      if (again) {
        again = false
        refresh()
      }
    })
  return refreshing
}

let timer = null
function soon() {
  clearTimeout(timer)
  timer = setTimeout(refresh, 80)
}

document.querySelectorAll("[data-action]").forEach((button) => {
  button.addEventListener("click", () => {
    const action = button.getAttribute("data-action")
    const run = state.run
    if (!run) return
    notice("")
    if (action === "verify") {
      api("GET", `/api/runs/${encodeURIComponent(run)}/verify`)
        .then((report) => {
          $("verify").className = report.ok ? "mono s-completed" : "mono error"
          const runFile =
            "run.json " +
            (report.run_file === "not recorded"
              ? "not checked (no sha256 recorded for this run)"
              : report.run_file === "matches"
                ? "matches its sha256"
                : "changed")
          $("verify").textContent = report.ok
            ? "verified: " +
              runFile +
              "; " +
              report.artifacts +
              " artifacts in " +
              report.checked.length +
              " stage directories match their manifests and the timeline"
            : "problems: " +
              report.problems
                .map((p) => `${[p.stage, p.path].filter(Boolean).join("/")}: ${p.problem}`)
                .join("; ")
        })
        .catch((error) => {
          notice(error.message)
        })
      return
    }
    const body = {}
    if (action === "reject") {
      const reason = prompt("Why is it rejected?")
      if (!reason) return
      body.reason = reason
    }
    if (action === "cancel") body.reason = "canceled from the panel"
    button.disabled = true
    api("POST", `/api/runs/${encodeURIComponent(run)}/${action}`, body)
      .then(refresh)
      .catch((error) => {
        // A failure that is not retryable: the server says why; a person may retry it anyway.
        if (action === "retry" && error.code === "NotRetryable") {
          state.refusedRetry = run
          $("retry-reason").textContent = error.message
        } else notice(error.message)
        refresh()
      })
  })
})

// Up and down move between the threads, and between the runs (Enter or Space chooses one).
arrowKeys($("threads"))
arrowKeys($("runs"))

$("retry-anyway").addEventListener("click", () => {
  const run = state.refusedRetry
  state.refusedRetry = null
  $("retry-refusal").hidden = true
  if (!run) return
  api("POST", `/api/runs/${encodeURIComponent(run)}/retry`, { force: true })
    .then(refresh)
    .catch((error) => {
      notice(error.message)
      refresh()
    })
})

$("new-thread").addEventListener("submit", (event) => {
  event.preventDefault()
  const form = event.target
  api("POST", "/api/threads", { title: form.title.value, queue_policy: form.queue_policy.value })
    .then((thread) => {
      form.title.value = ""
      state.thread = thread.id
      state.run = null
      writeHash()
      refresh()
    })
    .catch((error) => {
      notice(error.message)
    })
})

$("new-run").addEventListener("submit", (event) => {
  event.preventDefault()
  const form = event.target
  const body = { thread_id: state.thread, request: form.request.value }
  if (form.plan.checked) body.plan = true
  else if (form.pipeline.value.trim()) {
    try {
      body.pipeline = JSON.parse(form.pipeline.value)
    } catch (error) {
      notice(`The pipeline is not JSON: ${error.message}`)
      return
    }
  }
  notice("")
  api("POST", "/api/runs", body)
    .then((run) => {
      form.request.value = ""
      state.run = run.run_id
      writeHash()
      refresh()
    })
    .catch((error) => {
      notice(error.message)
    })
})

$("thread-queue").addEventListener("change", (event) => {
  if (!state.thread) return
  notice("")
  api("POST", `/api/threads/${encodeURIComponent(state.thread)}/queue-policy`, {
    queue_policy: event.target.value
  })
    .then(refresh)
    .catch((error) => {
      notice(error.message)
      refresh()
    })
})

/** Shows the view at the address's place (`params`: the hash's). */
export function show(params) {
  state.thread = params.get("thread")
  state.run = params.get("run")
  return refresh()
}

export { soon }

// Durations of what is running go on counting.
setInterval(() => {
  if (!$("view-runs").hidden && state.runView && state.runView.status === "running") soon()
}, 1000)
