/**
 * PlannerSteps: where a planner run's Effect steps go, counted. Not part of `npm run bench`;
 * run by hand (bench/README.md, beside PlannerProbe).
 *
 *   node src/PlannerSteps.ts [runs] [--flat]
 *
 * Runs the 20-task tree (4 supervisors of 4 leaves; `--flat`: 16 leaves and no supervisor) in
 * memory `runs` times (default 12; the first 2 are warm-up) under effect's native tracer with a
 * `context` hook that sees every step effect's run loop takes (no span is opened that an
 * untraced run would not open), and prints per run: the steps, by the service they
 * ran in (the store, policy, events, vector index and index wrapped to say so; a forked fiber
 * counts for the service its parent was in when it first ran), then CPU per run (`--cpu`: only
 * that, without the counting; `--total`: the steps without the wrappers' own).
 */
import { Planner, TaskTree } from "@noema/planner"
import * as PlannerTesting from "@noema/planner/testing"
import {
  LocalEmbedder,
  MemoryResourceStore,
  Policy,
  ResourceEvents,
  ResourceIndex,
  VectorIndex
} from "@noema/resources"
import { Effect, Tracer } from "effect"
import { median } from "./Harness.ts"
import { team, treeOf } from "./Planner.ts"

const runs = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? 12)
const flat = process.argv.includes("--flat")
// `--cpu`: no tracer and no wrappers, only CPU per run (to compare builds, in turns).
const cpuOnly = process.argv.includes("--cpu")
// `--total`: the steps counted, without the wrappers (which take steps of their own).
const unwrapped = cpuOnly || process.argv.includes("--total")
const plan: TaskTree.Plan = flat
  ? { tasks: treeOf(1, 16).tasks.flatMap((task) => task.subtasks) }
  : treeOf(4, 4)
const count = TaskTree.count(plan.tasks)
const limits = {
  maxChildren: 64,
  maxTasks: count,
  maxModelCalls: 10_000,
  maxTokens: 100_000_000,
  parallel: 4
}

const evaluate = "~effect/Effect/evaluate"
type Fiber = { _parent?: Fiber }
const labels = new WeakMap<object, Array<string>>()
const inherited = new WeakMap<object, string>()
const steps = new Map<string, number>()
let counting = false
const labelOf = (fiber: Fiber): string => {
  const own = labels.get(fiber)
  if (own !== undefined && own.length > 0) return own[own.length - 1] as string
  let known = inherited.get(fiber)
  if (known === undefined) {
    known = fiber._parent === undefined ? "other" : labelOf(fiber._parent)
    inherited.set(fiber, known)
  }
  return known
}
// The counting hook is put on effect's own native tracer, provided explicitly (effect's run loop
// calls a provided tracer's `context` at every step): a tracer of its own would make every
// traced call (`ChatModel`'s `chat` span, which checks for the native tracer) open spans
// that an untraced run does not, and count their steps.
const tracer = Tracer.nativeTracer
;(tracer as { context?: unknown }).context = (primitive: unknown, fiber: unknown) => {
  if (counting) {
    const label = labelOf(fiber as Fiber)
    steps.set(label, (steps.get(label) ?? 0) + 1)
  }
  // effect's run loop calls this instead of the primitive's own step (`~effect/Effect/evaluate`).
  return (primitive as Record<string, (fiber: unknown) => never>)[evaluate]!(fiber)
}

/** `service` with each method's effect counted under `name.method`. */
const labelled = <S extends object>(name: string, service: S): S =>
  unwrapped
    ? service
    : new Proxy(service, {
        get(target, key, receiver) {
          const value = Reflect.get(target, key, receiver)
          if (typeof value !== "function") return value
          const label = `${name}.${String(key)}`
          return (...args: Array<unknown>) => {
            const result = value.apply(target, args)
            if (!Effect.isEffect(result)) return result
            return Effect.withFiber((fiber) => {
              const stack = labels.get(fiber) ?? []
              labels.set(fiber, stack)
              stack.push(label)
              return Effect.ensuring(
                result as Effect.Effect<unknown, unknown>,
                Effect.sync(() => stack.pop())
              )
            })
          }
        }
      })

const program = Effect.gen(function* () {
  const model = PlannerTesting.scriptedModel({ plan })
  const cpus: Array<number> = []
  for (let run = 0; run < runs; run++) {
    // PlannerTesting.world's parts, each labelled where the others call it.
    const engine = labelled("policy", yield* Policy.allowAll)
    const store = labelled("store", MemoryResourceStore.make())
    const events = labelled("events", yield* ResourceEvents.makeMemory(engine))
    const vectors = labelled("vectors", yield* Effect.orDie(VectorIndex.makeMemory(LocalEmbedder.make())))
    const index = labelled("index", ResourceIndex.make(store, engine, { events, vectors }))
    yield* PlannerTesting.registerAssistants(index, "cld:assistant.planner", team)
    const labelledWorld = { store, index, events, vectors }
    counting = run >= 2
    const cpu = process.cpuUsage()
    const result = yield* Planner.run("bench", { model, ...labelledWorld, limits })
    const used = process.cpuUsage(cpu)
    counting = false
    if (result.tasks.length !== count) throw new Error("tasks missing")
    if (run >= 2) cpus.push((used.user + used.system) / 1000)
  }
  return cpus
})

const cpus = await Effect.runPromise(cpuOnly ? program : Effect.withTracer(program, tracer))
const perRun = cpus.length
const total = [...steps.values()].reduce((sum, n) => sum + n, 0) / perRun
process.stdout.write(
  `${flat ? "flat 16 leaves" : "4 supervisors x 4 leaves"}: ${total.toFixed(0)} steps a run\n`
)
for (const [label, n] of [...steps].sort((a, b) => b[1] - a[1]))
  process.stdout.write(`  ${label.padEnd(28)} ${(n / perRun).toFixed(0)}\n`)
process.stdout.write(`CPU per run${cpuOnly ? "" : " (counting)"}: median ${median(cpus).toFixed(2)} ms\n`)
