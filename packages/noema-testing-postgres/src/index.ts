/**
 * @noema/testing-postgres: a real PostgreSQL server for noema's tests and
 * benchmarks, from npm alone, and a fresh database per test suite.
 */
export * as EmbeddedPostgres from "./EmbeddedPostgres.js"
export * as TestDatabase from "./TestDatabase.js"
