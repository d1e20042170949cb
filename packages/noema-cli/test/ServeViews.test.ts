/**
 * `noema serve` gives the dev UI's Plans, Routines and Resources views the
 * database it serves, read as `noema resources` reads it: as cld:user.cli,
 * under the policy in $NOEMA_HOME (the one `noema resources` would use), so
 * what the policy denies there is denied in the page, and what it allows is
 * the resource `noema resources show` prints. (The views themselves are
 * tested in Chromium in @noema/server's DevUiBrowse.test.ts.)
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { binPath, cleanEnv, makeHome, removeHome, runCli } from "./support/cli.js"

let home: string
let serve: ChildProcess
let url: string
let token: string
let output = ""
let kitchen: string
let secret: string

const env = () => ({ NOEMA_HOME: home, NO_COLOR: "1" })

beforeAll(async () => {
  home = makeHome()
  const file = path.join(home, "resources.json")
  fs.writeFileSync(file, JSON.stringify({ type: "conversation", name: "kitchen" }))
  const put = await runCli(["resources", "put", file, "--json"], { env: env() })
  expect(put.code, put.stderr).toBe(0)
  kitchen = (JSON.parse(put.stdout) as Array<string>)[0] as string
  fs.writeFileSync(file, JSON.stringify({ type: "chunk", name: "secret", parent: kitchen, text: "hidden" }))
  secret = (
    JSON.parse((await runCli(["resources", "put", file, "--json"], { env: env() })).stdout) as Array<string>
  )[0] as string
  // The policy `noema resources` uses, edited as a person would: the secret may not be read.
  fs.appendFileSync(
    path.join(home, "policy.cedar"),
    `\nforbid (principal, action == Noema::Action::"get", resource == Noema::Resource::"${secret}");\n`
  )
  serve = spawn(process.execPath, [binPath, "serve", "--port", "0", "--json", "--no-worker"], {
    env: cleanEnv(env()),
    stdio: ["ignore", "pipe", "pipe"]
  })
  ;({ url, token } = await new Promise<{ url: string; token: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`noema serve did not start: ${output}`)), 60_000)
    serve.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      output += chunk
      // The address is the JSON line (`output` holds standard error too: the offline model's notice may come first).
      const line = output
        .split("\n")
        .find((candidate) => candidate.startsWith("{") && output.includes(`${candidate}\n`))
      if (line !== undefined) {
        clearTimeout(timer)
        resolve(JSON.parse(line) as { url: string; token: string })
      }
    })
    serve.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      output += chunk
    })
    serve.on("exit", (code) => reject(new Error(`noema serve exited with ${code}: ${output}`)))
  }))
}, 120_000)

afterAll(() => {
  serve?.kill("SIGTERM")
  removeHome(home)
})

const get = async (route: string) => {
  const response = await fetch(`${url}${route}`, { headers: { authorization: `Bearer ${token}` } })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

describe("noema serve: the Plans, Routines and Resources views' data", () => {
  it("reads the resources as noema resources does: its actor, its policy, its output", async () => {
    const listed = await get(`/api/resources?prefix=${encodeURIComponent(kitchen)}`)
    expect(listed.status).toBe(200)
    expect(listed.body.actor).toBe("cld:user.cli")
    expect(listed.body.resources).toEqual([
      { urn: secret, type: "chunk", name: null, parent: kitchen, decision: "deny", score: null }
    ])
    const shown = await get(`/api/resources/show?urn=${encodeURIComponent(kitchen)}`)
    const printed = await runCli(["resources", "show", kitchen, "--json"], { env: env() })
    expect(shown.body.resource).toEqual(JSON.parse(printed.stdout))
    const denied = await get(`/api/resources/show?urn=${encodeURIComponent(secret)}`)
    expect(denied.body.resource).toBeNull()
    expect(JSON.stringify(denied.body)).not.toContain("hidden")
  }, 120_000)

  it("serves the plans and routines of the same database", async () => {
    expect(await get("/api/plans")).toEqual({
      status: 200,
      body: { total: 0, offset: 0, limit: 50, plans: [] }
    })
    expect(await get("/api/routines")).toEqual({ status: 200, body: { routines: [] } })
  })
})
