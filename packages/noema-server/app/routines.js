/**
 * routines: the Routines view. The work breakdown documents with stored
 * progress; a routine's goals as `noema routine status` prints them (each
 * goal's line with its status and count, each task's `[x] id: title` with
 * why it is open or that it was ticked in the document), and under a task
 * the agent completed, its own account of what it did. Its place in the
 * address: `#view=routines&routine=ID`. While shown, it reads again every
 * two seconds (a routine run in a terminal ticks tasks off).
 */
import { $, arrowKeys, badge, el, oneLine, readListAndDetail, time, whileShown } from "./dom.js"

const place = { routine: null }
const drawn = { list: "", detail: "" }

export function hrefOf(routine) {
  const params = new URLSearchParams({ view: "routines" })
  if (routine) params.set("routine", routine)
  return `#${params.toString()}`
}

function renderList(data) {
  const list = $("routines")
  list.replaceChildren()
  if (data.routines.length === 0)
    list.appendChild(
      el("li", { className: "empty", text: "No routines yet. Start one with: noema routine run FILE" })
    )
  for (const routine of data.routines) {
    const link = el("a", { href: hrefOf(routine.id), "data-routine-id": routine.id }, [
      el("span", { className: "title", text: routine.name }),
      el("span", {
        className: "dim small",
        text: `${routine.goals_complete}/${routine.goals} goals complete · ${routine.tasks_done}/${routine.tasks} tasks done${routine.tasks_open ? ` · ${routine.tasks_open} open` : ""}`
      })
    ])
    if (routine.id === place.routine) link.setAttribute("aria-current", "true")
    list.appendChild(el("li", { className: routine.id === place.routine ? "selected" : "" }, [link]))
  }
}

/** A task's line as `noema routine status` prints it (without its indentation). */
function taskLine(task) {
  const note = task.ticked
    ? " (ticked in the document, not run)"
    : task.open === null
      ? ""
      : ` (open: ${oneLine(task.open, 200)})`
  return `[${task.done ? "x" : " "}] ${task.id}: ${oneLine(task.title, 200)}${note}`
}

function goalOf(goal) {
  const done = goal.tasks.filter((task) => task.done).length
  return el("article", { className: "goal", "data-chain": goal.chain }, [
    el("h3", {}, [
      el("span", {
        className: "goal-line",
        text: `${goal.chain} (${goal.status}, ${done}/${goal.tasks.length})`
      }),
      badge(goal.status.replace(" ", "_"))
    ]),
    el(
      "ul",
      { className: "goal-tasks" },
      goal.tasks.map((task) =>
        el("li", { "data-task": task.id, className: task.open === null ? "" : "open" }, [
          el("div", { className: "task-line mono", text: taskLine(task) }),
          task.summary === null
            ? null
            : el("div", {
                className: "dim small",
                text: `${task.summary}${task.completed_at ? ` (${time(task.completed_at)})` : ""}`
              })
        ])
      )
    )
  ])
}

function renderDetail(data) {
  $("routine-empty").hidden = true
  $("routine-detail").hidden = false
  $("routine-name").textContent = data.routine.name
  $("routine-meta").textContent =
    `${data.routine.tasks_done} of ${data.routine.tasks} tasks done${data.routine.updated_at ? ` · last saved ${time(data.routine.updated_at)}` : ""}`
  $("routine-problem").textContent =
    data.routine.problem === null ? "" : `${data.routine.problem}: showing what the store holds`
  $("routine-goals").replaceChildren(...data.goals.map(goalOf))
}

export function refresh() {
  return readListAndDetail({
    drawn,
    list: "routines",
    listPath: "/api/routines",
    renderList,
    pane: "routine",
    detailPath: place.routine ? `/api/routines/${encodeURIComponent(place.routine)}` : undefined,
    renderDetail
  })
}

export function show(params) {
  place.routine = params.get("routine")
  drawn.list = ""
  drawn.detail = ""
  $("routine-empty").textContent = "Choose a routine."
  return refresh()
}

arrowKeys($("routines"))
whileShown("view-routines", 2000, refresh)
