/**
 * SameOrigin: which requests a local server answers, judged by where they say
 * they come from.
 *
 * `Host` must name the server itself, so a DNS-rebound name (evil.example
 * resolving to 127.0.0.1) gets nothing. `Origin`, sent by browsers on every
 * state-changing request, must be the server's own when present: a page of
 * another site cannot approve a run even if it could make the browser send
 * the cookie. A request without `Origin` comes from a program, not a page;
 * the access token decides about it.
 */

export interface SameOrigin {
  /** Whether a request with this `Host` header is for this server. */
  readonly hostAllowed: (host: string | undefined) => boolean
  /** Whether a state-changing request with this `Origin` header (if any) may proceed. */
  readonly originAllowed: (origin: string | undefined) => boolean
  /** The host names this server answers for, to say so in a refusal. */
  readonly hosts: ReadonlyArray<string>
}

/** Whether a request with `method` may change state (and so needs its origin checked). */
export const changesState = (method: string): boolean =>
  method !== "GET" && method !== "HEAD" && method !== "OPTIONS"

/** The server listening on `host`:`port` (`localhost` is accepted too when the host is loopback). */
export const make = (host: string, port: number): SameOrigin => {
  const loopback = host === "127.0.0.1" || host === "::1" || host === "localhost"
  const name = host.includes(":") ? `[${host}]` : host
  const hosts = [`${name}:${port}`, ...(loopback && host !== "localhost" ? [`localhost:${port}`] : [])]
  const origins = new Set(hosts.map((h) => `http://${h}`))
  return {
    hosts,
    hostAllowed: (header) => header !== undefined && hosts.includes(header.toLowerCase()),
    originAllowed: (origin) => origin === undefined || origins.has(origin.toLowerCase())
  }
}
