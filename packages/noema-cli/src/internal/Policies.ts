/**
 * Policies: the policy engine a command names (`noema policy`, `noema resources`,
 * `noema plan`, `noema tasks`): `--engine allow-all`, the `--policy` file (Cedar,
 * or OPA for a `.wasm`), else the default policy (`DefaultPolicy`, written on
 * first use except by a command that only reads).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { CedarPolicy, OpaPolicy, Policy } from "@noema/resources"
import { Effect } from "effect"
import { type Command, readsOnly } from "../CliArguments.js"
import * as DefaultPolicy from "../DefaultPolicy.js"
import type { Io } from "../Io.js"

/** A policy that does not load: the file, and why. */
export class PolicyLoadError extends Error {
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
export const policyFile = (
  command: Pick<EngineOptions, "policy">,
  io: Io
): Effect.Effect<string, PolicyLoadError> =>
  command.policy === undefined
    ? Effect.mapError(DefaultPolicy.ensure(io), (error) => new PolicyLoadError(error.message))
    : Effect.sync(() => path.resolve(io.cwd, command.policy as string))

export const readText = (file: string): Effect.Effect<string, PolicyLoadError> =>
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

/** The Cedar file, re-read by the engine whenever it changes (readText first: its missing-file message). */
export const loadCedar = (file: string) =>
  Effect.andThen(
    readText(file),
    CedarPolicy.fromFile(file).pipe(
      Effect.mapError((error) => new PolicyLoadError(`policy: ${error.message}`))
    )
  )

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
  if (command.engine === "allow-all") return Effect.succeed(Policy.allowAllChosen)
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
