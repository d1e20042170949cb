/**
 * CurrentTime: the `current_time` tool.
 *
 * Models do not know what time it is. The tool answers with the local date and
 * time (or in an IANA time zone the model names) in one line that is both
 * machine-readable (ISO 8601 with offset) and readable (weekday, date, time).
 * It reads Effect's `Clock`, so tests control the time.
 */

import { Tool } from "@noema/core"
import { Clock, Effect, Schema } from "effect"

export class TimeZoneError extends Schema.TaggedError<TimeZoneError>()("TimeZoneError", {
  timeZone: Schema.String,
  message: Schema.String
}) {}

const pad = (value: number, width = 2): string => String(value).padStart(width, "0")

/** The parts of `epochMillis` as seen in `timeZone`; throws RangeError for an unknown zone. */
const partsIn = (epochMillis: number, timeZone: string | undefined) => {
  const formatter = new Intl.DateTimeFormat("en-US", {
    ...(timeZone !== undefined && { timeZone }),
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hourCycle: "h23",
    weekday: "long"
  })
  const parts: Record<string, string> = {}
  for (const part of formatter.formatToParts(new Date(epochMillis))) parts[part.type] = part.value
  return { parts, resolvedZone: formatter.resolvedOptions().timeZone }
}

/** `2025-03-01T14:05:09+01:00 (Saturday, Europe/Paris)` for the instant and zone given. */
export const describeTime = (epochMillis: number, timeZone?: string): string => {
  const { parts, resolvedZone } = partsIn(epochMillis, timeZone)
  const year = Number(parts.year)
  const month = Number(parts.month)
  const day = Number(parts.day)
  const hour = Number(parts.hour)
  const minute = Number(parts.minute)
  const second = Number(parts.second)
  // The offset is what the wall-clock time differs from UTC by, at this instant.
  const asUtc = Date.UTC(year, month - 1, day, hour, minute, second)
  const offsetMinutes = Math.round((asUtc - Math.floor(epochMillis / 1000) * 1000) / 60_000)
  const sign = offsetMinutes < 0 ? "-" : "+"
  const absolute = Math.abs(offsetMinutes)
  const offset = offsetMinutes === 0 ? "Z" : `${sign}${pad(Math.floor(absolute / 60))}:${pad(absolute % 60)}`
  const iso = `${pad(year, 4)}-${pad(month)}-${pad(day)}T${pad(hour)}:${pad(minute)}:${pad(second)}${offset}`
  return `${iso} (${parts.weekday}, ${resolvedZone})`
}

export const Parameters = Schema.Struct({
  timezone: Schema.optionalKey(
    Schema.String.annotate({
      description:
        "An IANA time zone such as Europe/Paris or America/New_York; omit for the user's local time"
    })
  )
})

export const tool = Tool.make({
  name: "current_time",
  description:
    "Returns the current date and time (ISO 8601 with UTC offset, weekday and time zone). " +
    "Use it whenever the answer depends on today's date or the time.",
  parameters: Parameters,
  // Reads the clock: changes nothing (though each call may answer differently).
  annotations: { readOnly: true },
  handler: ({ timezone }) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.try({
        try: () => describeTime(now, timezone),
        catch: () =>
          new TimeZoneError({
            timeZone: timezone ?? "",
            message: `Unknown time zone "${timezone}": use an IANA name such as Europe/Paris, Asia/Tokyo or UTC`
          })
      })
    )
})
