/**
 * Gate: what every request must show before any route sees it, and what
 * every answer carries; the router's one global middleware, so the page, the
 * API, the live feed and the OpenAPI document are behind the same checks.
 *
 * In order: the right `Host` (421: a DNS-rebound name gets nothing,
 * SameOrigin), a path that decodes (400), the access token (401, AccessToken;
 * `GET /?token=` trades a right one for the cookie and redirects to `/`), the
 * page's own origin on a state-changing request (403), and a POST's body as
 * `application/json` (415). Bodies are taken up to `maxBodyBytes` (413).
 * Whatever a route fails with is answered here, through `Failures`, so every
 * refusal has the one JSON shape; and every answer says it is not to be
 * cached, sniffed, framed or sent on as a referrer. No CORS header is ever
 * sent.
 */
import { ByteSize, Cause, Effect, type Types } from "effect"
import { HttpIncomingMessage, HttpServerRequest, HttpServerResponse } from "effect/http"
import * as ApiError from "../ApiError.js"
import type * as AccessToken from "./AccessToken.js"
import type { Failures } from "./Failures.js"
import * as SameOrigin from "./SameOrigin.js"

export interface Options {
  readonly access: AccessToken.AccessToken
  readonly origin: SameOrigin.SameOrigin
  /** `http://127.0.0.1:PORT`, to say where to get in. */
  readonly base: string
  readonly failures: Failures
  readonly maxBodyBytes: number
}

/** Sent with every answer (a route may set its own policy: the page does). */
const commonHeaders: Readonly<Record<string, string>> = {
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'"
}

const withCommonHeaders = (response: HttpServerResponse.HttpServerResponse) =>
  HttpServerResponse.setHeaders(
    response,
    Object.fromEntries(Object.entries(commonHeaders).filter(([name]) => response.headers[name] === undefined))
  )

const unauthorized = (base: string) =>
  ApiError.response(
    ApiError.make(
      ApiError.Unauthorized,
      "Unauthorized",
      `this server needs its access token: open the address noema serve printed (${base}/?token=…), or send the header "Authorization: Bearer <token>"`
    ),
    { "www-authenticate": 'Bearer realm="noema"' }
  )

const refuse = (Class: ApiError.Class, code: string, message: string) =>
  ApiError.response(ApiError.make(Class, code, message))

/** The request's URL, or undefined when its path is not valid percent-encoding. */
const urlOf = (request: HttpServerRequest.HttpServerRequest, base: string): URL | undefined => {
  try {
    const url = new URL(request.url, base)
    for (const segment of url.pathname.split("/")) decodeURIComponent(segment)
    return url
  } catch {
    return undefined
  }
}

/** The answer that stops `request` at the gate, or undefined when it may go on to its route. */
export const check = (
  options: Options,
  request: HttpServerRequest.HttpServerRequest
): HttpServerResponse.HttpServerResponse | undefined => {
  const { access, origin, base } = options
  if (!origin.hostAllowed(request.headers.host))
    return refuse(
      ApiError.MisdirectedRequest,
      "MisdirectedRequest",
      `this server answers for ${origin.hosts.join(" and ")} only`
    )
  const url = urlOf(request, base)
  if (url === undefined)
    return refuse(
      ApiError.BadRequest,
      "BadPath",
      "the path is not a valid URL path (or not valid percent-encoding)"
    )
  if (request.method === "GET" && url.pathname === "/" && url.searchParams.has("token"))
    // The tokened address: trade the token for the cookie, and take it out of the address bar.
    return access.matches(url.searchParams.get("token"))
      ? HttpServerResponse.empty({ status: 303, headers: { location: "/", "set-cookie": access.cookie } })
      : unauthorized(base)
  if (!access.admits(request.headers)) return unauthorized(base)
  if (SameOrigin.changesState(request.method) && !origin.originAllowed(request.headers.origin))
    return refuse(ApiError.Forbidden, "ForeignOrigin", "a page of another site cannot change anything here")
  if (request.method === "POST" && !/^application\/json\b/i.test(request.headers["content-type"] ?? ""))
    return refuse(
      ApiError.UnsupportedMediaType,
      "UnsupportedMediaType",
      "send JSON (Content-Type: application/json)"
    )
  return undefined
}

/** The gate around the router (`HttpRouter.middleware(..., { global: true })`). */
export const middleware =
  (options: Options) =>
  (
    app: Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      Types.unhandled,
      HttpServerRequest.HttpServerRequest
    >
  ): Effect.Effect<
    HttpServerResponse.HttpServerResponse,
    Types.unhandled,
    HttpServerRequest.HttpServerRequest
  > =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const stopped = check(options, request)
      if (stopped !== undefined) return Effect.succeed(withCommonHeaders(stopped))
      return app.pipe(
        Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(options.maxBodyBytes)),
        Effect.catchCause((cause) =>
          // A client that went away is answered by nobody: nothing to say, nothing to log.
          Cause.hasInterruptsOnly(cause)
            ? Effect.failCause(cause)
            : Effect.succeed(ApiError.response(options.failures.fromCause(cause)))
        ),
        Effect.map(withCommonHeaders)
      )
    })
