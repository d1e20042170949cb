/**
 * ReadFile: the `read_file` tool, a model's read-only window onto the files
 * under the directory the CLI was started in.
 *
 * The path comes from a model, so it is treated as hostile: it is resolved
 * (following every symlink) and rejected unless the real file lies inside the
 * real root, which closes `..`, absolute paths and symlinks pointing outside.
 * Only regular text files up to a size limit are read; binary content (a NUL
 * byte or invalid UTF-8) is refused rather than fed to the model as noise.
 */
import { Buffer } from "node:buffer"
import { constants as fsConstants } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Tool } from "@noema/core"
import { Effect, Schema } from "effect"

export class ReadFileError extends Schema.TaggedError<ReadFileError>()("ReadFileError", {
  path: Schema.String,
  reason: Schema.Literals(["OutsideRoot", "NotFound", "NotAFile", "TooLarge", "Binary", "Unreadable"]),
  message: Schema.String
}) {}

export interface Options {
  /** The directory files must lie under. Default: the working directory at call time. */
  readonly root?: string
  /** Largest file read, in bytes. Default 256 KiB. */
  readonly maxBytes?: number
}

export const defaultMaxBytes = 256 * 1024

const isInside = (root: string, candidate: string): boolean => {
  const relative = path.relative(root, candidate)
  return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative))
}

const formatBytes = (bytes: number): string =>
  bytes >= 1024 * 1024
    ? `${(bytes / (1024 * 1024)).toFixed(1)} MiB`
    : bytes >= 1024
      ? `${Math.round(bytes / 1024)} KiB`
      : `${bytes} bytes`

const errnoCode = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && "code" in error ? String(error.code) : undefined

/**
 * Reads `requested` (relative to the root, or absolute inside it) as UTF-8
 * text. Fails with a `ReadFileError` saying exactly why it would not.
 */
export const readText = (requested: string, options: Options = {}): Effect.Effect<string, ReadFileError> =>
  Effect.tryPromise({
    try: async (signal) => {
      const fail = (reason: ReadFileError["reason"], message: string): never => {
        throw new ReadFileError({ path: requested, reason, message })
      }
      const maxBytes = options.maxBytes ?? defaultMaxBytes
      const root = await fs.realpath(options.root ?? process.cwd())
      if (requested.trim() === "" || requested.includes("\0"))
        fail("NotFound", "The path is empty or invalid")
      const lexical = path.resolve(root, requested)
      // Checked before touching the file system, so an escape is reported as such even if the target is missing.
      if (!isInside(root, lexical)) {
        fail("OutsideRoot", `Refusing to read "${requested}": it is outside the working directory`)
      }
      let real = lexical
      try {
        real = await fs.realpath(lexical)
      } catch (error) {
        const code = errnoCode(error)
        if (code === "ENOENT" || code === "ENOTDIR") fail("NotFound", `No such file: "${requested}"`)
        fail("Unreadable", `Cannot read "${requested}": ${code ?? String(error)}`)
      }
      if (!isInside(root, real)) {
        fail(
          "OutsideRoot",
          `Refusing to read "${requested}": it links to a file outside the working directory`
        )
      }
      // Open the resolved path and check the opened file itself, so what is checked is what is read.
      let handle: fs.FileHandle | undefined
      try {
        // Non-blocking so a FIFO cannot hang the open (it is then refused as not a regular file);
        // no-follow so a link swapped in after the check above is refused, not followed.
        handle = await fs.open(real, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK | fsConstants.O_NOFOLLOW)
      } catch (error) {
        const code = errnoCode(error)
        if (code === "EISDIR") fail("NotAFile", `"${requested}" is a directory, not a file`)
        fail("Unreadable", `Cannot read "${requested}": ${code ?? String(error)}`)
      }
      const file = handle as fs.FileHandle
      try {
        const stat = await file.stat()
        if (stat.isDirectory()) fail("NotAFile", `"${requested}" is a directory, not a file`)
        if (!stat.isFile()) fail("NotAFile", `"${requested}" is not a regular file`)
        if (stat.size > maxBytes) {
          fail(
            "TooLarge",
            `"${requested}" is too large to read (${formatBytes(stat.size)}; the limit is ${formatBytes(maxBytes)})`
          )
        }
        // Read to the end, or to one byte past the limit: a file that grew after stat is read whole
        // (or refused as too large), never cut short at its old size.
        const buffer = Buffer.alloc(maxBytes + 1)
        let length = 0
        while (length < buffer.length) {
          signal.throwIfAborted()
          const { bytesRead } = await file.read(buffer, length, buffer.length - length, length)
          if (bytesRead === 0) break
          length += bytesRead
        }
        if (length > maxBytes) fail("TooLarge", `"${requested}" is larger than ${formatBytes(maxBytes)}`)
        const bytes = buffer.subarray(0, length)
        if (bytes.includes(0)) fail("Binary", `"${requested}" is a binary file, not text`)
        try {
          return new TextDecoder("utf-8", { fatal: true }).decode(bytes)
        } catch {
          return fail("Binary", `"${requested}" is not UTF-8 text (it looks binary)`)
        }
      } finally {
        await file.close()
      }
    },
    catch: (error) =>
      error instanceof ReadFileError
        ? error
        : new ReadFileError({
            path: requested,
            reason: "Unreadable",
            message: `Cannot read "${requested}": ${error instanceof Error ? error.message : String(error)}`
          })
  })

export const Parameters = Schema.Struct({
  path: Schema.String.annotate({
    description: "Path of a text file, relative to the current directory (e.g. README.md or src/index.ts)"
  })
})

/** A `read_file` tool confined to `options.root` (default: the working directory). */
export const make = (options: Options = {}) =>
  Tool.make({
    name: "read_file",
    description:
      "Reads a UTF-8 text file under the current working directory and returns its content. " +
      `Files outside that directory, binary files and files over ${formatBytes(options.maxBytes ?? defaultMaxBytes)} are refused.`,
    parameters: Parameters,
    annotations: { readOnly: true },
    handler: ({ path: requested }) => readText(requested, options)
  })

export const tool = make()
