/**
 * Printable: text that came from elsewhere (a model, a tool, a user, a server)
 * made fit to show to a person, and the one definition of what is not.
 *
 * Two things must never reach a screen or a log as they are:
 *
 * - characters that steer a terminal or the reading order: the C0 controls,
 *   DEL, the C1 controls (an escape sequence can set a window title, clear the
 *   screen or print a fake line) and the bidirectional-text controls (an
 *   override makes a line read differently from what it holds). `escape`
 *   shows each as a visible escape (`\x1b`, `\u202e`); names that a program
 *   chooses are refused when they hold one (`firstControl`).
 * - credentials in URLs: the user part (`http://user:password@host`) and query
 *   parameters named like a secret (`?api_key=...`). `redactUrl` is the form of
 *   a URL for messages, `redactUrls` applies it to every URL in a text.
 */

/** The C0 controls, DEL, the C1 controls, and the bidirectional-text controls. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: naming the control characters is the point
const control = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g

/** `\x1b` for a character below U+0100, `\u202e` above: what a person can read and look up. */
const visible = (character: string): string => {
  const code = character.codePointAt(0) ?? 0
  return code < 0x100
    ? `\\x${code.toString(16).padStart(2, "0")}`
    : `\\u${code.toString(16).padStart(4, "0")}`
}

/**
 * `text` with every control character shown as a visible escape, except those in
 * `keep` (e.g. `"\n\t"` for text of several lines). Nothing else changes.
 */
export const escapeControls = (text: string, keep = ""): string =>
  text.replace(control, (character) => (keep.includes(character) ? character : visible(character)))

/** The first control character of `text` (as `escapeControls` means it): where, and its code point (`U+202E`). */
export const firstControl = (
  text: string
): { readonly index: number; readonly codePoint: string } | undefined => {
  const found = new RegExp(control.source).exec(text)
  if (found === null) return undefined
  const code = found[0].codePointAt(0) ?? 0
  return { index: found.index, codePoint: `U+${code.toString(16).toUpperCase().padStart(4, "0")}` }
}

// ---------------------------------------------------------------------------
// URLs
// ---------------------------------------------------------------------------

/** A query parameter whose name says it holds a secret (`key`, `api-key`, `access_token`, `password`...). */
const secretParameter = /key|token|secret|passw|pwd|auth|signature|sig$|credential/i

/** The scheme and the user part of a URL (everything before the last `@` of its authority). */
const userPart = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#\s]*)@/i

/**
 * `user:password` shown as `user:***`: the name helps, the password never shows. A lone
 * user part of a web URL may be a token (`https://TOKEN@host`): `***`; a database's
 * (`postgres://alice@db`) is a user name.
 */
const maskUser = (_whole: string, scheme: string, userInfo: string): string => {
  const colon = userInfo.indexOf(":")
  if (colon > 0) return `${scheme}${userInfo.slice(0, colon)}:***@`
  return /^(https?|wss?):/i.test(scheme) || colon === 0 ? `${scheme}***@` : `${scheme}${userInfo}@`
}

/** Parameters of the query or the fragment (OAuth puts tokens there): the separator, the name, the value. */
const parameter = /([?&;#])([^=&#;]*)=([^&#;]*)/g

/**
 * `url` as it may be shown: the password replaced by `***` (`http://user:***@host/v1`; a user part
 * without a password, which may be a token, as a whole: `http://***@host`) and the
 * values of secret-named query (or fragment) parameters by `***`. The rest is kept as written, also when
 * `url` is not a valid URL.
 */
export const redactUrl = (url: string): string => {
  const withoutUser = url.replace(userPart, maskUser)
  const query = withoutUser.search(/[?#]/)
  if (query < 0) return withoutUser
  return (
    withoutUser.slice(0, query) +
    withoutUser
      .slice(query)
      .replace(parameter, (whole, separator: string, name: string) =>
        secretParameter.test(decodeName(name)) ? `${separator}${name}=***` : whole
      )
  )
}

const decodeName = (name: string): string => {
  try {
    return decodeURIComponent(name.replace(/\+/g, " "))
  } catch {
    return name
  }
}

/** A URL inside text: a scheme, `://`, and what follows up to a space, a quote or a bracket. */
const urlInText = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>()[\]{}]+/gi

/** `text` with every URL in it redacted (`redactUrl`): for messages that may quote one. */
export const redactUrls = (text: string): string => text.replace(urlInText, (url) => redactUrl(url))
