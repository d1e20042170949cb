/**
 * markdown: Markdown as elements whose text is set: nothing of the text is
 * ever parsed as HTML (a tag in it is shown as the text it is), and a link
 * goes only to an http(s) address. Escape first (text nodes), then a short
 * list of constructs: headings, paragraphs, lists, quotes, code, tables,
 * rules, code spans, links, strong and emphasis.
 */
import { el } from "./dom.js"

/** An http(s) address, or null: javascript:, data:, relative and malformed ones are not links. */
export function safeHref(href) {
  try {
    const url = new URL(href)
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null
  } catch (_error) {
    return null
  }
}

const inlinePattern =
  /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\[([^\]]*)\]\(\s*(\S*?)\s*(?:"[^"]*")?\s*\)|\*\*(?!\s)((?:(?!\*\*)[\s\S])+?)(?<!\s)\*\*|(?<![A-Za-z0-9_])__(?!\s)((?:(?!__)[\s\S])+?)(?<!\s)__(?![A-Za-z0-9_])|\*(?!\s)([^*]+?)(?<!\s)\*|(?<![A-Za-z0-9_])_(?!\s)([^_]+?)(?<!\s)_(?![A-Za-z0-9_])/g

/** Appends `text`'s inline Markdown to `parent`: code spans, links, strong and emphasis. */
export function inline(text, parent) {
  const pattern = new RegExp(inlinePattern.source, "g")
  let last = 0
  for (let match = pattern.exec(text); match !== null; match = pattern.exec(text)) {
    if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)))
    if (match[1] !== undefined) parent.appendChild(el("code", { text: match[2] }))
    else if (match[3] !== undefined) {
      const href = safeHref(match[4])
      if (href === null) parent.appendChild(document.createTextNode(match[0]))
      else {
        const link = el("a", { href: href, rel: "noopener noreferrer", target: "_blank" })
        inline(match[3], link)
        parent.appendChild(link)
      }
    } else if (match[5] !== undefined || match[6] !== undefined) {
      const strong = el("strong")
      inline(match[5] !== undefined ? match[5] : match[6], strong)
      parent.appendChild(strong)
    } else {
      const em = el("em")
      inline(match[7] !== undefined ? match[7] : match[8], em)
      parent.appendChild(em)
    }
    last = pattern.lastIndex
  }
  if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)))
  return parent
}

const fencePattern = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/
const headingPattern = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/
const rulePattern = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/
const quotePattern = /^ {0,3}> ?(.*)$/
const itemPattern = /^( {0,3})([-*+]|\d{1,9}[.)])\s+(.*)$/
const tableRulePattern = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/

function blank(line) {
  return /^\s*$/.test(line)
}

function indented(line) {
  return /^ {2,}\S/.test(line)
}

function startsBlock(line) {
  return (
    fencePattern.test(line) ||
    headingPattern.test(line) ||
    rulePattern.test(line) ||
    quotePattern.test(line) ||
    itemPattern.test(line)
  )
}

function cells(line) {
  return line
    .trim()
    .replace(/^\|/, "")
    .replace(/\|$/, "")
    .split("|")
    .map((cell) => cell.trim())
}

/** `text` (Markdown) as a fragment of elements: headings, paragraphs, lists, quotes, code, tables, rules. */
export function markdown(text) {
  const out = document.createDocumentFragment()
  const lines = text.replace(/\r\n?/g, "\n").split("\n")
  let i = 0
  while (i < lines.length) {
    const line = lines[i]
    const fence = fencePattern.exec(line)
    if (blank(line)) {
      i++
      continue
    }
    if (fence) {
      const body = []
      i++
      while (
        i < lines.length &&
        !(
          lines[i].trim().indexOf(fence[1]) === 0 &&
          lines[i]
            .trim()
            .replace(new RegExp(`^${fence[1].charAt(0)}+`), "")
            .trim() === ""
        )
      )
        body.push(lines[i++])
      i++
      const code = el("code", { text: body.join("\n") })
      if (/^[A-Za-z0-9_+-]+$/.test(fence[2])) code.setAttribute("data-language", fence[2])
      out.appendChild(el("pre", {}, [code]))
      continue
    }
    const heading = headingPattern.exec(line)
    if (heading) {
      out.appendChild(inline(heading[2] || "", el(`h${heading[1].length}`)))
      i++
      continue
    }
    if (rulePattern.test(line)) {
      out.appendChild(el("hr"))
      i++
      continue
    }
    if (quotePattern.test(line)) {
      const quoted = []
      while (i < lines.length && quotePattern.test(lines[i])) quoted.push(quotePattern.exec(lines[i++])[1])
      out.appendChild(el("blockquote", {}, [markdown(quoted.join("\n"))]))
      continue
    }
    const item = itemPattern.exec(line)
    if (item) {
      const ordered = /\d/.test(item[2])
      const list = el(ordered ? "ol" : "ul")
      if (ordered && parseInt(item[2], 10) !== 1) list.setAttribute("start", String(parseInt(item[2], 10)))
      while (i < lines.length) {
        // A blank line between two items keeps them in one list.
        if (blank(lines[i]) && i + 1 < lines.length && itemPattern.test(lines[i + 1])) {
          i++
          continue
        }
        const next = itemPattern.exec(lines[i])
        if (!next || /\d/.test(next[2]) !== ordered) break
        // The item's own lines: the first, then those indented under it (a nested list too).
        const own = [next[3]]
        const indent = next[1].length + next[2].length + 1
        i++
        while (i < lines.length) {
          if (indented(lines[i]))
            own.push(lines[i++].replace(/^ +/, (spaces) => spaces.slice(Math.min(spaces.length, indent))))
          else if (blank(lines[i]) && i + 1 < lines.length && indented(lines[i + 1])) {
            own.push("")
            i++
          } else break
        }
        const li = el("li")
        if (own.length === 1) inline(own[0], li)
        else li.appendChild(markdown(own.join("\n")))
        list.appendChild(li)
      }
      out.appendChild(list)
      continue
    }
    if (
      line.indexOf("|") >= 0 &&
      i + 1 < lines.length &&
      tableRulePattern.test(lines[i + 1]) &&
      lines[i + 1].indexOf("-") >= 0
    ) {
      const head = el(
        "tr",
        {},
        cells(line).map((cell) => inline(cell, el("th")))
      )
      const rows = el("tbody")
      i += 2
      while (i < lines.length && !blank(lines[i]) && lines[i].indexOf("|") >= 0)
        rows.appendChild(
          el(
            "tr",
            {},
            cells(lines[i++]).map((cell) => inline(cell, el("td")))
          )
        )
      out.appendChild(el("table", {}, [el("thead", {}, [head]), rows]))
      continue
    }
    const paragraph = [line.trim()]
    i++
    while (i < lines.length && !blank(lines[i]) && !startsBlock(lines[i])) paragraph.push(lines[i++].trim())
    out.appendChild(inline(paragraph.join(" "), el("p")))
  }
  return out
}
