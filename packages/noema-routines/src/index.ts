/**
 * @noema/routines: goal chains (a skill, a scenario, its tasks) from a work
 * breakdown document, worked through by an agent that is told each preamble
 * once and resumes where it stopped.
 */
export * as Routine from "./Routine.js"
export * as RoutineContext from "./RoutineContext.js"
export * as RoutineStore from "./RoutineStore.js"
export * as SqlRoutineStore from "./SqlRoutineStore.js"
export * as TaskVerdict from "./TaskVerdict.js"
export * as Variables from "./Variables.js"
export * as WorkBreakdown from "./WorkBreakdown.js"
