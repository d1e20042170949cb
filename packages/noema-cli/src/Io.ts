/**
 * Io: the process around a command (its streams, environment and working
 * directory), replaceable for tests and for programs that embed the CLI.
 */

export type Environment = Readonly<Record<string, string | undefined>>

/** The process around a command: its streams and environment (replaceable for tests). */
export interface Io {
  readonly env: Environment
  readonly stdin: NodeJS.ReadStream
  readonly stdout: NodeJS.WriteStream
  readonly stderr: NodeJS.WriteStream
  /** Where `read_file` may read; default the working directory. */
  readonly cwd: string
}

export const processIo = (): Io => ({
  env: process.env,
  stdin: process.stdin,
  stdout: process.stdout,
  stderr: process.stderr,
  cwd: process.cwd()
})
