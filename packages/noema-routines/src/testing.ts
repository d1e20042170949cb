/**
 * @noema/routines/testing: the conformance suite every routine store must pass.
 */
export * as RoutineConformance from "./RoutineConformance.js"
