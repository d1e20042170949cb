/**
 * ArtifactFile: reads an artifact for someone outside the process (the HTTP
 * API), trusting nothing found in the workspace.
 *
 * Artifacts are written by agents, and the workspace may be shared with other
 * processes and users, so what is on disk at the artifact's path may not be
 * what the manifest describes: a symbolic link to a file outside the
 * workspace, a FIFO that blocks whoever opens it, a device, a huge file. The
 * file is opened without following a final link (`O_NOFOLLOW`) and without
 * blocking (`O_NONBLOCK`); the opened file itself must be a regular file of at
 * most `maxBytes` (fstat, so what is checked is what is read); and every
 * directory between the workspace and the file must be a real directory, not
 * a link. The directories are checked before the open and again after it,
 * with the path's file then compared with the opened one (device and inode):
 * a directory swapped for a link between the check and the open is caught.
 * The bytes are read asynchronously, so a slow disk never stops the server.
 * Errors name the artifact by its relative path only, never by where the
 * workspace is. This follows the CLI's `read_file` tool, whose root is allowed
 * to hold links (it resolves them and confines the result), which artifacts
 * are not.
 */
import { Buffer } from "node:buffer"
import { constants } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { RunFiles } from "@noema/runs"
import { Effect, Schema } from "effect"

export class ArtifactFileError extends Schema.TaggedError<ArtifactFileError>()("ArtifactFileError", {
  /** The artifact's path, relative to its attempt's `artifacts/` directory. */
  path: Schema.String,
  reason: Schema.Literals(["NotFound", "Refused", "TooLarge", "Unreadable"]),
  detail: Schema.String
}) {
  override get message() {
    return `artifact ${this.path}: ${this.detail}`
  }
}

export interface Options {
  /** The workspace: the directories under it, down to the file, must be real directories. */
  readonly workspace: string
  /** The attempt's directory (inside the workspace); the artifact is in its `artifacts/`. */
  readonly attemptDirectory: string
  /** The artifact's path, relative to `artifacts/`. */
  readonly relative: string
  /** Largest file read. Default 4 MiB. */
  readonly maxBytes?: number
}

export const defaultMaxBytes = 4 * 1024 * 1024

const codeOf = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && "code" in error ? String(error.code) : undefined

/** Fails when a directory from the workspace down to `file`'s parent is a link or not a directory. */
const checkDirectories = (workspace: string, file: string, refuse: (detail: string) => never) => {
  const problem = RunFiles.linkOnTheWay(workspace, file)
  if (problem !== undefined) refuse(problem)
}

/**
 * The bytes of `file` (already open), to its end or just past `maxBytes`: a file
 * that grew after its fstat is read whole (or refused as too large), never cut
 * short at its old size, and a small file costs a small buffer.
 */
const readAll = async (file: fs.FileHandle, maxBytes: number): Promise<Buffer> => {
  const chunks: Array<Buffer> = []
  let length = 0
  while (length <= maxBytes) {
    const chunk = Buffer.alloc(Math.min(64 * 1024, maxBytes + 1 - length))
    const { bytesRead } = await file.read(chunk, 0, chunk.length, length)
    if (bytesRead === 0) break
    chunks.push(chunk.subarray(0, bytesRead))
    length += bytesRead
  }
  return Buffer.concat(chunks, length)
}

/** The artifact's bytes (see the module's comment for what is refused). */
export const read = (options: Options): Effect.Effect<Uint8Array, ArtifactFileError> => {
  const { relative } = options
  const maxBytes = options.maxBytes ?? defaultMaxBytes
  const fail = (reason: ArtifactFileError["reason"], detail: string): never => {
    throw new ArtifactFileError({ path: relative, reason, detail })
  }
  const refuse = (detail: string) => fail("Refused", detail)
  return Effect.tryPromise({
    try: async () => {
      const workspace = path.resolve(options.workspace)
      const target = RunFiles.confine(path.resolve(options.attemptDirectory, "artifacts"), relative)
      if (typeof target !== "string") return refuse(target.problem)
      if (!target.startsWith(workspace + path.sep)) return refuse("the artifact is outside the workspace")
      let handle: fs.FileHandle | undefined
      try {
        checkDirectories(workspace, target, refuse)
        handle = await fs.open(target, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
      } catch (error) {
        if (error instanceof ArtifactFileError) throw error
        const code = codeOf(error)
        if (code === "ENOENT" || code === "ENOTDIR") return fail("NotFound", "no such file")
        if (code === "ELOOP") return refuse("the artifact is a symbolic link")
        return fail("Unreadable", `cannot open it (${code ?? "unknown error"})`)
      }
      try {
        const stat = await handle.stat()
        if (!stat.isFile()) return refuse("the artifact is not a regular file")
        if (stat.size > maxBytes)
          return fail("TooLarge", `${stat.size} bytes, more than the ${maxBytes} served`)
        // The path may have changed since the open: it must still lead, through real directories, to this file.
        checkDirectories(workspace, target, refuse)
        const now = await fs.lstat(target)
        if (now.dev !== stat.dev || now.ino !== stat.ino)
          return refuse("the artifact changed while it was opened")
        const bytes = await readAll(handle, maxBytes)
        if (bytes.length > maxBytes) return fail("TooLarge", `more than the ${maxBytes} bytes served`)
        return new Uint8Array(bytes)
      } finally {
        await handle.close()
      }
    },
    catch: (error) =>
      error instanceof ArtifactFileError
        ? error
        : new ArtifactFileError({
            path: relative,
            reason: codeOf(error) === "ENOENT" ? "NotFound" : "Unreadable",
            detail: `cannot read it (${codeOf(error) ?? "unknown error"})`
          })
  })
}
