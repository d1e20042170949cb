/**
 * traces: the Traces view. The turns' traces kept locally (newest first, for
 * one session or one turn of it: `#view=traces&session=ID&seq=N&trace=ID`),
 * and one trace as a waterfall: a row per span in tree order, indented by
 * depth, its bar placed by its start and sized by its duration; the line
 * beside it is the one `noema traces show` prints. Choosing a row shows the
 * span's attributes (tokens, time to first token, tool arguments and results)
 * and events (retries) as text. It reads again every few seconds while shown,
 * so turns another process runs appear.
 */
import { $, el, readListAndDetail, time } from "./dom.js"

const pageSize = 50
const place = { session: null, seq: null, offset: 0, trace: null, span: null }
const drawn = { list: "", detail: "" }

export function hrefOf(changes) {
  const next = { ...place, ...changes }
  const params = new URLSearchParams({ view: "traces" })
  if (next.session) params.set("session", next.session)
  if (next.seq !== null && next.seq !== undefined) params.set("seq", String(next.seq))
  if (next.offset) params.set("offset", String(next.offset))
  if (next.trace) params.set("trace", next.trace)
  return `#${params.toString()}`
}

const ms = (value) => (value < 1000 ? `${value.toFixed(1)} ms` : `${(value / 1000).toFixed(2)} s`)

function renderList(page) {
  const list = $("traces")
  list.replaceChildren()
  if (page.total === 0)
    list.appendChild(el("li", { className: "empty", text: "No traces kept yet. Run a turn: noema chat" }))
  for (const trace of page.traces) {
    const link = el("a", { href: hrefOf({ trace: trace.trace_id }), "data-trace-id": trace.trace_id }, [
      el("span", { className: "title", text: `${trace.name} · ${ms(trace.duration_ms)}` }),
      el("span", {
        className: "dim mono",
        text: `${time(trace.started_at)} · ${trace.span_count} spans${trace.session_id ? ` · session ${trace.session_id.slice(0, 8)}` : ""}`
      })
    ])
    if (trace.trace_id === place.trace) link.setAttribute("aria-current", "true")
    list.appendChild(el("li", { className: trace.status === "ok" ? "" : "error" }, [link]))
  }
  const last = Math.min(page.offset + page.traces.length, page.total)
  $("traces-range").textContent = page.total === 0 ? "" : `${page.offset + 1}–${last} of ${page.total}`
  $("traces-prev").disabled = page.offset === 0
  $("traces-next").disabled = last >= page.total
}

function details(span) {
  const rows = span.attributes.map((attribute) =>
    el("tr", {}, [
      el("th", { className: "mono", text: attribute.key }),
      el("td", {}, [el("pre", { text: attribute.value })])
    ])
  )
  const events = span.events.map((event) =>
    el("li", { className: "mono", "data-event": event.name }, [
      el("span", { text: `+${ms(event.offset_ms)} ${event.name} ` }),
      el("span", { className: "dim", text: event.attributes.map((a) => `${a.key}=${a.value}`).join(" ") })
    ])
  )
  return [
    el("h3", { className: "mono", text: span.name }),
    el("div", { className: "dim", text: span.line }),
    span.error === null ? null : el("div", { className: "error", text: span.error }),
    el("table", { className: "attributes" }, [el("tbody", {}, rows)]),
    events.length === 0 ? null : el("h3", { text: "events" }),
    events.length === 0 ? null : el("ul", { className: "events" }, events)
  ]
}

function select(detail, spanId) {
  place.span = spanId
  for (const row of $("waterfall").querySelectorAll("[data-span-id]"))
    row.setAttribute("aria-selected", row.getAttribute("data-span-id") === spanId ? "true" : "false")
  const span = detail.spans.find((candidate) => candidate.span_id === spanId)
  $("span-detail").replaceChildren(...(span ? details(span) : []))
}

function renderDetail(detail) {
  $("trace-empty").hidden = true
  $("trace-detail").hidden = false
  const trace = detail.trace
  $("trace-title").textContent = `${trace.name} · ${ms(trace.duration_ms)}`
  $("trace-meta").textContent =
    `trace ${trace.trace_id} · ${time(trace.started_at)} · ${trace.span_count} spans` +
    (trace.dropped_spans > 0 ? ` (${trace.dropped_spans} not kept)` : "") +
    (trace.session_id ? ` · session ${trace.session_id}, message ${trace.message_seq}` : "")
  const total = Math.max(trace.duration_ms, 0.001)
  $("waterfall").replaceChildren(
    ...detail.spans.map((span) => {
      const bar = el("span", { className: `bar s-${span.status}` })
      bar.style.left = `${Math.max(0, (span.offset_ms / total) * 100)}%`
      bar.style.width = `${Math.max(0.3, (span.duration_ms / total) * 100)}%`
      const name = el("span", { className: "name mono", text: span.name })
      name.style.paddingLeft = `${span.depth * 1.2}em`
      const row = el(
        "button",
        { type: "button", className: "span", "data-span-id": span.span_id, "data-depth": String(span.depth) },
        [
          name,
          el("span", { className: "track" }, [bar]),
          el("span", { className: "line dim", text: span.line })
        ]
      )
      row.addEventListener("click", () => select(detail, span.span_id))
      return row
    })
  )
  select(
    detail,
    detail.spans.some((span) => span.span_id === place.span) ? place.span : detail.spans[0]?.span_id
  )
}

export function refresh() {
  const query = new URLSearchParams({ offset: String(place.offset), limit: String(pageSize) })
  if (place.session) query.set("session", place.session)
  if (place.seq !== null) query.set("seq", String(place.seq))
  return readListAndDetail({
    drawn,
    list: "traces",
    listPath: `/api/traces?${query}`,
    renderList,
    afterList: (page) => {
      // A turn's link names no trace: open the turn's own when there is one.
      if (!place.trace && place.seq !== null && page.traces.length === 1)
        location.hash = hrefOf({ trace: page.traces[0].trace_id })
    },
    pane: "trace",
    detailPath: place.trace ? `/api/traces/${encodeURIComponent(place.trace)}` : undefined,
    renderDetail
  })
}

export function show(params) {
  place.session = params.get("session")
  const seq = Number.parseInt(params.get("seq") ?? "", 10)
  place.seq = Number.isInteger(seq) && seq >= 0 ? seq : null
  place.offset = Math.max(0, Number.parseInt(params.get("offset") || "0", 10) || 0)
  place.trace = params.get("trace")
  $("traces-filter").textContent = place.session
    ? `session ${place.session}${place.seq === null ? "" : `, the turn from message ${place.seq}`}`
    : "all sessions"
  drawn.list = ""
  drawn.detail = ""
  $("trace-empty").textContent = "Choose a trace."
  return refresh()
}

$("traces-prev").addEventListener("click", () => {
  location.hash = hrefOf({ offset: Math.max(0, place.offset - pageSize), trace: null })
})
$("traces-next").addEventListener("click", () => {
  location.hash = hrefOf({ offset: place.offset + pageSize, trace: null })
})

// Up and down move between the rows of a list or of the waterfall; Enter opens or shows one.
for (const id of ["traces", "waterfall"])
  $(id).addEventListener("keydown", (event) => {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return
    const items = [...$(id).querySelectorAll(id === "traces" ? "a" : "button")]
    const at = items.indexOf(document.activeElement)
    const next = items[Math.max(0, Math.min(items.length - 1, at + (event.key === "ArrowDown" ? 1 : -1)))]
    if (next) {
      event.preventDefault()
      next.focus()
    }
  })

setInterval(() => {
  if (!$("view-traces").hidden && document.visibilityState === "visible") refresh()
}, 2000)
