/**
 * ResourcesArguments: `noema resources ls|show|put|search|reindex ...`, parsed
 * (light: `noema --help` loads it).
 */
import { parseArgs } from "node:util"

/** A usage error of `noema resources` (CliArguments turns it into its own `UsageError`). */
export class ResourcesUsageError extends Error {
  override readonly name = "UsageError"
  readonly exitCode = 2
}

interface Common {
  readonly database: string | undefined
  /** Who acts: the policy's principal. */
  readonly actor: string
  readonly policy: string | undefined
  readonly engine: "cedar" | "opa" | "allow-all" | undefined
  /** `--embedding-model`: "local" or a model of an OpenAI-compatible server. */
  readonly embeddingModel: string | undefined
  readonly baseUrl: string | undefined
  readonly apiKey: string | undefined
  readonly json: boolean
}

export type ResourcesCommand =
  | ({ readonly type: "resources-ls"; readonly prefix: string } & Common)
  | ({ readonly type: "resources-show"; readonly urn: string } & Common)
  | ({ readonly type: "resources-put"; readonly file: string } & Common)
  | ({
      readonly type: "resources-search"
      readonly text: string
      readonly resourceType: string | undefined
      readonly prefix: string | undefined
      readonly limit: number
    } & Common)
  | ({ readonly type: "resources-reindex" } & Common)

export const defaultActor = "cld:user.cli"

const options = {
  help: { type: "boolean", short: "h" },
  database: { type: "string" },
  as: { type: "string" },
  policy: { type: "string" },
  engine: { type: "string" },
  "embedding-model": { type: "string" },
  "base-url": { type: "string" },
  "api-key": { type: "string" },
  type: { type: "string", short: "t" },
  prefix: { type: "string", short: "p" },
  limit: { type: "string", short: "n" },
  json: { type: "boolean" }
} as const

const parseRaw = (args: ReadonlyArray<string>) =>
  parseArgs({ args: [...args], allowPositionals: true, strict: true, options })

const usage = (message: string) => new ResourcesUsageError(`${message} (see noema resources --help)`)

export const parse = (args: ReadonlyArray<string>): ResourcesCommand | "help" => {
  let parsed: ReturnType<typeof parseRaw>
  try {
    parsed = parseRaw(args)
  } catch (error) {
    throw usage(
      `noema resources: ${error instanceof Error ? (error.message.split(". ")[0] ?? error.message) : String(error)}`
    )
  }
  const { values, positionals } = parsed
  if (values.help === true) return "help"
  const [action, ...rest] = positionals
  const engine = values.engine
  if (engine !== undefined && engine !== "cedar" && engine !== "opa" && engine !== "allow-all")
    throw usage(`noema resources: unknown engine "${engine}" (use cedar, opa or allow-all)`)
  const common: Common = {
    database: values.database,
    actor: values.as ?? defaultActor,
    policy: values.policy,
    engine,
    embeddingModel: values["embedding-model"],
    baseUrl: values["base-url"],
    apiKey: values["api-key"],
    json: values.json === true
  }
  const one = (what: string) => {
    if (rest.length === 0) throw usage(`noema resources ${action}: missing ${what}`)
    if (rest.length > 1) throw usage(`noema resources ${action}: unexpected argument "${rest[1]}"`)
    return rest[0] as string
  }
  const only = (flag: string, set: boolean) => {
    if (set) throw usage(`noema resources ${action}: ${flag} only applies to search`)
  }
  if (action !== "search") {
    only("--type", values.type !== undefined)
    only("--prefix", values.prefix !== undefined)
    only("--limit", values.limit !== undefined)
  }
  switch (action) {
    case "ls":
      return { type: "resources-ls", prefix: one("the URN PREFIX"), ...common }
    case "show":
      return { type: "resources-show", urn: one("the URN"), ...common }
    case "put":
      return { type: "resources-put", file: one("the FILE (JSON; - for stdin)"), ...common }
    case "reindex":
      if (rest.length > 0) throw usage(`noema resources reindex: unexpected argument "${rest[0]}"`)
      return { type: "resources-reindex", ...common }
    case "search": {
      const text = rest.join(" ").trim()
      if (text === "") throw usage('noema resources search: missing the "text" to search for')
      const limit = values.limit === undefined ? 10 : Number(values.limit)
      if (!Number.isInteger(limit) || limit < 1)
        throw usage(
          `noema resources search: --limit needs a whole number of at least 1, got "${values.limit}"`
        )
      return {
        type: "resources-search",
        text,
        resourceType: values.type,
        prefix: values.prefix,
        limit,
        ...common
      }
    }
    case undefined:
      throw usage("noema resources: missing the action ls, show, put, search or reindex")
    default:
      throw usage(`noema resources: unknown action "${action}" (use ls, show, put, search or reindex)`)
  }
}

export const help = `noema resources: the resources agents work with (conversations, tasks, chunks...)

Usage
  noema resources ls PREFIX             everything under a URN, e.g. cld:conversation.c1
  noema resources show URN              one resource
  noema resources put FILE              store resources from a JSON file (- for stdin)
  noema resources search "text" [--type T] [--prefix URN] [--limit N]
                                        the most similar resources, best first
  noema resources reindex               embed every resource again (after changing
                                        --embedding-model)

FILE holds one resource or an array. A resource is either complete ({ "meta": {...}, ... },
as show --json prints it) or made from { "type": "chunk", "name": "...", "parent": "URN",
...its fields } (its URN is derived from parent, type and name).
Every access goes through the policy, as the actor --as (default ${defaultActor}).

Options
      --as URN              who acts (default ${defaultActor})
      --policy FILE         a Cedar (.cedar) or OPA (.wasm) policy (default
                            $NOEMA_HOME/policy.cedar, written on first use; noema policy show)
      --engine NAME         cedar, opa, or allow-all (every access allowed: only when asked)
      --embedding-model M   "local" (default: offline, lexical feature hashing, not semantic)
                            or a model of an OpenAI-compatible server, e.g. text-embedding-3-small
                            (env NOEMA_EMBEDDING_MODEL; uses --base-url/--api-key as noema chat)
  -t, --type TYPE           search: only this type (conversation, message, task, assistant, chunk, tool)
  -p, --prefix URN          search: only under this URN
  -n, --limit N             search: at most N results (default 10)
      --json                as JSON
      --database DB         a SQLite file or postgres:// URL (env NOEMA_DATABASE_URL;
                            default $NOEMA_HOME/noema.db)
  -h, --help                show this help
`
