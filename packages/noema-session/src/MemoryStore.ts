/**
 * MemoryStore: the session store contract kept in process memory.
 *
 * For tests, demos and throwaway sessions. It behaves like a persistent store
 * in everything but persistence: messages are copied through JSON on the way
 * in (so later changes to the caller's objects do not leak in, and what comes
 * back is what a database would give back), each validated with core's
 * `Message` Schema as a SQL store does, appends are atomic and checked
 * against the expected message count, and the same conformance suite runs
 * against it.
 */
import { Message } from "@noema/core"
import { Clock, Effect, Layer } from "effect"
import {
  defaultTitle,
  InvalidMessage,
  mergeMetadata,
  type Service,
  SessionAlreadyExistsError,
  SessionConflictError,
  type SessionInfo,
  SessionNotFoundError,
  SessionStore,
  StoreError
} from "./SessionStore.js"

interface Entry {
  info: SessionInfo
  readonly messages: Array<Message.Message>
  /** Store-wide change counter: orders `list` even when changes share a millisecond. */
  activity: number
}

const location = "memory"

const copy = <A>(value: A): A => JSON.parse(JSON.stringify(value)) as A

export const make = (): Effect.Effect<Service> =>
  Effect.sync(() => {
    const sessions = new Map<string, Entry>()
    let activity = 0

    const find = (id: string) =>
      Effect.suspend(() => {
        const entry = sessions.get(id)
        return entry === undefined
          ? Effect.fail(new SessionNotFoundError({ sessionId: id }))
          : Effect.succeed(entry)
      })

    /** The messages as a database would store and return them (through JSON), or why one cannot be stored. */
    const storable = (
      id: string,
      messages: ReadonlyArray<Message.Message>
    ): Array<Message.Message> | StoreError => {
      const stored = new Array<Message.Message>(messages.length)
      for (let index = 0; index < messages.length; index++) {
        try {
          stored[index] = Message.decodeSync(copy(Message.encode(messages[index] as Message.Message)))
        } catch (error) {
          const detail = (error instanceof Error ? error.message : String(error)).replace(/\s*\n\s*/g, "; ")
          return new StoreError({ reason: new InvalidMessage({ location, sessionId: id, index, detail }) })
        }
      }
      return stored
    }

    const appendTo = (entry: Entry, stored: ReadonlyArray<Message.Message>, now: number): void => {
      for (const message of stored) entry.messages.push(message)
      const title = entry.info.title ?? defaultTitle(stored)
      entry.info = {
        ...entry.info,
        ...(title !== undefined && { title }),
        updatedAt: now,
        messageCount: entry.messages.length
      }
      entry.activity = ++activity
    }

    const service: Service = {
      location,
      create: (options) =>
        Effect.flatMap(
          Clock.currentTimeMillis,
          (now): Effect.Effect<SessionInfo, SessionAlreadyExistsError | StoreError> => {
            const id = options?.id ?? crypto.randomUUID()
            if (sessions.has(id)) return Effect.fail(new SessionAlreadyExistsError({ sessionId: id }))
            // Checked before anything is stored: the session exists with its first messages or not at all.
            const first = storable(id, options?.messages ?? [])
            if (first instanceof StoreError) return Effect.fail(first)
            const info: SessionInfo = {
              id,
              ...(options?.title !== undefined && { title: options.title }),
              createdAt: options?.createdAt ?? now,
              updatedAt: options?.updatedAt ?? now,
              messageCount: 0,
              metadata: copy(options?.metadata ?? {})
            }
            const entry: Entry = { info, messages: [], activity: ++activity }
            sessions.set(id, entry)
            if (first.length > 0) appendTo(entry, first, options?.updatedAt ?? now)
            return Effect.succeed(entry.info)
          }
        ),

      load: (id) => Effect.map(find(id), (entry) => ({ info: entry.info, messages: entry.messages.slice() })),

      append: (id, expectedMessageCount, messages) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.flatMap(find(id), (entry): Effect.Effect<SessionInfo, SessionConflictError | StoreError> => {
            const actual = entry.messages.length
            if (actual !== expectedMessageCount) {
              return Effect.fail(
                new SessionConflictError({
                  sessionId: id,
                  expectedMessageCount,
                  actualMessageCount: actual
                })
              )
            }
            const stored = storable(id, messages)
            if (stored instanceof StoreError) return Effect.fail(stored)
            appendTo(entry, stored, now)
            return Effect.succeed(entry.info)
          })
        ),

      list: () =>
        Effect.sync(() =>
          Array.from(sessions.values())
            .sort((left, right) => right.activity - left.activity)
            .map((entry) => entry.info)
        ),

      info: (id) => Effect.map(find(id), (entry) => entry.info),

      delete: (id) =>
        Effect.flatMap(find(id), () =>
          Effect.sync(() => {
            sessions.delete(id)
          })
        ),

      updateMetadata: (id, update) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.map(find(id), (entry) => {
            const title = update.title ?? entry.info.title
            entry.info = {
              ...entry.info,
              ...(title !== undefined && { title }),
              metadata: copy(mergeMetadata(entry.info.metadata, update.metadata)),
              updatedAt: now
            }
            entry.activity = ++activity
            return entry.info
          })
        )
    }
    return service
  })

/** A fresh, empty in-memory store as the `SessionStore` service. */
export const layer: Layer.Layer<SessionStore> = Layer.effect(SessionStore, make())
