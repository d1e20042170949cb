export * as MemoryResourceStore from "./MemoryResourceStore.js"
export * as Resource from "./Resource.js"
export * as ResourceStore from "./ResourceStore.js"
export * as Urn from "./Urn.js"
