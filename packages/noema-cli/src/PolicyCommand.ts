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
 * 3 deny (`ExitStatus.notDone`), 2 usage, 1 a policy that does not load.
 */
import { Policy, Urn } from "@noema/resources"
import { Effect } from "effect"
import { type PolicyCheck, type PolicyCommand, type PolicyShow, UsageError } from "./CliArguments.js"
import * as ExitStatus from "./ExitStatus.js"
import type { Io } from "./Io.js"
import * as Policies from "./internal/Policies.js"

const check = Effect.fnUntraced(function* (command: PolicyCheck, io: Io) {
  for (const urn of [command.actor, ...command.resources]) {
    const problem = Urn.parseEither(urn)
    if (problem instanceof Urn.InvalidUrnError) return yield* Effect.fail(new UsageError(problem.message))
  }
  const loaded = yield* Policies.engineOf(command, io)
  const engine = command.shadow ? Policy.shadow(loaded) : loaded
  const decision = yield* engine.authorize({
    actor: command.actor,
    action: command.action,
    resources: command.resources
  })
  if (command.json) {
    io.stdout.write(
      `${JSON.stringify({
        decision: decision.decision,
        reasons: decision.reasons,
        engine: engine.name,
        actor: command.actor,
        action: command.action,
        resources: command.resources
      })}\n`
    )
  } else {
    io.stdout.write(`${decision.decision} (${engine.name})\n`)
    for (const reason of decision.reasons) io.stdout.write(`  - ${reason}\n`)
  }
  return decision.decision === "allow" ? ExitStatus.success : ExitStatus.notDone
})

/** The text of the policy in use (the default one written first, as any command would). */
const show = Effect.fnUntraced(function* (command: PolicyShow, io: Io) {
  const file = yield* Policies.policyFile(command, io)
  if (file.endsWith(".wasm"))
    return yield* Effect.fail(
      new Policies.PolicyLoadError(`policy: ${file} is a compiled OPA policy; its Rego source is not in it`)
    )
  const text = yield* Policies.readText(file)
  // Shown only once it loads: what is printed is what the commands would enforce.
  yield* Policies.loadCedar(file)
  io.stderr.write(`noema: ${file}\n`)
  io.stdout.write(text.endsWith("\n") ? text : `${text}\n`)
  return ExitStatus.success
})

export const run = (command: PolicyCommand, io: Io): Effect.Effect<number, unknown> =>
  command.type === "policy-check" ? check(command, io) : show(command, io)
