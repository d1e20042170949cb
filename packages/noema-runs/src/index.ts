/**
 * @noema/runs: run-centric execution. Threads hold runs; runs are split into
 * stages whose files are written atomically, hashed and never overwritten,
 * with an append-only timeline in a store.
 */
export * as ClusterEngine from "./ClusterEngine.js"
export * as Executor from "./Executor.js"
export * as Pipeline from "./Pipeline.js"
export * as PlanPipeline from "./PlanPipeline.js"
export * as Run from "./Run.js"
export * as RunFiles from "./RunFiles.js"
export * as RunLease from "./RunLease.js"
export * as RunsStore from "./RunsStore.js"
export * as Shown from "./Shown.js"
export * as SqlRunsStore from "./SqlRunsStore.js"
export * as Worker from "./Worker.js"
