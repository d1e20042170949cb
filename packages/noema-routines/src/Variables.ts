/**
 * Variables: where the values of a document's declared variables come from.
 *
 * A source answers the names of one namespace (`documents`, `message`,
 * `thread`, `stakeholder`): a value, `undefined` when it has none, or a
 * failure (a file it could not read), which the routine retries. Sources are
 * plain values; give a routine any number of them, the first that answers a
 * name wins.
 */
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Message } from "@noema/core"
import type { SessionStore } from "@noema/session"
import { Effect, Schema } from "effect"
import type { Namespace, WorkBreakdown } from "./WorkBreakdown.js"
import { placeholder } from "./WorkBreakdown.js"

export class VariableSourceError extends Schema.TaggedError<VariableSourceError>()("VariableSourceError", {
  variable: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `Could not read {{${this.variable}}}: ${this.detail}`
  }
}

export class MissingVariable extends Schema.TaggedError<MissingVariable>()("MissingVariable", {
  variable: Schema.String,
  chain: Schema.String
}) {
  override get message(): string {
    return `The required variable {{${this.variable}}} of goal ${this.chain} has no value (no source gives it)`
  }
}

export interface Source {
  readonly namespace: Namespace
  /** `name` is the part after the namespace (`brief` of `documents.brief`). */
  resolve(name: string): Effect.Effect<string | undefined, VariableSourceError>
}

/** `documents.<name>`: the text of a file, from a name-to-path map (relative to `directory`). */
export const files = (
  mapping: Readonly<Record<string, string>>,
  directory: string = process.cwd()
): Source => ({
  namespace: "documents",
  resolve: (name) => {
    const file = mapping[name]
    if (file === undefined) return Effect.succeed(undefined)
    const full = path.resolve(directory, file)
    return Effect.tryPromise({
      try: () => fs.readFile(full, "utf8"),
      catch: (error) =>
        new VariableSourceError({
          variable: `documents.${name}`,
          detail: `${full}: ${error instanceof Error ? error.message : String(error)}`
        })
    })
  }
})

/** `documents.<name>`: the file `<name>` (or `<name>.md`, `<name>.txt`) in `directory`, if there is one. */
export const directory = (directory: string): Source => ({
  namespace: "documents",
  resolve: (name) =>
    Effect.tryPromise({
      try: async () => {
        for (const candidate of [name, `${name}.md`, `${name}.txt`]) {
          const full = path.resolve(directory, candidate)
          if (path.relative(directory, full).startsWith("..")) return undefined
          try {
            return await fs.readFile(full, "utf8")
          } catch (error) {
            if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error
          }
        }
        return undefined
      },
      catch: (error) =>
        new VariableSourceError({
          variable: `documents.${name}`,
          detail: error instanceof Error ? error.message : String(error)
        })
    })
})

/**
 * `message.<name>` from a session's messages: `last` and `first` are the text of
 * the last and first user message, `count` how many there are, anything else a
 * metadata key of the last user message that has it.
 */
export const messages = (list: ReadonlyArray<Message.Message>): Source => ({
  namespace: "message",
  resolve: (name) =>
    Effect.sync(() => {
      const users = list.filter((message) => message.role === "user")
      if (name === "last") return users.length === 0 ? undefined : Message.text(users.at(-1)!)
      if (name === "first") return users.length === 0 ? undefined : Message.text(users[0]!)
      if (name === "count") return String(users.length)
      for (let index = users.length - 1; index >= 0; index--) {
        const value = users[index]!.metadata?.[name]
        if (value !== undefined && value !== null) return render(value)
      }
      return undefined
    })
})

/** `thread.<path>` from a thread's (a session's) metadata. */
export const thread = (metadata: Readonly<Record<string, unknown>>): Source => ({
  namespace: "thread",
  resolve: (name) => Effect.sync(() => lookup(metadata, name))
})

/**
 * `stakeholder.<path>` from a JSON file: an object by role or name
 * (`{ "owner": { "name": "Ada", "email": "..." } }` gives `stakeholder.owner.name`),
 * or an array of objects with an `id` or `role`.
 */
export const stakeholders = (file: string): Source => {
  let loaded: Promise<unknown> | undefined
  return {
    namespace: "stakeholder",
    resolve: (name) =>
      Effect.tryPromise({
        try: async () => {
          loaded ??= fs.readFile(file, "utf8").then((content) => JSON.parse(content) as unknown)
          let data: unknown
          try {
            data = await loaded
          } catch (error) {
            loaded = undefined
            throw error
          }
          if (Array.isArray(data)) {
            const byKey: Record<string, unknown> = {}
            for (const entry of data) {
              if (typeof entry === "object" && entry !== null) {
                const key = (entry as Record<string, unknown>).id ?? (entry as Record<string, unknown>).role
                if (typeof key === "string") byKey[key] = entry
              }
            }
            data = byKey
          }
          return typeof data === "object" && data !== null
            ? lookup(data as Record<string, unknown>, name)
            : undefined
        },
        catch: (error) =>
          new VariableSourceError({
            variable: `stakeholder.${name}`,
            detail: `${file}: ${error instanceof Error ? error.message : String(error)}`
          })
      })
  }
}

/**
 * `message.x` and `thread.x` from a stored session: its messages (as `messages`)
 * and its metadata (as `thread`, with `thread.title` and `thread.id` besides).
 * The session is loaded once, when a variable is first asked for.
 */
export const session = (store: SessionStore.Service, id: string): ReadonlyArray<Source> => {
  let loaded: Promise<SessionStore.StoredSession> | undefined
  const load = (variable: string) =>
    Effect.tryPromise({
      try: () => {
        loaded ??= Effect.runPromise(store.load(id))
        return loaded.catch((error: unknown) => {
          loaded = undefined
          throw error
        })
      },
      catch: (error) =>
        new VariableSourceError({
          variable,
          detail: `session ${id}: ${error instanceof Error ? error.message : String(error)}`
        })
    })
  return [
    {
      namespace: "message",
      resolve: (name) =>
        Effect.flatMap(load(`message.${name}`), (stored) => messages(stored.messages).resolve(name))
    },
    {
      namespace: "thread",
      resolve: (name) =>
        Effect.flatMap(load(`thread.${name}`), (stored) =>
          thread({
            id: stored.info.id,
            ...(stored.info.title === undefined ? {} : { title: stored.info.title }),
            ...stored.info.metadata
          }).resolve(name)
        )
    }
  ]
}

/** Fixed values, `{ "thread.topic": "..." }`, for any namespace (tests, command-line `--var`). */
export const values = (entries: Readonly<Record<string, string>>): ReadonlyArray<Source> => {
  const byNamespace = new Map<Namespace, Record<string, string>>()
  for (const [key, value] of Object.entries(entries)) {
    const dot = key.indexOf(".")
    const namespace = key.slice(0, dot) as Namespace
    const table = byNamespace.get(namespace) ?? {}
    table[key.slice(dot + 1)] = value
    byNamespace.set(namespace, table)
  }
  return [...byNamespace].map(([namespace, table]) => ({
    namespace,
    resolve: (name: string) => Effect.succeed(table[name])
  }))
}

const lookup = (data: Readonly<Record<string, unknown>>, name: string): string | undefined => {
  if (name in data) return render(data[name])
  let current: unknown = data
  for (const part of name.split(".")) {
    if (typeof current !== "object" || current === null) return undefined
    current = (current as Record<string, unknown>)[part]
  }
  return current === undefined || current === null ? undefined : render(current)
}

const render = (value: unknown): string => (typeof value === "string" ? value : JSON.stringify(value))

/**
 * The values of every declared variable the chain's texts use, from the first
 * source that has one; a required variable no source gives fails `MissingVariable`.
 */
export const collect = (
  breakdown: WorkBreakdown,
  used: ReadonlyArray<string>,
  sources: ReadonlyArray<Source>,
  chain: string
): Effect.Effect<Record<string, string>, MissingVariable | VariableSourceError> =>
  Effect.gen(function* () {
    const result: Record<string, string> = {}
    for (const declaration of breakdown.variables) {
      if (!used.includes(declaration.name)) continue
      const dot = declaration.name.indexOf(".")
      const namespace = declaration.name.slice(0, dot)
      const name = declaration.name.slice(dot + 1)
      let value: string | undefined
      for (const source of sources) {
        if (source.namespace !== namespace) continue
        value = yield* source.resolve(name)
        if (value !== undefined) break
      }
      if (value === undefined && declaration.required) {
        return yield* Effect.fail(new MissingVariable({ variable: declaration.name, chain }))
      }
      result[declaration.name] = value ?? ""
    }
    return result
  })

/** The text with every `{{name}}` replaced by its value (collected beforehand). */
export const fill = (template: string, variables: Readonly<Record<string, string>>): string =>
  template.replace(placeholder, (whole, name: string) => variables[name] ?? whole)
