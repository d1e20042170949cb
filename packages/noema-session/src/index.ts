/**
 * @noema/session: conversations kept in a store, turns committed as transactions.
 */
export * as Compaction from "./Compaction.js"
/** SQLite transactions that arrive together, committed as one (the session store's appends, the resource store's writes). */
export * as MemoryStore from "./MemoryStore.js"
export * as PostgresStore from "./PostgresStore.js"
export * as Session from "./Session.js"
export * as SessionArchive from "./SessionArchive.js"
export * as SessionStore from "./SessionStore.js"
export * as SqliteStore from "./SqliteStore.js"
export * as SqlStore from "./SqlStore.js"
export * as TraceStore from "./TraceStore.js"
export * as Usage from "./Usage.js"
