/**
 * @noema/session/testing: the conformance suite every session store must pass, and
 * the helpers tests of turns share (a reply agent, a hanging model, a holding store).
 */
export * as SessionStoreConformance from "./SessionStoreConformance.js"
export * as SessionTesting from "./SessionTesting.js"
