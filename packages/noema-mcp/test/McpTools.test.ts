import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { Tool } from "@noema/core"
import { Effect, Exit, Fiber, Scope } from "effect"
import { TestClock } from "effect/testing"
import * as z from "zod"
import { McpTools } from "../src/index.js"

const fixture = path.join(import.meta.dirname, "fixtures", "StdioServer.ts")
const stdio = { command: process.execPath, args: [fixture] }
const silentServer = path.join(import.meta.dirname, "fixtures", "SilentServer.ts")

const call = (tools: ReadonlyArray<Tool.Any>, name: string, args: unknown) =>
  Tool.callIn(tools, { id: "c1", name, arguments: JSON.stringify(args) })

const find = (tools: ReadonlyArray<Tool.Any>, name: string): Tool.Any => {
  const tool = tools.find((candidate) => candidate.name === name)
  if (tool === undefined) throw new Error(`no tool ${name} in ${tools.map((t) => t.name).join(", ")}`)
  return tool
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("McpTools over stdio (a real server process)", () => {
  it.effect("lists the server's tools with prefixed names, converted schemas and annotations", () =>
    Effect.gen(function* () {
      const connection = yield* McpTools.connect("calc", stdio)
      const names = connection.tools.map((tool) => tool.name).sort()
      assert.deepStrictEqual(names, ["calc__add", "calc__crash", "calc__fail", "calc__picture", "calc__pid"])
      const add = find(connection.tools, "calc__add")
      assert.strictEqual(add.description, "Adds two numbers")
      const parameters = add.definition.parameters as {
        type: string
        properties: { a: { type: string; description: string } }
        required: Array<string>
      }
      assert.strictEqual(parameters.type, "object")
      assert.deepStrictEqual(parameters.properties.a, { type: "number", description: "first" })
      assert.deepStrictEqual([...parameters.required].sort(), ["a", "b"])
      assert.notProperty(parameters, "$schema")
      assert.deepStrictEqual(add.annotations, { readOnly: true, idempotent: true })
      assert.deepStrictEqual(find(connection.tools, "calc__fail").annotations, { destructive: true })
      assert.isFalse(Tool.isInterruptible(find(connection.tools, "calc__fail")))
    }).pipe(Effect.scoped)
  )

  it.effect("a call round-trips through tools/call", () =>
    Effect.gen(function* () {
      const { tools } = yield* McpTools.connect("calc", stdio)
      const result = yield* call(tools, "calc__add", { a: 2, b: 40 })
      assert.strictEqual(result.content, "42")
      assert.isFalse(result.isError)
      assert.strictEqual(result.name, "calc__add")
    }).pipe(Effect.scoped)
  )

  it.effect(
    "isError results, thrown handlers and bad arguments become error results the model can read",
    () =>
      Effect.gen(function* () {
        const { tools } = yield* McpTools.connect("calc", stdio)
        const failed = yield* call(tools, "calc__fail", { reason: "testing" })
        assert.isTrue(failed.isError)
        assert.include(failed.content, "failed on purpose: testing")
        const crashed = yield* call(tools, "calc__crash", {})
        assert.isTrue(crashed.isError)
        assert.include(crashed.content, "the handler threw")
        const bad = yield* call(tools, "calc__add", { a: "two", b: 1 })
        assert.isTrue(bad.isError)
        assert.match(bad.content, /Tool "calc__add" failed: .*a/s)
        assert.include(bad.content.toLowerCase(), "number")
        const notObject = yield* Tool.callIn(tools, { id: "c2", name: "calc__add", arguments: "[1]" })
        assert.isTrue(notObject.isError)
        assert.include(notObject.content, "Invalid arguments")
      }).pipe(Effect.scoped)
  )

  it.effect("summarises content that is not text", () =>
    Effect.gen(function* () {
      const { tools } = yield* McpTools.connect("calc", stdio)
      const result = yield* call(tools, "calc__picture", {})
      assert.strictEqual(result.content, "here it is\n[image: image/png, 8 bytes]")
    }).pipe(Effect.scoped)
  )

  it.effect("passes env to the server", () =>
    Effect.gen(function* () {
      const { tools } = yield* McpTools.connect("calc", {
        ...stdio,
        env: { FIXTURE_GREETING: "hello from env" }
      })
      const result = yield* call(tools, "calc__greeting", {})
      assert.strictEqual(result.content, "hello from env")
    }).pipe(Effect.scoped)
  )

  it.effect("closing the scope ends the server process", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const connection = yield* Scope.provide(McpTools.connect("calc", stdio), scope)
      const pid = connection.pid
      assert.isNumber(pid)
      const reported = yield* call(connection.tools, "calc__pid", {})
      assert.strictEqual(reported.content, String(pid))
      assert.isTrue(isAlive(pid as number))
      yield* Scope.close(scope, Exit.void)
      assert.isFalse(isAlive(pid as number))
    })
  )

  it.effect("a server that cannot start is one McpError naming it", () =>
    Effect.gen(function* () {
      const missing = yield* McpTools.connect("ghost", { command: "/nonexistent/mcp-server" }).pipe(
        Effect.scoped,
        Effect.flip
      )
      assert.strictEqual(missing._tag, "McpError")
      assert.strictEqual(missing.server, "ghost")
      assert.match(
        missing.message,
        /^MCP server "ghost" \(\/nonexistent\/mcp-server\) failed to start: .*ENOENT/
      )
      const exits = yield* McpTools.connect("broken", {
        command: process.execPath,
        args: ["-e", "console.error('missing API token'); process.exit(3)"]
      }).pipe(Effect.scoped, Effect.flip)
      assert.include(exits.message, 'MCP server "broken"')
      assert.include(exits.message, "missing API token")
    })
  )

  it("the async helper opens and closes", async () => {
    const opened = await McpTools.open({ one: stdio, two: stdio })
    const names = opened.tools.map((tool) => tool.name)
    assert.include(names, "one__add")
    assert.include(names, "two__add")
    const result = await Effect.runPromise(call(opened.tools, "two__add", { a: 1, b: 2 }))
    assert.strictEqual(result.content, "3")
    const pid = Number((await Effect.runPromise(call(opened.tools, "one__pid", {}))).content)
    await opened.close()
    assert.isFalse(isAlive(pid))
    const error = await McpTools.open({ ok: stdio, bad: { command: "/nonexistent/x" } }).catch(
      (e: unknown) => e
    )
    assert.instanceOf(error, McpTools.McpError)
  })
})

// ---------------------------------------------------------------------------
// The process tree: a server and what it started end on every path
// ---------------------------------------------------------------------------

/**
 * Whether a process is gone: `kill(pid, 0)` fails with ESRCH, or it is a zombie (dead, its
 * exit status not collected: a grandchild whose parent died is handed to PID 1, and a
 * container's PID 1 may never collect it).
 */
const isGone = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH"
  }
  try {
    return /^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, "utf8"))
  } catch {
    return false
  }
}

const pause = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

/** Polls until `done`, at most `tries` times 50 ms apart (a generous bound: a busy machine is slow, not wrong). */
const eventually = (done: () => boolean, tries = 600): Effect.Effect<boolean> =>
  Effect.gen(function* () {
    for (let i = 0; i < tries; i++) {
      if (done()) return true
      yield* pause(50)
    }
    return done()
  })

interface Pids {
  readonly child: number
  readonly grandchild: number
}

/** A file for the fixture to write its pids to, and a way to wait for them. */
const pidsFile = () => {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "noema-mcp-")), "pids.json")
  const read = (): Pids | undefined => {
    try {
      return JSON.parse(fs.readFileSync(file, "utf8")) as Pids
    } catch {
      return undefined
    }
  }
  const written = Effect.gen(function* () {
    assert.isTrue(yield* eventually(() => read() !== undefined), `the fixture never wrote ${file}`)
    return read() as Pids
  })
  return { file, written }
}

/** Both running before noema gives up: what is checked afterwards is noema's doing. */
const assertRunning = (pids: Pids) => {
  assert.isFalse(isGone(pids.child))
  assert.isFalse(isGone(pids.grandchild))
}

const assertTreeGone = (pids: Pids) =>
  Effect.gen(function* () {
    assert.isTrue(yield* eventually(() => isGone(pids.child)), `the server ${pids.child} is still running`)
    assert.isTrue(
      yield* eventually(() => isGone(pids.grandchild)),
      `the server's child ${pids.grandchild} is still running`
    )
  })

const silent = (file: string, mode: "silent" | "exit") => ({
  command: process.execPath,
  args: [silentServer, file, mode]
})

describe("McpTools ends a stdio server's process tree on every path", () => {
  it.effect("a server that never answers initialize: ended when the timeout gives up", () =>
    Effect.gen(function* () {
      const { file, written } = pidsFile()
      const connecting = yield* Effect.forkChild(
        McpTools.connect("mute", silent(file, "silent"), { initializeTimeout: "1 minute" }).pipe(
          Effect.scoped,
          Effect.flip
        )
      )
      const pids = yield* written
      assertRunning(pids)
      // The test's clock: the timeout fires now, however slow the machine was to start the server.
      yield* TestClock.adjust("1 minute")
      const error = yield* Fiber.join(connecting)
      assert.strictEqual(error._tag, "McpError")
      assert.match(
        error.message,
        /^MCP server "mute" \(.*\) failed to start: it did not answer initialize within 1m/
      )
      yield* assertTreeGone(pids)
    })
  )

  it.effect("a server that fails to start: ended at once, before its scope closes", () =>
    Effect.gen(function* () {
      const { file, written } = pidsFile()
      // The scope stays open: what ends the tree is the failed start itself. (The server has
      // exited by design; its child ignores SIGTERM and would run on.)
      const scope = yield* Scope.make()
      const error = yield* Effect.flip(Scope.provide(McpTools.connect("quits", silent(file, "exit")), scope))
      assert.match(error.message, /^MCP server "quits" \(.*\) failed to start/)
      yield* assertTreeGone(yield* written)
      yield* Scope.close(scope, Exit.void)
    })
  )

  it.effect("connecting interrupted: ended", () =>
    Effect.gen(function* () {
      const { file, written } = pidsFile()
      const connecting = yield* Effect.forkChild(
        Effect.scoped(McpTools.connect("interrupted", silent(file, "silent")))
      )
      const pids = yield* written
      assertRunning(pids)
      yield* Fiber.interrupt(connecting)
      yield* assertTreeGone(pids)
    })
  )

  it.effect("a connected server: ended, with what it started, when the scope closes", () =>
    Effect.gen(function* () {
      const { file, written } = pidsFile()
      const scope = yield* Scope.make()
      const connection = yield* Scope.provide(
        McpTools.connect("calc", { ...stdio, env: { FIXTURE_PIDS_FILE: file } }),
        scope
      )
      const pids = yield* written
      assertRunning(pids)
      assert.strictEqual(connection.pid, pids.child)
      assert.strictEqual((yield* call(connection.tools, "calc__add", { a: 1, b: 1 })).content, "2")
      yield* Scope.close(scope, Exit.void)
      yield* assertTreeGone(pids)
    })
  )
})

describe("McpTools.toolName", () => {
  it("prefixes, sanitises and shortens", () => {
    assert.strictEqual(McpTools.toolName("github", "create_issue"), "github__create_issue")
    assert.strictEqual(McpTools.toolName("fs", "read.file/v2"), "fs__read_file_v2")
    assert.strictEqual(McpTools.toolName("s", "x".repeat(100)).length, 64)
  })
})

// ---------------------------------------------------------------------------
// Streamable HTTP, in-process on port 0
// ---------------------------------------------------------------------------

const startHttpServer = Effect.acquireRelease(
  Effect.promise(async () => {
    const server = new McpServer({ name: "http-fixture", version: "1.0.0" })
    server.registerTool(
      "echo",
      { description: "Echoes", inputSchema: { text: z.string() }, annotations: { readOnlyHint: true } },
      async ({ text }) => ({ content: [{ type: "text", text: `echo: ${text}` }] })
    )
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => crypto.randomUUID() })
    await server.connect(transport)
    const httpServer = http.createServer((request, response) => {
      if (request.headers.authorization !== "Bearer secret") {
        response.writeHead(401).end("unauthorized")
        return
      }
      void transport.handleRequest(request, response)
    })
    await new Promise<void>((resolve) => httpServer.listen(0, "127.0.0.1", resolve))
    const { port } = httpServer.address() as AddressInfo
    return { url: `http://127.0.0.1:${port}/mcp`, httpServer, server }
  }),
  ({ httpServer, server }) =>
    Effect.promise(async () => {
      await server.close()
      httpServer.closeAllConnections()
      await new Promise((resolve) => httpServer.close(resolve))
    })
)

describe("McpTools over streamable HTTP", () => {
  it.effect("lists and calls tools, sending the configured headers", () =>
    Effect.gen(function* () {
      const { url } = yield* startHttpServer
      const connection = yield* McpTools.connect("web", { url, headers: { Authorization: "Bearer secret" } })
      assert.deepStrictEqual(
        connection.tools.map((tool) => tool.name),
        ["web__echo"]
      )
      assert.isUndefined(connection.pid)
      assert.isTrue(Tool.isReadOnly(connection.tools[0] as Tool.Any))
      const result = yield* call(connection.tools, "web__echo", { text: "hi" })
      assert.strictEqual(result.content, "echo: hi")
    }).pipe(Effect.scoped)
  )

  it.effect("a refused connection is an McpError", () =>
    Effect.gen(function* () {
      const { url } = yield* startHttpServer
      const error = yield* McpTools.connect("web", { url }).pipe(Effect.flip)
      assert.strictEqual(error._tag, "McpError")
      assert.match(error.message, /^MCP server "web" \(http:\/\/127\.0\.0\.1:\d+\/mcp\) failed to start/)
    }).pipe(Effect.scoped)
  )
})
