export * as ResourceStoreConformance from "./ResourceStoreConformance.js"
