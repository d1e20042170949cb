import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

const home = makeHome()
afterAll(() => removeHome(home))

const c1 = "cld:conversation.c1"
const planner = "cld:assistant.planner"
const reader = "cld:assistant.reader"
const policyFile = path.join(home, "team.cedar")
fs.writeFileSync(
  policyFile,
  `@id("planner-owns-c1")
permit (principal == Noema::Actor::"${planner}", action, resource in Noema::Resource::"${c1}");
@id("reader-reads-c1")
permit (principal == Noema::Actor::"${reader}", action == Noema::Action::"get", resource in Noema::Resource::"${c1}");
`
)
const env = { NOEMA_HOME: home }
const check = (...args: ReadonlyArray<string>) => runCli(["policy", "check", ...args], { env })

describe("noema policy check", () => {
  it("prints the decision and its reasons; exit 0 allows, 3 denies", async () => {
    const allowed = await check(
      "--actor",
      reader,
      "--action",
      "get",
      `${c1}/message.m1`,
      "--policy",
      policyFile
    )
    assert.equal(allowed.code, 0, allowed.stderr)
    assert.match(allowed.stdout, /^allow \(cedar\)\n {2}- .*reader-reads-c1/)
    const denied = await check("--actor", reader, "--action", "delete", c1, "--policy", policyFile)
    assert.equal(denied.code, 3, denied.stderr)
    assert.match(denied.stdout, /^deny \(cedar\)\n {2}- /)
    const json = await check(
      "--actor",
      planner,
      "--action",
      "put",
      `${c1}/task.t1`,
      "--policy",
      policyFile,
      "--json"
    )
    assert.equal(json.code, 0, json.stderr)
    const decision = JSON.parse(json.stdout)
    assert.equal(decision.decision, "allow")
    assert.deepEqual(decision.resources, [`${c1}/task.t1`])
    assert.match(decision.reasons.join(" "), /planner-owns-c1/)
  })

  it("uses $NOEMA_HOME/policy.cedar by default; shadow says what it is on stderr, allow-all chosen says nothing", async () => {
    // None yet: the default policy is written, and decides.
    const fresh = await check("--actor", "cld:user.guest", "--action", "get", c1)
    assert.equal(fresh.code, 3, fresh.stderr)
    assert.match(fresh.stderr, /wrote the default policy/)
    assert.match(
      fresh.stdout,
      /^deny \(cedar\)\n {2}- cedar: get cld:conversation\.c1 denied \(no policy allows it\)/
    )
    const local = await check("--actor", "cld:user.cli", "--action", "delete", c1)
    assert.equal(local.code, 0, local.stdout)
    assert.match(local.stdout, /allowed by local-user/)
    fs.copyFileSync(policyFile, path.join(home, "policy.cedar"))
    const byDefault = await check("--actor", reader, "--action", "put", c1)
    assert.equal(byDefault.code, 3)
    const shadow = await check("--actor", reader, "--action", "put", c1, "--shadow")
    assert.equal(shadow.code, 0)
    assert.match(shadow.stdout, /allow \(shadow\(cedar\)\)\n {2}- shadow: cedar would deny/)
    assert.match(shadow.stderr, /cedar would deny/)
    const open = await check("--actor", reader, "--action", "delete", c1, "--engine", "allow-all")
    assert.equal(open.code, 0)
    // The user chose it: no warning about it.
    assert.notMatch(open.stderr, /allow-all/)
  })

  it("refuses bad input with one line and the right status", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, number, RegExp]> = [
      [["--action", "get", c1], 2, /missing --actor/],
      [["--actor", reader, c1], 2, /missing --action/],
      [
        ["--actor", reader, "--action", "drop", c1],
        2,
        /--action: "drop" is not valid \("get" \| "put" \| "delete"\)/
      ],
      [["--actor", reader, "--action", "get"], 2, /missing URN/],
      [["--actor", "reader", "--action", "get", c1], 2, /reader/],
      [["--actor", reader, "--action", "get", c1, "--engine", "rego"], 2, /--engine: "rego" is not valid/]
    ]
    for (const [args, code, message] of cases) {
      const result = await check(...args)
      assert.equal(result.code, code, `${args.join(" ")}: ${result.stderr}`)
      assert.match(result.stderr, message)
      assert.equal(result.stderr.trim().split("\n").length, 1, result.stderr)
    }
    const broken = path.join(home, "broken.cedar")
    fs.writeFileSync(broken, "permit (principal, action, resource) when { resource.colour == 1 };")
    const invalid = await check("--actor", reader, "--action", "get", c1, "--policy", broken)
    assert.equal(invalid.code, 1)
    assert.match(invalid.stderr, /broken\.cedar/)
    const notWasm = path.join(home, "policy.wasm")
    fs.writeFileSync(notWasm, "not wasm")
    const opa = await check("--actor", reader, "--action", "get", c1, "--policy", notWasm)
    assert.equal(opa.code, 1)
    assert.match(opa.stderr, /not a WebAssembly module/)
    const usage = await runCli(["policy", "allow"], { env })
    assert.equal(usage.code, 2)
    assert.match(usage.stderr, /^noema: unknown command "allow" \(see noema policy --help\)$/m)
    const showCheck = await runCli(["policy", "show", "--actor", reader], { env })
    assert.equal(showCheck.code, 2)
    assert.match(showCheck.stderr, /^noema: unknown flag --actor \(see noema policy show --help\)$/m)
    const showMissing = await runCli(["policy", "show", "--policy", path.join(home, "absent.cedar")], { env })
    assert.equal(showMissing.code, 1)
    assert.match(showMissing.stderr, /absent\.cedar does not exist/)
    const showBroken = await runCli(["policy", "show", "--policy", broken], { env })
    assert.equal(showBroken.code, 1)
    assert.match(showBroken.stderr, /broken\.cedar/)
    const help = await runCli(["policy", "check", "--help"], { env })
    assert.equal(help.code, 0)
    assert.match(help.stdout, /^Usage\n {2}noema policy check \[flags\] URN\.\.\.$/m)
    assert.match(help.stdout, /--actor URN/)
  })
})
