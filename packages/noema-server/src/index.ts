/**
 * @noema/server: noema's HTTP server. The runs panel (one page) and the JSON
 * API behind it, served on 127.0.0.1 behind an access token.
 */
export * as Server from "./Server.js"
