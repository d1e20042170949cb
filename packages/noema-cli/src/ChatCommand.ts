/**
 * ChatCommand: `noema chat`, the interactive chat, a client of the runtime.
 *
 * Lines come from `ChatInput` (readline, history); slash commands run here;
 * each message is a trigger for the session's runtime (`@noema/runtime`),
 * whose events draw the answers. On a terminal, typing while an answer
 * streams is not echoed into it: a line sent then is queued (`ForNextTurn`:
 * it joins the answer at its next model call, shown as queued), a line
 * starting with `!` interrupts the answer for it, and Ctrl-C (read as a key)
 * cancels the answer; what was already shown is kept, marked interrupted.
 * A call that waits for approval is asked about (y/N) once the answer ends,
 * and the decision is a trigger too: the runtime goes on with the turn.
 * When input is not a terminal (a script), each line waits for the previous
 * answer. `/exit` (also during an answer), or Ctrl-C / Ctrl-D on an empty
 * line, stops the runtime and quits with status 0.
 */
import * as fs from "node:fs"
import { Approval, type ChatModel, Message, type Tool } from "@noema/core"
import { type Runtime as AgentRuntime, ContextItem, TriggerEvent } from "@noema/runtime"
import { Session, SessionStore, Usage } from "@noema/session"
import { Cause, Deferred, Effect, Exit, Fiber, Stream } from "effect"
import type { Command } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as CliError from "./CliError.js"
import type { Io } from "./Io.js"
import { ChatInput } from "./internal/ChatInput.js"
import * as ChatSetup from "./internal/ChatSetup.js"
import * as Databases from "./internal/Databases.js"
import * as Frame from "./internal/Frame.js"
import * as Mcp from "./internal/Mcp.js"
import * as Models from "./internal/Models.js"
import { RetryNotice } from "./internal/RetryNotice.js"
import * as Sessions from "./internal/Sessions.js"
import * as SlashCommands from "./internal/SlashCommands.js"
import { TurnRenderer } from "./internal/TurnRenderer.js"
import * as Terminal from "./Terminal.js"
import * as BuiltinTools from "./tools/BuiltinTools.js"

export type Options = Extract<Command, { readonly type: "chat" }>

const firstSentence = (text: string): string => {
  const match = /^.*?[.!?](?=\s|$)/.exec(text)
  return match === null ? text : match[0]
}

class Chat {
  readonly #io: Io
  readonly #options: Options
  readonly #style: Terminal.Style
  readonly #errorStyle: Terminal.Style
  readonly #interactive: boolean
  readonly #runtime: Databases.StoreRuntime
  /** `/plan on`: turns run the plan workflow. */
  #planning = false
  /** The tools of the `--mcp` servers, after the built-in ones. */
  readonly #mcpTools: ReadonlyArray<Tool.Any>
  readonly #input: ChatInput
  #config: CliConfig.ModelConfig
  #model: ChatModel.Service
  readonly #modelOptions: Models.ModelOptions
  #session: Session.Session | undefined
  /** Sessions this process created, to drop them again if they stay empty. */
  readonly #created = new Set<string>()
  /** The system prompt a new session gets (`--system`, `/system` before the first turn, else the default). */
  #pendingSystemPrompt: string
  /** The runtime of the current session, once a message was sent to it, and the fiber drawing its events. */
  #agentRuntime:
    | {
        readonly runtime: AgentRuntime.Runtime
        readonly session: Session.Session
        readonly drawing: Fiber.Fiber<void>
      }
    | undefined
  /** The answer being drawn (a runtime cycle). */
  #renderer: TurnRenderer | undefined
  /** A cycle runs, or a message was sent and its cycle has not ended yet. */
  #busy = false
  readonly #idleWaiters: Array<() => void> = []
  /** Triggers whose line is on the screen already (typed at the prompt, not during an answer). */
  readonly #onScreen = new Set<string>()
  /** The last turn stopped at calls that wait for approval: the loop asks before reading on. */
  #approvalsWaiting = false
  /** When to compact (`--context-budget`), and the settings for the current model once loaded. */
  readonly #contextBudget: CliConfig.ContextBudget
  #compaction: Promise<Models.CompactionSettings> | undefined
  readonly #paths: CliConfig.Paths
  /** A turn failed (reported in the exit status when input is not a terminal). */
  #failed = false

  constructor(
    io: Io,
    options: Options,
    config: CliConfig.ModelConfig,
    model: ChatModel.Service,
    paths: CliConfig.Paths,
    runtime: Databases.StoreRuntime,
    modelOptions: Models.ModelOptions,
    contextBudget: CliConfig.ContextBudget,
    mcpTools: ReadonlyArray<Tool.Any> = []
  ) {
    this.#contextBudget = contextBudget
    this.#paths = paths
    this.#mcpTools = mcpTools
    this.#modelOptions = modelOptions
    this.#io = io
    this.#options = options
    this.#config = config
    this.#model = model
    this.#runtime = runtime
    this.#pendingSystemPrompt = options.system ?? Sessions.defaultSystemPrompt
    this.#style = Terminal.styleFor(io.stdout, io.env)
    this.#errorStyle = Terminal.styleFor(io.stderr, io.env)
    this.#interactive = io.stdin.isTTY === true && io.stdout.isTTY === true
    this.#input = new ChatInput({
      stdin: io.stdin,
      stdout: io.stdout,
      interactive: this.#interactive,
      historyFile: paths.history,
      prompt: this.#style.bold(this.#style.cyan("› ")),
      continuationPrompt: this.#style.dim("… "),
      onCancel: () => this.#cancel()
    })
    process.on("SIGINT", this.#onSignal)
  }

  // -------------------------------------------------------------------------
  // Signals
  // -------------------------------------------------------------------------

  /** SIGINT proper (input that is not a terminal): cancels the answer, or quits when there is none. */
  readonly #onSignal = (): void => {
    if (!this.#cancel()) this.#input.close()
  }

  /** Cancels the answer being drawn, if there is one (Ctrl-C); true if there was. */
  #cancel(): boolean {
    const current = this.#agentRuntime
    if (!this.#busy || current === undefined) return false
    this.#runtime.runFork(Effect.ignore(current.runtime.receiveTrigger(TriggerEvent.cancel())))
    return true
  }

  // -------------------------------------------------------------------------
  // Output
  // -------------------------------------------------------------------------

  #print(text = ""): void {
    this.#io.stdout.write(`${text}\n`)
  }

  #note(text: string): void {
    this.#print(this.#style.dim(text))
  }

  #error(text: string): void {
    this.#io.stderr.write(`${this.#errorStyle.red(text)}\n`)
  }

  #describeModel(): string {
    return CliConfig.describeModel(this.#config)
  }

  banner(): void {
    if (!this.#interactive) return
    const count = (this.#options.tools ? BuiltinTools.all.length : 0) + this.#mcpTools.length
    const tools = count === 0 ? "no tools" : `${count} tools`
    this.#note(`noema chat · ${this.#describeModel()} · ${tools}`)
    this.#note("/help for commands · Ctrl-C cancels an answer · Ctrl-D quits")
  }

  #title(session: Session.Session): string {
    return session.title === undefined ? "(untitled)" : Terminal.oneLine(session.title, 80)
  }

  #printTurns(session: Session.Session): void {
    const lines = Terminal.transcript(session.context(), { style: this.#style, maxLines: 6 })
    if (lines.length === 0) this.#note("(no messages yet)")
    for (const line of lines) this.#print(line)
    if (lines.length > 0) this.#print()
  }

  // -------------------------------------------------------------------------
  // Sessions
  // -------------------------------------------------------------------------

  async #currentSession(): Promise<Session.Session> {
    if (this.#session !== undefined) return this.#session
    const session = await Databases.runOn(
      this.#runtime,
      // Stored with its first turn: a chat killed before that (a closed terminal) leaves no empty session.
      Session.draft({ systemPrompt: this.#pendingSystemPrompt })
    )
    this.#created.add(session.id)
    this.#session = session
    return session
  }

  async #open(idOrPrefix: string): Promise<Session.Session> {
    return Databases.runOn(
      this.#runtime,
      Effect.flatMap(Sessions.resolveSessionId(idOrPrefix), (id) => Session.open(id))
    )
  }

  async resumeAtStart(): Promise<void> {
    const id = this.#options.session
    if (id === undefined) return
    const session = await this.#open(id)
    if (this.#options.system !== undefined) {
      await Databases.runOn(this.#runtime, session.setSystemPrompt(this.#options.system))
    }
    this.#session = session
    if (this.#interactive) {
      this.#note(`Resumed session ${Sessions.shortId(session.id)}: ${this.#title(session)}`)
      this.#printTurns(session)
    }
    await this.#settleApprovals(session)
  }

  /** Empty sessions this process created are not worth keeping. */
  async #dropIfEmpty(session: Session.Session | undefined): Promise<void> {
    if (session === undefined || !this.#created.has(session.id) || session.context().length > 0) return
    await Databases.runOn(this.#runtime, Effect.ignore(Sessions.deleteSession(session.id))).catch(
      () => undefined
    )
  }

  // -------------------------------------------------------------------------
  // Turns
  // -------------------------------------------------------------------------

  /** The current model's compaction settings, loaded (tokenizer included) at the first turn that needs them. */
  #compactionSettings(): Promise<Models.CompactionSettings> {
    this.#compaction ??= Models.makeCompaction(this.#config, this.#contextBudget)
    return this.#compaction
  }

  /** `/compact`: summarises older turns now, whatever the budget. */
  async #compact(): Promise<void> {
    const session = this.#session
    if (session === undefined || session.context().length === 0) {
      this.#note("(no messages yet)")
      return
    }
    const settings = (await this.#compactionSettings()) ?? { budget: CliConfig.defaultContextBudget }
    this.#note("Summarising older turns…")
    const result = await Databases.runOn(
      this.#runtime,
      session.compact(this.#model, { ...settings, force: true })
    )
    if (result.compacted) this.#note(Terminal.compactionLine(result.info))
    else this.#note("Nothing to summarise yet: the session holds only its latest turn.")
  }

  /** Sends a message to the session's runtime; a script (input not a terminal) waits for its answer. */
  async #send(text: string, interrupt: boolean): Promise<void> {
    let session: Session.Session
    let runtime: AgentRuntime.Runtime
    try {
      session = await this.#currentSession()
      await Databases.runOn(this.#runtime, Sessions.adoptDefaultSystemPrompt(session))
      runtime = await this.#runtimeFor(session)
    } catch (error) {
      this.#failed = true
      this.#error(`error: ${CliError.describe(error)}`)
      return
    }
    const queued = this.#busy && !interrupt
    const trigger = TriggerEvent.fromUser(text, { interrupt })
    // Typed at the prompt, the line is on the screen; typed during an answer, it is shown when its turn starts.
    if (!this.#busy) this.#onScreen.add(trigger.id)
    this.#busy = true
    // The answer comes next: no prompt in between.
    this.#input.beginAnswer()
    await this.#runtime.runPromise(Effect.ignore(runtime.receiveTrigger(trigger)))
    if (queued) this.#renderer?.note(`(queued: ${Terminal.oneLine(text, 60)})`)
    if (!this.#interactive) await this.#whenIdle()
  }

  /** Resolves once no cycle runs and nothing waits. */
  #whenIdle(): Promise<void> {
    if (!this.#busy) return Promise.resolve()
    return new Promise((resolve) => this.#idleWaiters.push(resolve))
  }

  /** The runtime of `session`, started on first use (and again after `/new`, `/resume`, `/model`, `/plan`). */
  async #runtimeFor(session: Session.Session): Promise<AgentRuntime.Runtime> {
    const current = this.#agentRuntime
    if (current !== undefined && current.session === session) return current.runtime
    await this.#stopRuntime()
    const runtime = await this.#runtime.runPromise(
      ChatSetup.runtimeFor(
        {
          model: this.#model,
          tools: this.#options.tools,
          cwd: this.#io.cwd,
          mcpTools: this.#mcpTools,
          plan: this.#planning,
          compaction: () => this.#compactionSettings()
        },
        session
      )
    )
    const drawing = await this.#runtime.runPromise(this.#draw(session, runtime))
    await this.#runtime.runPromise(runtime.start)
    this.#agentRuntime = { runtime, session, drawing }
    return runtime
  }

  /**
   * Draws the runtime's events until it stops, in a fiber of its own; returns
   * once it is subscribed, so nothing published after is missed.
   */
  #draw(session: Session.Session, runtime: AgentRuntime.Runtime): Effect.Effect<Fiber.Fiber<void>> {
    const onEvent = (event: AgentRuntime.RuntimeEvent) => Effect.sync(() => this.#onEvent(session, event))
    return Effect.gen(function* () {
      const subscribed = yield* Deferred.make<void>()
      const drawing = yield* Effect.forkDetach(
        Effect.scoped(
          Effect.gen(function* () {
            const events = yield* runtime.subscribe
            yield* Deferred.succeed(subscribed, undefined)
            yield* Stream.runForEach(
              Stream.takeUntil(events, (event) => event.type === "stopped"),
              onEvent
            )
          })
        )
      )
      yield* Deferred.await(subscribed)
      return drawing
    })
  }

  /** Stops the runtime (cancelling its answer: what was shown is kept) and says what was left unsent. */
  async #stopRuntime(): Promise<void> {
    const current = this.#agentRuntime
    if (current === undefined) return
    this.#agentRuntime = undefined
    const report = await this.#runtime.runPromise(current.runtime.stop())
    // What the runtime published up to `stopped` is drawn before anything else is said.
    await this.#runtime.runPromise(Fiber.await(current.drawing))
    // A decision left unprocessed keeps its call waiting in the session: it is asked again on resume.
    const texts = report.unprocessed.flatMap((item) =>
      item.messages.map((message) => Terminal.oneLine(Message.text(message), 40))
    )
    if (texts.length > 0) this.#note(`(not sent: ${texts.join("; ")})`)
    this.#settleIdle()
  }

  #settleIdle(): void {
    this.#busy = false
    this.#input.endAnswer()
    for (const resolve of this.#idleWaiters.splice(0)) resolve()
  }

  /** Draws the runtime's cycles: each one's answer, and how it ended. */
  #onEvent(session: Session.Session, event: AgentRuntime.RuntimeEvent): void {
    switch (event.type) {
      case "cycle-started": {
        this.#busy = true
        this.#input.beginAnswer()
        // Lines typed during an earlier answer start this turn: show them where they now are.
        for (const item of event.cycle.items) {
          const id = item.trigger?.id
          if (id !== undefined && this.#onScreen.delete(id)) continue
          for (const message of item.messages) {
            if (message.role === "user")
              this.#print(this.#style.bold(`› ${Terminal.oneLine(Message.text(message), 100)}`))
          }
        }
        this.#renderer = this.#newRenderer()
        this.#renderer.start()
        return
      }
      case "turn": {
        const turnEvent = event.event
        if (turnEvent.type === "compacted") this.#renderer?.compacted(turnEvent)
        else if (turnEvent.type !== "committed") this.#renderer?.event(turnEvent)
        return
      }
      case "injected":
        // A line typed during the answer joined it: shown where it now is in the conversation.
        for (const item of event.items) {
          for (const message of item.messages) {
            if (message.role === "user")
              this.#renderer?.note(`› ${Terminal.oneLine(Message.text(message), 100)}`)
          }
        }
        return
      case "cycle-completed":
        this.#renderer?.end()
        this.#renderer = undefined
        if (this.#interactive) this.#print()
        if (session.pendingApprovals().length > 0) this.#approvalsWaiting = true
        return
      case "cycle-interrupted":
        this.#renderer?.end()
        this.#renderer = undefined
        this.#note(
          event.kept.length > 0
            ? "(interrupted; what was shown is kept, marked interrupted)"
            : "(cancelled; nothing of this turn was saved)"
        )
        return
      case "cycle-failed": {
        this.#renderer?.end()
        this.#renderer = undefined
        this.#failed = true
        const error = Cause.squash(event.error as Cause.Cause<unknown>)
        if (error instanceof SessionStore.SessionConflictError) {
          // The runtime has reloaded the session already: the next turn goes on from what is stored.
          const decided = event.cycle.items.some(ContextItem.hasDecisions)
          this.#error(
            `error: another noema changed this session meanwhile, so your ${decided ? "decision" : "message"} was not saved`
          )
          this.#note(
            decided
              ? "The session is reloaded with the other turns."
              : "The session is reloaded with the other turns; send your message again."
          )
          return
        }
        this.#error(
          `error: ${CliError.describe(error, { baseUrl: this.#baseUrl(), maxRetryWait: this.#modelOptions.maxRetryWait, inChat: true })}`
        )
        if (CliError.debugEnabled(this.#io.env)) this.#io.stderr.write(`${CliError.detail(error)}\n`)
        return
      }
      case "decision-refused":
        // A message went first and answered the call: the decision did not apply.
        this.#note(`(not decided: ${event.error.message})`)
        return
      case "hook-failed":
        if (CliError.debugEnabled(this.#io.env))
          this.#error(`${event.submind}.${event.hook} failed: ${event.reason}`)
        return
      case "idle":
        if (this.#agentRuntime?.runtime === undefined) return
        this.#settleIdle()
        // The loop asks about waiting calls before it reads on.
        if (this.#approvalsWaiting) this.#input.wake()
        return
      default:
        return
    }
  }

  #newRenderer(): TurnRenderer {
    return new TurnRenderer({
      text: this.#io.stdout,
      tools: this.#io.stdout,
      textStyle: this.#style,
      toolStyle: this.#style,
      textOnTerminal: this.#io.stdout.isTTY === true,
      toolsOnTerminal: this.#io.stdout.isTTY === true,
      indicator: this.#interactive && this.#style.enabled,
      sameScreen: true
    })
  }

  /**
   * Asks about each tool call the session has waiting for approval (y/N), then
   * hands the decisions to the session's runtime, which goes on with the turn
   * (a script waits for it). The calls stay waiting in the session until
   * answered: a chat that ends first asks again when the session is resumed.
   */
  async #settleApprovals(session: Session.Session): Promise<void> {
    const pending = session.pendingApprovals()
    if (pending.length === 0) return
    const decisions: Record<string, Approval.Decision> = {}
    for (const call of pending) {
      const answer = await this.#input.ask(this.#style.yellow(`Allow ${Terminal.callLine(call)}? [y/N] `))
      if (answer === undefined) {
        this.#note("(not answered: the call keeps waiting in the session; resume it to decide)")
        return
      }
      const approved = /^\s*y(es)?\s*$/i.test(answer)
      decisions[call.id] = approved ? Approval.approve : Approval.reject()
      if (!this.#interactive) this.#note(`${approved ? "Allowed" : "Refused"} ${Terminal.callLine(call)}.`)
    }
    let runtime: AgentRuntime.Runtime
    try {
      runtime = await this.#runtimeFor(session)
    } catch (error) {
      this.#failed = true
      this.#error(`error: ${CliError.describe(error)}`)
      return
    }
    this.#busy = true
    this.#input.beginAnswer()
    const exit = await this.#runtime.runPromise(
      Effect.exit(runtime.receiveTrigger(TriggerEvent.decide(decisions)))
    )
    if (Exit.isFailure(exit)) {
      // Refused (the calls no longer wait): nothing was queued, so no answer comes.
      this.#failed = true
      this.#error(`error: ${CliError.describe(Cause.squash(exit.cause), { inChat: true })}`)
      this.#settleIdle()
      return
    }
    if (!this.#interactive) await this.#whenIdle()
  }

  #baseUrl(): string | undefined {
    return this.#config.kind === "openai" ? this.#config.baseUrl : undefined
  }

  // -------------------------------------------------------------------------
  // Slash commands
  // -------------------------------------------------------------------------

  /** Runs a slash command; false means quit. */
  async #command(line: string): Promise<boolean> {
    const name = (/^\/(\S*)/.exec(line)?.[1] ?? "").toLowerCase()
    const argument = line.slice(name.length + 1).trim()
    switch (name) {
      case "help":
      case "?":
        this.#print(SlashCommands.text)
        return true
      case "exit":
      case "quit":
      case "q":
        return false
      case "new": {
        await this.#stopRuntime()
        await this.#dropIfEmpty(this.#session)
        const previous = this.#session
        this.#session = undefined
        this.#pendingSystemPrompt = this.#options.system ?? Sessions.defaultSystemPrompt
        this.#note(
          previous === undefined || previous.context().length === 0
            ? "New session."
            : `New session. The previous one is saved as ${Sessions.shortId(previous.id)}.`
        )
        return true
      }
      case "sessions": {
        const sessions = await Databases.runOn(this.#runtime, Sessions.listSessions)
        if (sessions.length === 0) {
          this.#note("No sessions yet; your first message starts one.")
          return true
        }
        for (const row of Terminal.sessionTable(sessions, {
          style: this.#style,
          current: this.#session?.id
        })) {
          this.#print(row)
        }
        return true
      }
      case "resume": {
        if (argument === "") {
          this.#note("Usage: /resume ID (see /sessions)")
          return true
        }
        const session = await this.#open(argument)
        await this.#stopRuntime()
        // Resuming the session already open must not delete it for being empty.
        if (this.#session?.id !== session.id) await this.#dropIfEmpty(this.#session)
        this.#session = session
        this.#note(
          `Resumed session ${Sessions.shortId(session.id)}: ${this.#title(session)} ` +
            `(${session.context().length} messages)`
        )
        this.#printTurns(session)
        await this.#settleApprovals(session)
        return true
      }
      case "history":
        if (this.#session === undefined) this.#note("(no messages yet)")
        else this.#printTurns(this.#session)
        return true
      case "model":
        await this.#switchModel(argument)
        return true
      case "tools":
        if (!this.#options.tools && this.#mcpTools.length === 0) {
          this.#note("Tools are off (started with --no-tools).")
          return true
        }
        {
          const tools = [...(this.#options.tools ? BuiltinTools.all : []), ...this.#mcpTools]
          const width = Math.max(...tools.map((tool) => tool.name.length))
          for (const tool of tools) {
            this.#print(`  ${this.#style.bold(tool.name.padEnd(width))}  ${firstSentence(tool.description)}`)
          }
        }
        if (this.#mcpTools.length > 0 && !this.#options.tools)
          this.#note("Built-in tools are off (--no-tools).")
        return true
      case "system":
        await this.#system(argument)
        return true
      case "usage":
        this.#usage()
        return true
      case "compact":
        await this.#compact()
        return true
      case "plan":
        this.#plan(argument)
        return true
      default:
        this.#note(`Unknown command /${name}. /help lists the commands.`)
        return true
    }
  }

  /** `/plan on|off`: the plan workflow (plan, steps, reviews, shown as they change) or the tool loop. */
  #plan(argument: string): void {
    if (argument !== "on" && argument !== "off") {
      this.#note(`Plan workflow: ${this.#planning ? "on" : "off"} (/plan on, /plan off)`)
      return
    }
    this.#planning = argument === "on"
    // The next message starts a runtime with the other agent.
    if (this.#agentRuntime !== undefined) void this.#stopRuntime()
    this.#note(
      this.#planning
        ? "Plan workflow on: each message is planned, done step by step with the tools, and reviewed."
        : "Plan workflow off."
    )
  }

  /** This session's tokens, and its last turn's. */
  #usage(): void {
    const messages = this.#session?.context() ?? []
    const turns = Usage.byTurn(messages)
    const last = turns.at(-1)
    if (last === undefined) {
      this.#note("(no messages yet)")
      return
    }
    this.#print(
      `Session:   ${Usage.format(Usage.ofMessages(messages))} over ${turns.length} turn${turns.length === 1 ? "" : "s"}`
    )
    this.#print(`Last turn: ${Usage.format(last.usage)}`)
    const prices = CliConfig.resolvePrices(this.#io.env, this.#paths)
    if (prices !== undefined) {
      this.#print(`Cost:      ${Usage.formatCost(Usage.cost(messages, prices))} (session)`)
    }
  }

  async #switchModel(name: string): Promise<void> {
    if (name === "") {
      this.#note(`Model: ${this.#describeModel()}`)
      return
    }
    const next = CliConfig.withModel(this.#config, name)
    if (next === undefined) {
      this.#note(
        `No model server is configured, so "${name}" cannot be used. Set OPENAI_API_KEY, or restart with ` +
          "--api-key / --base-url."
      )
      return
    }
    this.#model = await Models.makeModel(next, this.#modelOptions)
    this.#config = next
    this.#compaction = undefined
    await this.#stopRuntime()
    this.#note(`Model: ${this.#describeModel()}`)
  }

  async #system(text: string): Promise<void> {
    const session = this.#session
    if (text === "") {
      const current = session === undefined ? this.#pendingSystemPrompt : session.systemPrompt
      this.#note(
        current === undefined
          ? "This session has no system prompt of its own; the default is set at its next turn."
          : `System prompt${current === Sessions.defaultSystemPrompt ? " (default)" : ""}: ${Terminal.sanitize(current)}`
      )
      return
    }
    const prompt = text === "default" ? Sessions.defaultSystemPrompt : text
    if (session === undefined) this.#pendingSystemPrompt = prompt
    else await Databases.runOn(this.#runtime, session.setSystemPrompt(prompt))
    this.#note(
      text === "default" ? "System prompt reset to the default." : "System prompt set for this session."
    )
  }

  // -------------------------------------------------------------------------
  // Loop
  // -------------------------------------------------------------------------

  /** Reads and runs lines until the input ends or the user quits; resolves to the exit status. */
  async loop(): Promise<number> {
    // A person saw every error as it happened; a script only sees the exit status.
    const status = () => (this.#failed && !this.#interactive ? 1 : 0)
    for (;;) {
      if (this.#approvalsWaiting && !this.#busy && this.#session !== undefined) {
        this.#approvalsWaiting = false
        await this.#settleApprovals(this.#session)
      }
      const line = await this.#input.nextLine()
      if (line === undefined) return status()
      this.#input.remember(line)
      const text = line.trim()
      if (text === "") continue
      if (text.startsWith("/") && !text.startsWith("//")) {
        const name = (/^\/(\S*)/.exec(text)?.[1] ?? "").toLowerCase()
        // During an answer only quitting is taken at once; the rest would act on a turn in flight.
        if (this.#busy && !["exit", "quit", "q"].includes(name)) {
          this.#renderer?.note(`(/${name} waits: the answer is still coming; Ctrl-C cancels it)`)
          continue
        }
        try {
          if (!(await this.#command(text))) return status()
        } catch (error) {
          this.#error(`error: ${CliError.describe(error, { inChat: true })}`)
        }
        continue
      }
      // "!text" interrupts the answer for it; "//text" sends a message that starts with a slash.
      if (text.startsWith("!") && text.length > 1) await this.#send(text.slice(1).trim(), true)
      else await this.#send(text.startsWith("//") ? text.slice(1) : text, false)
    }
  }

  /** Stops the chat as quitting does: the answer under way is cancelled, the input closed. */
  stop(): void {
    this.#cancel()
    this.#input.close()
  }

  async close(): Promise<void> {
    process.off("SIGINT", this.#onSignal)
    await this.#stopRuntime()
    this.#input.dispose()
    await this.#dropIfEmpty(this.#session)
    await this.#runtime.dispose()
  }
}

/**
 * The chat, until its input ends or the user quits. Ctrl-C is the chat's own (it cancels
 * an answer, see `#onSignal`); SIGTERM and SIGHUP, the frame's, abort `signal`, which
 * stops the chat as quitting does.
 */
const chat = async (options: Options, frame: Frame.Shape, signal: AbortSignal): Promise<number> => {
  const { io } = frame
  const paths = CliConfig.paths(io.env)
  // The database first: a URL this build cannot use is refused before anything else is said.
  const store = Databases.storeLayer(CliConfig.resolveDatabase(options.database, io.env, paths, io.cwd))
  const config = CliConfig.resolveModel(options.model, io.env)
  const interactive = io.stdin.isTTY === true && io.stdout.isTTY === true
  const notice = new RetryNotice(io.stderr, io.env)
  const modelOptions: Models.ModelOptions = {
    interactive,
    maxRetryWait: CliConfig.resolveMaxRetryWait(options.model, io.env),
    onRetry: notice.onRetry
  }
  const contextBudget = CliConfig.resolveContextBudget(options.model, io.env)
  const model = await Models.makeModel(config, modelOptions)
  const mcp = await Mcp.openMcp(options.mcp, io.cwd, { approveAll: options.approveAll }).catch(
    (error: unknown) => {
      notice.dispose()
      throw error
    }
  )
  // The input history lives in $NOEMA_HOME even when the sessions are elsewhere.
  fs.mkdirSync(paths.home, { recursive: true, mode: 0o700 })
  const runtime = Databases.openStore(store, frame)
  // Opening the store here surfaces a corrupt database before the prompt appears.
  await Databases.runOn(runtime, Effect.void).catch(async (error: unknown) => {
    await runtime.dispose()
    await mcp.close()
    throw error
  })
  const session = new Chat(io, options, config, model, paths, runtime, modelOptions, contextBudget, mcp.tools)
  const stop = () => session.stop()
  signal.addEventListener("abort", stop, { once: true })
  try {
    session.banner()
    await session.resumeAtStart()
    return await session.loop()
  } finally {
    signal.removeEventListener("abort", stop)
    notice.dispose()
    await session.close()
    await mcp.close()
  }
}

export const run = (options: Options, _io: Io) =>
  Frame.promiseInFrame((frame, signal) => {
    frame.keepInterrupt()
    return chat(options, frame, signal)
  })
