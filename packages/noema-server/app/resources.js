/**
 * resources: the Resources view, what `noema resources` shows, as the
 * server's actor. Browse by URN prefix (`resources ls`: everything under it;
 * no prefix: the resources with no parent), search (`resources search`), and a
 * resource's content and metadata (`resources show`) with the policy's
 * decision for each action. Each listed line is the CLI's (`URN  type  name`,
 * a search's with its score first); one the actor may not read is listed as
 * denied, and the server never sends its name or content. Its place in the
 * address: `#view=resources&prefix=URN&q=TEXT&offset=N&urn=URN`. While
 * shown, a prefix's listing and the resource are read again every two seconds
 * and drawn only when they changed (a search is not, its embedding may cost a
 * model's call; nor are the roots, found by reading every resource).
 */
import { $, api, arrowKeys, badge, el, whenChanged, whileShown } from "./dom.js"

const pageSize = 100
const place = { prefix: "", q: "", offset: 0, urn: null }
/** What was last drawn, so a read that brings nothing new draws nothing (and focus stays where it is). */
const drawn = { list: "", detail: "" }

/** Draws `data` with `render` unless it is what `slot` shows already. */
export function hrefOf(changes) {
  const next = { ...place, ...changes }
  const params = new URLSearchParams({ view: "resources" })
  if (next.prefix) params.set("prefix", next.prefix)
  if (next.q) params.set("q", next.q)
  if (next.offset) params.set("offset", String(next.offset))
  if (next.urn) params.set("urn", next.urn)
  return `#${params.toString()}`
}

function go(changes) {
  location.hash = hrefOf(changes)
}

/** A resource's line as `noema resources ls` prints it; a denied one has no name to print. */
function lineOf(entry) {
  return `${entry.urn}  ${entry.type}  ${entry.name ?? ""}`.trimEnd()
}

function entryOf(entry, scored) {
  const line = scored ? `${(entry.score ?? 0).toFixed(3)}  ${lineOf(entry)}` : lineOf(entry)
  const link = el(
    "a",
    { href: hrefOf({ urn: entry.urn }), "data-urn": entry.urn, "data-decision": entry.decision },
    [el("span", { className: "line mono", text: line })]
  )
  if (entry.urn === place.urn) link.setAttribute("aria-current", "true")
  const item = el("li", { className: entry.urn === place.urn ? "selected" : "" }, [link])
  if (entry.decision === "deny") item.appendChild(badge("denied"))
  return item
}

function renderEntries(entries, scored, empty) {
  const list = $("resources")
  list.replaceChildren(...entries.map((entry) => entryOf(entry, scored)))
  if (entries.length === 0) list.appendChild(el("li", { className: "empty", text: empty }))
}

function renderList(page) {
  $("resource-actor").textContent =
    `as ${page.actor}${page.prefix ? ` · under ${page.prefix}` : " · the resources with no parent"}`
  renderEntries(page.resources, false, page.prefix ? `nothing under ${page.prefix}` : "No resources yet.")
  const last = Math.min(page.offset + page.resources.length, page.total)
  $("resources-range").textContent = page.total === 0 ? "" : `${page.offset + 1}–${last} of ${page.total}`
  $("resources-prev").disabled = page.offset === 0
  $("resources-next").disabled = last >= page.total
}

function renderSearch(results) {
  $("resource-actor").textContent =
    `as ${results.actor} · search "${place.q}"${place.prefix ? ` under ${place.prefix}` : ""}`
  renderEntries(results.resources, true, "nothing found")
  $("resources-range").textContent = `${results.resources.length} found`
  $("resources-prev").disabled = true
  $("resources-next").disabled = true
}

function renderDetail(detail) {
  $("resource-empty").hidden = true
  $("resource-detail").hidden = false
  $("resource-urn").textContent = detail.urn
  $("resource-decisions").replaceChildren(
    ...detail.decisions.map((decision) =>
      el("tr", { "data-action": decision.action }, [
        el("td", { text: decision.action }),
        el("td", {}, [badge(decision.decision === "allow" ? "allowed" : "denied")]),
        el("td", { className: "dim", text: decision.reasons.join("; ") })
      ])
    )
  )
  $("resource-decisions")
    .closest("table")
    .setAttribute("aria-label", `the policy's decisions for ${detail.actor}`)
  $("resource-denied").hidden = detail.resource !== null
  $("resource-denied").textContent = `${detail.actor} may not get this resource: its content is not shown`
  $("resource-json").hidden = detail.resource === null
  $("resource-json").textContent = detail.resource === null ? "" : JSON.stringify(detail.resource, null, 2)
  $("resource-under").setAttribute("href", hrefOf({ prefix: detail.urn, q: "", offset: 0, urn: detail.urn }))
}

function failed(error) {
  drawn.list = ""
  $("resources").replaceChildren(el("li", { className: "error", text: error.message }))
  $("resources-range").textContent = ""
}

/**
 * Reads what is shown again. `polling`: not a search (its embedding may cost a model's call each
 * time) nor the roots (found by reading every resource), only a prefix's listing and the resource.
 */
export function refresh(polling) {
  const listing =
    polling && (place.q || !place.prefix)
      ? Promise.resolve()
      : place.q
        ? api(
            "GET",
            `/api/resources/search?${new URLSearchParams({ q: place.q, ...(place.prefix && { prefix: place.prefix }) })}`
          ).then(whenChanged(drawn, "list", renderSearch), failed)
        : api(
            "GET",
            `/api/resources?${new URLSearchParams({ offset: String(place.offset), limit: String(pageSize), ...(place.prefix && { prefix: place.prefix }) })}`
          ).then(whenChanged(drawn, "list", renderList), failed)
  if (!place.urn) {
    $("resource-empty").hidden = false
    $("resource-detail").hidden = true
    return listing
  }
  const detail = api("GET", `/api/resources/show?urn=${encodeURIComponent(place.urn)}`).then(
    whenChanged(drawn, "detail", renderDetail),
    (error) => {
      drawn.detail = ""
      $("resource-empty").hidden = false
      $("resource-detail").hidden = true
      $("resource-empty").textContent = error.message
    }
  )
  return Promise.all([listing, detail])
}

export function show(params) {
  place.prefix = params.get("prefix") || ""
  place.q = params.get("q") || ""
  place.offset = Math.max(0, Number.parseInt(params.get("offset") || "0", 10) || 0)
  place.urn = params.get("urn")
  if ($("resource-prefix").value !== place.prefix) $("resource-prefix").value = place.prefix
  if ($("resource-search").value !== place.q) $("resource-search").value = place.q
  $("resource-empty").textContent = "Choose a resource."
  drawn.list = ""
  drawn.detail = ""
  return refresh(false)
}

$("resource-prefix-form").addEventListener("submit", (event) => {
  event.preventDefault()
  go({ prefix: $("resource-prefix").value.trim(), q: "", offset: 0 })
})
$("resource-search-form").addEventListener("submit", (event) => {
  event.preventDefault()
  go({ q: $("resource-search").value.trim(), offset: 0 })
})
$("resources-prev").addEventListener("click", () => go({ offset: Math.max(0, place.offset - pageSize) }))
$("resources-next").addEventListener("click", () => go({ offset: place.offset + pageSize }))
arrowKeys($("resources"))
// Another process (noema resources put, a plan) may change what is listed: read again while shown.
whileShown("view-resources", 2000, () => refresh(true))
