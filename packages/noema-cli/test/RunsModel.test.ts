/**
 * A run remembers what ran it: run.json and each manifest name the model, and `runs resume`
 * and workers carry a run on with that model, or leave it waiting, never on another.
 * Everything through the built `noema`, against the local wire-format server.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import type { OpenAiTestServer } from "@noema/openai/testing"
import { assert, describe, it } from "vitest"
import { offlineNotice } from "../src/CliConfig.js"
import { type Result, runCli, useServerAndHome } from "./support/cli.js"

const frame = useServerAndHome()

const runIdOf = (stdout: string) => {
  const id = /^run (run_\S+)$/m.exec(stdout)?.[1]
  assert.ok(id, stdout)
  return id!
}

const runDirectory = (runId: string) => path.join(frame.home, "workspace", "runs", runId)
const readJson = (file: string) => JSON.parse(fs.readFileSync(file, "utf8"))
const modelsAsked = (requests: ReadonlyArray<OpenAiTestServer.RecordedRequest>) =>
  requests.map((request) => (request.body as { model: string }).model)

/** `noema run` on model-a (configured in the environment), killed with SIGKILL inside its second stage. */
const killedInStageTwo = async (): Promise<string> => {
  const env = { NOEMA_HOME: frame.home }
  // Each answer streams slowly, so the kill lands inside the second stage.
  frame.server.setFallback(() => ({ type: "text", text: "a careful answer", delayMs: 400 }))
  const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
  const killed = await runCli(["run", "a report", "--thread", thread, "--no-tools"], {
    env: { ...env, NOEMA_MODEL: "model-a", NOEMA_BASE_URL: frame.server.url },
    onStart: (child) => {
      child.stdout?.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("▸ 02-result")) setTimeout(() => child.kill("SIGKILL"), 120)
      })
    }
  })
  assert.equal(killed.signal, "SIGKILL", killed.stdout + killed.stderr)
  return runIdOf(killed.stdout)
}

const assertWaits = (result: Result, runId: string, has: string) => {
  assert.equal(result.code, 4, result.stdout + result.stderr)
  assert.include(
    result.stderr,
    `noema: run ${runId} waits for the model it was started with, model-a at ${frame.server.url} (chat API); this process has ${has}. ` +
      `Configure that model where the run is carried on (NOEMA_MODEL=model-a NOEMA_BASE_URL=${frame.server.url}), then noema runs resume ${runId} (or a worker carries it on); ` +
      `or carry it on with another model: noema runs resume ${runId} --model NAME\n`
  )
}

describe("a run remembers the model that ran it", () => {
  it("resumed where its model is not configured it waits, said by resume, the worker and runs show; where it is, it runs on it", async () => {
    const env = { NOEMA_HOME: frame.home }
    const runId = await killedInStageTwo()
    const runJson = readJson(path.join(runDirectory(runId), "run.json"))
    assert.deepEqual(runJson.model, {
      provider: "openai",
      name: "model-a",
      base_url: frame.server.url,
      api: "chat"
    })
    assert.equal(
      readJson(path.join(runDirectory(runId), "stages", "01-brief", "manifest.json")).model.name,
      "model-a"
    )
    const askedBefore = frame.server.requests.length

    // No model configured: the offline notice, then the wait; nothing runs, on any model.
    for (let again = 0; again < 2; again++) {
      const unconfigured = await runCli(["runs", "resume", runId], { env })
      assert.include(unconfigured.stderr, `${offlineNotice}\n`)
      assertWaits(unconfigured, runId, "noema-offline (offline)")
    }
    // Another model on the same server waits too.
    assertWaits(
      await runCli(["runs", "resume"], {
        env: { ...env, NOEMA_MODEL: "model-c", NOEMA_BASE_URL: frame.server.url }
      }),
      runId,
      `model-c at ${frame.server.url} (chat API)`
    )
    // A worker says it once, and leaves the run alone.
    let told = 0
    const worker = await runCli(["worker"], {
      env,
      onStart: (child) => {
        child.stderr?.on("data", (chunk: Buffer) => {
          if (chunk.toString().includes("waits for the model it was started with") && told++ === 0)
            setTimeout(() => child.kill("SIGTERM"), 1500)
        })
      }
    })
    assert.equal(worker.stderr.split("waits for the model it was started with").length, 2, worker.stderr)
    assert.include(worker.stderr, `noema: run ${runId} waits for the model it was started with, model-a`)
    assert.equal(frame.server.requests.length, askedBefore)

    const shown = await runCli(["runs", "show", runId], { env })
    assert.match(
      shown.stdout,
      new RegExp(`\\nwaiting since \\S+: run ${runId} waits for the model it was started with, model-a at `)
    )
    const view = JSON.parse((await runCli(["runs", "show", runId, "--json"], { env })).stdout)
    // No process carries it on: shown interrupted (its stored status stays running), waiting for its model.
    assert.equal(view.status, "interrupted")
    assert.equal(view.waiting_for_model.model.name, "model-a")
    const types = (view.events as Array<{ data: { type: string } }>).map((event) => event.data.type)
    // The interrupted attempt is recorded; no stage started after it; each process's wait is
    // one event (the same wait again adds none).
    assert.deepEqual(types.slice(types.lastIndexOf("StageFailed")), [
      "StageFailed",
      "ModelUnavailable",
      "ModelUnavailable",
      "ModelUnavailable"
    ])
    assert.deepEqual(
      view.events
        .slice(-3)
        .map((event: { data: { available: { name: string } } }) => event.data.available.name),
      ["noema-offline", "model-c", "noema-offline"]
    )

    // Configured for model-a (in the environment, as the run was started): it runs on model-a.
    const resumed = await runCli(["runs", "resume", runId], {
      env: { ...env, NOEMA_MODEL: "model-a", NOEMA_BASE_URL: frame.server.url }
    })
    assert.equal(resumed.code, 0, resumed.stdout + resumed.stderr)
    assert.match(resumed.stdout, /▸ 02-result \(attempt 2\)/)
    assert.deepEqual(modelsAsked(frame.server.requests.slice(askedBefore)), ["model-a"])
    const manifest = readJson(path.join(runDirectory(runId), "stages", "02-result", "manifest.json"))
    assert.equal(manifest.attempt, 2)
    assert.equal(manifest.model.name, "model-a")
    assert.equal((await runCli(["runs", "verify", runId], { env })).code, 0)
  }, 240_000)

  it("runs resume --model B carries it on with B, and the new attempt's manifest says B", async () => {
    const env = { NOEMA_HOME: frame.home }
    const runId = await killedInStageTwo()
    const askedBefore = frame.server.requests.length
    // --model names only the model: without a server configured, it is refused before anything.
    const refused = await runCli(["runs", "resume", runId, "--model", "model-b"], { env })
    assert.equal(refused.code, 2, refused.stderr)
    assert.include(refused.stderr, "--model model-b names no model server")
    assert.notInclude(refused.stderr, "offline model", "a refused command says only why")

    const resumed = await runCli(
      ["runs", "resume", runId, "--model", "model-b", "--base-url", frame.server.url, "--no-tools"],
      { env }
    )
    assert.equal(resumed.code, 0, resumed.stdout + resumed.stderr)
    assert.deepEqual(modelsAsked(frame.server.requests.slice(askedBefore)), ["model-b"])
    const stages = path.join(runDirectory(runId), "stages")
    assert.deepEqual(readJson(path.join(stages, "02-result", "manifest.json")).model, {
      provider: "openai",
      name: "model-b",
      base_url: frame.server.url,
      api: "chat"
    })
    assert.equal(readJson(path.join(stages, "01-brief", "manifest.json")).model.name, "model-a")
    assert.equal(readJson(path.join(runDirectory(runId), "run.json")).model.name, "model-a")
  }, 240_000)

  it("run.json names the server without the password or key its base URL carried", async () => {
    const env = { NOEMA_HOME: frame.home }
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const created = await runCli(["run", "a report", "--thread", thread, "--detach"], {
      env: {
        ...env,
        NOEMA_MODEL: "model-a",
        NOEMA_BASE_URL: "http://ada:s3cret-pass@127.0.0.1:9/v1?api_key=sk-s3cret-key",
        OPENAI_API_KEY: "sk-env-key"
      }
    })
    assert.equal(created.code, 0, created.stderr)
    const runId = created.stdout.trim()
    const text = fs.readFileSync(path.join(runDirectory(runId), "run.json"), "utf8")
    assert.deepEqual(JSON.parse(text).model, {
      provider: "openai",
      name: "model-a",
      base_url: "http://ada:***@127.0.0.1:9/v1?api_key=***",
      api: "chat"
    })
    for (const secret of ["s3cret-pass", "sk-s3cret-key", "sk-env-key"]) assert.notInclude(text, secret)
  })

  it("a run started on the offline model resumes on it, even where a model server is configured", async () => {
    const env = { NOEMA_HOME: frame.home }
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const created = await runCli(["run", "a note on tea", "--thread", thread, "--detach"], { env })
    assert.equal(created.code, 0, created.stderr)
    assert.include(created.stderr, `${offlineNotice}\n`)
    const runId = created.stdout.trim()
    assert.deepEqual(readJson(path.join(runDirectory(runId), "run.json")).model, {
      provider: "offline",
      name: "noema-offline"
    })
    const resumed = await runCli(["runs", "resume", runId], {
      env: { ...env, NOEMA_MODEL: "model-a", NOEMA_BASE_URL: frame.server.url }
    })
    assert.equal(resumed.code, 0, resumed.stdout + resumed.stderr)
    assert.equal(frame.server.requests.length, 0)
    assert.equal(
      readJson(path.join(runDirectory(runId), "stages", "02-result", "manifest.json")).model.provider,
      "offline"
    )
  })
})
