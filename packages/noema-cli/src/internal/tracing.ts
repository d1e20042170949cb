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
 */

import type { Resource } from "@effect/opentelemetry"
import { Tracing } from "@noema/core"
import type { SpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Layer } from "effect"
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
