/**
 * ClusterEngine: runs execute on effect/cluster's `ClusterWorkflowEngine`,
 * over PostgreSQL (`SqlMessageStorage` + `SqlRunnerStorage` in the runs
 * database), instead of on `StoreWorkflowEngine` under claims.
 *
 * The workflow (`Executor.RunWorkflow`) is the same; only the engine layer
 * differs. An execution is an entity whose shard one runner process owns at a
 * time: the runner takes its shard locks in PostgreSQL, refreshes them every
 * `shardLockRefreshInterval`, and a runner that stops refreshing (a SIGKILL,
 * a lost machine) loses its shards after `shardLockExpiration`; the others
 * then take them and replay its executions from the message storage.
 * Runners talk over TCP (`@effect/platform-node` sockets) at the address each
 * registers (`runner`), so a message for a shard reaches its owner at once;
 * storage polls (`entityMessagePollInterval`) only catch what a notification
 * missed. A short-lived command is a client: it has no shards and no socket
 * server, it writes its message to storage and notifies the owner.
 *
 * While an execution's body runs, the runner holds the run's lease
 * (`RunLease`), so `runs list` shows it carried on, `runs verify`, `Shown`
 * and a claims worker on the same database see who has it; a body replayed
 * elsewhere after a failover waits for a dead holder's claim to go stale.
 *
 * PostgreSQL only: shard locks need a server every runner shares. On SQLite
 * the engine refuses to start (`ClusterNeedsPostgres`).
 */
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import { Database, DatabaseError } from "@noema/sql"
import { Duration, Effect, Layer, Option, Schedule, Schema, Semaphore } from "effect"
import {
  ClusterWorkflowEngine,
  RunnerAddress,
  RunnerHealth,
  Runners,
  ShardingConfig,
  SocketRunner,
  SqlMessageStorage,
  SqlRunnerStorage
} from "effect/cluster"
import { RpcSerialization } from "effect/rpc"
import { SqlClient } from "effect/sql"
import { WorkflowEngine } from "effect/workflow"
import { currentExecution, type Engine, RunWorkflow, type WorkflowView } from "./Executor.js"
import * as RunLease from "./RunLease.js"
import { RunsStoreError, type Service as Store } from "./RunsStore.js"

export class ClusterNeedsPostgres extends Schema.TaggedError<ClusterNeedsPostgres>()("ClusterNeedsPostgres", {
  location: Schema.String
}) {
  override get message() {
    return `--engine cluster needs a PostgreSQL database (--database postgres://...); ${this.location} is SQLite, which runs on the claims engine (--engine claims)`
  }
}

/** Where a runner is reached by the others (`host`, `port`), and where it listens if that differs. */
export interface RunnerOptions {
  readonly host: string
  readonly port: number
  readonly listenHost?: string
  readonly listenPort?: number
}

/**
 * The settings that decide failover and latency, in milliseconds. Every runner and client
 * of a cluster must use the same `shardsPerGroup`.
 */
export interface Settings {
  /** A runner that stopped refreshing its shard locks loses them after this: how long a dead runner's runs wait. */
  readonly shardLockExpiration: number
  /** How often a runner refreshes its shard locks and its heartbeat (well under the expiration). */
  readonly shardLockRefreshInterval: number
  /** How often a runner reads the shard assignments (a runner joined or left). */
  readonly refreshAssignmentsInterval: number
  /** How often a runner reads messages a notification missed, from storage. */
  readonly entityMessagePollInterval: number
  /** How often a client waiting for a reply reads it from storage. */
  readonly entityReplyPollInterval: number
  /** How often runners check each other's health (a runner that does not answer is reported). */
  readonly runnerHealthCheckInterval: number
  /** Shards the executions are spread over (the same on every runner and client). */
  readonly shardsPerGroup: number
}

/**
 * Tuned for runs: effect's defaults (35 s lock expiry, 10 s lock refresh, 10 s message poll,
 * 300 shards, a health check a minute) make a dead runner's runs wait over half a minute.
 * Here a dead runner's shards move after 6 s of silence, refreshed every 2 s (three missed
 * refreshes before they move, so a busy machine's pause does not move them); storage is
 * read every second for what a notification missed; 60 shards are enough for a few dozen
 * runners and keep each lock round small.
 */
export const tuned: Settings = {
  shardLockExpiration: 6_000,
  shardLockRefreshInterval: 2_000,
  refreshAssignmentsInterval: 1_000,
  entityMessagePollInterval: 1_000,
  entityReplyPollInterval: 100,
  runnerHealthCheckInterval: 2_000,
  shardsPerGroup: 60
}

/** The environment variables that override `tuned`, one per setting (durations in milliseconds or "6 seconds"). */
export const settingsVariables: { readonly [K in keyof Settings]: string } = {
  shardLockExpiration: "NOEMA_CLUSTER_SHARD_LOCK_EXPIRATION",
  shardLockRefreshInterval: "NOEMA_CLUSTER_SHARD_LOCK_REFRESH",
  refreshAssignmentsInterval: "NOEMA_CLUSTER_ASSIGNMENTS_REFRESH",
  entityMessagePollInterval: "NOEMA_CLUSTER_MESSAGE_POLL",
  entityReplyPollInterval: "NOEMA_CLUSTER_REPLY_POLL",
  runnerHealthCheckInterval: "NOEMA_CLUSTER_HEALTH_CHECK",
  shardsPerGroup: "NOEMA_CLUSTER_SHARDS"
}

/**
 * `tuned` with what `env` overrides; a value that is not a duration (or, for the shards, a
 * whole number) is refused naming its variable. A lock refresh not under the expiration is
 * refused too: the runner would lose its shards between refreshes.
 */
export const settingsFrom = (
  env: Readonly<Record<string, string | undefined>>
): { readonly settings: Settings } | { readonly problem: string } => {
  const settings: { -readonly [K in keyof Settings]: number } = { ...tuned }
  for (const key of Object.keys(settingsVariables) as Array<keyof Settings>) {
    const name = settingsVariables[key]
    const given = env[name]?.trim()
    if (given === undefined || given === "") continue
    if (key === "shardsPerGroup") {
      const shards = Number(given)
      if (!Number.isInteger(shards) || shards < 1)
        return { problem: `${name} must be a whole number of shards, at least 1, got "${given}"` }
      settings[key] = shards
      continue
    }
    const duration = Duration.fromInput((/^\d+$/.test(given) ? Number(given) : given) as Duration.Input)
    if (Option.isNone(duration) || Duration.toMillis(duration.value) <= 0)
      return { problem: `${name} must be a duration such as 6000 (ms) or "6 seconds", got "${given}"` }
    settings[key] = Duration.toMillis(duration.value)
  }
  if (settings.shardLockRefreshInterval >= settings.shardLockExpiration)
    return {
      problem: `${settingsVariables.shardLockRefreshInterval} (${settings.shardLockRefreshInterval} ms) must be under ${settingsVariables.shardLockExpiration} (${settings.shardLockExpiration} ms)`
    }
  return { settings }
}

const shardingConfig = (settings: Settings, runner: RunnerOptions | undefined) =>
  ShardingConfig.layer({
    runnerAddress:
      runner === undefined ? Option.none() : Option.some(RunnerAddress.make(runner.host, runner.port)),
    runnerListenAddress:
      runner?.listenHost === undefined && runner?.listenPort === undefined
        ? Option.none()
        : Option.some(
            RunnerAddress.make(
              runner?.listenHost ?? runner?.host ?? "0.0.0.0",
              runner?.listenPort ?? runner.port
            )
          ),
    shardsPerGroup: settings.shardsPerGroup,
    shardLockExpiration: Duration.millis(settings.shardLockExpiration),
    shardLockRefreshInterval: Duration.millis(settings.shardLockRefreshInterval),
    refreshAssignmentsInterval: Duration.millis(settings.refreshAssignmentsInterval),
    entityMessagePollInterval: Duration.millis(settings.entityMessagePollInterval),
    entityReplyPollInterval: Duration.millis(settings.entityReplyPollInterval),
    runnerHealthCheckInterval: Duration.millis(settings.runnerHealthCheckInterval)
  })

/** Refuses SQLite before anything of the cluster starts. */
const requirePostgres = Layer.effectDiscard(
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    if (Database.dialectOf(sql) === "pg") return
    const database = yield* Effect.serviceOption(Database.Database)
    return yield* new ClusterNeedsPostgres({
      location: Option.match(database, { onNone: () => "the database", onSome: (db) => db.location })
    })
  })
)

/**
 * effect/cluster's `ClusterWorkflowEngine` on the runs database: a runner (shards, a socket
 * server at `runner`'s address) or, without `runner`, a client (no shards, no server).
 * The parts are `NodeClusterSocket.layer`'s, put together here so the settings come from
 * `settings` alone (that layer also reads HOST, PORT and others from the environment).
 */
export const layer = (options: {
  readonly runner?: RunnerOptions
  readonly settings?: Settings
}): Layer.Layer<WorkflowEngine.WorkflowEngine, ClusterNeedsPostgres | unknown, SqlClient.SqlClient> => {
  const settings = options.settings ?? tuned
  const sharding =
    options.runner === undefined
      ? SocketRunner.layerClientOnly.pipe(Layer.provide(NodeClusterSocket.layerClientProtocol))
      : SocketRunner.layer.pipe(
          Layer.provide(RunnerHealth.layerPing.pipe(Layer.provide(Runners.layerRpc))),
          Layer.provide([NodeClusterSocket.layerSocketServer, NodeClusterSocket.layerClientProtocol])
        )
  return ClusterWorkflowEngine.layer.pipe(
    Layer.provideMerge(sharding),
    Layer.provideMerge(SqlMessageStorage.layer.pipe(Layer.provide(NodeCrypto.layerDigest))),
    Layer.provide(SqlRunnerStorage.layer),
    Layer.provide(shardingConfig(settings, options.runner)),
    Layer.provide(RpcSerialization.layerSchemaBinary()),
    Layer.provide(requirePostgres)
  ) as never
}

/** The message storage's tables (`SqlMessageStorage.layer`'s default prefix, `cluster`). */
const messagesTable = "cluster_messages"
const repliesTable = "cluster_replies"
const storageLocation = "the cluster's message storage"

/** A stored message's payload: an activity's or a deferred's name. */
const NamedPayload = Schema.fromJsonString(Schema.Struct({ name: Schema.String }))
/** A stored reply: the `Workflow.Result` an activity or the run answered with. */
const ResultReply = Schema.fromJsonString(
  Schema.Struct({ _tag: Schema.Literal("Success"), value: Schema.Struct({ _tag: Schema.String }) })
)
const nameOf = Schema.decodeUnknownOption(NamedPayload)
const resultOf = Schema.decodeUnknownOption(ResultReply)

/** effect's deferred that carries an interrupt (`ClusterWorkflowEngine`'s `InterruptSignal`). */
const interruptSignal = "Workflow/InterruptSignal"

/**
 * An execution as the cluster's message storage records it: its `run` message and its
 * activities' and deferreds' messages, in the order they were sent. An activity counts once
 * its result is stored (a `Suspended` reply is no result: it is run again on the next replay).
 */
const workflowFromStorage = (sql: SqlClient.SqlClient, executionId: string) =>
  Effect.gen(function* () {
    const rows = yield* sql<{
      readonly tag: string
      readonly payload: string
      readonly reply: string | null
    }>`
      SELECT m.tag, m.payload, r.payload AS reply
      FROM ${sql(messagesTable)} m LEFT JOIN ${sql(repliesTable)} r ON r.id = m.last_reply_id
      WHERE m.entity_type = ${`Workflow/${RunWorkflow._tag}`} AND m.entity_id = ${executionId}
      ORDER BY m.id`
    const run = rows.find((row) => row.tag === "run")
    if (run === undefined) return undefined
    const named = (tag: string) =>
      rows.flatMap((row) =>
        row.tag === tag
          ? Option.toArray(Option.map(nameOf(row.payload), (payload) => ({ row, name: payload.name })))
          : []
      )
    const completedResult = (reply: string | null) =>
      reply !== null && Option.exists(resultOf(reply), (result) => result.value._tag === "Complete")
    const deferreds = named("deferred").map(({ name }) => name)
    return {
      executionId,
      completed: completedResult(run.reply),
      interrupted: deferreds.includes(interruptSignal),
      activities: named("activity")
        .filter(({ row }) => completedResult(row.reply))
        .map(({ name }) => name),
      deferreds: deferreds.filter((name) => name !== interruptSignal)
    } satisfies WorkflowView
  }).pipe(
    DatabaseError.mapSqlErrors(storageLocation),
    Effect.mapError((error) => RunsStoreError.fromDatabaseError(storageLocation, error))
  )

/**
 * The run's current execution as the cluster's message storage records it (`runs show`
 * without a cluster client: a read needs no runner); none where the cluster never ran it,
 * also where this database never had a cluster (no message storage tables).
 */
export const storedWorkflow = (
  store: Store,
  runId: string
): Effect.Effect<WorkflowView | undefined, RunsStoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    if (Database.dialectOf(sql) !== "pg") return undefined
    const tables = yield* sql<{
      readonly found: boolean
    }>`SELECT to_regclass(${messagesTable}) IS NOT NULL AS found`.pipe(
      DatabaseError.mapSqlErrors(storageLocation),
      Effect.mapError((error) => RunsStoreError.fromDatabaseError(storageLocation, error))
    )
    if (tables[0]?.found !== true) return undefined
    return yield* workflowFromStorage(sql, yield* currentExecution(store, runId))
  })

/**
 * The executor's engine over the cluster's `WorkflowEngine` (from `layer`): a run's execution
 * goes to its shard's runner; the body holds the run's lease there (`leaseTtlMs`, default the
 * shard lock expiration: a dead runner's claim and its shards are free at about the same time).
 * At most `concurrency` bodies run at once in this runner (default: no limit); the others wait
 * for a slot holding their lease, so `runs list` shows them carried on and no worker hands
 * them over again.
 */
export const make = (
  store: Store,
  options: { readonly leaseTtlMs?: number; readonly settings?: Settings; readonly concurrency?: number } = {}
): Effect.Effect<Engine, never, WorkflowEngine.WorkflowEngine | SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const service = yield* WorkflowEngine.WorkflowEngine
    const sql = yield* SqlClient.SqlClient
    const ttlMs = options.leaseTtlMs ?? (options.settings ?? tuned).shardLockExpiration
    const slots = options.concurrency === undefined ? undefined : Semaphore.makeUnsafe(options.concurrency)
    const listeners = new Set<(runId: string) => void>()
    const ended = (runId: string) =>
      Effect.sync(() => {
        for (const listener of listeners) listener(runId)
      })
    const engine: Engine = {
      service,
      run: (workflow, { executionId, payload }) =>
        service.execute(workflow, { executionId, payload }) as Effect.Effect<never>,
      handOver: ({ executionId, payload, fresh }) =>
        Effect.gen(function* () {
          yield* service.execute(RunWorkflow, { executionId, payload, discard: true })
          // Already executed and suspended (its run stopped on a failure): replayed by its runner.
          // A run started just now has a new execution: the lookup would find nothing to resume.
          if (fresh !== true) yield* service.resume(RunWorkflow, executionId)
        }),
      carry: (runId, body) =>
        RunLease.withLease(store, runId, slots === undefined ? body : slots.withPermits(1)(body), {
          ttlMs
        }).pipe(
          // A runner that took the shards over waits for the dead one's claim to go stale.
          Effect.retry({
            while: (error) => error instanceof RunLease.RunBusy,
            schedule: Schedule.spaced(Duration.millis(Math.max(100, Math.floor(ttlMs / 6)))),
            times: 60
          }),
          // The body has no error channel (it suspends on defects): a lease it cannot hold is one.
          Effect.catchIf(
            (error) =>
              error instanceof RunLease.RunBusy ||
              error instanceof RunLease.LeaseLost ||
              error instanceof RunsStoreError,
            (error) => Effect.die(error)
          ),
          Effect.ensuring(ended(runId))
        ) as never,
      placement: "owner",
      workflowOf: (executionId) => workflowFromStorage(sql, executionId),
      onBodyEnded: (listener) =>
        Effect.asVoid(
          Effect.acquireRelease(
            Effect.sync(() => listeners.add(listener)),
            () => Effect.sync(() => listeners.delete(listener))
          )
        )
    }
    return engine
  })
