/**
 * Every command that runs a model has it as `ask` does (`Runtime.commandModel`): the offline
 * notice when nothing is configured, each retry shown, and a failure to reach the model
 * server told with the server's address. Through the built `noema`.
 */
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { assert, describe, it } from "vitest"
import { offlineNotice } from "../src/CliConfig.js"
import { type Result, runCli, useServerAndHome } from "./support/cli.js"

const frame = useServerAndHome()

/** A local port nothing listens on: taken from the system, then let go. */
const closedPort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })

const routineFile = () => {
  const file = path.join(frame.home, "routine.yaml")
  fs.writeFileSync(
    file,
    "title: R\nskills:\n  - id: s\n    scenarios:\n      - id: c\n        tasks:\n          - id: t\n            title: Add 2 and 2\n"
  )
  return file
}

/** `noema <args>` that runs until it prints `ready` on stdout, then is stopped (SIGTERM). */
const untilReady = (args: ReadonlyArray<string>, ready: string, env: Record<string, string>) =>
  runCli(args, {
    env,
    onStart: (child) => {
      child.stdout?.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes(ready)) child.kill("SIGTERM")
      })
    }
  })

describe("the offline notice, said by every command that runs a model, as chat and ask say it", () => {
  it("run, runs resume|retry|approve, worker, serve, plan and routine", async () => {
    const env = { NOEMA_HOME: frame.home }
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const results: Record<string, Result> = {
      run: await runCli(["run", "what is 6 times 7?", "--thread", thread], { env }),
      "runs resume": await runCli(["runs", "resume"], { env }),
      "runs retry": await runCli(["runs", "retry", "run_none"], { env }),
      "runs approve": await runCli(["runs", "approve", "run_none"], { env }),
      worker: await untilReady(["worker"], "noema worker: carrying runs on", env),
      serve: await untilReady(["serve", "--port", "0"], "noema serve:", env),
      plan: await runCli(["plan", "what is 6 times 7?", "--no-tools"], { env }),
      routine: await runCli(["routine", "run", routineFile()], { env })
    }
    for (const [command, result] of Object.entries(results))
      assert.equal(result.stderr.split(`${offlineNotice}\n`).length, 2, `${command}: ${result.stderr}`)
    assert.equal(results.run?.code, 0, results.run?.stderr)

    // Not when a model is configured, nor by a command that runs none.
    const configured = await runCli(["runs", "resume"], { env: { ...env, NOEMA_BASE_URL: frame.server.url } })
    assert.equal(configured.stderr, "noema: no run to resume\n")
    assert.notInclude((await runCli(["runs", "list"], { env })).stderr, offlineNotice)
  }, 240_000)
})

describe("a model server that cannot be reached is told as ask tells it", () => {
  it("run, plan and routine show each retry, then name the server they could not reach", async () => {
    const env = { NOEMA_HOME: frame.home }
    const url = `http://127.0.0.1:${await closedPort()}/v1`
    const model = ["--base-url", url, "--no-tools"]
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const results: Record<string, Result> = {
      ask: await runCli(["ask", "hello", ...model], { env }),
      run: await runCli(["run", "a note", "--thread", thread, ...model], { env }),
      plan: await runCli(["plan", "a note", ...model], { env }),
      routine: await runCli(["routine", "run", routineFile(), ...model], { env })
    }
    for (const [command, result] of Object.entries(results)) {
      assert.equal(result.code, 1, `${command}: ${result.stdout}${result.stderr}`)
      for (const attempt of [2, 3])
        assert.match(
          result.stderr,
          new RegExp(
            `noema: the connection to the model server failed; retrying in \\d+ s \\(attempt ${attempt} of 3\\)\n`
          ),
          command
        )
      assert.match(
        result.stderr,
        new RegExp(
          `\nnoema: cannot reach the model server at ${url.replace(/[.]/g, "\\.")} \\(connection failed: [^\n]*\\); is it running\\? \\(--base-url / NOEMA_BASE_URL\\)\n`
        ),
        command
      )
    }
    // The run's own record keeps the stage's failure as it was.
    assert.match(results.run!.stdout, /✗ 01-brief: \S+: /)
  }, 240_000)
})
