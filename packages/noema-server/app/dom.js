/**
 * dom: what every view of the panel shares: elements made with their text set
 * (never HTML), the JSON API called with the access cookie, and a few formats.
 */
export const $ = (id) => document.getElementById(id)

export function el(tag, attrs, children) {
  const node = document.createElement(tag)
  for (const key in attrs || {}) {
    if (key === "text") node.textContent = attrs[key]
    else if (key === "className") node.className = attrs[key]
    else node.setAttribute(key, attrs[key])
  }
  ;(children || []).forEach((child) => {
    if (child) node.appendChild(child)
  })
  return node
}

export function notice(text) {
  $("notice").textContent = text || ""
}

export const signedOut = "Not signed in (the server restarted?): open the address noema serve printed."

/** A same-origin request: the access cookie goes with it. */
export function request(path, init) {
  init.credentials = "same-origin"
  return fetch(path, init).then((response) => {
    if (response.status === 401) throw new Error(signedOut)
    return response
  })
}

export function api(method, path, body) {
  const init = { method: method, headers: {} }
  if (body !== undefined) {
    init.headers["content-type"] = "application/json"
    init.body = JSON.stringify(body)
  }
  return request(path, init).then((response) =>
    response.json().then((data) => {
      if (!response.ok) {
        const error = new Error(data?.error ? data.error.message : response.statusText)
        error.code = data?.error ? data.error.code : undefined
        throw error
      }
      return data
    })
  )
}

export function duration(from, to) {
  if (!from) return ""
  const ms = (to ? Date.parse(to) : Date.now()) - Date.parse(from)
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`
}

export function time(at) {
  return at ? new Date(at).toLocaleString() : ""
}

export function badge(status) {
  return el("span", { className: `badge s-${status}`, text: status.replace("_", " ") })
}

export function shorten(text, length) {
  return text.length > length ? `${text.slice(0, length)}…` : text
}

/** `text` on one line, at most `max` characters, as the CLI's `Terminal.oneLine` writes it. */
export function oneLine(text, max) {
  const single = text.replace(/\s+/g, " ").trim()
  return single.length <= max ? single : `${single.slice(0, Math.max(0, max - 1))}…`
}

/**
 * `node` chosen by a click, or from the keyboard as a button is: reached with Tab, chosen with
 * Enter or Space (list items that are not links, such as the Runs view's threads and runs).
 */
export function activatable(node, action) {
  node.setAttribute("tabindex", "0")
  node.setAttribute("role", "button")
  node.addEventListener("click", action)
  node.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" && event.key !== " ") return
    event.preventDefault()
    action()
  })
  return node
}

/** Up and down move between the entries of `list`, links or `activatable` (Enter opens one). */
export function arrowKeys(list) {
  list.addEventListener("keydown", (event) => {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return
    const links = [...list.querySelectorAll('a, [tabindex="0"]')]
    const at = links.indexOf(document.activeElement)
    const next = links[Math.max(0, Math.min(links.length - 1, at + (event.key === "ArrowDown" ? 1 : -1)))]
    if (next) {
      event.preventDefault()
      next.focus()
    }
  })
}

/**
 * Calls `read` every `ms` while the view `id` is shown and the page is seen: what another
 * process changes (a plan being worked on in a terminal) shows without a reload.
 */
export function whileShown(id, ms, read) {
  setInterval(() => {
    if (!$(id).hidden && document.visibilityState === "visible") read()
  }, ms)
}

/** `render(data)` only when `data` differs from what `drawn[slot]` last drew: a poll redraws nothing unchanged. */
export function whenChanged(drawn, slot, render) {
  return (data) => {
    const text = JSON.stringify(data)
    if (text !== drawn[slot]) {
      drawn[slot] = text
      render(data)
    }
    return data
  }
}

/**
 * What a list-and-detail view reads: `listPath`'s answer drawn by `renderList`, and, when an
 * entry is chosen (`detailPath`), its answer drawn by `renderDetail`; each only when it changed.
 * `list` is the list's element id; `pane` the prefix of the detail's `-empty` and `-detail`
 * elements, the first showing why a read failed.
 */
export function readListAndDetail({
  drawn,
  list,
  listPath,
  renderList,
  afterList,
  pane,
  detailPath,
  renderDetail
}) {
  const listed = api("GET", listPath)
    .then(whenChanged(drawn, "list", renderList))
    .then((data) => afterList?.(data))
    .catch((error) => {
      drawn.list = ""
      $(list).replaceChildren(el("li", { className: "error", text: error.message }))
    })
  if (detailPath === undefined) {
    $(`${pane}-empty`).hidden = false
    $(`${pane}-detail`).hidden = true
    return listed
  }
  const detail = api("GET", detailPath)
    .then(whenChanged(drawn, "detail", renderDetail))
    .catch((error) => {
      drawn.detail = ""
      $(`${pane}-empty`).hidden = false
      $(`${pane}-detail`).hidden = true
      $(`${pane}-empty`).textContent = error.message
    })
  return Promise.all([listed, detail])
}
