/** A SQLite file read as it is on disk, outside the store: its marks, and what a query finds. */
import { DatabaseSync } from "node:sqlite"

/** Runs `read` on `filename` opened read-only, and closes it. */
export const readFile = <A>(filename: string, read: (database: DatabaseSync) => A): A => {
  const database = new DatabaseSync(filename, { readOnly: true })
  try {
    return read(database)
  } finally {
    database.close()
  }
}

/** The value of `PRAGMA name`. */
export const pragma = (database: DatabaseSync, name: string): unknown =>
  (database.prepare(`PRAGMA ${name}`).get() as Record<string, unknown>)[name]
