import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

const home = makeHome()
afterAll(() => removeHome(home))
const env = { NOEMA_HOME: home }
const noema = (...args: ReadonlyArray<string>) => runCli(["resources", ...args], { env })
const file = (name: string, value: unknown) => {
  const target = path.join(home, name)
  fs.writeFileSync(target, JSON.stringify(value))
  return target
}

describe("noema resources", () => {
  it("put, ls, show and search, on the default database, with the local embedder", async () => {
    const put = await noema("put", file("kitchen.json", { type: "conversation", name: "kitchen" }), "--json")
    assert.equal(put.code, 0, put.stderr)
    const [kitchen] = JSON.parse(put.stdout) as Array<string>
    assert.match(kitchen!, /^cld:conversation\.[0-9a-f]{16}$/)
    // No policy named: the default one, written on first use (never allow-all unasked).
    assert.match(put.stderr, /wrote the default policy to .*policy\.cedar/)
    assert.notMatch(put.stderr, /allow-all/)
    const chunks = await noema(
      "put",
      file("chunks.json", [
        {
          type: "chunk",
          name: "bread",
          parent: kitchen,
          text: "Sourdough bread: feed the starter, bake the loaf."
        },
        { type: "chunk", name: "pasta", parent: kitchen, text: "Tomato pasta with garlic." },
        {
          type: "assistant",
          name: "mechanic",
          purpose: "Repairs cars",
          applicability: "car engines, oil, brakes"
        }
      ])
    )
    assert.equal(chunks.code, 0, chunks.stderr)
    assert.equal(chunks.stdout.trim().split("\n").length, 3)

    const ls = await noema("ls", kitchen!)
    assert.equal(ls.code, 0, ls.stderr)
    // In URN order (the hashes decide), so compared as a set.
    assert.sameDeepMembers(
      ls.stdout
        .trim()
        .split("\n")
        .map((row) => row.split("  ").slice(1)),
      [
        ["chunk", "bread"],
        ["chunk", "pasta"]
      ]
    )
    const search = await noema("search", "how do I bake bread?")
    assert.equal(search.code, 0, search.stderr)
    assert.match(
      search.stdout.split("\n")[0]!,
      /^\d\.\d{3} {2}cld:conversation\.[0-9a-f]+\/chunk\.[0-9a-f]+ {2}chunk {2}bread$/
    )
    const scoped = await noema("search", "car engine", "--type", "assistant", "--json")
    const hits = JSON.parse(scoped.stdout) as Array<{ name: string; type: string; score: number }>
    assert.deepEqual(
      hits.map((hit) => [hit.type, hit.name]),
      [["assistant", "mechanic"]]
    )
    assert.isAbove(hits[0]!.score, 0)
    const underKitchen = await noema("search", "car engine", "--prefix", kitchen!, "--json")
    assert.ok(
      (JSON.parse(underKitchen.stdout) as Array<{ type: string }>).every((hit) => hit.type !== "assistant")
    )

    const breadUrn = search.stdout.split("\n")[0]!.split("  ")[1]!
    const show = await noema("show", breadUrn, "--json")
    assert.equal(show.code, 0, show.stderr)
    const resource = JSON.parse(show.stdout)
    assert.equal(resource.meta.urn, breadUrn)
    assert.equal(resource.meta.parent, kitchen)
    assert.match(resource.text, /Sourdough/)

    const reindex = await noema("reindex")
    assert.equal(reindex.code, 0, reindex.stderr)
    assert.equal(reindex.stdout, "reindexed 4 resources with local/hash-v1\n")
    const again = await noema("search", "how do I bake bread?")
    assert.equal(again.stdout, search.stdout)
  })

  it("goes through the policy as the actor --as", async () => {
    const policyHome = makeHome()
    try {
      const local = { NOEMA_HOME: policyHome }
      fs.writeFileSync(
        path.join(policyHome, "policy.cedar"),
        `@id("cli-writes") permit (principal == Noema::Actor::"cld:user.cli", action, resource);`
      )
      const put = await runCli(
        ["resources", "put", file("one.json", { type: "conversation", name: "one" }), "--json"],
        {
          env: local
        }
      )
      assert.equal(put.code, 0, put.stderr)
      const urn = (JSON.parse(put.stdout) as Array<string>)[0]!
      const denied = await runCli(["resources", "show", urn, "--as", "cld:user.guest"], { env: local })
      assert.equal(denied.code, 1)
      assert.match(denied.stderr, /cld:user\.guest may not get/)
      // The guest's search finds nothing it may not read.
      const search = await runCli(["resources", "search", "one", "--as", "cld:user.guest", "--json"], {
        env: local
      })
      assert.equal(search.code, 0, search.stderr)
      assert.deepEqual(JSON.parse(search.stdout), [])
      // An ls refused for a resource under the prefix names the prefix, never the hidden one.
      const [secret] = JSON.parse(
        (
          await runCli(
            [
              "resources",
              "put",
              file("secret.json", { type: "chunk", name: "s", parent: urn, text: "x" }),
              "--json"
            ],
            { env: local }
          )
        ).stdout
      ) as Array<string>
      fs.appendFileSync(
        path.join(policyHome, "policy.cedar"),
        `\n@id("guest-reads-one") permit (principal == Noema::Actor::"cld:user.guest", action == Noema::Action::"get", resource in Noema::Resource::"${urn}");
@id("but-not-the-secret") forbid (principal == Noema::Actor::"cld:user.guest", action, resource == Noema::Resource::"${secret}");`
      )
      const ls = await runCli(["resources", "ls", urn, "--as", "cld:user.guest"], { env: local })
      assert.equal(ls.code, 1)
      assert.equal(
        ls.stderr,
        `noema: cld:user.guest may not get everything under ${urn}: the policy withholds some of it\n`
      )
    } finally {
      removeHome(policyHome)
    }
  })

  it("a fresh home gets the default policy (0600): plan and resources work on it, anyone else is refused", async () => {
    const fresh = makeHome()
    try {
      const local = { NOEMA_HOME: path.join(fresh, "home") }
      const policyFile = path.join(fresh, "home", "policy.cedar")
      const shown = await runCli(["policy", "show"], { env: local })
      assert.equal(shown.code, 0, shown.stderr)
      assert.match(shown.stderr, /wrote the default policy to .*policy\.cedar/)
      assert.equal(fs.statSync(policyFile).mode & 0o777, 0o600)
      assert.equal(shown.stdout, fs.readFileSync(policyFile, "utf8"))
      assert.match(shown.stdout, /@id\("local-user"\)/)
      // Written once: the next use finds it and says nothing.
      const again = await runCli(["policy", "show"], { env: local })
      assert.equal(again.stderr, `noema: ${policyFile}\n`)
      assert.equal(again.stdout, shown.stdout)

      // noema plan, as the planner and the assistants it elects, and tasks show.
      const planned = await runCli(["plan", "what is 12*7", "--json"], { env: local })
      assert.equal(planned.code, 0, planned.stderr)
      const result = JSON.parse(planned.stdout.trim().split("\n").at(-1)!) as {
        missing: Array<unknown>
        tree: { conversation: string; message: string }
      }
      assert.deepEqual(result.missing, [])
      const tasks = await runCli(["tasks", "show", result.tree.message], { env: local })
      assert.equal(tasks.code, 0, tasks.stderr)
      assert.match(tasks.stdout, /12 \* 7 = 84/)
      // noema resources, as the local user: what the plan stored.
      const listed = await runCli(["resources", "ls", result.tree.conversation], { env: local })
      assert.equal(listed.code, 0, listed.stderr)
      assert.match(listed.stdout, /\/task\.[0-9a-f]+ {2}task {2}.*what is 12\*7/)
      // An actor the policy does not name is refused.
      const guest = await runCli(["resources", "ls", result.tree.conversation, "--as", "cld:user.guest"], {
        env: local
      })
      assert.equal(guest.code, 1)
      assert.match(
        guest.stderr,
        /^noema: cld:user\.guest may not get cld:conversation\.[0-9a-f]+: cedar: get .* denied/
      )
      const check = await runCli(
        ["policy", "check", "--actor", "cld:user.guest", "--action", "get", result.tree.conversation],
        { env: local }
      )
      assert.equal(check.code, 3)
      // An assistant reads, but changes no assistant.
      const assistantPut = await runCli(
        ["policy", "check", "--actor", "cld:assistant.writer", "--action", "put", "cld:assistant.writer"],
        { env: local }
      )
      assert.equal(assistantPut.code, 3, assistantPut.stdout)
      // Allow-all only when asked for; asked for, it is the user's choice: no warning.
      const open = await runCli(
        ["resources", "ls", result.tree.conversation, "--as", "cld:user.guest", "--engine", "allow-all"],
        { env: local }
      )
      assert.equal(open.code, 0, open.stderr)
      assert.notMatch(open.stderr, /allow-all/)
    } finally {
      removeHome(fresh)
    }
  })

  it("lists a type from its root, finds resources by name, refuses a missing parent, lists a plan in order", async () => {
    const local = { NOEMA_HOME: makeHome() }
    try {
      const run = (...args: ReadonlyArray<string>) => runCli(["resources", ...args], { env: local })
      const put = await run(
        "put",
        file("named.json", [
          { type: "assistant", name: "analyst", purpose: "analyse numbers" },
          { type: "assistant", name: "writer", purpose: "write prose" },
          { type: "conversation", name: "c1" },
          // The parent named as the conversation just put: "c1", not its hash.
          {
            type: "message",
            name: "request",
            parent: "cld:conversation.c1",
            role: "user",
            content: "plan it"
          },
          ...["third", "first", "second"].map((name) => ({
            type: "task",
            name,
            parent: "cld:conversation.c1/message.request",
            status: "pending",
            position: ["first", "second", "third"].indexOf(name) + 1
          }))
        ]),
        "--json"
      )
      assert.equal(put.code, 0, put.stderr)
      const [analyst, , conversation, request] = JSON.parse(put.stdout) as Array<string>
      assert.match(request!, new RegExp(`^${conversation}/message\\.[0-9a-f]{16}$`))

      const assistants = await run("ls", "cld:assistant")
      assert.equal(assistants.code, 0, assistants.stderr)
      assert.deepEqual(
        assistants.stdout
          .trim()
          .split("\n")
          .map((row) => row.split("  ").slice(1)),
        [
          ["assistant", "analyst"],
          ["assistant", "writer"]
        ]
      )
      const shown = await run("show", "cld:assistant.analyst", "--json")
      assert.equal(shown.code, 0, shown.stderr)
      assert.equal(JSON.parse(shown.stdout).meta.urn, analyst)
      assert.isAbove(JSON.parse(shown.stdout).meta.tokens, 0)

      // Under the request, its tasks in the plan's order, whatever their URNs' order.
      const tasks = await run("ls", "cld:conversation.c1")
      assert.deepEqual(
        tasks.stdout
          .trim()
          .split("\n")
          .map((row) => row.split("  ").slice(1).join(" ")),
        ["message request", "task first", "task second", "task third"]
      )

      const orphan = await run(
        "put",
        file("orphan.json", { type: "chunk", name: "x", parent: "cld:conversation.none", text: "x" })
      )
      assert.equal(orphan.code, 1)
      assert.match(
        orphan.stderr,
        /its parent cld:conversation\.none does not exist \(put the parent first\)\n$/
      )
      const twin = await run(
        "put",
        file("twin.json", {
          meta: { urn: "cld:assistant.a2", name: "analyst", type: "assistant", hash: "a2" }
        })
      )
      assert.equal(twin.code, 1)
      assert.match(
        twin.stderr,
        /the name "analyst" is taken: cld:assistant\.[0-9a-f]{16} is the assistant of that name/
      )
      assert.equal((await run("ls", "cld:assistant")).stdout.trim().split("\n").length, 2)
    } finally {
      removeHome(local.NOEMA_HOME)
    }
  })

  it("refuses bad input with one line and the right status", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, number, RegExp]> = [
      [["ls"], 2, /missing PREFIX/],
      [["ls", "kitchen"], 2, /kitchen/],
      [["ls", "cld:rocket"], 2, /a type's root is cld:<type>, one of conversation, message, task/],
      [
        ["show", `cld:${Array.from({ length: 3000 }, (_, i) => `task.t${i}`).join("/")}`],
        2,
        /has 3000 elements, at most 32 are allowed/
      ],
      [["search"], 2, /missing TEXT/],
      [["search", "x", "--limit", "0"], 2, /--limit/],
      [["show", "cld:conversation.none"], 1, /not found/],
      [["put", path.join(home, "absent.json")], 1, /cannot read/],
      [["put", file("bad.json", [{ type: "chunk", name: "no text" }])], 1, /bad\.json.*text/],
      [["put", file("kind.json", { type: "rocket", name: "x" })], 1, /"type" must be one of/],
      [["launch"], 2, /unknown command "launch"/],
      [
        ["search", "x", "--embedding-model", "text-embedding-3-small"],
        2,
        /needs OPENAI_API_KEY or --base-url/
      ]
    ]
    for (const [args, code, message] of cases) {
      const result = await noema(...args)
      assert.equal(result.code, code, `${args.join(" ")}: ${result.stderr}`)
      assert.match(result.stderr, message, args.join(" "))
      assert.ok(!/\n\s+at /.test(result.stderr), result.stderr)
    }
  })
})
