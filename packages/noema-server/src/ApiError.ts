/**
 * ApiError: what the API answers when it does not answer with data, one class
 * per HTTP status, each with the one body `{ "error": { "code", "message" } }`.
 *
 * `code` names the cause (the error class a refusal came from, such as
 * `ThreadClosed` or `NotRetryable`), `message` says it for a person. The
 * classes are the API's declared errors (the OpenAPI document lists them per
 * endpoint) and what the checks in front of every route refuse with; which
 * failure becomes which is decided in one place (`internal/Failures`).
 */
import { Effect, Schema } from "effect"
import { HttpServerRespondable, HttpServerResponse } from "effect/http"

const fields = {
  error: Schema.Struct({
    code: Schema.String.annotate({ description: "The cause, by name (ThreadClosed, NotRetryable, ...)" }),
    message: Schema.String
  })
}

const annotations = (httpApiStatus: number, description: string) => ({ httpApiStatus, description })

export class BadRequest extends Schema.Error<BadRequest>("BadRequest")(
  fields,
  annotations(400, "The request is not one this API takes (a field, the JSON, the path)")
) {}

export class Unauthorized extends Schema.Error<Unauthorized>("Unauthorized")(
  fields,
  annotations(401, "No access token, or not this server's")
) {}

export class Forbidden extends Schema.Error<Forbidden>("Forbidden")(
  fields,
  annotations(403, "Refused: a page of another site, or an artifact that is not a regular file")
) {}

export class NotFound extends Schema.Error<NotFound>("NotFound")(
  fields,
  annotations(404, "No such thread, run, artifact or route")
) {}

export class Conflict extends Schema.Error<Conflict>("Conflict")(
  fields,
  annotations(409, "The run or thread is not in a state that allows it")
) {}

export class PayloadTooLarge extends Schema.Error<PayloadTooLarge>("PayloadTooLarge")(
  fields,
  annotations(413, "The body is larger than the server takes")
) {}

export class UnsupportedMediaType extends Schema.Error<UnsupportedMediaType>("UnsupportedMediaType")(
  fields,
  annotations(415, "A POST is taken only as application/json")
) {}

export class MisdirectedRequest extends Schema.Error<MisdirectedRequest>("MisdirectedRequest")(
  fields,
  annotations(421, "The Host header names another server")
) {}

export class Unprocessable extends Schema.Error<Unprocessable>("Unprocessable")(
  fields,
  annotations(422, "The artifact is larger than the server serves")
) {}

export class InternalError extends Schema.Error<InternalError>("InternalError")(
  fields,
  annotations(500, "The server failed; its log says why")
) {}

export class BadGateway extends Schema.Error<BadGateway>("BadGateway")(
  fields,
  annotations(502, "The model could not plan the stages")
) {}

export class ServiceUnavailable extends Schema.Error<ServiceUnavailable>("ServiceUnavailable")(
  fields,
  annotations(503, "The live feed has as many clients as it takes; try again after Retry-After")
) {}

export type ApiError =
  | BadRequest
  | Unauthorized
  | Forbidden
  | NotFound
  | Conflict
  | PayloadTooLarge
  | UnsupportedMediaType
  | MisdirectedRequest
  | Unprocessable
  | InternalError
  | BadGateway
  | ServiceUnavailable

/** Every class, each status once. */
export const all = [
  BadRequest,
  Unauthorized,
  Forbidden,
  NotFound,
  Conflict,
  PayloadTooLarge,
  UnsupportedMediaType,
  MisdirectedRequest,
  Unprocessable,
  InternalError,
  BadGateway,
  ServiceUnavailable
] as const

/** Whether `value` is one of the API's errors. */
export const isApiError = (value: unknown): value is ApiError => all.some((Class) => value instanceof Class)

/** A class of `ApiError`: they all take the same body. */
export type Class<E extends ApiError = ApiError> = new (props: {
  readonly error: { readonly code: string; readonly message: string }
}) => E

/** An error of `Class` answering `code` with `message`. */
export const make = <E extends ApiError>(Class: Class<E>, code: string, message: string): E =>
  new Class({ error: { code, message } })

/** The HTTP status of `error`, as its class declares it. */
export const statusOf = (error: ApiError): number =>
  (
    Schema.resolveAnnotations(error.constructor as unknown as Schema.Top) as {
      readonly httpApiStatus?: number
    }
  )?.httpApiStatus ?? 500

/** `error` as a response, where it is answered outside the API's own encoding (the checks, the feed's 503). */
export const response = (
  error: ApiError,
  headers: Readonly<Record<string, string>> = {}
): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.jsonUnsafe({ error: error.error }, { status: statusOf(error), headers })

// Each answers for itself where the API's own encoding does not know it (an endpoint that did
// not declare it, a check in front of the routes): the same body and status either way.
for (const Class of all)
  Object.defineProperty(Class.prototype, HttpServerRespondable.symbol, {
    value(this: ApiError) {
      return Effect.succeed(response(this))
    }
  })
