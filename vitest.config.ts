import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "examples/test/**/*.test.ts"],
    reporters: ["default", "./scripts/summary-reporter.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Several suites start local HTTP servers and child processes; two forks match the 2-core machines.
    pool: "forks",
    maxWorkers: 2
  }
})
