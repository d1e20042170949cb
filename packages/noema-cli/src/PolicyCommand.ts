/**
 * PolicyCommand: `noema policy check --actor A --action get|put|delete URN...`
 * asks a policy engine for a decision and prints it with its reasons;
 * `noema policy show` prints the policy in use.
 *
 * The engine comes from `--policy FILE` (a Cedar policy set, `.cedar`, or a
 * compiled OPA policy, `.wasm`), else the default policy (`DefaultPolicy`,
 * `$NOEMA_HOME/policy.cedar`, written on first use, except by a command that only
 * reads), or is `--engine
 * allow-all`, the only way to allow everything. `--shadow` asks the engine but
 * allows, saying what it would have decided. Exit status of check: 0 allow,
 * 3 deny, 2 usage, 1 a policy that does not load.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { CedarPolicy, OpaPolicy, Policy, Urn } from "@noema/resources"
import { Effect, Logger } from "effect"
import type { Io } from "./Cli.js"
import { type Command, readsOnly, UsageError } from "./CliArguments.js"
import * as DefaultPolicy from "./DefaultPolicy.js"
import type { PolicyCheck, PolicyCommand, PolicyShow } from "./PolicyArguments.js"

class PolicyLoadError extends Error {
  override readonly name = "PolicyLoadError"
}

/** How a command names its policy engine (`noema policy`, `noema resources`, `noema plan`). */
export interface EngineOptions {
  /** Which command: one that only reads (`readsOnly`) writes no default policy. */
  readonly type: Command["type"]
  readonly policy: string | undefined
  readonly engine: "cedar" | "opa" | "allow-all" | undefined
  readonly entrypoint?: string | undefined
  readonly data?: string | undefined
}

/** The policy file the command names, else the default one (written on first use). */
const policyFile = (
  command: Pick<EngineOptions, "policy">,
  io: Io
): Effect.Effect<string, PolicyLoadError> =>
  command.policy === undefined
    ? Effect.mapError(DefaultPolicy.ensure(io), (error) => new PolicyLoadError(error.message))
    : Effect.sync(() => path.resolve(io.cwd, command.policy as string))

const readText = (file: string): Effect.Effect<string, PolicyLoadError> =>
  Effect.try({
    try: () => fs.readFileSync(file, "utf8"),
    catch: (error) =>
      new PolicyLoadError(
        (error as NodeJS.ErrnoException).code === "ENOENT"
          ? `policy: ${file} does not exist (pass --policy FILE, a .cedar policy set or an OPA .wasm, or --engine allow-all)`
          : `policy: cannot read ${file}: ${String(error)}`
      )
  })

const cedarOf = (file: string, text: string) =>
  CedarPolicy.make(text).pipe(
    Effect.mapError((error) => new PolicyLoadError(`policy: ${file}: ${error.message}`))
  )

const loadCedar = (file: string) => Effect.flatMap(readText(file), (text) => cedarOf(file, text))

const loadOpa = (file: string, command: EngineOptions, io: Io) =>
  Effect.gen(function* () {
    if (!fs.existsSync(file))
      return yield* Effect.fail(
        new PolicyLoadError(`policy: ${file} does not exist (pass --policy FILE, a compiled OPA .wasm)`)
      )
    const data =
      command.data === undefined
        ? undefined
        : yield* Effect.try({
            try: () =>
              JSON.parse(fs.readFileSync(path.resolve(io.cwd, command.data as string), "utf8")) as object,
            catch: (error) =>
              new PolicyLoadError(
                `policy: --data ${command.data}: ${error instanceof Error ? error.message : String(error)}`
              )
          })
    return yield* OpaPolicy.load(file, {
      ...(command.entrypoint === undefined ? {} : { entrypoint: command.entrypoint }),
      ...(data === undefined ? {} : { data })
    }).pipe(Effect.mapError((error) => new PolicyLoadError(`policy: ${error.message}`)))
  })

/**
 * The engine the command names, loaded: `--engine allow-all`; the `--policy` file (Cedar, or
 * OPA for a `.wasm` or `--engine opa`); else the default policy. A policy that does not load
 * is an error naming the file.
 */
export const engineOf = (command: EngineOptions, io: Io): Effect.Effect<Policy.Service, PolicyLoadError> => {
  if (command.engine === "allow-all") return Policy.allowAll
  if (command.engine === "opa" && command.policy === undefined)
    return Effect.fail(new PolicyLoadError("policy: --engine opa needs --policy FILE (a compiled OPA .wasm)"))
  // Reading needs the policy, but a command that only reads writes nothing, also on a
  // home it may only read: before the default policy is written, it is the text it would be.
  if (command.policy === undefined && readsOnly(command) && !fs.existsSync(DefaultPolicy.file(io)))
    return cedarOf(DefaultPolicy.file(io), DefaultPolicy.text)
  return Effect.flatMap(policyFile(command, io), (file) =>
    (command.engine ?? (file.endsWith(".wasm") ? "opa" : "cedar")) === "opa"
      ? loadOpa(file, command, io)
      : loadCedar(file)
  )
}

/** Engines' log lines (allow-all's warning, shadow's verdicts) as `noema: ...` lines on stderr. */
export const stderrLogger = (io: Io) =>
  Logger.layer([
    Logger.make<unknown, void>(({ message }) => {
      io.stderr.write(`noema: ${Array.isArray(message) ? message.join(" ") : String(message)}\n`)
    })
  ])

const check = async (command: PolicyCheck, io: Io): Promise<number> => {
  for (const urn of [command.actor, ...command.resources]) {
    const problem = Urn.parseEither(urn)
    if (problem instanceof Urn.InvalidUrnError)
      throw new UsageError(`noema policy check: ${problem.message} (see noema policy --help)`)
  }
  const decision = await Effect.runPromise(
    Effect.gen(function* () {
      const loaded = yield* engineOf(command, io)
      const engine = command.shadow ? Policy.shadow(loaded) : loaded
      const decided = yield* engine.authorize({
        actor: command.actor,
        action: command.action,
        resources: command.resources
      })
      return { engine: engine.name, ...decided }
    }).pipe(Effect.provide(stderrLogger(io)))
  )
  if (command.json) {
    io.stdout.write(
      `${JSON.stringify({
        decision: decision.decision,
        reasons: decision.reasons,
        engine: decision.engine,
        actor: command.actor,
        action: command.action,
        resources: command.resources
      })}\n`
    )
  } else {
    io.stdout.write(`${decision.decision} (${decision.engine})\n`)
    for (const reason of decision.reasons) io.stdout.write(`  - ${reason}\n`)
  }
  return decision.decision === "allow" ? 0 : 3
}

/** The text of the policy in use (the default one written first, as any command would). */
const show = async (command: PolicyShow, io: Io): Promise<number> => {
  const text = await Effect.runPromise(
    Effect.gen(function* () {
      const file = yield* policyFile(command, io)
      if (file.endsWith(".wasm"))
        return yield* Effect.fail(
          new PolicyLoadError(`policy: ${file} is a compiled OPA policy; its Rego source is not in it`)
        )
      const text = yield* readText(file)
      // Shown only once it loads: what is printed is what the commands would enforce.
      yield* loadCedar(file)
      io.stderr.write(`noema: ${file}\n`)
      return text
    })
  )
  io.stdout.write(text.endsWith("\n") ? text : `${text}\n`)
  return 0
}

export const run = (command: PolicyCommand, io: Io): Promise<number> =>
  command.type === "policy-check" ? check(command, io) : show(command, io)
