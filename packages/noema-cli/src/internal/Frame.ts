/**
 * Frame: what runs every command, the same way.
 *
 * `run` parses the command line with the command tree (`Commands`), answers
 * `--help` and `--version` (once the rest of the line is known to be valid: a
 * stray flag is an error, not ignored), and runs the command asked for in one
 * fiber. Around it the frame owns, once for all commands:
 * - signals: SIGINT (Ctrl-C), SIGTERM and SIGHUP interrupt the command, whose
 *   finalizers run; the exit status is then 128 + the signal's number (130, 143,
 *   129), or 0 for a command a signal is the normal end of (`endsOnSignal`: serve,
 *   worker). A second signal ends at once. A command that answers SIGINT itself
 *   (chat: Ctrl-C cancels an answer) says so (`keepInterrupt`);
 * - logging: Effect's log lines go to stderr as `noema: ...` (debug ones with NOEMA_DEBUG);
 * - tracing: the tracer the OTEL_* variables ask for, built once, its spans flushed
 *   when the command ends, and how turns' traces are kept in the command's database
 *   (NOEMA_TRACES_*), which the commands that run turns install over it (`internal/tracing`);
 * - the offline-model notice, for every command that builds a model (those with the
 *   model flags), when nothing configures one;
 * - the exit status, from the outcome and the error's class (`ExitStatus`), and
 *   the one line an error is reported in (`Output.report`).
 * A command's module is imported only when it runs (`runner`), so `--help` and
 * `--version` load the tree and nothing else.
 *
 * Imported at start-up: effect's modules by their own paths, not the `effect`
 * index, which would load all of them.
 */
import type { Resource } from "@effect/opentelemetry"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as CliConfig from "effect/cli/CliConfig"
import * as CliError from "effect/cli/CliError"
import * as CliOutput from "effect/cli/CliOutput"
import * as Command from "effect/cli/Command"
import * as Completions from "effect/cli/Completions"
import * as Flag from "effect/cli/Flag"
import * as GlobalFlag from "effect/cli/GlobalFlag"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Path from "effect/Path"
import * as Predicate from "effect/Predicate"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as References from "effect/References"
import * as Stdio from "effect/Stdio"
import * as Terminal from "effect/Terminal"
import type { ModelFlags } from "../CliConfig.js"
import type * as Failures from "../CliError.js"
import * as ExitStatus from "../ExitStatus.js"
import { type Io, processIo } from "../Io.js"
import * as Output from "./Output.js"
import type { LocalTraces } from "./tracing.js"

/** What a command gets from the frame that runs it. */
export interface Shape {
  readonly io: Io
  /** noema's version (package.json). */
  readonly version: string
  /** The tracer the environment asks for, for a command that builds its own runtime (chat, ask). */
  readonly tracer: Layer.Layer<Resource.Resource> | undefined
  /** How turns' traces are kept in the command's database (`tracing.recording`); undefined: not at all. */
  readonly localTraces: LocalTraces | undefined
  /** Shows the help page of the command `path` names (`noema help runs show`). */
  readonly help: (path: ReadonlyArray<string>) => Effect.Effect<void, unknown>
  /** The shell's completion script for the whole command tree. */
  readonly completions: (shell: Completions.Shell) => string
  /**
   * The context a failure that ends the command is told in (the model's server, the cap
   * on retry waits: `Models.commandModel` gives it), as the command tells its own.
   */
  readonly tellFailuresWith: (context: Failures.Context) => void
  /** SIGINT is the command's own from now on (chat reads Ctrl-C as "cancel this answer"). */
  readonly keepInterrupt: () => void
  /** A signal is how this command ends (serve, worker): exit status 0, not 128 + its number. */
  readonly endsOnSignal: () => void
}

export class Frame extends Context.Service<Frame, Shape>()("@noema/cli/Frame") {}

/**
 * When set, commands do not run: each hands its parsed input here instead (`parse`).
 * The frame parses a line a second time this way to tell, before it answers `--help`
 * or `--version`, whether the rest is valid.
 */
export const Parsed = Context.Reference<((path: string, input: unknown) => void) | undefined>(
  "@noema/cli/Frame/Parsed",
  { defaultValue: () => undefined }
)

const signals: ReadonlyArray<NodeJS.Signals> = ["SIGINT", "SIGTERM", "SIGHUP"]

/** The frame's own record of one command line: what ran, how it ended, which signal came. */
class Invocation implements Shape {
  tracer: Layer.Layer<Resource.Resource> | undefined = undefined
  localTraces: LocalTraces | undefined = undefined
  /** The command that ran, for the help its usage errors point to. */
  path = "noema"
  /** The status the command returned. */
  status: number = ExitStatus.success
  signalled: NodeJS.Signals | undefined = undefined
  keepsInterrupt = false
  signalEnds = false
  failureContext: Failures.Context = {}
  constructor(
    readonly io: Io,
    readonly version: string,
    /** The whole tree, and `noema <path> --help` parsed on it. */
    private readonly root: Command.Command.Any,
    private readonly helpOn: (path: ReadonlyArray<string>) => Effect.Effect<void, unknown>
  ) {}
  readonly help = (path: ReadonlyArray<string>) => this.helpOn(path)
  // The script's own installation note names effect/cli's `--completions` flag; noema's is a command.
  readonly completions = (shell: Completions.Shell) =>
    Completions.generate("noema", shell, Completions.fromCommand(this.root)).replaceAll(
      "noema --completions ",
      "noema completions "
    )
  readonly tellFailuresWith = (context: Failures.Context) => {
    this.failureContext = context
  }
  readonly keepInterrupt = () => {
    this.keepsInterrupt = true
  }
  readonly endsOnSignal = () => {
    this.signalEnds = true
  }
}

/**
 * A command written with promises, as an effect: interrupting it aborts `signal`,
 * and the frame waits for the promise to settle, so the command's own clean-up
 * (closing the store, saying what was kept) is done before the process exits.
 */
export const promise = <A>(run: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, unknown> =>
  Effect.callback<A, unknown>((resume, signal) => {
    const settled = run(signal).then(
      (value) => resume(Effect.succeed(value)),
      (error: unknown) => resume(Effect.fail(error))
    )
    return Effect.promise(() => settled)
  })

/** `promise`, for a command that also needs the frame (its tracer, its signals). */
export const promiseInFrame = <A>(run: (frame: Shape, signal: AbortSignal) => Promise<A>) =>
  Effect.flatMap(Frame, (frame) => promise((signal) => run(frame, signal)))

/** Effect's log lines as `noema: ...` lines on stderr; debug ones too with NOEMA_DEBUG. */
const logger = (io: Io) =>
  Layer.mergeAll(
    Logger.layer([
      Logger.make<unknown, void>(({ message }) => {
        io.stderr.write(`noema: ${Array.isArray(message) ? message.join(" ") : String(message)}\n`)
      })
    ]),
    Output.debugEnabled(io.env) ? Layer.succeed(References.MinimumLogLevel, "Debug") : Layer.empty
  )

/**
 * The tracer the environment asks for, built for the command's lifetime (closing its scope
 * flushes the spans), and how turns' traces are kept locally.
 */
const tracing = (io: Io) =>
  Effect.gen(function* () {
    const Tracing = yield* Effect.promise(() => import("./tracing.js"))
    const layer = yield* Effect.tryPromise({ try: () => Tracing.layer(io.env), catch: (error) => error })
    const localTraces = yield* Effect.try({ try: () => Tracing.localTraces(io.env), catch: (error) => error })
    return {
      tracer: layer === undefined ? undefined : Layer.succeedContext(yield* Layer.build(layer)),
      localTraces
    }
  })

/** A command's entry: its parsed input and the process around it, to the exit status. */
export type Entry<Input> = (input: Input, io: Io) => Effect.Effect<number, unknown, Frame>

/**
 * The handler of the commands one module runs: `load` imports the module only when
 * one of them runs. `path` (e.g. "sessions show") is where its usage errors point.
 */
export const runner =
  <Input>(load: () => Promise<Entry<Input>>) =>
  (path: string, input: Input): Effect.Effect<void, unknown, Frame> =>
    Effect.gen(function* () {
      const parsed = yield* Parsed
      if (parsed !== undefined) return parsed(path, input)
      const frame = yield* Frame
      // The frame's own bookkeeping is on the object it provides.
      if (!(frame instanceof Invocation))
        return yield* Effect.die("a command runs in the frame that provides it")
      frame.path = `noema ${path}`
      const entry = yield* Effect.promise(load)
      // Every command that builds a model takes the model flags: the frame is where it says
      // that the model is the offline one, for all of them.
      if (Predicate.hasProperty(input, "model")) {
        const { offlineNoticeFor } = yield* Effect.promise(() => import("../CliConfig.js"))
        const notice = offlineNoticeFor(input.model as ModelFlags, frame.io.env)
        if (notice !== undefined) frame.io.stderr.write(`${notice}\n`)
      }
      frame.status = yield* Effect.scoped(
        Effect.gen(function* () {
          const chosen = yield* tracing(frame.io)
          frame.tracer = chosen.tracer
          frame.localTraces = chosen.localTraces
          const command = entry(input, frame.io).pipe(Effect.provide(logger(frame.io)))
          return yield* frame.tracer === undefined ? command : Effect.provide(command, frame.tracer)
        })
      )
    })

// ---------------------------------------------------------------------------
// --help and --version
// ---------------------------------------------------------------------------

const helpFlag = Flag.Boolean("help").pipe(
  Flag.withAlias("h"),
  Flag.withoutNegation,
  Flag.withDescription("show this help"),
  Flag.withDefault(false)
)

const versionFlag = Flag.Boolean("version").pipe(
  Flag.withAlias("v"),
  Flag.withoutNegation,
  Flag.withDescription("show the version"),
  Flag.withDefault(false)
)

interface Asked {
  readonly answer: GlobalFlag.Action<boolean>
  readonly value: boolean
  readonly context: GlobalFlag.HandlerContext
}

/** `--help` and `--version`, noted when given and answered once the line is known to be valid. */
const answeredLater = (asked: Array<Asked>): ReadonlyArray<GlobalFlag.Action<boolean>> =>
  (
    [
      [helpFlag, GlobalFlag.Help],
      [versionFlag, GlobalFlag.Version]
    ] as const
  ).map(([flag, answer]) =>
    GlobalFlag.Action({
      flag,
      run: (value, context) => Effect.sync(() => void asked.push({ answer, value, context }))
    })
  )

/**
 * What `effect/cli` may ask of its environment: the tree uses none of it (no file
 * flags, no prompts), so these are inert.
 */
const unused = Layer.mergeAll(
  FileSystem.layerNoop({}),
  Path.layer,
  Stdio.layerTest({}),
  Layer.succeed(
    Terminal.Terminal,
    Terminal.make({
      columns: Effect.succeed(100),
      size: Effect.die("noema asks nothing interactively through effect/cli"),
      rows: Effect.succeed(40),
      readInput: Effect.die("noema asks nothing interactively through effect/cli"),
      readLine: Effect.die("noema asks nothing interactively through effect/cli"),
      display: () => Effect.void
    })
  ),
  Layer.succeed(
    ChildProcessSpawner.ChildProcessSpawner,
    ChildProcessSpawner.make(() => Effect.die("effect/cli runs no process for noema"))
  )
)

/**
 * What `--help` and `--version` overlook in the rest of the line: what is missing (they are
 * asked instead of running the command), and themselves (the check parses without them).
 */
const overlooked = (problem: CliError.ShowHelp["errors"][number]): boolean =>
  problem instanceof CliError.MissingArgument ||
  problem instanceof CliError.MissingOption ||
  (problem instanceof CliError.UnrecognizedOption &&
    ["--help", "-h", "--version", "-v"].includes(problem.option))

/** The line's problems but the overlooked ones: none, or a usage error naming only the others. */
const strayInput = (error: unknown): Effect.Effect<void, unknown> => {
  if (!(error instanceof CliError.ShowHelp)) return Effect.fail(error)
  const stray = error.errors.filter((problem) => !overlooked(problem))
  return stray.length === 0 ? Effect.void : Effect.fail(new CliError.ShowHelp({ ...error, errors: stray }))
}

/** The frame of one command line on `root`. */
const invocation = <Name extends string, Input, ContextInput, E>(
  root: Command.Command<Name, Input, ContextInput, E, Frame>,
  io: Io,
  version: string
): Invocation => {
  // `noema help PATH` is `noema PATH --help`, for a PATH that names a command.
  const frame: Invocation = new Invocation(io, version, root, (path) =>
    refuseStrayInput(root, path).pipe(
      Effect.andThen(Command.runWith(root, { version })([...path, "--help"])),
      Effect.provideService(Frame, frame),
      Effect.provide(unused)
    )
  )
  return frame
}

/**
 * `args` parsed on `root` without running anything, as `--help` and `--version` do not
 * see it: the command they name (its path, e.g. "sessions show") and its input, or the
 * usage error (effect/cli's `ShowHelp`) that says why they name none.
 */
export const parse = <Name extends string, Input, ContextInput, E>(
  root: Command.Command<Name, Input, ContextInput, E, Frame>,
  args: ReadonlyArray<string>,
  io: Io = processIo()
) =>
  Effect.gen(function* () {
    let parsed: { readonly path: string; readonly input: unknown } | undefined
    yield* Command.runWith(root, { version: "", renderErrors: false })(args).pipe(
      Effect.provideService(Parsed, (path, input) => {
        parsed = { path, input }
      }),
      Effect.provideService(CliOutput.Presenter, { present: () => Effect.void }),
      Effect.provide(CliConfig.layer({ builtIns: [] })),
      Effect.provideService(Frame, invocation(root, io, "")),
      Effect.provide(unused)
    )
    return parsed
  })

/** Fails with the problems of the line, other than missing arguments, without running or printing anything. */
const refuseStrayInput = <Name extends string, Input, ContextInput, E>(
  root: Command.Command<Name, Input, ContextInput, E, Frame>,
  args: ReadonlyArray<string>
) => Effect.catch(parse(root, args), strayInput)

/** The command line `args` parsed and run: help and version answered, or the command run. */
const parseAndRun = <Name extends string, Input, ContextInput, E>(
  root: Command.Command<Name, Input, ContextInput, E, Frame>,
  args: ReadonlyArray<string>,
  version: string
) =>
  Effect.gen(function* () {
    const asked: Array<Asked> = []
    yield* Command.runWith(root, { version })(args).pipe(
      Effect.provide(CliConfig.layer({ builtIns: answeredLater(asked) }))
    )
    for (const { answer, value, context } of asked) {
      yield* refuseStrayInput(root, args)
      yield* answer.run(value, context)
    }
  })

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/** The exit status of a command that ended with `exit`; an error is reported first. */
const statusOf = async (frame: Invocation, exit: Exit.Exit<unknown, unknown>): Promise<number> => {
  if (Exit.isSuccess(exit)) return frame.status
  if (
    Cause.hasInterrupts(exit.cause) &&
    (frame.signalled !== undefined || Cause.hasInterruptsOnly(exit.cause))
  )
    return frame.signalEnds ? ExitStatus.success : ExitStatus.ofSignal(frame.signalled ?? "SIGINT")
  const error = Cause.squash(exit.cause)
  await Output.report(error, frame.io, frame.path, frame.failureContext)
  return ExitStatus.ofError(error)
}

/**
 * Runs `noema <args>` with the command tree `root`: resolves to the exit status and
 * never rejects.
 */
export const run = async <Name extends string, Input, ContextInput, E>(
  root: Command.Command<Name, Input, ContextInput, E, Frame>,
  args: ReadonlyArray<string>,
  io: Io,
  version: string
): Promise<number> => {
  const frame = invocation(root, io, version)
  const fiber = Effect.runFork(
    parseAndRun(root, args, version).pipe(
      Effect.provideService(Frame, frame),
      Effect.provide(unused),
      Effect.provide(CliOutput.layerPresenter(Output.presenter(io)))
    )
  )
  let endNow: (status: number) => void = () => undefined
  const ended = new Promise<number>((resolve) => {
    endNow = resolve
  })
  const onSignal = (signal: NodeJS.Signals) => {
    if (signal === "SIGINT" && frame.keepsInterrupt) return
    // A second signal: the command did not stop in time for the one before.
    if (frame.signalled !== undefined) return endNow(ExitStatus.ofSignal(signal))
    frame.signalled = signal
    Effect.runFork(Fiber.interrupt(fiber))
  }
  for (const signal of signals) process.on(signal, onSignal)
  try {
    return await Promise.race([
      Effect.runPromise(Fiber.await(fiber)).then((exit) => statusOf(frame, exit)),
      ended
    ])
  } catch (error) {
    // Reporting itself failed (a closed stderr): the status still says it failed.
    return ExitStatus.ofError(error)
  } finally {
    for (const signal of signals) process.off(signal, onSignal)
  }
}
