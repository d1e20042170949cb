/**
 * sessions: the Sessions view. The saved conversations a page at a time, with
 * a search; a session's turns as `noema sessions show` shows them: the user's
 * messages, the answers (Markdown, rendered safely), each tool call with its
 * arguments and result, approvals (waiting, approved, rejected and by whom),
 * interruptions and the points where older messages were summarised, with
 * each turn's usage and cost. Its place in the address:
 * `#view=sessions&q=TEXT&offset=N&session=ID&turn=N`. It follows changes made
 * by other processes (a chat going on in a terminal) by reading again every
 * few seconds while it is shown, and draws again only what changed.
 */
import { $, arrowKeys, el, readListAndDetail, time } from "./dom.js"
import { markdown } from "./markdown.js"

const pageSize = 50
const place = { q: "", offset: 0, session: null, turn: 1 }
/** What was last drawn, so a read that brings nothing new draws nothing. */
const drawn = { list: "", detail: "" }

/** The address of a place in this view (`changes` over the current one). */
export function hrefOf(changes) {
  const next = { ...place, ...changes }
  const params = new URLSearchParams({ view: "sessions" })
  if (next.q) params.set("q", next.q)
  if (next.offset) params.set("offset", String(next.offset))
  if (next.session) params.set("session", next.session)
  if (next.session && next.turn > 1) params.set("turn", String(next.turn))
  return `#${params.toString()}`
}

function go(changes) {
  location.hash = hrefOf(changes)
}

function renderList(page) {
  const list = $("sessions")
  list.replaceChildren()
  if (page.total === 0)
    list.appendChild(
      el("li", {
        className: "empty",
        text: place.q ? "No session matches." : "No sessions yet. Start one with: noema chat"
      })
    )
  for (const session of page.sessions) {
    const link = el("a", { href: hrefOf({ session: session.id, turn: 1 }), "data-session-id": session.id }, [
      el("span", { className: "title", text: session.title === null ? "(untitled)" : session.title }),
      el("span", {
        className: "dim mono",
        text: `${session.id.slice(0, 8)} · ${time(session.updated_at)} · ${session.message_count} msgs`
      })
    ])
    if (session.id === place.session) link.setAttribute("aria-current", "true")
    list.appendChild(el("li", { className: session.id === place.session ? "selected" : "" }, [link]))
  }
  const last = Math.min(page.offset + page.sessions.length, page.total)
  $("sessions-range").textContent = page.total === 0 ? "" : `${page.offset + 1}–${last} of ${page.total}`
  $("sessions-prev").disabled = page.offset === 0
  $("sessions-next").disabled = last >= page.total
}

/** `name(arguments)`, as the CLI writes a call: a single string argument alone, else key=value pairs. */
export function callText(name, argumentsJson) {
  let parsed
  try {
    parsed = JSON.parse(argumentsJson.trim() === "" ? "{}" : argumentsJson)
  } catch {
    return `${name}(${argumentsJson})`
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    return `${name}(${argumentsJson})`
  const entries = Object.entries(parsed)
  if (entries.length === 1 && typeof entries[0][1] === "string") return `${name}(${entries[0][1]})`
  return `${name}(${entries.map(([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`).join(", ")})`
}

function mark(text, className) {
  return el("span", { className: `badge ${className}`, text })
}

/** What became of a call that needed a person's decision. */
function decision(approval) {
  if (approval === null) return null
  const by = approval.by ? ` by ${approval.by}` : ""
  return approval.approved
    ? mark(`approved${by}`, "s-completed")
    : mark(`rejected${by}${approval.reason ? `: ${approval.reason}` : ""}`, "s-failed")
}

export function entryOf(entry) {
  switch (entry.kind) {
    case "user":
      return el("div", { className: "entry user", "data-kind": "user" }, [
        el("span", { className: "marker", text: "›" }),
        el("div", { className: "text", text: entry.text })
      ])
    case "assistant": {
      const parts = []
      if (entry.refusal !== null)
        parts.push(el("div", { className: "refusal", text: `(refused) ${entry.refusal}` }))
      if (entry.text.length > 0)
        parts.push(el("div", { className: "markdown answer" }, [markdown(entry.text)]))
      if (entry.interrupted) parts.push(mark("interrupted: this is what had streamed", "s-interrupted"))
      for (const call of entry.tool_calls)
        if (call.approval === "pending")
          parts.push(
            el("div", { className: "pending", "data-call-id": call.id }, [
              mark("waits for approval", "s-waiting_approval"),
              el("span", { className: "mono", text: ` ${callText(call.name, call.arguments)}` })
            ])
          )
      if (entry.model !== null || entry.usage !== null)
        parts.push(
          el("div", { className: "dim small", text: [entry.model, entry.usage].filter(Boolean).join(" · ") })
        )
      return el("div", { className: "entry assistant", "data-kind": "assistant" }, parts)
    }
    case "tool": {
      const outcome = entry.is_error
        ? `✗ ${entry.content.split("\n")[0]}`
        : `→ ${entry.content.includes("\n") ? `${entry.content.split("\n").length} lines` : entry.content}`
      const summary = el("summary", {}, [
        el("span", { className: "mono", text: `⚙ ${callText(entry.name, entry.arguments)} ` }),
        el("span", {
          className: entry.is_error ? "error mono" : "mono dim",
          text: outcome.length > 120 ? `${outcome.slice(0, 120)}…` : outcome
        }),
        entry.interrupted ? mark("interrupted, may have partially run", "s-interrupted") : null,
        decision(entry.approval)
      ])
      return el(
        "details",
        { className: "entry tool", "data-kind": "tool", "data-call-id": entry.tool_call_id },
        [
          summary,
          el("div", { className: "dim", text: "arguments" }),
          el("pre", { className: "arguments", text: entry.arguments }),
          el("div", { className: "dim", text: "result" }),
          el("pre", { className: "result", text: entry.content })
        ]
      )
    }
    case "compaction":
      return el("div", {
        className: "entry compaction dim",
        "data-kind": "compaction",
        text: `(${entry.line})`
      })
    default:
      return null
  }
}

function renderDetail(detail) {
  const session = detail.session
  $("session-empty").hidden = true
  $("session-detail").hidden = false
  $("session-title").textContent = session.title === null ? "(untitled)" : session.title
  $("session-meta").textContent =
    `session ${session.id} · created ${time(session.created_at)} · updated ${time(session.updated_at)} · ${session.message_count} messages`
  $("session-prompt").textContent =
    detail.system_prompt === null ? "" : `system prompt: ${detail.system_prompt}`
  $("session-usage").textContent =
    `usage: ${detail.usage}${detail.cost === null ? "" : ` · cost: ${detail.cost}`}`
  const turns = $("session-turns")
  turns.replaceChildren(
    ...detail.turns.map((turn) =>
      el("article", { className: "turn", "data-turn": String(turn.number) }, [
        el("h3", {
          className: "dim",
          text: `turn ${turn.number} · ${turn.usage}${turn.cost === null ? "" : ` · ${turn.cost}`}`
        }),
        el("a", {
          className: "trace-link small",
          href: `#view=traces&session=${encodeURIComponent(detail.session.id)}&seq=${turn.first_seq}`,
          text: "trace"
        }),
        ...turn.entries.map(entryOf)
      ])
    )
  )
  const first = detail.from_turn
  const last = first + detail.turns.length - 1
  $("turns-range").textContent =
    detail.turn_count === 0 ? "no turns yet" : `turns ${first}–${last} of ${detail.turn_count}`
  $("turns-prev").hidden = first <= 1
  $("turns-next").hidden = last >= detail.turn_count
  $("turns-prev").onclick = () => go({ turn: Math.max(1, first - pageSize) })
  $("turns-next").onclick = () => go({ turn: last + 1 })
}

/** Reads the list and the session shown, drawing what changed. */
export function refresh() {
  const query = new URLSearchParams({ offset: String(place.offset), limit: String(pageSize) })
  if (place.q) query.set("q", place.q)
  return readListAndDetail({
    drawn,
    list: "sessions",
    listPath: `/api/sessions?${query}`,
    renderList,
    pane: "session",
    detailPath: place.session
      ? `/api/sessions/${encodeURIComponent(place.session)}?from_turn=${place.turn}`
      : undefined,
    renderDetail
  })
}

/** Shows the view at the address's place (`params`: the hash's). */
export function show(params) {
  place.q = params.get("q") || ""
  place.offset = Math.max(0, Number.parseInt(params.get("offset") || "0", 10) || 0)
  place.session = params.get("session")
  place.turn = Math.max(1, Number.parseInt(params.get("turn") || "1", 10) || 1)
  if ($("session-search").value !== place.q) $("session-search").value = place.q
  drawn.list = ""
  drawn.detail = ""
  $("session-empty").textContent = "Choose a session."
  return refresh()
}

$("session-search-form").addEventListener("submit", (event) => {
  event.preventDefault()
  go({ q: $("session-search").value.trim(), offset: 0 })
})
$("sessions-prev").addEventListener("click", () => go({ offset: Math.max(0, place.offset - pageSize) }))
$("sessions-next").addEventListener("click", () => go({ offset: place.offset + pageSize }))

// Up and down move between the sessions of the list (Enter opens one, as any link).
arrowKeys($("sessions"))

// Another process (a chat in a terminal) may add to what is shown: read again while the view is shown.
setInterval(() => {
  if (!$("view-sessions").hidden && document.visibilityState === "visible") refresh()
}, 2000)
