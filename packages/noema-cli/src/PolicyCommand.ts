/**
 * PolicyCommand: `noema policy check --actor A --action get|put|delete URN...`
 * asks a policy engine for a decision and prints it with its reasons.
 *
 * The engine comes from `--policy FILE` (a Cedar policy set, `.cedar`, or a
 * compiled OPA policy, `.wasm`; default `$NOEMA_HOME/policy.cedar`), or is
 * `--engine allow-all`. `--shadow` asks the engine but allows, saying what it
 * would have decided. Exit status: 0 allow, 3 deny, 2 usage, 1 a policy that
 * does not load.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { CedarPolicy, OpaPolicy, Policy, Urn } from "@noema/resources"
import { Effect, Logger } from "effect"
import type { Io } from "./Cli.js"
import { UsageError } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import type { PolicyCheck } from "./PolicyArguments.js"

class PolicyLoadError extends Error {
  override readonly name = "PolicyLoadError"
}

/** How a command names its policy engine (`noema policy`, `noema resources`). */
export interface EngineOptions {
  readonly policy: string | undefined
  readonly engine: "cedar" | "opa" | "allow-all" | undefined
  readonly entrypoint: string | undefined
  readonly data: string | undefined
}

/** The default policy file, `$NOEMA_HOME/policy.cedar`. */
export const defaultPolicyFile = (io: Io): string => path.join(CliConfig.paths(io.env).home, "policy.cedar")

/**
 * The engine a command that reads or writes resources uses: the one it names, or, with no
 * engine, no policy file named and none at the default place, allow-all (which says so).
 */
export const engineOrAllowAll = (
  command: Pick<EngineOptions, "engine" | "policy">,
  io: Io
): EngineOptions["engine"] =>
  command.engine === undefined && command.policy === undefined && !fs.existsSync(defaultPolicyFile(io))
    ? "allow-all"
    : command.engine

/** The engine the command names, loaded (a policy that does not load is an error naming the file). */
export const engineOf = (command: EngineOptions, io: Io): Effect.Effect<Policy.Service, PolicyLoadError> => {
  if (command.engine === "allow-all") return Policy.allowAll
  const file = path.resolve(io.cwd, command.policy ?? defaultPolicyFile(io))
  const kind = command.engine ?? (file.endsWith(".wasm") ? "opa" : "cedar")
  if (!fs.existsSync(file))
    return Effect.fail(
      new PolicyLoadError(
        `policy: ${file} does not exist (pass --policy FILE, a .cedar policy set or an OPA .wasm, or --engine allow-all)`
      )
    )
  if (kind === "opa") {
    let data: object | undefined
    if (command.data !== undefined) {
      try {
        data = JSON.parse(fs.readFileSync(path.resolve(io.cwd, command.data), "utf8")) as object
      } catch (error) {
        return Effect.fail(
          new PolicyLoadError(
            `policy: --data ${command.data}: ${error instanceof Error ? error.message : String(error)}`
          )
        )
      }
    }
    return OpaPolicy.load(file, {
      ...(command.entrypoint === undefined ? {} : { entrypoint: command.entrypoint }),
      ...(data === undefined ? {} : { data })
    }).pipe(Effect.mapError((error) => new PolicyLoadError(`policy: ${error.message}`)))
  }
  let text: string
  try {
    text = fs.readFileSync(file, "utf8")
  } catch (error) {
    return Effect.fail(new PolicyLoadError(`policy: cannot read ${file}: ${String(error)}`))
  }
  return CedarPolicy.make(text).pipe(
    Effect.mapError((error) => new PolicyLoadError(`policy: ${file}: ${error.message}`))
  )
}

/** Engines' log lines (allow-all's warning, shadow's verdicts) as `noema: ...` lines on stderr. */
export const stderrLogger = (io: Io) =>
  Logger.layer([
    Logger.make<unknown, void>(({ message }) => {
      io.stderr.write(`noema: ${Array.isArray(message) ? message.join(" ") : String(message)}\n`)
    })
  ])

export const run = async (command: PolicyCheck, io: Io): Promise<number> => {
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
