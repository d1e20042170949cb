/**
 * PolicyArguments: \`noema policy check ...\`, parsed (light: \`noema --help\` loads it).
 */
import { parseArgs } from "node:util"

/** A usage error of `noema policy` (CliArguments turns it into its own `UsageError`). */
export class PolicyUsageError extends Error {
  override readonly name = "UsageError"
  readonly exitCode = 2
}

const actions = ["get", "put", "delete"] as const

const options = {
  help: { type: "boolean", short: "h" },
  actor: { type: "string" },
  action: { type: "string" },
  policy: { type: "string" },
  engine: { type: "string" },
  entrypoint: { type: "string" },
  data: { type: "string" },
  shadow: { type: "boolean" },
  json: { type: "boolean" }
} as const

const parseRaw = (args: ReadonlyArray<string>) =>
  parseArgs({ args: [...args], allowPositionals: true, strict: true, options })

export interface PolicyCheck {
  readonly type: "policy-check"
  readonly actor: string
  readonly action: "get" | "put" | "delete"
  readonly resources: ReadonlyArray<string>
  readonly policy: string | undefined
  readonly engine: "cedar" | "opa" | "allow-all" | undefined
  readonly entrypoint: string | undefined
  readonly data: string | undefined
  readonly shadow: boolean
  readonly json: boolean
}

export const help = `noema policy: ask a policy engine what it decides

Usage
  noema policy check --actor URN --action get|put|delete URN...

Prints allow or deny and the reasons. Exit status 0 when allowed, 3 when denied.

Options
      --actor URN       who acts, e.g. cld:assistant.planner
      --action ACTION   get, put or delete
      --policy FILE     a Cedar policy set (.cedar) or a compiled OPA policy (.wasm)
                        (default $NOEMA_HOME/policy.cedar)
      --engine NAME     cedar, opa (default: from the file's extension) or allow-all
      --entrypoint E    OPA: the entrypoint to evaluate (default noema/authz/decision)
      --data FILE       OPA: a JSON file the policy reads as data
      --shadow          ask the engine, allow anyway, say what it would decide
      --json            the decision as JSON
  -h, --help            show this help
`

const usage = (message: string) =>
  new PolicyUsageError(`noema policy check: ${message} (see noema policy --help)`)

/** `noema policy ...` parsed; "help" for --help. Throws UsageError. */
export const parse = (args: ReadonlyArray<string>): PolicyCheck | "help" => {
  let parsed: ReturnType<typeof parseRaw>
  try {
    parsed = parseRaw(args)
  } catch (error) {
    throw usage(error instanceof Error ? (error.message.split(". ")[0] ?? error.message) : String(error))
  }
  const { values, positionals } = parsed
  if (values.help === true) return "help"
  const [verb, ...resources] = positionals
  if (verb !== "check")
    throw new PolicyUsageError(
      verb === undefined
        ? "noema policy: missing the action check (see noema policy --help)"
        : `noema policy: unknown action "${verb}" (use check; see noema policy --help)`
    )
  if (values.actor === undefined) throw usage("missing --actor URN")
  if (values.action === undefined) throw usage("missing --action get|put|delete")
  const action = actions.find((known) => known === values.action)
  if (action === undefined) throw usage(`unknown action "${values.action}" (use get, put or delete)`)
  if (resources.length === 0) throw usage("name at least one resource URN")
  const engine = values.engine
  if (engine !== undefined && engine !== "cedar" && engine !== "opa" && engine !== "allow-all")
    throw usage(`unknown engine "${engine}" (use cedar, opa or allow-all)`)
  return {
    type: "policy-check",
    actor: values.actor,
    action,
    resources,
    policy: values.policy,
    engine,
    entrypoint: values.entrypoint,
    data: values.data,
    shadow: values.shadow === true,
    json: values.json === true
  }
}
