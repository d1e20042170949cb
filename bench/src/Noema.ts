/**
 * Noema: which noema packages this checkout can run.
 *
 * The packages above core are loaded on demand: a package that is missing or
 * not built leaves its figures out of the run, with the reason printed, rather
 * than failing the whole benchmark or measuring something else in its place.
 */
import { existsSync } from "node:fs"
import { fileURLToPath } from "node:url"

export interface Availability {
  readonly agents: typeof import("@noema/agents") | undefined
  readonly openai: typeof import("@noema/openai") | undefined
  readonly anthropic: typeof import("@noema/anthropic") | undefined
  readonly aiSdk: typeof import("@noema/ai-sdk") | undefined
  readonly session: typeof import("@noema/session") | undefined
  /** The installed `noema` command (`packages/noema-cli/bin/noema.js`), when the CLI is built. */
  readonly cliBin: string | undefined
  /** Package name to why it is not available. */
  readonly missing: Readonly<Record<string, string>>
}

const reasonOf = (error: unknown): string => {
  const message = error instanceof Error ? error.message : String(error)
  return message.split("\n")[0] ?? message
}

export const load = async (): Promise<Availability> => {
  const missing: Record<string, string> = {}
  const attempt = async <A>(name: string, load: () => Promise<A>): Promise<A | undefined> => {
    try {
      return await load()
    } catch (error) {
      missing[name] = `not available yet (${reasonOf(error)})`
      return undefined
    }
  }
  const agents = await attempt("@noema/agents", () => import("@noema/agents"))
  const openai = await attempt("@noema/openai", () => import("@noema/openai"))
  const anthropic = await attempt("@noema/anthropic", () => import("@noema/anthropic"))
  const aiSdk = await attempt("@noema/ai-sdk", () => import("@noema/ai-sdk"))
  const session = await attempt("@noema/session", () => import("@noema/session"))
  const cliBin = fileURLToPath(new URL("../../packages/noema-cli/bin/noema.js", import.meta.url))
  const cliBuilt = existsSync(fileURLToPath(new URL("../../packages/noema-cli/dist/bin.js", import.meta.url)))
  if (!cliBuilt) missing["@noema/cli"] = "not available yet (packages/noema-cli/dist/bin.js is not built)"
  return { agents, openai, anthropic, aiSdk, session, cliBin: cliBuilt ? cliBin : undefined, missing }
}
