/**
 * RoutineRoutes: the `routines` group of the API (PanelApi): the routines
 * with stored progress, and one routine's goals as `noema routine status`
 * shows them (RoutinesJson).
 *
 * Progress is the stored chains read against the document, which is read
 * again on every request (it may have gained tasks or ticks since), at most
 * `maxDocumentBytes` of it. A document that cannot be read or parsed is no
 * failure of the request: the stored progress is shown with the problem,
 * which names the document as the page does, never by its path. A server
 * started without a routine store answers 404 `NoRoutineStore`.
 */
import * as fs from "node:fs/promises"
import { WorkBreakdown } from "@noema/routines"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as ApiError from "../ApiError.js"
import * as PanelApi from "../PanelApi.js"
import * as RoutinesJson from "../RoutinesJson.js"
import { answer, type Context, type Routines } from "./Routes.js"

/** The largest document read; a larger one is reported, not read. */
export const maxDocumentBytes = 1024 * 1024

const noStore = ApiError.make(ApiError.NotFound, "NoRoutineStore", "this server was started without routines")

const routinesOf = (context: Context) =>
  context.routines === undefined ? Effect.fail(noStore) : Effect.succeed(context.routines)

/** The routine's document, parsed; or why not, in words that name it as the page does. */
const documentOf = (routine: string, name: string) =>
  Effect.promise(async () => {
    try {
      const stat = await fs.stat(routine)
      if (!stat.isFile()) return { problem: `${name} is not a file` }
      if (stat.size > maxDocumentBytes) return { problem: `${name} is larger than ${maxDocumentBytes} bytes` }
      const text = await fs.readFile(routine, "utf8")
      return { breakdown: WorkBreakdown.parse(text, routine) }
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code !== undefined) return { problem: `cannot read ${name} (${code})` }
      return { problem: (error instanceof Error ? error.message : String(error)).split(routine).join(name) }
    }
  })

const detail = (access: Routines, routine: string) =>
  Effect.gen(function* () {
    const states = yield* access.store.list(routine)
    const document = yield* documentOf(routine, RoutinesJson.nameOf(routine, access.root))
    return RoutinesJson.detailOf(routine, access.root, states, document)
  })

const list = (context: Context) =>
  Effect.gen(function* () {
    const access = yield* routinesOf(context)
    const routines = yield* access.store.routines()
    const details = yield* Effect.forEach(routines, (routine) => detail(access, routine))
    return { routines: details.map((shown) => shown.routine) } satisfies RoutinesJson.RoutineList
  })

const get = (context: Context, id: string) =>
  Effect.gen(function* () {
    const access = yield* routinesOf(context)
    const routine = (yield* access.store.routines()).find((candidate) => RoutinesJson.idOf(candidate) === id)
    if (routine === undefined)
      return yield* Effect.fail(ApiError.make(ApiError.NotFound, "RoutineNotFound", `no routine ${id}`))
    return yield* detail(access, routine)
  })

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "routines", (handlers) =>
    handlers
      .handle("list", () => answer(context, list(context)))
      .handle("get", ({ params }) => answer(context, get(context, params.id)))
  )
