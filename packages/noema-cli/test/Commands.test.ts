/**
 * The command tree parses a command line into what its command receives
 * (`CliArguments`), in process and without running anything: flags over
 * nothing, words joined, `-` for stdin, repeated flags, defaults, and the
 * rules that involve several flags. A line that cannot run is a usage error
 * (effect/cli's `ShowHelp`, exit status 2) naming the problem.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as CliError from "effect/cli/CliError"
import * as Commands from "../src/Commands.js"
import * as ExitStatus from "../src/ExitStatus.js"
import * as Frame from "../src/internal/Frame.js"

const parse = (...args: ReadonlyArray<string>) => Effect.runPromise(Frame.parse(Commands.root, args))

/** The input the line hands its command. */
const input = async (...args: ReadonlyArray<string>) => (await parse(...args))?.input

/** The problems of a line that does not parse, as effect/cli names them. */
const problems = async (...args: ReadonlyArray<string>) => {
  const error = await Effect.runPromise(Effect.flip(Frame.parse(Commands.root, args)))
  assert.instanceOf(error, CliError.ShowHelp)
  assert.strictEqual(ExitStatus.ofError(error), ExitStatus.usage)
  return (error as CliError.ShowHelp).errors
}

describe("Commands", () => {
  it("parses chat options, flags over nothing", async () => {
    assert.deepStrictEqual(
      await input(
        "chat",
        "-m",
        "gpt-4.1",
        "--base-url",
        "http://x/v1",
        "--no-tools",
        "-s",
        "abc",
        "--provider",
        "anthropic"
      ),
      {
        type: "chat",
        model: {
          model: "gpt-4.1",
          baseUrl: "http://x/v1",
          apiKey: undefined,
          provider: "anthropic",
          api: undefined,
          maxRetryWait: undefined,
          contextBudget: undefined
        },
        tools: false,
        mcp: undefined,
        approveAll: false,
        system: undefined,
        session: "abc",
        database: undefined
      }
    )
  })

  it("joins the words of a question, and reads stdin for none or -", async () => {
    assert.deepInclude(await input("ask", "--json", "what", "is", "2+2?"), {
      type: "ask",
      question: "what is 2+2?",
      json: true,
      tools: true
    })
    assert.deepInclude(await input("ask"), { question: undefined, explicitStdin: false })
    assert.deepInclude(await input("ask", "-"), { question: undefined, explicitStdin: true })
    assert.deepInclude(await input("ask", "--", "--not-a-flag"), { question: "--not-a-flag" })
  })

  it("takes an MCP servers file and --yes for chat and ask", async () => {
    assert.deepInclude(await input("chat", "--mcp", "mcp.json"), { mcp: "mcp.json", approveAll: false })
    assert.deepInclude(await input("ask", "-y", "--mcp", "mcp.json", "hi"), {
      mcp: "mcp.json",
      approveAll: true
    })
    assert.instanceOf((await problems("ask", "--mcp"))[0], CliError.InvalidValue)
  })

  it("parses the sessions commands; without one, the list", async () => {
    assert.deepStrictEqual(await parse("sessions"), {
      path: "sessions",
      input: { type: "sessions-list", json: false, database: undefined }
    })
    assert.deepStrictEqual(await input("sessions", "ls", "--json"), {
      type: "sessions-list",
      json: true,
      database: undefined
    })
    assert.deepStrictEqual(await input("sessions", "show", "ab12"), {
      type: "sessions-show",
      id: "ab12",
      json: false,
      database: undefined
    })
    assert.deepStrictEqual(await input("sessions", "rm", "ab12"), {
      type: "sessions-delete",
      id: "ab12",
      database: undefined
    })
    assert.deepStrictEqual(await input("sessions", "export", "ab12", "-f", "md"), {
      type: "sessions-export",
      id: "ab12",
      format: "markdown",
      database: undefined
    })
    assert.deepStrictEqual(await input("sessions", "export", "--all", "--database", "pg.db"), {
      type: "sessions-export-all",
      database: "pg.db"
    })
    assert.deepStrictEqual(await input("sessions", "import"), {
      type: "sessions-import",
      file: undefined,
      database: undefined
    })
  })

  it("refuses what sessions export cannot do, naming it", async () => {
    assert.instanceOf((await problems("sessions", "export"))[0], CliError.MissingArgument)
    assert.match(
      (await problems("sessions", "export", "--all", "ab12"))[0]?.message ?? "",
      /ID or --all, not both/
    )
    assert.match(
      (await problems("sessions", "export", "--all", "-f", "json"))[0]?.message ?? "",
      /JSON lines only/
    )
    assert.instanceOf(
      (await problems("sessions", "export", "ab", "--format", "pdf"))[0],
      CliError.InvalidValue
    )
    assert.instanceOf((await problems("sessions", "list", "--all"))[0], CliError.UnrecognizedOption)
    assert.instanceOf((await problems("sessions", "import", "a", "b"))[0], CliError.UnexpectedArgument)
  })

  it("takes --database on every command that touches sessions, = or space", async () => {
    const url = "postgres://noema:pw@db:5432/noema"
    assert.deepInclude(await input("chat", "--database", url), { database: url })
    assert.deepInclude(await input("ask", "--database=/tmp/x.db", "hi"), { database: "/tmp/x.db" })
    assert.deepInclude(await input("sessions", "show", "ab", "--database", url), { database: url })
  })

  it("keeps the runs rules: a thread for run, one way to choose stages, --approve with --plan", async () => {
    assert.deepInclude(
      await input("run", "write", "a", "haiku", "-t", "T1", "--plan", "--approve", "first"),
      {
        type: "run",
        request: "write a haiku",
        thread: "T1",
        plan: true,
        approve: "first",
        detach: false
      }
    )
    assert.deepInclude(await input("run", "x", "-t", "T1"), { approve: "none", pipeline: undefined })
    assert.instanceOf((await problems("run", "x"))[0], CliError.MissingOption)
    assert.instanceOf((await problems("run", "-t", "T1"))[0], CliError.MissingArgument)
    assert.match(
      (await problems("run", "x", "-t", "T", "--plan", "-p", "f.yml"))[0]?.message ?? "",
      /give one/
    )
    assert.match(
      (await problems("run", "x", "-t", "T", "--approve", "all"))[0]?.message ?? "",
      /goes with --plan/
    )
    assert.instanceOf((await problems("runs", "reject", "R1"))[0], CliError.MissingOption)
    assert.instanceOf((await problems("runs", "show", "R1", "--by", "x"))[0], CliError.UnrecognizedOption)
    assert.deepInclude(await input("runs", "resume"), { type: "runs-resume", run: undefined })
    assert.deepInclude(await input("threads", "set-queue", "T1", "enqueue"), {
      thread: "T1",
      queue: "enqueue"
    })
    assert.instanceOf((await problems("threads", "set-queue", "T1", "later"))[0], CliError.InvalidValue)
  })

  it("checks numbers and gives defaults", async () => {
    assert.deepInclude(await input("serve"), { port: 7077, worker: true, concurrency: 4 })
    assert.deepInclude(await input("serve", "--port", "0", "--no-worker"), { port: 0, worker: false })
    assert.instanceOf((await problems("serve", "--port", "70000"))[0], CliError.InvalidValue)
    assert.instanceOf((await problems("worker", "--concurrency", "0"))[0], CliError.InvalidValue)
    assert.instanceOf((await problems("plan", "x", "--parallel", "0"))[0], CliError.InvalidValue)
    assert.instanceOf((await problems("plan", "x", "--threshold", "2"))[0], CliError.InvalidValue)
    assert.deepInclude(await input("plan", "x", "--threshold", "-0.5"), {
      threshold: -0.5,
      fallback: "model"
    })
    assert.deepInclude(await input("resources", "search", "a", "b", "-n", "3"), { text: "a b", limit: 3 })
    assert.deepInclude(await input("resources", "ls", "cld:x.y"), { actor: "cld:user.cli", json: false })
    assert.deepInclude(await input("tasks", "show", "cld:x.y"), { as: "cld:assistant.planner" })
  })

  it("takes repeated --var NAME=VALUE for routine run", async () => {
    assert.deepInclude(await input("routine", "run", "goals.md", "--var", "a=1", "--var", "b=x=y"), {
      type: "routine-run",
      vars: { a: "1", b: "x=y" },
      parallel: 1
    })
    assert.instanceOf((await problems("routine", "run", "goals.md", "--var", "a"))[0], CliError.InvalidValue)
  })

  it("offers --json only where it does something", async () => {
    assert.instanceOf((await problems("chat", "--json"))[0], CliError.UnrecognizedOption)
    assert.instanceOf((await problems("policy", "show", "--json"))[0], CliError.UnrecognizedOption)
    assert.instanceOf((await problems("resources", "reindex", "--json"))[0], CliError.UnrecognizedOption)
  })

  it("suggests a command or flag close to one that does not exist", async () => {
    const [command] = await problems("chta")
    assert.instanceOf(command, CliError.UnknownSubcommand)
    assert.deepStrictEqual((command as CliError.UnknownSubcommand).suggestions, ["chat"])
    const [flag] = await problems("ask", "--jsn", "hi")
    assert.deepStrictEqual((flag as CliError.UnrecognizedOption).suggestions, ["--json"])
  })
})
