/**
 * The CLI's tracer: OpenTelemetry through `@effect/opentelemetry`, switched on
 * by the standard `OTEL_*` variables and off otherwise, in which case none of
 * the OpenTelemetry packages is even loaded.
 *
 * - `OTEL_TRACES_EXPORTER=otlp` (the default once an endpoint is set) sends
 *   spans as OTLP/HTTP (JSON) to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or to
 *   `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`, or to the exporter's default
 *   (`http://localhost:4318/v1/traces`); `console` prints them; `none` is off.
 * - `OTEL_SDK_DISABLED=true` switches it off whatever else is set.
 * - `OTEL_SERVICE_NAME` names the service (default `noema`).
 * - `NOEMA_TRACE_CONTENT=1` records message content, tool arguments and
 *   results in the spans (off by default; keys are never recorded).
 *
 * Besides, turns' traces are kept in the command's own database (`TraceStore`,
 * what `noema traces` and the Traces view of `noema serve` read), whether or not
 * spans are also exported: `recording` installs it over the exporter's tracer,
 * which keeps getting every span (without content unless `NOEMA_TRACE_CONTENT=1`).
 * - `NOEMA_TRACES_KEEP`: how many turns' traces are kept (default 1000; 0: none
 *   are recorded).
 * - `NOEMA_TRACES_MAX_AGE_DAYS`: how many days one is kept at most (default: no limit).
 */

import type { Resource } from "@effect/opentelemetry"
import { Tracing } from "@noema/core"
import { type SessionStore, TraceStore } from "@noema/session"
import { Database } from "@noema/sql"
import type { SpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer } from "effect"
import type { SqlClient } from "effect/sql"
import { UsageError } from "../CliArguments.js"

type Env = Readonly<Record<string, string | undefined>>

const set = (value: string | undefined): value is string => value !== undefined && value.trim() !== ""

/** The exporter the environment asks for, or `undefined` when tracing is off. */
export const exporterKind = (env: Env): "otlp" | "console" | undefined => {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return undefined
  const requested = env.OTEL_TRACES_EXPORTER?.trim().toLowerCase()
  if (set(requested)) {
    // The variable may list several; noema honours the first it knows.
    const kinds = requested.split(",").map((kind) => kind.trim())
    if (kinds.includes("none")) return undefined
    const known = kinds.find((kind) => kind === "otlp" || kind === "console")
    if (known === undefined)
      throw new UsageError(
        `OTEL_TRACES_EXPORTER=${env.OTEL_TRACES_EXPORTER} is not supported: use otlp, console or none`
      )
    return known as "otlp" | "console"
  }
  return set(env.OTEL_EXPORTER_OTLP_ENDPOINT) || set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
    ? "otlp"
    : undefined
}

/** Where OTLP/HTTP spans go, as the OpenTelemetry specification derives it; `undefined` means the default. */
export const tracesUrl = (env: Env): string | undefined => {
  if (set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)) return env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT.trim()
  if (set(env.OTEL_EXPORTER_OTLP_ENDPOINT))
    return `${env.OTEL_EXPORTER_OTLP_ENDPOINT.trim().replace(/\/+$/, "")}/v1/traces`
  return undefined
}

/**
 * The tracer layer the environment asks for (spans are flushed when the
 * runtime that holds it is disposed), or `undefined` when tracing is off.
 */
export const layer = async (env: Env): Promise<Layer.Layer<Resource.Resource> | undefined> => {
  const kind = exporterKind(env)
  if (kind === undefined) return undefined
  const [NodeSdk, TraceBase] = await Promise.all([
    import("@effect/opentelemetry/NodeSdk"),
    import("@opentelemetry/sdk-trace-base")
  ])
  let spanProcessor: SpanProcessor
  if (kind === "console") {
    spanProcessor = new TraceBase.SimpleSpanProcessor(new TraceBase.ConsoleSpanExporter())
  } else {
    const { OTLPTraceExporter } = await import("@opentelemetry/exporter-trace-otlp-http")
    const url = tracesUrl(env)
    spanProcessor = new TraceBase.BatchSpanProcessor(new OTLPTraceExporter(url === undefined ? {} : { url }))
  }
  const serviceName = set(env.OTEL_SERVICE_NAME) ? env.OTEL_SERVICE_NAME.trim() : "noema"
  const tracer = NodeSdk.layer(() => ({ spanProcessor, resource: { serviceName } }))
  return env.NOEMA_TRACE_CONTENT === "1"
    ? Layer.merge(tracer, Layer.succeed(Tracing.RecordContent, true))
    : tracer
}

// ---------------------------------------------------------------------------
// Kept locally
// ---------------------------------------------------------------------------

/** How turns' traces are kept in the command's database. */
export interface LocalTraces {
  readonly keep: number
  readonly maxAgeDays: number | undefined
  /** Whether the exporter, if there is one, gets content too (`NOEMA_TRACE_CONTENT=1`). */
  readonly forwardContent: boolean
}

/**
 * What `NOEMA_TRACES_KEEP` and `NOEMA_TRACES_MAX_AGE_DAYS` ask for; `undefined` when no
 * trace is kept (`NOEMA_TRACES_KEEP=0`). A value that is not a number is a `UsageError`.
 */
export const localTraces = (env: Env): LocalTraces | undefined => {
  const keep = set(env.NOEMA_TRACES_KEEP) ? Number(env.NOEMA_TRACES_KEEP.trim()) : TraceStore.defaultKeep
  if (!Number.isInteger(keep) || keep < 0)
    throw new UsageError(
      `NOEMA_TRACES_KEEP: "${env.NOEMA_TRACES_KEEP}" is not a number of turns (e.g. 1000; 0 keeps no trace)`
    )
  const age = env.NOEMA_TRACES_MAX_AGE_DAYS
  const maxAgeDays = set(age) ? Number(age.trim()) : undefined
  if (maxAgeDays !== undefined && !(Number.isFinite(maxAgeDays) && maxAgeDays > 0))
    throw new UsageError(`NOEMA_TRACES_MAX_AGE_DAYS: "${age}" is not a number of days (e.g. 30)`)
  if (keep === 0) return undefined
  return { keep, maxAgeDays, forwardContent: env.NOEMA_TRACE_CONTENT === "1" }
}

/**
 * Turns' traces kept in the database in context, for as long as the layer lives (closing
 * it writes what waits). Built over an exporter's tracer, it passes every span on to it.
 */
export const recording = (
  local: LocalTraces
): Layer.Layer<never, SessionStore.StoreError, SqlClient.SqlClient | Database.Database> =>
  Layer.unwrap(
    Effect.map(
      Database.store((options) =>
        TraceStore.make({
          ...options,
          keep: local.keep,
          ...(local.maxAgeDays !== undefined && { maxAgeDays: local.maxAgeDays })
        })
      ),
      (store) => TraceStore.layerRecording(store, { forwardContent: local.forwardContent })
    )
  )
