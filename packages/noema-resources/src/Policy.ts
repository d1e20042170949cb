/**
 * Policy: the engine-neutral authorization contract.
 *
 * `authorize({ actor, action, resources })` answers allow or deny with reasons.
 * Every engine is wrapped by `failClosed`: an engine error, a defect or a
 * malformed request is a deny naming the cause, never an allow. Engines: `allowAll`
 * (for development; the first made in a process logs a warning) and `allowAllChosen`
 * (the user's explicit choice: no warning), Cedar (`CedarPolicy`);
 * `shadow` runs an engine, logs its decision and allows.
 */
import { Context, Effect, Layer } from "effect"
import * as Urn from "./Urn.js"

export type Action = "get" | "put" | "delete"
export const actions: ReadonlyArray<Action> = ["get", "put", "delete"]

export interface Request {
  /** The acting identity, a URN (an assistant, a user...). */
  readonly actor: string
  readonly action: Action
  readonly resources: ReadonlyArray<string>
}

export interface Decision {
  readonly decision: "allow" | "deny"
  readonly reasons: ReadonlyArray<string>
}

export const allow = (...reasons: ReadonlyArray<string>): Decision => ({ decision: "allow", reasons })
export const deny = (...reasons: ReadonlyArray<string>): Decision => ({ decision: "deny", reasons })

export interface Service {
  readonly name: string
  readonly authorize: (request: Request) => Effect.Effect<Decision>
  /**
   * The policies' current revision, for an engine that promises two things: its decisions
   * depend only on the actor, the action, each resource and the revision (which changes
   * whenever the policies do), and a request is allowed exactly when each of its resources
   * would be on its own. `ResourceIndex` then remembers what it allowed while the revision
   * stays. An engine without it is asked every time; a wrapper that changes or observes
   * decisions (`shadow`) leaves it out.
   */
  readonly revision?: () => string
  /**
   * The decision made without an effect, for an engine that can (allow-all): what `authorize`
   * would answer. `remembering` takes an allow from it as it takes one from `authorize`, so an
   * access it allows needs no effect; a denial is still asked of `authorize`, for its reasons.
   */
  readonly decideNow?: (request: Request) => Decision
}

export class Policy extends Context.Service<Policy, Service>()("@noema/resources/Policy") {}

const describeError = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** A deny for a malformed request (an unknown action, a bad URN, no resources), undefined for a good one. */
const malformed = (name: string, request: Request): Decision | undefined => {
  if (!actions.includes(request.action)) return deny(`${name}: unknown action "${request.action}"`)
  const actor = Urn.parseEither(request.actor)
  if (actor instanceof Urn.InvalidUrnError) return deny(`${name}: ${actor.message}`)
  for (let i = 0; i < request.resources.length; i++) {
    const parsed = Urn.parseEither(request.resources[i] as string)
    if (parsed instanceof Urn.InvalidUrnError) return deny(`${name}: ${parsed.message}`)
  }
  if (request.resources.length === 0) return deny(`${name}: no resources named`)
  return undefined
}

const errorDenial = (name: string, error: unknown) => deny(`${name}: error, denied: ${describeError(error)}`)

/**
 * Checks the request, runs `authorize`, and turns any failure or defect into a deny. Given
 * `decideNow` (the engine's decision without an effect), the same checks and the same
 * fail-closed rule give `Service.decideNow`.
 */
export const failClosed = (
  name: string,
  authorize: (request: Request) => Effect.Effect<Decision, unknown>,
  revision?: () => string,
  decideNow?: (request: Request) => Decision
): Service => ({
  name,
  ...(revision === undefined ? {} : { revision }),
  ...(decideNow === undefined
    ? {}
    : {
        decideNow: (request: Request) => {
          try {
            return malformed(name, request) ?? decideNow(request)
          } catch (error) {
            return errorDenial(name, error)
          }
        }
      }),
  authorize: (request) =>
    Effect.suspend(() => {
      const problem = malformed(name, request)
      return problem === undefined ? authorize(request) : Effect.succeed(problem)
    }).pipe(Effect.catchCause((cause) => Effect.succeed(errorDenial(name, causeError(cause)))))
})

const causeError = (cause: { readonly reasons: ReadonlyArray<unknown> }): unknown => {
  const reason = cause.reasons[0] as { error?: unknown; defect?: unknown } | undefined
  return reason?.error ?? reason?.defect ?? "interrupted"
}

/** Allows everything, warning no one: for a user who chose it (`--engine allow-all`), knowing what it does. */
const allowedByAllowAll = allow("allow-all: every request is allowed")
export const allowAllChosen: Service = failClosed(
  "allow-all",
  () => Effect.succeed(allowedByAllowAll),
  // Its decisions never change: one revision for ever.
  () => "allow-all",
  () => allowedByAllowAll
)

/** Whether this process has said that allow-all is in use: said once, not per engine made. */
let warned = false

/**
 * Allows everything. For development only: the first one made in a process says so (a
 * warning); the others do not repeat it. Where the user chose it, `allowAllChosen`.
 */
export const allowAll: Effect.Effect<Service> = Effect.suspend(() => {
  if (warned) return Effect.succeed(allowAllChosen)
  warned = true
  return Effect.as(
    Effect.logWarning("policy: allow-all engine in use, every request is allowed (development only)"),
    allowAllChosen
  )
})

export const layerAllowAll: Layer.Layer<Policy> = Layer.effect(Policy, allowAll)

/** Allowed (actor, action, URN) triples an engine's memo holds; past that it starts afresh. */
const allowsRemembered = 8192

/** Each engine's remembering view: one per engine, so every index and event hub on it shares one memo. */
const rememberingViews = new WeakMap<Service, Service>()

/**
 * `engine` with what it allowed remembered per (actor, action, URN) while its `revision` stays,
 * for an engine that has one (see `Service.revision`; without one, `engine` itself): it is asked
 * only about the resources it has not allowed yet (none: allowed), which by that contract decides
 * the whole request. The same view for the same engine, so an index and an event subscription
 * asking about the same access ask it once. Denials are never remembered, so a refusal always
 * carries the engine's own reasons.
 */
export const remembering = (engine: Service): Service => {
  const revisionOf = engine.revision
  if (revisionOf === undefined) return engine
  const known = rememberingViews.get(engine)
  if (known !== undefined) return known
  const memo = rememberAllows(engine, revisionOf)
  const view: Service = {
    name: engine.name,
    revision: revisionOf,
    authorize: memo.authorize
  }
  rememberingViews.set(engine, view)
  rememberingViews.set(view, view)
  knownAllows.set(view, memo.allowedBefore)
  return view
}

/** Each remembering view's check of its memo, without an effect. */
const knownAllows = new WeakMap<Service, (request: Request) => boolean>()

/**
 * Whether `view` (a `remembering` view) has allowed every resource of the request already, its
 * engine's revision unchanged, or its engine allows it now without an effect (`decideNow`,
 * remembered alike): the allow `authorize` would give without asking the engine,
 * known without running an effect (a planner run makes about 200 accesses, nearly all allowed
 * before). False otherwise (a view that does not remember, a resource not allowed yet): ask
 * `authorize`.
 */
export const allowedBefore = (view: Service, request: Request): boolean =>
  knownAllows.get(view)?.(request) ?? false

const rememberAllows = (
  engine: Service,
  revisionOf: () => string
): {
  readonly authorize: (request: Request) => Effect.Effect<Decision>
  readonly allowedBefore: (request: Request) => boolean
} => {
  // By action, then actor, the URNs allowed: the strings are looked up as they are (no key built
  // per access: a planner run asks about 200 times).
  const allowed = new Map<Action, Map<string, Set<string>>>()
  let size = 0
  let revision = revisionOf()
  /** The memo of the current revision (emptied when it changed, or when full). */
  const current = () => {
    const now = revisionOf()
    if (now !== revision || size >= allowsRemembered) {
      allowed.clear()
      size = 0
      revision = now
    }
    return now
  }
  const knownOf = (request: Request) => allowed.get(request.action)?.get(request.actor)
  const remember = (request: Request, urns: ReadonlyArray<string>) => {
    let byActor = allowed.get(request.action)
    if (byActor === undefined) {
      byActor = new Map()
      allowed.set(request.action, byActor)
    }
    let known = byActor.get(request.actor)
    if (known === undefined) {
      known = new Set()
      byActor.set(request.actor, known)
    }
    for (let i = 0; i < urns.length; i++) {
      const urn = urns[i] as string
      if (!known.has(urn)) {
        size++
        known.add(urn)
      }
    }
  }
  const allKnown = (known: Set<string>, urns: ReadonlyArray<string>) => {
    for (let i = 0; i < urns.length; i++) if (!known.has(urns[i] as string)) return false
    return true
  }
  const decideNow = engine.decideNow
  const allowedBefore = (request: Request): boolean => {
    current()
    if (request.resources.length === 0) return false
    const known = knownOf(request)
    if (known !== undefined && allKnown(known, request.resources)) return true
    // Not allowed before: allowed now, by an engine that decides without an effect, is remembered alike.
    if (decideNow === undefined || decideNow(request).decision !== "allow") return false
    remember(request, request.resources)
    return true
  }
  const authorize = (request: Request) =>
    Effect.suspend(() => {
      const asked = current()
      const known = knownOf(request)
      const unknown =
        known === undefined ? request.resources : request.resources.filter((urn) => !known.has(urn))
      if (request.resources.length > 0 && unknown.length === 0) return Effect.succeed(allow())
      return Effect.tap(engine.authorize({ ...request, resources: unknown }), (decision) =>
        Effect.sync(() => {
          if (decision.decision === "allow" && revision === asked) remember(request, unknown)
        })
      )
    })
  return { authorize, allowedBefore }
}

/** Runs `engine`, logs its decision, and allows: for trying a policy out before enforcing it. */
export const shadow = (engine: Service): Service => ({
  name: `shadow(${engine.name})`,
  authorize: (request) =>
    Effect.flatMap(engine.authorize(request), (decision) =>
      Effect.as(
        Effect.logInfo(`policy shadow: ${engine.name} would ${decision.decision}`).pipe(
          Effect.annotateLogs({
            actor: request.actor,
            action: request.action,
            resources: request.resources.join(" "),
            reasons: decision.reasons.join("; ")
          })
        ),
        allow(`shadow: ${engine.name} would ${decision.decision}: ${decision.reasons.join("; ")}`)
      )
    )
})
