/**
 * globalSetup: one temporary directory for the whole test run, removed when it ends.
 *
 * Listed first in the root vitest.config.ts. Tests (and the processes they start) make their
 * workspaces, databases and policy files under `os.tmpdir()`; `TMPDIR` is pointed at a fresh
 * directory for the run (the workers and their children inherit it), so whatever a test leaves
 * behind goes with the run instead of piling up in /tmp, thousands a day. A run killed before
 * its teardown leaves this one directory. (`TMPDIR` only says where temporary files go: turbo.json
 * passes it through without hashing it.)
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

export default function setup(): () => void {
  const previous = process.env.TMPDIR
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-test-"))
  // As /tmp is (sticky, everyone may write): tests run commands as another user in it.
  fs.chmodSync(directory, 0o1777)
  process.env.TMPDIR = directory
  return () => {
    if (previous === undefined) delete process.env.TMPDIR
    else process.env.TMPDIR = previous
    fs.rmSync(directory, { recursive: true, force: true, maxRetries: 3 })
  }
}
