/**
 * Runs an OpenAiTestServer as its own process, for end-to-end tests that start
 * the CLI (or anything else) in another process and point it at a fake OpenAI.
 *
 *   node dist/internal/testServerMain.js [--port N] [--host H] [--script replies.json]
 *                                        [--requests-out requests.json]
 *
 * Environment fallbacks: NOEMA_OPENAI_TEST_PORT, NOEMA_OPENAI_TEST_HOST,
 * NOEMA_OPENAI_TEST_SCRIPT, NOEMA_OPENAI_TEST_REQUESTS_OUT.
 *
 * The script is a JSON array of replies (enqueued in order), or
 * `{ "replies": [...], "fallback": {...} }`. Once listening, one JSON line
 * `{"url":"http://127.0.0.1:PORT/v1","port":PORT}` is printed on stdout. On
 * SIGTERM/SIGINT the server closes and, with --requests-out, the recorded
 * requests are written to that file so the parent test can assert on them.
 */
import { readFile, writeFile } from "node:fs/promises"
import { parseArgs } from "node:util"
import type { ScriptedReply } from "../OpenAiTestServer.js"
import { start } from "../OpenAiTestServer.js"

interface Script {
  readonly replies: ReadonlyArray<ScriptedReply>
  readonly fallback: ScriptedReply | undefined
}

const isReply = (u: unknown): u is ScriptedReply =>
  typeof u === "object" && u !== null && typeof (u as { readonly type?: unknown }).type === "string"

const parseScript = (text: string, file: string): Script => {
  const json: unknown = JSON.parse(text)
  if (Array.isArray(json)) return checked(json, undefined, file)
  if (typeof json !== "object" || json === null) {
    throw new Error(`${file}: expected an array of replies or { "replies": [...], "fallback": {...} }`)
  }
  const { replies, fallback } = json as { readonly replies?: unknown; readonly fallback?: unknown }
  return checked(replies ?? [], fallback, file)
}

const checked = (replies: unknown, fallback: unknown, file: string): Script => {
  if (!(Array.isArray(replies) && replies.every(isReply))) {
    throw new Error(`${file}: "replies" must be an array of replies with a string "type"`)
  }
  if (fallback !== undefined && !isReply(fallback)) {
    throw new Error(`${file}: "fallback" must be a reply with a string "type"`)
  }
  return { replies, fallback }
}

const main = async (): Promise<void> => {
  const { values } = parseArgs({
    options: {
      port: { type: "string" },
      host: { type: "string" },
      script: { type: "string" },
      "requests-out": { type: "string" }
    }
  })
  const env = process.env
  const port = values.port ?? env.NOEMA_OPENAI_TEST_PORT
  const host = values.host ?? env.NOEMA_OPENAI_TEST_HOST
  const scriptFile = values.script ?? env.NOEMA_OPENAI_TEST_SCRIPT
  const requestsOut = values["requests-out"] ?? env.NOEMA_OPENAI_TEST_REQUESTS_OUT

  const script =
    scriptFile === undefined ? undefined : parseScript(await readFile(scriptFile, "utf8"), scriptFile)
  const server = await start({
    ...(host === undefined ? {} : { host }),
    ...(port === undefined ? {} : { port: Number(port) })
  })
  if (script !== undefined) {
    server.enqueue(...script.replies)
    server.setFallback(script.fallback)
  }
  process.stdout.write(`${JSON.stringify({ url: server.url, port: server.port })}\n`)

  let stopping = false
  const stop = async (): Promise<void> => {
    if (stopping) return
    stopping = true
    await server.close()
    if (requestsOut !== undefined) {
      const requests = server.requests.map((r) => ({ ...r, clientClosedEarly: r.clientClosedEarly }))
      await writeFile(requestsOut, `${JSON.stringify(requests, null, 2)}\n`)
    }
    process.exit(0)
  }
  process.once("SIGTERM", () => void stop())
  process.once("SIGINT", () => void stop())
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`)
  process.exit(1)
})
