/**
 * plans: the Plans view. The plans `noema plan` stored, the most recently
 * worked on first, 50 a page; a plan's tree as `noema tasks show` prints it
 * (each task's line is that command's: status, title, corrective, the
 * assistant elected with how and its score; then the first line of its output
 * or of why it failed), and under each task what the terminal leaves out: the
 * candidates it was elected among with their scores, its evaluation criteria,
 * what its evaluation said, when it was completed, and its whole output
 * (Markdown, rendered safely). A plan the server's actor may not read is
 * listed as denied. Its place in the address: `#view=plans&offset=N&plan=URN`.
 * While shown, it reads again every two seconds, so a plan worked on by
 * another process (`noema plan` in a terminal) grows and ticks off without a
 * reload; it draws again only what changed.
 */
import { $, arrowKeys, badge, el, oneLine, readListAndDetail, shorten, time, whileShown } from "./dom.js"
import { markdown } from "./markdown.js"

const pageSize = 50
const place = { plan: null, offset: 0 }
const drawn = { list: "", detail: "" }
const icons = { pending: "□", running: "▸", done: "✓", failed: "✗" }

export function hrefOf(changes) {
  const next = { ...place, ...changes }
  const params = new URLSearchParams({ view: "plans" })
  if (next.offset) params.set("offset", String(next.offset))
  if (next.plan) params.set("plan", next.plan)
  return `#${params.toString()}`
}

/** The first line of text that is not blank, on one line (the CLI's `firstLine`). */
function firstLine(text, max = 100) {
  return oneLine(text.split("\n").find((part) => part.trim() !== "") ?? "", max)
}

function renderList(data) {
  const list = $("plans")
  list.replaceChildren()
  if (data.total === 0)
    list.appendChild(
      el("li", { className: "empty", text: 'No plans yet. Start one with: noema plan "request"' })
    )
  for (const plan of data.plans) {
    const counts =
      plan.decision === "deny"
        ? "denied to this server's actor"
        : `${plan.tasks} tasks · ${plan.done} done${plan.failed ? ` · ${plan.failed} failed` : ""}${plan.running ? ` · ${plan.running} running` : ""}`
    const link = el("a", { href: hrefOf({ plan: plan.urn }), "data-plan-urn": plan.urn }, [
      el("span", {
        className: "title",
        text: plan.request === null ? "(withheld)" : shorten(oneLine(plan.request, 200), 80)
      }),
      el("span", {
        className: "dim small",
        text: `${counts}${plan.updated_at ? ` · ${time(plan.updated_at)}` : ""}`
      })
    ])
    if (plan.urn === place.plan) link.setAttribute("aria-current", "true")
    const item = el("li", { className: plan.urn === place.plan ? "selected" : "" }, [link])
    if (plan.decision === "deny") item.appendChild(badge("denied"))
    list.appendChild(item)
  }
  const last = Math.min(data.offset + data.plans.length, data.total)
  $("plans-range").textContent = data.total === 0 ? "" : `${data.offset + 1}–${last} of ${data.total}`
  $("plans-prev").disabled = data.offset === 0
  $("plans-next").disabled = last >= data.total
}

/** The task's line as `noema tasks show` prints it (without its indentation). */
function lineOf(task) {
  const who = task.assignment
    ? `  → ${oneLine(task.assignment.name ?? task.assignment.assistant, 80)} (${task.assignment.by} ${task.assignment.score.toFixed(2)})`
    : ""
  return `${icons[task.status] ?? "?"} ${oneLine(task.name, 80)}${task.corrective ? " (corrective)" : ""}${who}`
}

/** The line under it: the first line of its output when done, of its reason when failed. */
function detailOf(task) {
  if (task.status === "done" && task.output !== null) return firstLine(task.output)
  if (task.status === "failed" && task.reason !== null) return firstLine(task.reason)
  return null
}

function field(label, value) {
  return value === null || value === ""
    ? null
    : el("div", { className: "field" }, [
        el("span", { className: "dim", text: `${label}: ` }),
        el("span", { text: value })
      ])
}

function candidates(assignment) {
  if (!assignment || assignment.candidates.length === 0) return null
  return el("table", { className: "candidates" }, [
    el("thead", {}, [el("tr", {}, [el("th", { text: "candidate" }), el("th", { text: "similarity" })])]),
    el(
      "tbody",
      {},
      assignment.candidates.map((candidate) =>
        el("tr", { className: candidate.assistant === assignment.assistant ? "elected" : "" }, [
          el("td", { text: candidate.name ?? candidate.assistant }),
          el("td", { className: "mono", text: candidate.score.toFixed(2) })
        ])
      )
    )
  ])
}

function taskOf(task) {
  const detail = detailOf(task)
  const more = el("details", { className: "task-more" }, [
    el("summary", { className: "dim small", text: "details" }),
    el("div", { className: "mono dim small", text: task.urn }),
    field("purpose", task.purpose),
    field("success means", task.evaluation),
    field(task.status === "failed" ? "why it failed" : "evaluation", task.reason),
    field("completed", task.completed_at === null ? null : time(task.completed_at)),
    candidates(task.assignment)
  ])
  // The whole output is rendered when it is first opened: a tree of hundreds of tasks draws at once.
  if (task.output !== null)
    more.addEventListener("toggle", () => {
      if (more.open && !more.querySelector(".output"))
        more.appendChild(el("div", { className: "markdown output" }, [markdown(task.output)]))
    })
  return el(
    "li",
    {
      className: `task s-${task.status}`,
      "data-urn": task.urn,
      "data-status": task.status,
      style: `margin-left: ${task.depth * 18}px`
    },
    [
      el("div", { className: "task-line", text: lineOf(task) }),
      detail === null ? null : el("div", { className: "task-detail dim", text: detail }),
      more
    ]
  )
}

function renderDetail(plan) {
  $("plan-empty").hidden = true
  $("plan-detail").hidden = false
  $("plan-request").textContent = plan.request
  $("plan-meta").textContent = `plan ${plan.urn} · conversation ${plan.conversation}`
  $("plan-withheld").textContent =
    plan.withheld === 0
      ? ""
      : `${plan.withheld} resources under it are withheld from this server's actor by the policy`
  // What is open stays open when the tree is drawn again.
  const open = new Set(
    [...$("plan-tasks").querySelectorAll("li.task")]
      .filter((li) => li.querySelector("details").open)
      .map((li) => li.getAttribute("data-urn"))
  )
  $("plan-tasks").replaceChildren(...plan.tasks.map(taskOf))
  for (const li of $("plan-tasks").querySelectorAll("li.task"))
    if (open.has(li.getAttribute("data-urn"))) li.querySelector("details").open = true
  const done = plan.tasks.filter((task) => task.status === "done").length
  $("plan-progress").textContent = `${done} of ${plan.tasks.length} tasks done`
}

export function refresh() {
  return readListAndDetail({
    drawn,
    list: "plans",
    listPath: `/api/plans?offset=${place.offset}&limit=${pageSize}`,
    renderList,
    pane: "plan",
    detailPath: place.plan ? `/api/plans/tree?urn=${encodeURIComponent(place.plan)}` : undefined,
    renderDetail
  })
}

export function show(params) {
  place.plan = params.get("plan")
  place.offset = Math.max(0, Number.parseInt(params.get("offset") || "0", 10) || 0)
  drawn.list = ""
  drawn.detail = ""
  $("plan-empty").textContent = "Choose a plan."
  return refresh()
}

$("plans-prev").addEventListener("click", () => {
  location.hash = hrefOf({ offset: Math.max(0, place.offset - pageSize) })
})
$("plans-next").addEventListener("click", () => {
  location.hash = hrefOf({ offset: place.offset + pageSize })
})
arrowKeys($("plans"))
whileShown("view-plans", 2000, refresh)
