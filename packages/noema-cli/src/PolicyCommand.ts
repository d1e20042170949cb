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
import { Policy, Urn } from "@noema/resources"
import { Effect } from "effect"
import { UsageError } from "./CliArguments.js"
import type { Io } from "./Io.js"
import * as Policies from "./internal/Policies.js"
import type { PolicyCheck, PolicyCommand, PolicyShow } from "./PolicyArguments.js"

const check = async (command: PolicyCheck, io: Io): Promise<number> => {
  for (const urn of [command.actor, ...command.resources]) {
    const problem = Urn.parseEither(urn)
    if (problem instanceof Urn.InvalidUrnError)
      throw new UsageError(`noema policy check: ${problem.message} (see noema policy --help)`)
  }
  const decision = await Effect.runPromise(
    Effect.gen(function* () {
      const loaded = yield* Policies.engineOf(command, io)
      const engine = command.shadow ? Policy.shadow(loaded) : loaded
      const decided = yield* engine.authorize({
        actor: command.actor,
        action: command.action,
        resources: command.resources
      })
      return { engine: engine.name, ...decided }
    }).pipe(Effect.provide(Policies.stderrLogger(io)))
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
      const file = yield* Policies.policyFile(command, io)
      if (file.endsWith(".wasm"))
        return yield* Effect.fail(
          new Policies.PolicyLoadError(
            `policy: ${file} is a compiled OPA policy; its Rego source is not in it`
          )
        )
      const text = yield* Policies.readText(file)
      // Shown only once it loads: what is printed is what the commands would enforce.
      yield* Policies.loadCedar(file)
      io.stderr.write(`noema: ${file}\n`)
      return text
    })
  )
  io.stdout.write(text.endsWith("\n") ? text : `${text}\n`)
  return 0
}

export const run = (command: PolicyCommand, io: Io): Promise<number> =>
  command.type === "policy-check" ? check(command, io) : show(command, io)
