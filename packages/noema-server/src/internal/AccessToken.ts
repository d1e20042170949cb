/**
 * AccessToken: the secret a runs server asks of every request, as Jupyter
 * Server does.
 *
 * The server listens on the loopback interface, which every local user can
 * reach, so being on the machine proves nothing. A token is made per start
 * (or configured), shown only in the URL the operator is given, and asked of
 * every request: in `Authorization: Bearer <token>` (or `token <token>`) for
 * scripts, or in a cookie for the browser. The cookie is set when the tokened
 * URL is opened; it is HttpOnly (the page's script never sees it) and
 * SameSite=Strict (another site's page cannot make the browser send it).
 * Cookies are not told apart by port, so the cookie's name carries the port:
 * two servers on one host do not overwrite each other's. Comparisons hash both
 * sides first, so they take the same time whatever the guess and its length.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"

/** Request headers as Node (and effect/http) give them. */
export type Headers = Readonly<Record<string, string | ReadonlyArray<string> | undefined>>

export interface AccessToken {
  /** Whether `candidate` is the token. */
  readonly matches: (candidate: string | null | undefined) => boolean
  /** Whether the request carries the token, in its Authorization header or its cookie. */
  readonly admits: (headers: Headers) => boolean
  /** The `Set-Cookie` value that lets a browser in from now on. */
  readonly cookie: string
}

/** What a configured token must look like: long enough to guess at no better than chance, and header- and cookie-safe. */
const shape = /^[A-Za-z0-9._~+/=-]{16,512}$/

/** Why `token` cannot be used, or undefined when it can. */
export const problem = (token: string): string | undefined =>
  shape.test(token)
    ? undefined
    : "the token must be 16 to 512 characters: letters, digits and . _ ~ + / = - (no spaces)"

/** A new random token (256 bits). */
export const generate = (): string => randomBytes(32).toString("base64url")

const digest = (text: string): Buffer => createHash("sha256").update(text, "utf8").digest()

const first = (value: string | ReadonlyArray<string> | undefined): string | undefined =>
  typeof value === "string" ? value : value?.[0]

/** The value of cookie `name` in a `Cookie` header. */
const cookieValue = (header: string | undefined, name: string): string | undefined => {
  for (const pair of (header ?? "").split(";")) {
    const at = pair.indexOf("=")
    if (at > 0 && pair.slice(0, at).trim() === name) return pair.slice(at + 1).trim()
  }
  return undefined
}

/** The access token of a server on `port`: `token`, which must pass `problem`. */
export const make = (token: string, port: number): AccessToken => {
  const expected = digest(token)
  const matches = (candidate: string | null | undefined) =>
    typeof candidate === "string" && timingSafeEqual(digest(candidate), expected)
  const name = `noema-token-${port}`
  return {
    matches,
    admits: (headers) => {
      const authorization = /^\s*(?:bearer|token)\s+(\S+)\s*$/i.exec(first(headers.authorization) ?? "")
      if (authorization !== null) return matches(authorization[1])
      return matches(cookieValue(first(headers.cookie), name))
    },
    cookie: `${name}=${token}; Path=/; HttpOnly; SameSite=Strict`
  }
}
