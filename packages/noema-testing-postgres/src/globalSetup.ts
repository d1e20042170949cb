/**
 * globalSetup: one PostgreSQL server for the whole test run.
 *
 * Listed in the root vitest.config.ts. It starts the embedded server before
 * any test file runs (unless `NOEMA_TEST_PG_URL` names one), provides its URL
 * to every worker (`TestDatabase.serverUrl()` reads it) and stops it when the
 * run ends. Starting a server costs about a second; one per run, not per suite.
 */
import type { TestProject } from "vitest/node"
import * as EmbeddedPostgres from "./EmbeddedPostgres.js"
import { environmentVariable, providedKey } from "./TestDatabase.js"

export default async function setup(project: TestProject): Promise<(() => Promise<void>) | undefined> {
  const given = process.env[environmentVariable]
  if (given !== undefined && given.trim() !== "") {
    project.provide(providedKey, given.trim())
    return undefined
  }
  const server = await EmbeddedPostgres.start()
  project.provide(providedKey, server.url)
  return () => server.stop()
}
