/**
 * @noema/server: noema's HTTP server. The panel (one page app: runs,
 * sessions, plans, routines and resources) and the JSON API behind it (an
 * `HttpApi` with its OpenAPI document), served on 127.0.0.1 behind an access
 * token, live over Server-Sent Events.
 */
export * as ApiError from "./ApiError.js"
export * as PanelApi from "./PanelApi.js"
export * as PlansJson from "./PlansJson.js"
export * as ResourcesJson from "./ResourcesJson.js"
export * as RoutinesJson from "./RoutinesJson.js"
export * as RunsJson from "./RunsJson.js"
export * as Server from "./Server.js"
export * as SessionsJson from "./SessionsJson.js"
export * as StoreChanges from "./StoreChanges.js"
export * as TracesJson from "./TracesJson.js"
