/**
 * IdPrefix: an id given as any unique prefix of it, the way people type ids
 * (sessions, runs, threads): the whole id, or enough of its start to name one.
 * A prefix that names several is refused with some of them, so the user knows
 * how much more to give; one that names none is the caller's "not found".
 */
import { Effect, Schema } from "effect"

/** How many of the ids an ambiguous prefix names are kept, and shown. */
const kept = 10
const shown = 3

export class AmbiguousId extends Schema.TaggedError<AmbiguousId>()("AmbiguousId", {
  /** What the id names: "session", "run", "thread". */
  what: Schema.String,
  prefix: Schema.String,
  /** How many ids it names. */
  count: Schema.Number,
  /** The first of them, in order (at most 10). */
  matches: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `"${this.prefix}" matches ${this.count} ${this.what}s (${this.matches.slice(0, shown).join(", ")}${
      this.count > shown ? ", …" : ""
    }); give more of the id`
  }
}

/**
 * The id `idOrPrefix` names among `ids`: an exact id, else the one id it begins. Several:
 * `AmbiguousId`; none: `notFound(idOrPrefix)`.
 */
export const resolve = <E>(
  what: string,
  idOrPrefix: string,
  ids: Iterable<string>,
  notFound: (wanted: string) => E
): Effect.Effect<string, AmbiguousId | E> => {
  const wanted = idOrPrefix.trim()
  const matches: Array<string> = []
  for (const id of ids) {
    if (id === wanted) return Effect.succeed(id)
    if (wanted !== "" && id.startsWith(wanted)) matches.push(id)
  }
  if (matches.length === 1) return Effect.succeed(matches[0] as string)
  if (matches.length === 0) return Effect.fail(notFound(wanted))
  matches.sort()
  return Effect.fail(
    new AmbiguousId({ what, prefix: wanted, count: matches.length, matches: matches.slice(0, kept) })
  )
}
