import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "examples/test/**/*.test.ts"],
    reporters: ["default", "./scripts/summary-reporter.ts"],
    // One PostgreSQL server for the whole run (or NOEMA_TEST_PG_URL's); each suite makes its own database.
    globalSetup: ["./packages/noema-testing-postgres/src/globalSetup.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Several suites start local HTTP servers and child processes; two forks match the 2-core machines.
    pool: "forks",
    maxWorkers: 2
  }
})
