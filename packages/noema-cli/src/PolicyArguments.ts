/**
 * PolicyArguments: `noema policy check ...` and `noema policy show`, parsed (light:
 * `noema --help` loads it).
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

/** `noema policy show`: the policy in use, as text. */
export interface PolicyShow {
  readonly type: "policy-show"
  readonly policy: string | undefined
}

export type PolicyCommand = PolicyCheck | PolicyShow

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

export const help = `noema policy: the policy every access to resources is asked of

Usage
  noema policy check --actor URN --action get|put|delete URN...
  noema policy show [--policy FILE]

check prints allow or deny and the reasons (exit status 0 when allowed, 3 when denied);
show prints the policy in use. Without --policy it is $NOEMA_HOME/policy.cedar, which
noema writes on first use: the local user (cld:user.cli) may do anything, the planner
(cld:assistant.planner) may read and write, the assistants a plan elects may read and
write tasks and messages, anyone else nothing. Edit it to change that; only
--engine allow-all allows everything.

Options
      --actor URN       who acts, e.g. cld:assistant.planner
      --action ACTION   get, put or delete
      --policy FILE     a Cedar policy set (.cedar) or a compiled OPA policy (.wasm)
                        (default $NOEMA_HOME/policy.cedar, written on first use)
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
export const parse = (args: ReadonlyArray<string>): PolicyCommand | "help" => {
  let parsed: ReturnType<typeof parseRaw>
  try {
    parsed = parseRaw(args)
  } catch (error) {
    throw usage(error instanceof Error ? (error.message.split(". ")[0] ?? error.message) : String(error))
  }
  const { values, positionals } = parsed
  if (values.help === true) return "help"
  const [verb, ...resources] = positionals
  if (verb === "show") return parseShow(values, resources)
  if (verb !== "check")
    throw new PolicyUsageError(
      verb === undefined
        ? "noema policy: missing the action check or show (see noema policy --help)"
        : `noema policy: unknown action "${verb}" (use check or show; see noema policy --help)`
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

const parseShow = (
  values: ReturnType<typeof parseRaw>["values"],
  rest: ReadonlyArray<string>
): PolicyShow => {
  const fail = (message: string) =>
    new PolicyUsageError(`noema policy show: ${message} (see noema policy --help)`)
  if (rest.length > 0) throw fail(`unexpected argument "${rest[0]}"`)
  for (const flag of ["actor", "action", "engine", "entrypoint", "data", "shadow", "json"] as const)
    if (values[flag] !== undefined) throw fail(`--${flag} belongs to noema policy check`)
  return { type: "policy-show", policy: values.policy }
}
