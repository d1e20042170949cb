/**
 * ServeViews: what `noema serve` gives the dev UI's Plans, Routines and
 * Resources views, from the database it serves. The resources are read as
 * `noema resources` reads them by default: as the local user
 * (`cld:user.cli`), every read asked of the same policy engine (the default
 * policy, `DefaultPolicy`, written on first use), searched with the same
 * embedder (`NOEMA_EMBEDDING_MODEL`, else the local one). The routines are
 * named by their documents' paths relative to the directory serve runs in.
 */
import type { Embedder } from "@noema/core"
import { ResourceIndex, SqlResourceStore, VectorIndex } from "@noema/resources"
import { SqlRoutineStore } from "@noema/routines"
import type { Server } from "@noema/server"
import type { Database } from "@noema/sql"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { defaultActor } from "../CliArguments.js"
import type { Io } from "../Io.js"
import * as Policies from "./Policies.js"
import * as Resources from "./Resources.js"

/** The embedder a search is ranked with: `noema resources search`'s default one. */
export const embedder = (io: Io): Promise<Embedder.Service> =>
  Resources.makeEmbedder({ embeddingModel: undefined }, io)

/** The views' stores, on the database in context. */
export const make = (
  io: Io,
  embedding: Embedder.Service
): Effect.Effect<
  { readonly resources: Server.Resources; readonly routines: Server.Routines },
  unknown,
  SqlClient.SqlClient | Database.Database
> =>
  Effect.gen(function* () {
    const store = yield* SqlResourceStore.fromDatabase
    const vectors = yield* VectorIndex.fromDatabase(embedding)
    const policy = yield* Policies.engineOf({ type: "serve", policy: undefined, engine: undefined }, io)
    const resources: Server.Resources = {
      store,
      index: ResourceIndex.make(store, policy, { vectors }),
      policy,
      actor: defaultActor
    }
    const routines: Server.Routines = { store: yield* SqlRoutineStore.fromDatabase, root: io.cwd }
    return { resources, routines }
  })
