/**
 * RunLease: which process is executing a run, so a run is carried on by one
 * process at a time and a dead one's run can be taken over.
 *
 * The lease is `runs/<run_id>/lease.json` (`pid`, `host`, `acquired_at`),
 * created exclusively (`wx`). A lease held by a live process on this host is
 * refused with `RunBusy`, naming it; one left by a process that is gone (a
 * SIGKILL, a crash: the pid no longer exists) is taken over. Released when the
 * executor stops waiting (done, failed, waiting for approval). This is the
 * one-machine guard; runs shared by workers on several machines need the
 * database's own lease (not here yet).
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, Schema } from "effect"
import { FileError, runDirectory } from "./RunFiles.js"

export class RunBusy extends Schema.TaggedError<RunBusy>()("RunBusy", {
  runId: Schema.String,
  pid: Schema.Number,
  host: Schema.String
}) {
  override get message() {
    return `run ${this.runId} is being executed by process ${this.pid} on ${this.host}`
  }
}

interface LeaseFile {
  readonly pid: number
  readonly host: string
  readonly acquired_at: string
}

export const leasePath = (workspace: string, runId: string): string =>
  path.join(runDirectory(workspace, runId), "lease.json")

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

const read = (file: string): LeaseFile | undefined => {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8")) as LeaseFile
  } catch {
    return undefined
  }
}

/** Who holds the run's lease, if a live process does. */
export const holder = (workspace: string, runId: string): LeaseFile | undefined => {
  const lease = read(leasePath(workspace, runId))
  if (lease === undefined) return undefined
  return lease.host === os.hostname() && !alive(lease.pid) ? undefined : lease
}

const acquire = (workspace: string, runId: string): Effect.Effect<string, RunBusy | FileError> =>
  Effect.suspend((): Effect.Effect<string, RunBusy | FileError> => {
    const file = leasePath(workspace, runId)
    const mine: LeaseFile = { pid: process.pid, host: os.hostname(), acquired_at: new Date().toISOString() }
    for (let tries = 0; tries < 3; tries++) {
      try {
        fs.writeFileSync(file, `${JSON.stringify(mine)}\n`, { flag: "wx" })
        return Effect.succeed(file)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST")
          return Effect.fail(
            new FileError({ path: file, detail: error instanceof Error ? error.message : String(error) })
          )
      }
      const current = read(file)
      if (current !== undefined && (current.host !== os.hostname() || alive(current.pid)))
        return Effect.fail(new RunBusy({ runId, pid: current.pid, host: current.host }))
      // Left by a process that is gone (or unreadable, cut off while written): taken over.
      try {
        fs.unlinkSync(file)
      } catch {}
    }
    return Effect.fail(new FileError({ path: file, detail: "could not take the lease over" }))
  })

/** Runs `effect` holding the run's lease (see the module's comment). */
export const withLease = <A, E, R>(
  workspace: string,
  runId: string,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | RunBusy | FileError, R> =>
  Effect.acquireUseRelease(
    acquire(workspace, runId),
    () => effect,
    (file) =>
      Effect.sync(() => {
        try {
          fs.unlinkSync(file)
        } catch {}
      })
  )
