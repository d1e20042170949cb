/**
 * A failed run says why, through `noema run` against the local OpenAI wire-format server:
 * its failed attempt's manifest, `runs show` and `--json` carry `error_code`,
 * `error_message` and `retryable`; a transient model failure (no server on the port, then
 * a server answering 500) is retryable, and `runs retry` carries the run on.
 */
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { assert, describe, it } from "vitest"
import { runCli, useServerAndHome } from "./support/cli.js"

const frame = useServerAndHome()

/** A port nothing listens on (taken, then let go). */
const closedPort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })

const runIdOf = (stdout: string) => {
  const id = /^run (run_\S+)$/m.exec(stdout)?.[1]
  assert.ok(id, stdout)
  return id as string
}

describe("noema run: a stage failing with a model error", () => {
  it("no server on the port, then a 500: model_error, retryable, in the manifest and runs show; runs retry completes it", async () => {
    const env = { NOEMA_HOME: frame.home }
    const model = ["--api-key", "k", "-m", "m", "--no-tools"]
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const unreachable = await runCli(
      [
        "run",
        "a note",
        "--thread",
        thread,
        "--base-url",
        `http://127.0.0.1:${await closedPort()}/v1`,
        ...model
      ],
      { env }
    )
    assert.equal(unreachable.code, 1, unreachable.stderr)
    const runId = runIdOf(unreachable.stdout)
    assert.match(
      unreachable.stdout,
      new RegExp(`✘ run ${runId} failed: model_error \\(noema runs retry ${runId}\\)`)
    )
    const stageDirectory = path.join(frame.home, "workspace", "runs", runId, "stages", "01-brief")
    const manifestOf = (directory: string) =>
      JSON.parse(fs.readFileSync(path.join(directory, "manifest.json"), "utf8")) as Record<string, unknown>
    const first = manifestOf(stageDirectory)
    assert.deepInclude(first, { status: "failed", attempt: 1, error_code: "model_error", retryable: true })
    assert.include(first.error_message as string, "connection failed")

    // The server is there now, but fails: still a transient failure, retried without --force.
    frame.server.setFallback(() => ({ type: "error", status: 500, message: "the server had an error" }))
    const failing = await runCli(["runs", "retry", runId, "--base-url", frame.server.url, ...model], { env })
    assert.equal(failing.code, 1, failing.stderr)
    assert.isAbove(frame.server.requests.length, 0)
    const second = manifestOf(stageDirectory)
    assert.deepInclude(second, { status: "failed", attempt: 2, error_code: "model_error", retryable: true })
    assert.include(second.error_message as string, "the server had an error")
    // The first attempt's manifest is kept aside, whole.
    assert.deepEqual(manifestOf(`${stageDirectory}.attempt-1`), first)

    const shown = JSON.parse((await runCli(["runs", "show", runId, "--json"], { env })).stdout)
    assert.deepEqual(shown.error, {
      error_code: "model_error",
      error_message: second.error_message,
      retryable: true
    })
    assert.deepEqual(
      shown.stages[0].attempts.map((attempt: { error?: { error_code: string; retryable: boolean } }) => [
        attempt.error?.error_code,
        attempt.error?.retryable
      ]),
      [
        ["model_error", true],
        ["model_error", true]
      ]
    )
    assert.match(
      (await runCli(["runs", "show", runId], { env })).stdout,
      /^error: model_error: .*the server had an error.* \(retryable\)$/m
    )

    frame.server.setFallback(() => ({ type: "text", text: "done" }))
    const retried = await runCli(["runs", "retry", runId, "--base-url", frame.server.url, ...model], { env })
    assert.equal(retried.code, 0, retried.stderr)
    assert.match(retried.stdout, /▸ 01-brief \(attempt 3\)/)
    assert.match(retried.stdout, /✔ run \S+ completed/)
    assert.equal((await runCli(["runs", "verify", runId], { env })).code, 0)
  }, 120_000)
})
