/**
 * @noema/runs/testing: the conformance suite every runs store passes.
 */
export * as RunsStoreConformance from "./RunsStoreConformance.js"
