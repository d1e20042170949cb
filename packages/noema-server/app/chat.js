/**
 * chat: the Chat view. Talk to the agent `noema chat` talks to, on the same
 * runtime: the session's stored turns (drawn as the Sessions view draws them,
 * in `noema sessions show`'s words), the turn under way streamed from
 * `/api/chat/:id/events`, messages sent while it runs shown as queued (they
 * join it at its next model call, or start the next turn), Stop (or Escape)
 * to cancel it as Ctrl-C does in a terminal (what was shown is kept, marked
 * interrupted), and calls waiting for approval answered with Approve or Reject.
 * Enter sends, Shift+Enter starts a new line. Its place in the address:
 * `#view=chat&session=ID` (no session: a new chat, stored with its first turn).
 * Turns another process adds (`noema chat --session ID`) appear without a
 * reload: the stored turns are read again every few seconds while no turn runs.
 */
import { $, api, el, notice } from "./dom.js"
import { callText, entryOf } from "./sessions.js"

/** How many of the latest turns are drawn (the Sessions view pages through all of them). */
const recentTurns = 20
const chat = { session: null, source: null, running: false, drawn: "", pending: [] }

function status(text) {
  $("chat-status").textContent = text
}

function setRunning(running) {
  chat.running = running
  $("chat-stop").disabled = !running
  document.body.setAttribute("data-chat", running ? "running" : "idle")
  status(running ? "answering… (Stop or Escape cancels; what you send now is queued)" : "")
}

// --- the stored turns -------------------------------------------------------

function drawStored(detail) {
  const text = JSON.stringify(detail.turns)
  if (text === chat.drawn) return
  chat.drawn = text
  $("chat-turns").replaceChildren(
    ...detail.turns.map((turn) =>
      el("article", { className: "turn", "data-turn": String(turn.number) }, [
        el("h3", { className: "dim", text: `turn ${turn.number} · ${turn.usage}` }),
        ...turn.entries.map(entryOf)
      ])
    )
  )
  $("chat-title").textContent = detail.session.title === null ? "(untitled)" : detail.session.title
  $("chat-open").setAttribute("href", `#view=sessions&session=${encodeURIComponent(detail.session.id)}`)
  $("chat-open").hidden = false
}

/** Reads the session's latest turns; a session not stored yet (no turn) has none. */
function loadStored() {
  const id = chat.session
  if (!id) return Promise.resolve()
  const path = (from) => `/api/sessions/${encodeURIComponent(id)}?from_turn=${from}`
  return api("GET", path(1))
    .then((first) =>
      first.turn_count > first.from_turn + first.turns.length - 1
        ? api("GET", path(Math.max(1, first.turn_count - recentTurns + 1)))
        : first
    )
    .then((detail) => {
      if (id === chat.session) drawStored(detail)
    })
    .catch((error) => {
      if (error.code !== "SessionNotFound") notice(error.message)
    })
}

// --- the turn under way -------------------------------------------------------

function live() {
  return $("chat-live")
}

function answerText() {
  let node = live().querySelector(".streaming:last-child")
  if (!node) {
    node = el("div", { className: "entry assistant streaming", "data-kind": "streaming" })
    live().appendChild(node)
  }
  return node
}

function userLine(text) {
  return el("div", { className: "entry user", "data-kind": "user" }, [
    el("span", { className: "marker", text: "›" }),
    el("div", { className: "text", text })
  ])
}

function drawQueued(queued) {
  $("chat-queued").replaceChildren(
    ...queued.map((item) =>
      el("li", { "data-queued-id": item.id }, [
        el("span", { className: "badge s-queued", text: "queued" }),
        el("span", { text: ` ${item.text}` })
      ])
    )
  )
}

function unqueue(ids) {
  for (const id of ids)
    $("chat-queued")
      .querySelector(`[data-queued-id="${CSS.escape(id)}"]`)
      ?.remove()
}

function drawPending(pending) {
  chat.pending = pending
  $("chat-approvals").replaceChildren(
    ...pending.map((call) =>
      el("div", { className: "approval", "data-call-id": call.id }, [
        el("span", { className: "badge s-waiting_approval", text: "waits for approval" }),
        el("span", { className: "mono", text: ` ${callText(call.name, call.arguments)} ` }),
        button("Approve", "approve", () => decide(call.id, { approved: true })),
        button("Reject", "reject", () => decide(call.id, { approved: false }))
      ])
    )
  )
}

function button(text, action, onClick) {
  const node = el("button", { type: "button", "data-action": action, text })
  node.addEventListener("click", onClick)
  return node
}

function onFrame(frame) {
  switch (frame.type) {
    case "state":
      setRunning(frame.running)
      drawQueued(frame.queued)
      drawPending(frame.pending)
      live().replaceChildren()
      return
    case "turn-started":
      setRunning(true)
      unqueue(frame.ids)
      drawPending([])
      live().replaceChildren(...frame.messages.map(userLine))
      return
    case "text":
      answerText().textContent += frame.delta
      return
    case "tool-call":
      live().appendChild(
        el("div", {
          className: "entry tool mono",
          "data-call-id": frame.call.id,
          text: `⚙ ${callText(frame.call.name, frame.call.arguments)}`
        })
      )
      return
    case "tool-result": {
      const line = live().querySelector(`[data-call-id="${CSS.escape(frame.id)}"]`)
      const first = frame.content.split("\n")[0]
      const outcome = frame.is_error
        ? ` ✗ ${first}`
        : ` → ${frame.content.includes("\n") ? `${frame.content.split("\n").length} lines` : frame.content}`
      if (line) line.appendChild(el("span", { className: frame.is_error ? "error" : "dim", text: outcome }))
      return
    }
    case "approval-request":
      drawPending([...chat.pending, frame.call])
      return
    case "compacted":
      live().appendChild(el("div", { className: "entry compaction dim", text: `(${frame.line})` }))
      return
    case "queued":
      $("chat-queued").appendChild(
        el("li", { "data-queued-id": frame.id }, [
          el("span", { className: "badge s-queued", text: "queued" }),
          el("span", { text: ` ${frame.text}` })
        ])
      )
      return
    case "injected":
      unqueue(frame.ids)
      for (const text of frame.messages) live().appendChild(userLine(text))
      return
    case "turn-ended":
      status(frame.message ?? "")
      $("chat-status").className = frame.outcome === "failed" ? "error" : "dim"
      // The stored turn replaces the streamed one (Markdown rendered, usage shown).
      loadStored().then(() => live().replaceChildren())
      return
    case "decision-refused":
      notice(frame.message)
      return
    case "idle": {
      const said = $("chat-status").textContent
      setRunning(false)
      status(said.startsWith("answering") ? "" : said)
      drawPending(frame.pending)
      drawQueued([])
      return
    }
    case "resync":
      // Fell behind: read the session again and follow from now.
      connect(chat.session)
      loadStored()
      return
    default:
      return
  }
}

function connect(id) {
  chat.source?.close()
  chat.source = null
  if (!id) return
  const source = new EventSource(`/api/chat/${encodeURIComponent(id)}/events`)
  chat.source = source
  source.addEventListener("chat", (message) => onFrame(JSON.parse(message.data)))
  source.onopen = () => document.body.setAttribute("data-chat-connected", id)
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED && chat.source === source) {
      status("the chat's stream closed: reload the page, or open the chat again")
      setTimeout(() => {
        if (chat.source === source) connect(id)
      }, 5000)
    }
  }
}

// --- what a person does ------------------------------------------------------

function failed(error) {
  $("chat-status").className = "error"
  status(error.message)
}

function decide(callId, decision) {
  api("POST", `/api/chat/${encodeURIComponent(chat.session)}/decisions`, {
    decisions: { [callId]: decision }
  })
    .then(() => drawPending(chat.pending.filter((call) => call.id !== callId)))
    .catch(failed)
}

function stop() {
  if (!chat.session || !chat.running) return
  api("POST", `/api/chat/${encodeURIComponent(chat.session)}/cancel`, {}).catch(failed)
}

/** The session to send to: a new one (then in the address) when the view has none. */
function sessionForMessage() {
  if (chat.session) return Promise.resolve(chat.session)
  return api("POST", "/api/chat", {}).then((created) => {
    chat.session = created.session_id
    connect(chat.session)
    history.replaceState(null, "", `#view=chat&session=${encodeURIComponent(chat.session)}`)
    return chat.session
  })
}

function send(text) {
  $("chat-status").className = "dim"
  return sessionForMessage()
    .then((id) => api("POST", `/api/chat/${encodeURIComponent(id)}/messages`, { text }))
    .then(() => {
      $("chat-input").value = ""
    })
    .catch(failed)
}

/** Shows the view at the address's place (`params`: the hash's). */
export function show(params) {
  const id = params.get("session")
  if (chat.agent === undefined)
    api("GET", "/api/chat")
      .then((info) => {
        chat.agent = info.agent
        $("chat-agent").textContent = info.agent
      })
      .catch((error) => {
        $("chat-agent").textContent = error.message
        $("chat-form").hidden = true
      })
  if (id === chat.session && chat.source) return loadStored()
  chat.session = id
  chat.drawn = ""
  $("chat-turns").replaceChildren()
  live().replaceChildren()
  drawQueued([])
  drawPending([])
  setRunning(false)
  $("chat-title").textContent = id ? "" : "New chat"
  $("chat-open").hidden = true
  connect(id)
  return loadStored()
}

$("chat-form").addEventListener("submit", (event) => {
  event.preventDefault()
  const text = $("chat-input").value.trim()
  if (text !== "") send(text)
})
$("chat-input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault()
    $("chat-form").requestSubmit()
  }
})
$("chat-stop").addEventListener("click", stop)
$("chat-new").addEventListener("click", () => {
  location.hash = "#view=chat"
})
// Escape stops the answer, as Ctrl-C does in noema chat.
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !$("view-chat").hidden && chat.running) {
    event.preventDefault()
    stop()
  }
})

// Another process (noema chat --session) may add turns: read them again while no turn runs here.
setInterval(() => {
  if (!$("view-chat").hidden && !chat.running && document.visibilityState === "visible") loadStored()
}, 2000)
