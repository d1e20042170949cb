import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "examples/test/**/*.test.ts"],
    reporters: ["default", "./scripts/summary-reporter.ts"],
    // One PostgreSQL server for the whole run (or NOEMA_TEST_PG_URL's); each suite makes its own database.
    globalSetup: ["./packages/noema-testing-postgres/src/globalSetup.ts"],
    // A time limit only catches a hang: it is never what a test checks. It is generous so that a
    // machine busy with other work (CI beside anything else on 2 cores) slows tests, never fails them.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Several suites start local HTTP servers and child processes; two forks match the 2-core machines.
    pool: "forks",
    maxWorkers: 2
  }
})
