/**
 * bin/noema.js on a Node that is too old: one line naming the Node it needs and
 * exit status 1, not "No such built-in module: node:sqlite" from deep inside.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { describe, expect, it } from "vitest"
import { binPath, cleanEnv } from "./support/cli.js"

/** Runs the bin on this Node with `process.versions.node` made to read `version`. */
const runAs = (version: string) =>
  spawnSync(
    process.execPath,
    [
      "--import",
      `data:text/javascript,Object.defineProperty(process.versions, "node", { value: ${JSON.stringify(version)} })`,
      binPath,
      "--version"
    ],
    { env: cleanEnv({}), encoding: "utf8" }
  )

const tooOld = /^noema: needs Node\.js 22\.13 or later \(for node:sqlite\); this is Node [0-9.]+\..*\n$/

/** The machine's own Node, when it is one too old for noema (e.g. /usr/bin/node v20 beside the pinned v24). */
const systemNode = ["/usr/bin/node", "/usr/local/bin/node"].find((candidate) => {
  if (!fs.existsSync(candidate)) return false
  const version = spawnSync(candidate, ["-p", "process.versions.node"], { encoding: "utf8" }).stdout.trim()
  const [major = 0, minor = 0] = version.split(".").map(Number)
  return major < 22 || (major === 22 && minor < 13)
})

describe("bin/noema.js on an old Node", () => {
  it("names the Node it needs and exits 1", () => {
    for (const version of ["20.20.2", "22.12.0", "18.0.0"]) {
      const result = runAs(version)
      expect(result.status).toBe(1)
      expect(result.stdout).toBe("")
      expect(result.stderr).toMatch(tooOld)
      expect(result.stderr).toContain(`this is Node ${version}.`)
    }
  })

  it("runs on 22.13 and later", () => {
    for (const version of ["22.13.0", "23.0.0", "24.9.0"]) {
      const result = runAs(version)
      expect(result.stderr).toBe("")
      expect(result.status).toBe(0)
      expect(result.stdout).toMatch(/^noema \d+\.\d+\.\d+/)
    }
  })

  it.skipIf(systemNode === undefined)(
    "says so on the machine's own old Node, before node:sqlite fails",
    () => {
      const result = spawnSync(systemNode as string, [binPath, "--version"], {
        env: cleanEnv({}),
        encoding: "utf8"
      })
      expect(result.status).toBe(1)
      expect(result.stderr).toMatch(tooOld)
      expect(result.stderr).not.toContain("node:sqlite'")
      expect(result.stderr).not.toContain("ERR_UNKNOWN_BUILTIN_MODULE")
    }
  )
})
