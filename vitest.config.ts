import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "examples/test/**/*.test.ts"],
    reporters: ["default", "./scripts/summary-reporter.ts"],
    // One temporary directory for the run, removed at its end (what tests leave under os.tmpdir()
    // goes with it); one PostgreSQL server for the whole run (or NOEMA_TEST_PG_URL's), each suite
    // making its own database.
    globalSetup: ["./scripts/tempDirectory.ts", "./packages/noema-testing-postgres/src/globalSetup.ts"],
    // A time limit only catches a hang: it is never what a test checks. It is generous so that a
    // machine busy with other work (CI beside anything else on 2 cores) slows tests, never fails them.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Several suites start local HTTP servers and child processes; two forks match the 2-core machines.
    pool: "forks",
    maxWorkers: 2
  }
})
