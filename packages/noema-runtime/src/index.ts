/**
 * @noema/runtime: an agent that reacts to triggers while it works.
 */
export * as ContextItem from "./ContextItem.js"
export * as Runtime from "./Runtime.js"
export * as RuntimeBuilder from "./RuntimeBuilder.js"
export * as Submind from "./Submind.js"
export * as TriggerEvent from "./TriggerEvent.js"
