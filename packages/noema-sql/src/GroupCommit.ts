/**
 * GroupCommit: appends that arrive together share one SQLite transaction and one fsync.
 *
 * SQLite has one writer at a time and, with `synchronous=FULL`, every COMMIT is
 * an fsync: one transaction per append caps a file at one turn per fsync however
 * many turns are waiting. Here the appends waiting for the write lock are
 * committed as one batch by one fiber:
 *
 * - The batch is whatever is queued when its fiber takes the lock. It runs in one
 *   `BEGIN IMMEDIATE` transaction, each append in its own SAVEPOINT, rolled back
 *   alone when it fails (a conflict, a missing session, a SQL error) and released
 *   otherwise; then one COMMIT. A batch of one has no savepoint: it is exactly the
 *   transaction of an append alone.
 * - Appends that do nothing but their statements (`rerunnable`, the session store's)
 *   save the two savepoint statements each: appends seldom fail, so their batch
 *   first runs without savepoints. If one of its appends fails, that transaction is
 *   rolled back, nothing of it committed, and the batch runs again in a new one with
 *   the savepoints. Such an append may so run twice, the first time in a
 *   transaction that is rolled back; appends of any other kind (a caller's own
 *   effect, which may do more than SQL) always run once, in their savepoints.
 * - Each caller gets its own result: its own success, or its own failure; the
 *   COMMIT's failure, if it fails, goes to every append it held that had succeeded.
 *   A caller's effect succeeds only after the COMMIT holding its append returned,
 *   so with `synchronous=FULL` an acknowledged append survives a SIGKILL.
 * - Interruption: a caller interrupted while its append is still queued takes it
 *   out of the batch; once the batch has taken it, it is committed with the batch
 *   (or fails with it) and only the result is lost to the caller. The batch runs in
 *   a fiber of its own, so no caller's interruption cuts the others' transaction.
 * - A writer alone pays nothing: no timer, no waiting for company, no batch fiber:
 *   its append is a transaction of its own, run in the caller's fiber as without
 *   grouping (interrupting it rolls it back), and appends arriving meanwhile queue
 *   for the batch after it. node:sqlite is synchronous, so nothing can queue while a COMMIT
 *   runs; others join a batch only if it lets the event loop turn once before it
 *   takes the lock. A batch does so after a batch that held several appends (the
 *   writers just answered queue their next ones meanwhile), and after a run of
 *   appends made alone, to notice writers that started meanwhile: the first run is
 *   `probeEvery` appends, and each probe that finds no company doubles the next
 *   run, up to `probeAtMost` (a probe costs a forked fiber and a turn of the event
 *   loop, which a writer that stays alone should not pay every few commits);
 *   company found starts again from `probeEvery`. So writers that join a writer
 *   alone are grouped after at most `probeAtMost` appends.
 * - `gather` (off by default; the session store leaves it off) trades that for company:
 *   every append queues and its batch lets the event loop turn once before it takes the
 *   lock, so writers that start together in one turn (a planner's sibling tasks, each
 *   stored as it starts) share one COMMIT where a writer alone would have committed each
 *   on its own, synchronously, before the next one ran. A writer that stays alone pays a
 *   forked fiber and a turn of the event loop per append, and its append runs in the batch
 *   fiber (an interruption takes it out only while it is queued, as for any batch).
 * - `beforeCommit` (off by default; the session store leaves it off): a step an append
 *   registers with `GroupCommit.beforeCommit` runs once in the transaction, after the last of
 *   its appends and before its COMMIT, however many appends registered it (a derived copy
 *   caught up once for a batch of writes, not once a write). A step that fails fails the
 *   transaction, and so every append it held.
 * - An append made inside a transaction already open on the client (a session
 *   created with its first turn) is not grouped: it is a savepoint of that one.
 * - The transactions (an append's alone, a batch's) are effect's `withTransaction`, except
 *   for `rerunnable` appends on noema's node:sqlite client: they use nothing of what
 *   `withTransaction` gives the effect it runs (the transaction in the context, nesting,
 *   `afterCommit`), so they run in the driver's `transactionOnConnection`, the same
 *   transaction (lease, BEGIN, COMMIT or ROLLBACK, interruption) for about 4 µs less CPU.
 */

import { SqliteClient } from "@noema/sql-sqlite"
import { Deferred, Effect, Exit } from "effect"
import type { SqlClient, SqlConnection, SqlError } from "effect/sql"
import { openTransaction } from "./Prepared.js"

/** An append's statements, run on the connection of the transaction that holds it. */
export type Append<A, E> = (connection: SqlConnection.Connection) => Effect.Effect<A, E | SqlError.SqlError>

/** Runs `append` on the connection of the `sql` transaction it is called in. */
export const onTransactionConnection = <A, E>(
  sql: SqlClient.SqlClient,
  append: Append<A, E>
): Effect.Effect<A, E | SqlError.SqlError> =>
  Effect.withFiber((fiber) => {
    const level = openTransaction(sql, fiber.context)
    return level === undefined ? Effect.die(new Error("no transaction is open")) : append(level[0])
  })

export interface Options {
  /**
   * The appends do nothing but their statements, so a batch may run them twice: first
   * without savepoints, then, only if one of them failed, again with one each. Default false:
   * each append runs once, in its savepoint.
   */
  readonly rerunnable?: boolean | undefined
  /**
   * Every append waits one turn of the event loop for company before its batch takes the lock
   * (see the module comment): for writers that start together, at the cost of that turn when
   * one is alone. Default false: a writer alone commits at once, in its own fiber.
   */
  readonly gather?: boolean | undefined
  /**
   * The transactions run the steps their appends register with `beforeCommit` once, before
   * the COMMIT. Default false: `beforeCommit` runs a step at once, as outside a group.
   */
  readonly beforeCommit?: boolean | undefined
}

/**
 * The steps registered in each open transaction of a group commit made with `beforeCommit`, by
 * its connection (a transaction holds its connection alone until it ends).
 */
const closing = new WeakMap<SqlConnection.Connection, Map<unknown, Effect.Effect<void, SqlError.SqlError>>>()

/**
 * `step` run once before the COMMIT of the group commit transaction open in this fiber (one made
 * with `beforeCommit`), once per `key` however many appends register it; elsewhere (no
 * transaction, or another one) it runs at once. The step runs whatever part of the transaction
 * was rolled back since (an append refused in its savepoint), so it must read what it needs from
 * the transaction as it stands then, as a catch-up from a change log does.
 */
export const beforeCommit = (
  sql: SqlClient.SqlClient,
  key: unknown,
  step: Effect.Effect<void, SqlError.SqlError>
): Effect.Effect<void, SqlError.SqlError> =>
  Effect.withFiber((fiber) => {
    const level = openTransaction(sql, fiber.context)
    const steps = level === undefined ? undefined : closing.get(level[0])
    if (steps === undefined) return step
    if (!steps.has(key)) steps.set(key, step)
    return Effect.void
  })

/** `body` on `connection` with steps registered in it run after it succeeds, before the COMMIT. */
const withClosingSteps = <A, E>(
  connection: SqlConnection.Connection,
  body: Effect.Effect<A, E | SqlError.SqlError>
): Effect.Effect<A, E | SqlError.SqlError> =>
  Effect.suspend(() => {
    const steps = new Map<unknown, Effect.Effect<void, SqlError.SqlError>>()
    closing.set(connection, steps)
    return Effect.ensuring(
      Effect.flatMap(body, (value) =>
        steps.size === 0
          ? Effect.succeed(value)
          : Effect.as(
              Effect.forEach([...steps.values()], (step) => step, { discard: true }),
              value
            )
      ),
      Effect.sync(() => closing.delete(connection))
    )
  })

/** Appends made alone after which a batch first waits one turn of the event loop for company. */
export const probeEvery = 8

/** The longest run of appends made alone between two such waits (each wait that finds nobody doubles the run). */
export const probeAtMost = 64

// The batch holds appends of every type: each caller casts its own result back.
type AnyExit = Exit.Exit<unknown, unknown>

interface Job {
  readonly append: Append<unknown, unknown>
  readonly done: Deferred.Deferred<unknown, unknown>
  /** Queued: may still leave; taken: in a running batch. */
  taken: boolean
  /** The append's own outcome in its batch, once it ran. */
  exit: AnyExit | undefined
}

/** The turn of the event loop a batch waits when company is likely: I/O and other fibers run first. */
const nextTurn: Effect.Effect<void> = Effect.callback<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

const savepoint = "SAVEPOINT noema_group_append"
const release = "RELEASE noema_group_append"
const rollbackTo = "ROLLBACK TO noema_group_append"

const control = (connection: SqlConnection.Connection, statement: string) =>
  connection.execute(statement, [], undefined)

/** Runs one append of a shared batch in its own savepoint, recording its outcome. */
const inSavepoint = (connection: SqlConnection.Connection, job: Job) =>
  Effect.flatMap(control(connection, savepoint), () =>
    Effect.flatMap(Effect.exit(job.append(connection)), (exit) => {
      job.exit = exit
      return Exit.isSuccess(exit)
        ? control(connection, release)
        : Effect.andThen(control(connection, rollbackTo), control(connection, release))
    })
  )

/** Runs one append of a batch as it is: its failure fails the batch's transaction. */
const asItIs = (connection: SqlConnection.Connection, job: Job) =>
  Effect.map(job.append(connection), (value) => {
    job.exit = Exit.succeed(value)
  })

/**
 * A batch's statements: its appends as they are (the first failure rolls the whole transaction
 * back), or, with `savepoints`, each in its own savepoint. A lone append needs none.
 */
const runBatch = (connection: SqlConnection.Connection, batch: ReadonlyArray<Job>, savepoints: boolean) =>
  savepoints && batch.length > 1
    ? Effect.forEach(batch, (job) => inSavepoint(connection, job), { discard: true })
    : Effect.forEach(batch, (job) => asItIs(connection, job), { discard: true })

/** What a job's caller gets once its batch's transaction ended with `transaction`. */
const outcome = (job: Job, transaction: Exit.Exit<unknown, unknown>): AnyExit =>
  job.exit !== undefined && (Exit.isFailure(job.exit) || Exit.isSuccess(transaction)) ? job.exit : transaction

/**
 * How the appends of `make` get their transaction (a batch's, or an append's alone). Appends that
 * run their statements on the connection they are handed and nothing else (`rerunnable`) need
 * none of what `withTransaction` puts in the context for the effects it runs: on a client that
 * offers it (noema's node:sqlite driver), they run in a transaction on the connection alone,
 * with the same lease, BEGIN, COMMIT and rollback, for less CPU. Any other append, or
 * another client, gets `withTransaction`.
 */
const transactionOf = (
  sql: SqlClient.SqlClient,
  rerunnable: boolean
): (<A, E>(append: Append<A, E>) => Effect.Effect<A, E | SqlError.SqlError>) =>
  rerunnable && SqliteClient.isSqliteClient(sql)
    ? sql.transactionOnConnection
    : (append) => sql.withTransaction(onTransactionConnection(sql, append))

/**
 * The append runner of one client: `run(append)` succeeds with the append's result once the
 * COMMIT holding it returned, or fails with its own failure (see the module comment).
 */
export const make = (sql: SqlClient.SqlClient, options?: Options) => {
  const rerunnable = options?.rerunnable === true
  const gather = options?.gather === true
  const closingSteps = options?.beforeCommit === true
  const inTransaction = transactionOf(sql, rerunnable)
  const queue: Array<Job> = []
  let committing = false
  let company = false
  let lone = 0
  let probeAfter = probeEvery
  /** The batch being committed is a probe made by a writer alone (not one of a run with company). */
  let probing = false

  const takeBatch = (): Array<Job> => {
    const batch = queue.splice(0)
    for (const job of batch) job.taken = true
    return batch
  }

  const waitForCompany = (): boolean => {
    if (company) return true
    lone++
    if (lone < probeAfter) return false
    lone = 0
    probing = true
    return true
  }

  /**
   * One batch: the lock, whatever is queued then, one transaction; every caller answered.
   * Whether another batch follows (appends queued meanwhile) is decided before the callers are
   * answered: a caller resumed by its answer may append again at once, within this very step,
   * and must find either this fiber still committing or the writer free to go alone, not a
   * fiber about to stop (it would queue behind it, and a writer alone would stay on the
   * batch path for good).
   */
  const commitBatch: Effect.Effect<boolean> = Effect.suspend(() => {
    let batch: Array<Job> | undefined
    const transaction = (savepoints: boolean) =>
      Effect.exit(
        inTransaction((connection) =>
          Effect.suspend(() => {
            batch ??= takeBatch()
            const appends = runBatch(connection, batch, savepoints)
            return closingSteps ? withClosingSteps(connection, appends) : appends
          })
        )
      )
    // Rerunnable appends without savepoints first; again with them only when an append of
    // several failed (its outcome is then unset) and so rolled the others back with it.
    const committed = rerunnable
      ? Effect.flatMap(transaction(false), (exit) => {
          if (Exit.isSuccess(exit) || batch === undefined || batch.length < 2) return Effect.succeed(exit)
          if (batch.every((job) => job.exit !== undefined)) return Effect.succeed(exit)
          for (const job of batch) job.exit = undefined
          return transaction(true)
        })
      : transaction(true)
    return Effect.andThen(company ? nextTurn : Effect.void, committed).pipe(
      Effect.flatMap((exit) =>
        Effect.sync(() => {
          // A transaction that never began (the lock not had within the busy timeout) fails
          // everything queued: each would have waited for the same lock.
          const answered = batch ?? takeBatch()
          company = answered.length > 1
          // Only a probe that found nobody makes the next one wait longer; company lost after a
          // run of batches is looked for again as soon as at first.
          if (company) probeAfter = probeEvery
          else if (probing) probeAfter = Math.min(probeAfter * 2, probeAtMost)
          probing = false
          const more = queue.length > 0
          if (!more) committing = false
          for (const job of answered) Deferred.doneUnsafe(job.done, outcome(job, exit))
          return more
        })
      )
    )
  })

  /** Commits batches while appends are queued; the one fiber writing for this client. */
  const commitAll: Effect.Effect<void> = Effect.flatMap(commitBatch, (more) =>
    more ? commitAll : Effect.void
  )

  const leave = (job: Job) =>
    Effect.sync(() => {
      if (job.taken) return
      const index = queue.indexOf(job)
      if (index >= 0) queue.splice(index, 1)
    })

  // Started in place: the batch fiber runs in the caller's turn until it first waits.
  const startCommitting = Effect.forkDetach(commitAll, { startImmediately: true, uninterruptible: true })

  /**
   * A writer alone, with no batch to wait for company: its append is its own transaction, in its
   * own fiber, as without grouping. Appends arriving meanwhile (while it waits for the lock)
   * queue, and are committed by a batch fiber once it is done.
   */
  const alone = <A, E>(append: Append<A, E>): Effect.Effect<A, E | SqlError.SqlError> => {
    committing = true
    company = false
    return Effect.onExit(
      inTransaction(closingSteps ? (connection) => withClosingSteps(connection, append(connection)) : append),
      afterAlone
    )
  }

  // One function for every append made alone, not a closure each.
  const afterAlone = (): Effect.Effect<void> => {
    if (queue.length > 0) return Effect.asVoid(startCommitting)
    committing = false
    return Effect.void
  }

  // Interruptible only while waiting, so a queued append always has its way out.
  const queued = <A, E>(append: Append<A, E>): Effect.Effect<A, E | SqlError.SqlError> =>
    Effect.uninterruptibleMask((restore) => {
      const job: Job = { append, done: Deferred.makeUnsafe(), taken: false, exit: undefined }
      queue.push(job)
      const wait = Effect.onInterrupt(restore(Deferred.await(job.done)), () => leave(job)) as Effect.Effect<
        A,
        E | SqlError.SqlError
      >
      if (committing) return wait
      committing = true
      return Effect.andThen(startCommitting, wait)
    })

  // Decided synchronously, before any step runs: a writer alone goes straight to its transaction
  // (interruptible as its caller is), with no mask or queue on the way.
  const grouped = <A, E>(append: Append<A, E>): Effect.Effect<A, E | SqlError.SqlError> => {
    if (!committing) {
      if (!gather && !waitForCompany()) return alone(append)
      company = true
    }
    return queued(append)
  }

  return <A, E>(append: Append<A, E>): Effect.Effect<A, E | SqlError.SqlError> =>
    Effect.withFiber((fiber) =>
      openTransaction(sql, fiber.context) === undefined
        ? grouped(append)
        : sql.withTransaction(onTransactionConnection(sql, append))
    )
}
