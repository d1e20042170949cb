/**
 * @noema/session/testing: the conformance suite every session store must pass.
 */
export * as SessionStoreConformance from "./SessionStoreConformance.js"
