/**
 * main: the panel's one page. A view switcher (Runs, Sessions, Chat, Traces, Plans,
 * Routines, Resources) whose place is
 * the address's hash (`#view=NAME&...`; no view is Runs, as before, so an
 * address the CLI or an older panel wrote still opens), and the live feed
 * (Server-Sent Events) that tells the Runs view when any run changed.
 */

import * as chat from "./chat.js"
import { $ } from "./dom.js"
import * as plans from "./plans.js"
import * as resources from "./resources.js"
import * as routines from "./routines.js"
import * as runs from "./runs.js"
import * as sessions from "./sessions.js"
import * as traces from "./traces.js"

const views = { runs, sessions, chat, traces, plans, routines, resources }
/** The search field "/" goes to, by view. */
const searches = { sessions: "session-search", resources: "resource-search" }

function route() {
  const params = new URLSearchParams(location.hash.slice(1))
  const name = Object.hasOwn(views, params.get("view")) ? params.get("view") : "runs"
  for (const other of Object.keys(views)) $(`view-${other}`).hidden = other !== name
  for (const link of document.querySelectorAll("nav a[data-view]")) {
    if (link.getAttribute("data-view") === name) link.setAttribute("aria-current", "page")
    else link.removeAttribute("aria-current")
  }
  document.body.setAttribute("data-view", name)
  document.title = `noema ${name}`
  return views[name].show(params)
}

function connect() {
  const source = new EventSource("/api/events")
  source.onopen = () => {
    $("live").className = "on"
    $("live").textContent = "live"
    runs.soon()
  }
  source.onerror = () => {
    $("live").className = "off"
    // A refused connection (401, 503) is not retried by the browser: try again later, as a page reload would.
    if (source.readyState === EventSource.CLOSED) {
      $("live").textContent = "offline"
      setTimeout(connect, 5000)
    } else $("live").textContent = "reconnecting"
  }
  source.addEventListener("run-event", (message) => {
    const event = JSON.parse(message.data)
    document.body.setAttribute("data-cursor", String(event.cursor))
    if (!$("view-runs").hidden) runs.soon()
  })
}

// "/" goes to the search of the view shown, as in many tools; not while typing somewhere.
document.addEventListener("keydown", (event) => {
  const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement?.tagName ?? "")
  const shown = document.body.getAttribute("data-view")
  if (event.key === "/" && !typing && Object.hasOwn(searches, shown)) {
    event.preventDefault()
    $(searches[shown]).focus()
  }
})

window.addEventListener("hashchange", route)
route()
connect()
